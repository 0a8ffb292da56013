//! `tamp-conformance`: the conformance kit, which checks a plugin against
//! `docs/plugin-spec.md`, rule by rule.
//!
//! `tamp conformance <plugin.so>` is the command; [`Kit`] is the same thing as a library, the
//! one dev-dependency a plugin author's own `cargo test` needs. It builds on `tamp-host`'s core
//! alone (no HTTP server or client, no PostgreSQL driver):
//!
//! ```no_run
//! # fn plugin_path() -> std::path::PathBuf { "target/debug/libmy_plugin.so".into() }
//! #[test]
//! fn conforms() {
//!     let report = tamp_conformance::Kit::new(plugin_path())
//!         .config(serde_json::json!({"keep_exchanges": 2}))
//!         .run();
//!     report.assert_passed();
//! }
//! ```
//!
//! - [`spec`]: the rules and their ids.
//! - [`generate`]: seeded conversations in both wire formats, and shrinking.
//! - [`harness`]: one compaction through the host's real services, keeping the raw output.
//! - [`checks`]: one check per rule, plus the performance line.
//! - [`child`]: every check in its own process, with a time limit.
//! - [`report`]: text, JSON and JUnit output.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod checks;
pub mod child;
pub mod generate;
pub mod harness;
pub mod report;

/// The rules and their ids: the host's one table ([`tamp_host::rules`]), and the id of the
/// performance line.
pub mod spec {
    pub use tamp_host::rules::*;

    /// The performance measurement's check id (not a rule: it reports, never fails).
    pub const PERF: &str = "PERF";
}

pub use child::Launcher;
pub use report::{CheckOutput, Finding, KitReport, Perf, PluginFacts, RuleResult, Status};
pub use spec::{Level, RuleSpec, RULES};

/// What a kit run checks, and how (what a child process is told).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KitOptions {
    pub plugin: PathBuf,
    /// The stage config; `None`: the plugin's default config.
    pub config: Option<serde_json::Value>,
    pub seed: u64,
    /// Generated conversations per wire format in each property check.
    pub cases: usize,
    /// Check ids to run (empty: all).
    pub only: Vec<String>,
    /// Check ids not to run.
    #[serde(default)]
    pub skip: Vec<String>,
    /// Time limit of one compaction.
    pub timeout_secs: f64,
}

impl KitOptions {
    pub const DEFAULT_SEED: u64 = 1;
    pub const DEFAULT_CASES: usize = 12;
    pub const DEFAULT_TIMEOUT_SECS: f64 = 10.0;

    /// How long a check's process may run before it is killed.
    pub fn child_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_secs * 4.0 + 4.0)
    }
}

/// The conformance kit as a library. Build it, then [`Kit::run`] it.
///
/// Inside a `cargo test` test, each check runs in a copy of the test binary filtered to the
/// same test (see [`child`]): the test must reach `run()` the same way when re-run, and
/// should not print to stdout lines starting with [`child::RESULT_MARKER`].
#[derive(Debug, Clone)]
pub struct Kit {
    options: KitOptions,
    launcher: Option<Launcher>,
    jobs: usize,
}

impl Kit {
    pub fn new(plugin: impl Into<PathBuf>) -> Self {
        Kit {
            options: KitOptions {
                plugin: plugin.into(),
                config: None,
                seed: KitOptions::DEFAULT_SEED,
                cases: KitOptions::DEFAULT_CASES,
                only: Vec::new(),
                skip: Vec::new(),
                timeout_secs: KitOptions::DEFAULT_TIMEOUT_SECS,
            },
            launcher: None,
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        }
    }

    /// The stage config to check with (default: the plugin's default config).
    pub fn config(mut self, config: serde_json::Value) -> Self {
        self.options.config = Some(config);
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.options.seed = seed;
        self
    }

    pub fn cases(mut self, cases: usize) -> Self {
        self.options.cases = cases.max(1);
        self
    }

    /// Runs only this check (call again for more); the load check always runs.
    pub fn only(mut self, id: &str) -> Self {
        self.options.only.push(id.to_string());
        self
    }

    /// Leaves this check out (call again for more); the load check always runs.
    pub fn skip(mut self, id: &str) -> Self {
        self.options.skip.push(id.to_string());
        self
    }

    /// Time limit of one compaction.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout_secs = timeout.as_secs_f64();
        self
    }

    /// How checks' processes are started (default: [`Launcher::detect`]).
    pub fn launcher(mut self, launcher: Launcher) -> Self {
        self.launcher = Some(launcher);
        self
    }

    /// Checks run at once.
    pub fn jobs(mut self, jobs: usize) -> Self {
        self.jobs = jobs.max(1);
        self
    }

    pub fn options(&self) -> &KitOptions {
        &self.options
    }

    /// Runs the checks and returns the report. In a check's child process (see [`child`]),
    /// runs that one check, prints its result and exits the process instead.
    pub fn run(&self) -> KitReport {
        if child::serve_child_from_env() {
            std::process::exit(0);
        }
        let launcher = self.launcher.clone().unwrap_or_else(Launcher::detect);
        let head = report::ReportHead {
            plugin: self.options.plugin.clone(),
            config: self
                .options
                .config
                .clone()
                .unwrap_or_else(|| serde_json::json!("the plugin's default config")),
            seed: self.options.seed,
            cases: self.options.cases,
            isolated: launcher != Launcher::InProcess,
        };
        let checks: Vec<String> = RULES
            .iter()
            .map(|r| r.id)
            .chain([spec::PERF])
            .filter(|id| {
                *id == "TAMP-LOAD-01"
                    || ((self.options.only.is_empty() || self.options.only.iter().any(|o| o == id))
                        && !self.options.skip.iter().any(|s| s == id))
            })
            .map(str::to_string)
            .collect();
        // One child per job; the load check goes first in the first, and decides whether the
        // others count.
        let jobs = self.jobs.min(checks.len()).max(1);
        let mut batches: Vec<Vec<String>> = vec![Vec::new(); jobs];
        for (i, check) in checks.into_iter().enumerate() {
            batches[i % jobs].push(check);
        }
        let mut results: Vec<child::CheckResult> = std::thread::scope(|scope| {
            let handles: Vec<_> = batches
                .iter()
                .map(|batch| {
                    let launcher = &launcher;
                    scope.spawn(move || child::run_checks_isolated(launcher, batch, &self.options))
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let load_failed = results
            .iter()
            .any(|r| r.check == "TAMP-LOAD-01" && !r.output.findings.is_empty());
        if load_failed {
            results.retain(|r| r.check == "TAMP-LOAD-01");
            let results = results
                .into_iter()
                .map(|r| (r.check, r.output, r.ms))
                .collect();
            return KitReport::assemble(
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
        let skipped = (!self.options.only.is_empty() || !self.options.skip.is_empty())
            .then(|| "not run (left out by --only or skip)".to_string());
        KitReport::assemble(head, results, skipped)
    }
}
