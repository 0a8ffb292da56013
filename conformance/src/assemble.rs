//! The report of a run, assembled from each check's output: one result per rule of
//! [`RULES`], a MUST rule with findings failing and a SHOULD rule warning.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tamp_conformance::report::{CheckOutput, Finding, KitReport, RuleResult, Status};

use super::spec::{Level, RULES};

/// What the report says about the run itself.
pub struct ReportHead {
    pub plugin: PathBuf,
    pub config: serde_json::Value,
    pub seed: u64,
    pub cases: usize,
    pub isolated: bool,
    /// The checks the run was to run (what `--only` and `--skip` left in): a rule among them
    /// whose check never reports fails, since it passed nothing.
    pub selected: Vec<String>,
    /// Why a selected check never reported, where that is known (its thread panicked).
    pub lost: BTreeMap<String, String>,
}

/// Assembles the report from each check's output (by check id, in [`RULES`] order).
pub fn assemble(
    head: ReportHead,
    outputs: Vec<(String, CheckOutput, f64)>,
    skipped_reason: Option<String>,
) -> KitReport {
    let mut rules: Vec<RuleResult> = RULES
        .iter()
        .map(|r| RuleResult {
            id: r.id.to_string(),
            title: r.title.to_string(),
            level: match r.level {
                Level::Must => "MUST".into(),
                Level::Should => "SHOULD".into(),
            },
            status: Status::Skipped,
            findings: Vec::new(),
            notes: Vec::new(),
            duration_ms: 0.0,
        })
        .collect();
    let mut meta = None;
    let mut perf = None;
    // A rule's own check's findings first (they are shrunk), then what other checks saw.
    let mut findings: Vec<(bool, Finding)> = Vec::new();
    for (check, output, ms) in outputs {
        meta = meta.or(output.meta);
        perf = perf.or(output.perf);
        if let Some(rule) = rules.iter_mut().find(|r| r.id == check) {
            rule.status = Status::Pass;
            rule.duration_ms = ms;
            rule.notes.extend(output.notes);
        }
        findings.extend(output.findings.into_iter().map(|f| (f.rule != check, f)));
    }
    findings.sort_by_key(|(foreign, _)| *foreign);
    {
        for (_, finding) in findings {
            if let Some(rule) = rules.iter_mut().find(|r| r.id == finding.rule) {
                // One finding per rule and wire format is plenty; keep the first three.
                if rule.findings.len() < 3 && !rule.findings.contains(&finding) {
                    rule.findings.push(finding);
                }
            }
        }
    }
    for rule in &mut rules {
        // Still `Skipped` here: no output came back for the rule's check.
        if rule.status == Status::Skipped && head.selected.contains(&rule.id) {
            never_reported(rule, head.lost.get(&rule.id));
        } else if !rule.findings.is_empty() {
            rule.status = if rule.level == "SHOULD" {
                Status::Warn
            } else {
                Status::Fail
            };
        } else if rule.status == Status::Skipped {
            if let Some(reason) = &skipped_reason {
                rule.notes.push(reason.clone());
            }
        }
    }
    let passed = rules.iter().all(|r| r.status != Status::Fail)
        && rules.iter().any(|r| r.status == Status::Pass);
    // Rules left unchecked by --only/--skip (when the plugin did not load, the rest are
    // unchecked too, but the run has its verdict).
    let loaded = rules
        .iter()
        .any(|r| r.id == tamp_conformance::LOAD_RULE && r.status != Status::Fail);
    let partial = loaded && rules.iter().any(|r| r.status == Status::Skipped);
    KitReport {
        plugin: head.plugin,
        meta,
        config: head.config,
        seed: head.seed,
        cases: head.cases,
        isolated: head.isolated,
        rules,
        perf,
        passed,
        partial,
    }
}

/// Fails `rule`, whose check was to run but sent no result: whatever the rule's level, a
/// check that never ran is no pass (and leaving the rule `Skipped` would let the run pass).
fn never_reported(rule: &mut RuleResult, why: Option<&String>) {
    let why = why.map_or("its check ended without sending a result", String::as_str);
    let finding = Finding::new(
        &rule.id,
        format!("{}: selected to run, but it never reported: {why}", rule.id),
    );
    rule.findings.insert(0, finding);
    rule.findings.truncate(3);
    rule.status = Status::Fail;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The head of a run that was to run `selected`.
    pub(crate) fn head(selected: &[&str], lost: BTreeMap<String, String>) -> ReportHead {
        ReportHead {
            plugin: "libx.so".into(),
            config: serde_json::json!({}),
            seed: 1,
            cases: 2,
            isolated: true,
            selected: selected.iter().map(|c| c.to_string()).collect(),
            lost,
        }
    }

    fn report(findings: Vec<Finding>) -> KitReport {
        let outputs = RULES
            .iter()
            .map(|r| {
                let output = CheckOutput {
                    findings: findings
                        .iter()
                        .filter(|f| f.rule == r.id)
                        .cloned()
                        .collect(),
                    ..CheckOutput::default()
                };
                (r.id.to_string(), output, 1.0)
            })
            .collect();
        let all: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        assemble(head(&all, BTreeMap::new()), outputs, None)
    }

    #[test]
    fn a_must_finding_fails_and_a_should_finding_warns() {
        let r = report(vec![
            Finding::new("TAMP-INV-01", "input message 3 <lost> & \"gone\"\u{1}"),
            Finding::new("TAMP-INV-08", "not prefix-stable"),
        ]);
        assert!(!r.passed);
        assert_eq!(r.failed_rules(), ["TAMP-INV-01"]);
        assert_eq!(r.warned_rules(), ["TAMP-INV-08"]);
        let text = r.to_text();
        assert!(text.contains("FAIL  TAMP-INV-01"), "{text}");
        assert!(text.contains("input message 3"), "{text}");
        let junit = r.to_junit();
        assert!(junit.contains("failures=\"1\""), "{junit}");
        assert!(
            junit.contains("&lt;lost&gt; &amp; &quot;gone&quot;"),
            "{junit}"
        );
        assert!(!junit.contains('\u{1}'));
        let back: KitReport = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back.failed_rules(), ["TAMP-INV-01"]);
        assert!(report(vec![Finding::new("TAMP-INV-08", "w")]).passed);
    }

    #[test]
    fn a_rule_selected_to_run_that_never_reported_fails() {
        // TAMP-INV-01 and the SHOULD rule TAMP-INV-08 were to run, and sent nothing back;
        // TAMP-INV-02 was left out (`--only`).
        let selected = ["TAMP-LOAD-01", "TAMP-INV-01", "TAMP-INV-08"];
        let lost = BTreeMap::from([(
            "TAMP-INV-01".to_string(),
            "its thread panicked: boom".to_string(),
        )]);
        let load = ("TAMP-LOAD-01".to_string(), CheckOutput::default(), 1.0);
        let r = assemble(head(&selected, lost), vec![load.clone()], None);
        assert!(!r.passed, "{}", r.to_text());
        assert_eq!(r.failed_rules(), ["TAMP-INV-01", "TAMP-INV-08"]);
        let finding = &r.rule("TAMP-INV-01").unwrap().findings[0];
        assert_eq!(
            finding.message,
            "TAMP-INV-01: selected to run, but it never reported: its thread panicked: boom"
        );
        let finding = &r.rule("TAMP-INV-08").unwrap().findings[0];
        assert!(finding.message.contains("never reported"), "{finding:?}");
        assert_eq!(r.rule("TAMP-INV-02").unwrap().status, Status::Skipped);
        assert!(std::panic::catch_unwind(|| r.assert_passed()).is_err());

        // What was left out stays skipped, and the run passes on what did report.
        let r = assemble(head(&selected[..1], BTreeMap::new()), vec![load], None);
        assert!(r.passed, "{}", r.to_text());
        assert_eq!(r.rule("TAMP-INV-01").unwrap().status, Status::Skipped);
    }

    #[test]
    fn a_run_with_rules_left_out_is_partial_and_no_verdict() {
        let full = report(Vec::new());
        assert!(full.passed && !full.partial && full.conforms());
        assert!(
            full.to_text().contains("result: CONFORMS"),
            "{}",
            full.to_text()
        );

        let load = ("TAMP-LOAD-01".to_string(), CheckOutput::default(), 1.0);
        let some = assemble(head(&["TAMP-LOAD-01"], BTreeMap::new()), vec![load], None);
        assert!(some.passed && some.partial && !some.conforms());
        let text = some.to_text();
        assert!(
            text.contains("result: no failures in the 1 check run (partial: "),
            "{text}"
        );
        assert!(!text.contains("CONFORMS"), "{text}");

        // A plugin that does not load: the rest is unchecked, and the verdict is given.
        let failed = CheckOutput {
            findings: vec![Finding::new("TAMP-LOAD-01", "not a plugin")],
            ..CheckOutput::default()
        };
        let r = assemble(
            head(&["TAMP-LOAD-01"], BTreeMap::new()),
            vec![("TAMP-LOAD-01".to_string(), failed, 1.0)],
            None,
        );
        assert!(!r.passed && !r.partial);
        assert!(r.to_text().contains("result: DOES NOT CONFORM"));
    }
}
