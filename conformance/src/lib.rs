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
//! - [`assemble`]: the report out of each check's output; [`report`] (the kit's): its text,
//!   JSON and JUnit renderings.

pub mod assemble;
pub mod checks;
pub mod child;
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

pub use child::Launcher;
pub use report::{CheckOutput, Finding, KitReport, Perf, PluginFacts, RuleResult, Status};
pub use spec::{Level, RuleSpec, RULES};

/// Runs the checks `options` ask for, `jobs` child processes at once, and returns the report.
pub fn run(options: &KitOptions, launcher: &Launcher, jobs: usize) -> KitReport {
    let head = assemble::ReportHead {
        plugin: options.plugin.clone(),
        config: options
            .config
            .clone()
            .unwrap_or_else(|| serde_json::json!("the plugin's default config")),
        seed: options.seed,
        cases: options.cases,
        isolated: *launcher != Launcher::InProcess,
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
    for (i, check) in checks.into_iter().enumerate() {
        batches[i % jobs].push(check);
    }
    let mut results: Vec<child::CheckResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = batches
            .iter()
            .map(|batch| scope.spawn(move || child::run_checks_isolated(launcher, batch, options)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let load_failed = results
        .iter()
        .any(|r| r.check == tamp_conformance::LOAD_RULE && !r.output.findings.is_empty());
    if load_failed {
        results.retain(|r| r.check == tamp_conformance::LOAD_RULE);
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
