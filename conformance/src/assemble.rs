//! The report of a run, assembled from each check's output: one result per rule of
//! [`RULES`], a MUST rule with findings failing and a SHOULD rule warning.

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
        if !rule.findings.is_empty() {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assemble(
            ReportHead {
                plugin: "libx.so".into(),
                config: serde_json::json!({}),
                seed: 1,
                cases: 2,
                isolated: true,
            },
            outputs,
            None,
        )
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
}
