//! `tamp-conformance-engine`: the checks of the conformance kit, a plugin against
//! `docs/plugin-spec.md`, rule by rule.
//!
//! `tamp conformance <plugin>` runs them ([`run`]); a plugin's own `cargo test` reaches them
//! through the kit crate `tamp-conformance` (`conformance/kit`), which starts that command
//! and reads its JSON report, so a plugin's tests never compile this crate or the host.
//!
//! - [`spec`]: the rules and their ids.
//! - [`generate`]: seeded conversations in both wire formats, and shrinking.
//! - [`harness`]: one compaction through the host's real services, keeping the raw output.
//! - [`checks`]: one check per rule, plus the performance line.
//! - [`child`]: every check in its own process, with a time limit.
//! - [`config_args`]: a `--config` the plugin refuses, told apart from a finding.
//! - [`assemble`]: the report out of each check's output; [`report`] (the kit's): its text,
//!   JSON and JUnit renderings.

pub mod assemble;
pub mod checks;
pub mod child;
pub mod config_args;
pub mod generate;
pub mod harness;

pub use tamp_conformance::report;
pub use tamp_conformance::KitOptions;

/// The rules and their ids: the host's one table ([`tamp_host::rules`]), and the id of the
/// performance line.
pub mod spec {
    pub use tamp_conformance::PERF;
    pub use tamp_host::rules::*;
}

use std::collections::BTreeMap;

use tamp_plugin_api::strategy::panic_message;

pub use child::Launcher;
pub use report::{CheckOutput, Finding, KitReport, Perf, PluginFacts, RuleResult, Status};
pub use spec::{Level, RuleSpec, RULES};

/// Runs the checks `options` ask for, `jobs` child processes at once, and returns the report.
pub fn run(options: &KitOptions, launcher: &Launcher, jobs: usize) -> KitReport {
    let mut head = assemble::ReportHead {
        plugin: options.plugin.clone(),
        config: options
            .config
            .clone()
            .unwrap_or_else(|| serde_json::json!("the plugin's default config")),
        seed: options.seed,
        cases: options.cases,
        isolated: *launcher != Launcher::InProcess,
        selected: Vec::new(),
        lost: BTreeMap::new(),
    };
    let checks: Vec<String> = RULES
        .iter()
        .map(|r| r.id)
        .chain([spec::PERF])
        .filter(|id| options.runs(id))
        .map(str::to_string)
        .collect();
    // One child per job; the load check goes first in the first, and decides whether the
    // others count.
    let jobs = jobs.min(checks.len()).max(1);
    let mut batches: Vec<Vec<String>> = vec![Vec::new(); jobs];
    for (i, check) in checks.iter().cloned().enumerate() {
        batches[i % jobs].push(check);
    }
    head.selected = checks;
    let (mut results, lost) = run_batches(&batches, |batch| {
        child::run_checks_isolated(launcher, batch, options)
    });
    head.lost = lost;
    let load_failed = results
        .iter()
        .any(|r| r.check == tamp_conformance::LOAD_RULE && !r.output.findings.is_empty());
    if load_failed {
        results.retain(|r| r.check == tamp_conformance::LOAD_RULE);
        head.selected.retain(|c| c == tamp_conformance::LOAD_RULE);
        let results = results
            .into_iter()
            .map(|r| (r.check, r.output, r.ms))
            .collect();
        return assemble::assemble(
            head,
            results,
            Some("not checked: the plugin did not load".into()),
        );
    }
    let order = |id: &str| RULES.iter().position(|r| r.id == id).unwrap_or(RULES.len());
    results.sort_by_key(|r| order(&r.check));
    let results = results
        .into_iter()
        .map(|r| (r.check, r.output, r.ms))
        .collect();
    let skipped = (!options.only.is_empty() || !options.skip.is_empty())
        .then(|| "not run (left out by --only or --skip)".to_string());
    assemble::assemble(head, results, skipped)
}

/// Why the plugin refuses `options.config`, when the fault is the config's: the
/// [`config_args`] pseudo-check, run in a child through `launcher`
/// ([`config_args::refusal`]).
pub fn config_refusal(launcher: &Launcher, options: &KitOptions) -> Option<String> {
    child::run_checks_isolated(launcher, &[config_args::CHECK.to_string()], options)
        .into_iter()
        .flat_map(|result| result.output.findings)
        .find(|finding| finding.rule == config_args::REFUSED)
        .map(|finding| finding.message)
}

/// Runs each batch of checks on a thread of its own (`run_batch`) and gathers their results;
/// for each check of a batch whose thread panicked, why it never reported (the panic's
/// message), so that it fails instead of staying unchecked in a report that passes.
fn run_batches(
    batches: &[Vec<String>],
    run_batch: impl Fn(&[String]) -> Vec<child::CheckResult> + Sync,
) -> (Vec<child::CheckResult>, BTreeMap<String, String>) {
    let run_batch = &run_batch;
    let mut results = Vec::new();
    let mut lost = BTreeMap::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = batches
            .iter()
            .map(|batch| (batch, scope.spawn(move || run_batch(batch))))
            .collect();
        // Joined here, a panicked thread is an `Err` rather than a panic of the scope.
        for (batch, handle) in handles {
            match handle.join() {
                Ok(done) => results.extend(done),
                Err(payload) => {
                    let why = format!(
                        "the thread running its batch of checks ({}) panicked: {}",
                        batch.join(", "),
                        panic_message(&*payload)
                    );
                    lost.extend(batch.iter().map(|check| (check.clone(), why.clone())));
                }
            }
        }
    });
    (results, lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use assemble::tests::head;

    #[test]
    fn a_batch_whose_thread_panicked_fails_its_rules_with_the_panic() {
        let batches = vec![
            vec!["TAMP-LOAD-01".to_string(), "TAMP-INV-01".to_string()],
            vec!["TAMP-INV-02".to_string(), "TAMP-INV-08".to_string()],
        ];
        let (results, lost) = run_batches(&batches, |batch| {
            if batch[0] == "TAMP-INV-02" {
                panic!("the kit tripped over its own feet");
            }
            batch
                .iter()
                .map(|check| child::CheckResult {
                    check: check.clone(),
                    output: CheckOutput::default(),
                    ms: 1.0,
                })
                .collect()
        });
        let reported: Vec<&str> = results.iter().map(|r| r.check.as_str()).collect();
        assert_eq!(reported, ["TAMP-LOAD-01", "TAMP-INV-01"]);
        assert_eq!(
            lost.keys().collect::<Vec<_>>(),
            ["TAMP-INV-02", "TAMP-INV-08"]
        );

        let selected: Vec<&str> = batches.iter().flatten().map(String::as_str).collect();
        let outputs = results
            .into_iter()
            .map(|r| (r.check, r.output, r.ms))
            .collect();
        let report = assemble::assemble(head(&selected, lost), outputs, None);
        assert!(!report.passed, "{}", report.to_text());
        assert_eq!(report.failed_rules(), ["TAMP-INV-02", "TAMP-INV-08"]);
        let finding = &report.rule("TAMP-INV-08").unwrap().findings[0];
        assert!(
            finding
                .message
                .starts_with("TAMP-INV-08: selected to run, but it never reported")
                && finding
                    .message
                    .contains("the kit tripped over its own feet"),
            "{finding:?}"
        );
    }
}
