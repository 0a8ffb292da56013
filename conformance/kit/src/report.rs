//! What the kit found, and its three renderings: text for people, JSON for tools, JUnit XML
//! for CI dashboards. `tamp conformance` assembles it (crate tamp-conformance-engine) and
//! prints it; [`crate::Kit`] reads it back from `--output-format json`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One broken rule: which, where, and what the plugin returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule's id, e.g. `TAMP-INV-01`.
    pub rule: String,
    /// What is wrong, naming the message at fault when there is one.
    pub message: String,
    /// How to get the case back: wire format, case seed, and the run's `--seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
    /// What the plugin returned (its output messages around the fault, one per line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<String>,
    /// The smallest failing conversation (after shrinking), as a request in its wire format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<serde_json::Value>,
}

impl Finding {
    pub fn new(rule: &str, message: impl Into<String>) -> Self {
        Finding {
            rule: rule.to_string(),
            message: message.into(),
            case: None,
            returned: None,
            conversation: None,
        }
    }
}

/// What the plugin says about itself (read by the load check, in its child process: the
/// kit's own process never loads the plugin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginFacts {
    pub name: String,
    pub version: String,
    pub description: String,
    pub plugin_api_version: String,
}

/// The plugin's own time per compaction on a 1,000-message conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Perf {
    pub messages: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub runs: usize,
    /// Median over the runs of the compaction's wall time minus the time inside LLM calls.
    pub plugin_ms: f64,
    /// Median time inside LLM calls (the kit's zero-delay provider).
    pub llm_ms: f64,
    pub llm_calls: usize,
}

/// What one check's process reports back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckOutput {
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
    /// The plugin's metadata (from the load check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<PluginFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf: Option<Perf>,
}

/// How a rule came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    /// A SHOULD rule was broken.
    Warn,
    /// Not checked: the plugin did not load, or `--only` left it out.
    Skipped,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Warn => "WARN",
            Status::Skipped => "SKIP",
        }
    }
}

/// One rule's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RuleResult {
    pub id: String,
    pub title: String,
    pub level: String,
    pub status: Status,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
    /// Time of the rule's own check (its child process), in milliseconds.
    pub duration_ms: f64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KitReport {
    pub plugin: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<PluginFacts>,
    pub config: serde_json::Value,
    pub seed: u64,
    pub cases: usize,
    /// Whether checks ran in child processes (false only for the in-process fallback).
    pub isolated: bool,
    pub rules: Vec<RuleResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf: Option<Perf>,
    /// No MUST rule among those checked failed (and at least one passed). On a partial run
    /// it says nothing about the rules left out.
    pub passed: bool,
    /// `--only` or `--skip` left rules out: the run is no verdict on the whole plugin (see
    /// [`KitReport::conforms`]).
    #[serde(default)]
    pub partial: bool,
}

impl KitReport {
    /// The ids of the rules that failed (MUST rules with findings).
    pub fn failed_rules(&self) -> Vec<&str> {
        self.rules
            .iter()
            .filter(|r| r.status == Status::Fail)
            .map(|r| r.id.as_str())
            .collect()
    }

    /// The ids of the SHOULD rules broken.
    pub fn warned_rules(&self) -> Vec<&str> {
        self.rules
            .iter()
            .filter(|r| r.status == Status::Warn)
            .map(|r| r.id.as_str())
            .collect()
    }

    pub fn rule(&self, id: &str) -> Option<&RuleResult> {
        self.rules.iter().find(|r| r.id == id)
    }

    /// Whether the plugin conforms: every rule was checked and no MUST rule failed. A
    /// partial run (`--only`, `--skip`) never conforms, even when [`KitReport::passed`].
    pub fn conforms(&self) -> bool {
        self.passed && !self.partial
    }

    /// The result in words: `CONFORMS — …`, `DOES NOT CONFORM — …`, or for a partial run
    /// with no failure, `no failures in the N checks run (partial: M skipped by
    /// --only/--skip) — …`.
    pub fn verdict(&self) -> String {
        let count = |s: Status| self.rules.iter().filter(|r| r.status == s).count();
        let (pass, fail, warn, skip) = (
            count(Status::Pass),
            count(Status::Fail),
            count(Status::Warn),
            count(Status::Skipped),
        );
        if self.passed && self.partial {
            let run = pass + warn;
            format!(
                "no failures in the {run} check{} run (partial: {skip} skipped by --only/--skip) \
                 — {pass} passed, {warn} warnings",
                if run == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "{} — {pass} passed, {fail} failed, {warn} warnings, {skip} skipped",
                if self.passed {
                    "CONFORMS"
                } else {
                    "DOES NOT CONFORM"
                }
            )
        }
    }

    /// Panics with the text report unless every checked MUST rule passed (for `cargo test`).
    pub fn assert_passed(&self) {
        assert!(
            self.passed,
            "the plugin does not conform:\n{}",
            self.to_text()
        );
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let who = match &self.meta {
            Some(m) => format!(
                "{} {} (plugin-api {})",
                m.name, m.version, m.plugin_api_version
            ),
            None => "not loaded".to_string(),
        };
        out.push_str(&format!(
            "tamp conformance: {} — {who}\nconfig: {}\nseed: {}, {} cases per wire format{}\n\n",
            self.plugin.display(),
            self.config,
            self.seed,
            self.cases,
            if self.isolated {
                ""
            } else {
                " (in-process: no isolation from aborts and hangs)"
            }
        ));
        for rule in &self.rules {
            out.push_str(&format!(
                "{}  {:<13} {} {}{}\n",
                rule.status.label(),
                rule.id,
                rule.level,
                rule.title,
                if rule.duration_ms > 0.0 {
                    format!(" ({:.0} ms)", rule.duration_ms)
                } else {
                    String::new()
                }
            ));
            for f in &rule.findings {
                out.push_str(&format!("      {}\n", f.message));
                if let Some(case) = &f.case {
                    out.push_str(&format!("      case: {case}\n"));
                }
                if let Some(returned) = &f.returned {
                    out.push_str("      the plugin returned:\n");
                    for line in returned.lines() {
                        out.push_str(&format!("      {line}\n"));
                    }
                }
                if let Some(conv) = &f.conversation {
                    let json = conv.to_string();
                    let shown: String = json.chars().take(4000).collect();
                    out.push_str(&format!(
                        "      smallest failing conversation: {shown}{}\n",
                        if shown.len() < json.len() { " …" } else { "" }
                    ));
                }
            }
            if matches!(rule.status, Status::Fail | Status::Warn) {
                for note in &rule.notes {
                    out.push_str(&format!("      note: {note}\n"));
                }
            }
        }
        if let Some(p) = &self.perf {
            out.push_str(&format!(
                "\nperformance: {:.2} ms of plugin time per compaction of {} messages ({} → {} tokens, {} LLM calls, {:.2} ms in the LLM excluded; median of {} runs)\n",
                p.plugin_ms, p.messages, p.tokens_before, p.tokens_after, p.llm_calls, p.llm_ms, p.runs
            ));
        }
        out.push_str(&format!("\nresult: {}\n", self.verdict()));
        out
    }

    pub fn to_junit(&self) -> String {
        let name = self
            .meta
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_else(|| self.plugin.display().to_string());
        let count = |s: Status| self.rules.iter().filter(|r| r.status == s).count();
        let total_s: f64 = self.rules.iter().map(|r| r.duration_ms).sum::<f64>() / 1e3;
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        out.push_str(&format!(
            "<testsuites name=\"tamp conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{total_s:.3}\">\n",
            self.rules.len(),
            count(Status::Fail),
            count(Status::Skipped)
        ));
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{total_s:.3}\">\n",
            xml(&format!("tamp conformance: {name}")),
            self.rules.len(),
            count(Status::Fail),
            count(Status::Skipped)
        ));
        out.push_str(&format!(
            "    <properties><property name=\"seed\" value=\"{}\"/><property name=\"cases\" value=\"{}\"/><property name=\"config\" value=\"{}\"/><property name=\"partial\" value=\"{}\"/><property name=\"result\" value=\"{}\"/></properties>\n",
            self.seed,
            self.cases,
            xml(&self.config.to_string()),
            self.partial,
            xml(&self.verdict())
        ));
        for rule in &self.rules {
            out.push_str(&format!(
                "    <testcase classname=\"tamp.conformance.{}\" name=\"{}\" time=\"{:.3}\"",
                xml(&name),
                xml(&format!("{} {} {}", rule.id, rule.level, rule.title)),
                rule.duration_ms / 1e3
            ));
            let details = |r: &RuleResult| {
                r.findings
                    .iter()
                    .map(|f| {
                        let mut s = f.message.clone();
                        if let Some(c) = &f.case {
                            s.push_str(&format!("\ncase: {c}"));
                        }
                        if let Some(r) = &f.returned {
                            s.push_str(&format!("\nthe plugin returned:\n{r}"));
                        }
                        if let Some(c) = &f.conversation {
                            s.push_str(&format!("\nsmallest failing conversation: {c}"));
                        }
                        s
                    })
                    .collect::<Vec<_>>()
                    .join("\n\n")
            };
            match rule.status {
                Status::Pass => out.push_str("/>\n"),
                Status::Skipped => out.push_str(&format!(
                    "><skipped message=\"{}\"/></testcase>\n",
                    xml(rule.notes.first().map(String::as_str).unwrap_or("not run"))
                )),
                Status::Fail => out.push_str(&format!(
                    "><failure message=\"{}\">{}</failure></testcase>\n",
                    xml(&rule.findings[0].message),
                    xml(&details(rule))
                )),
                // A broken SHOULD rule passes the suite; its findings go to the test's output.
                Status::Warn => out.push_str(&format!(
                    "><system-out>{}</system-out></testcase>\n",
                    xml(&format!("warning (SHOULD rule broken): {}", details(rule)))
                )),
            }
        }
        if let Some(p) = &self.perf {
            out.push_str(&format!(
                "    <system-out>{}</system-out>\n",
                xml(&format!(
                    "performance: {:.2} ms of plugin time per compaction of {} messages",
                    p.plugin_ms, p.messages
                ))
            ));
        }
        out.push_str("  </testsuite>\n</testsuites>\n");
        out
    }
}

/// Escapes text for XML attributes and content; drops characters XML 1.0 cannot carry.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}
