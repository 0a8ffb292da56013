//! `tamp-conformance`: the conformance kit in a plugin's own `cargo test`.
//!
//! It checks a strategy plugin against `docs/plugin-spec.md`, rule by rule, with the same
//! checks as `tamp conformance`, because it runs them there: [`Kit::run`] starts the `tamp`
//! binary (`tamp conformance <plugin> --output-format json`), which runs each check in a child
//! process of its own, and reads its report back. So the kit adds nothing to a plugin's
//! build but itself: no host, no JSON Schema validator, no SQLite, no async runtime.
//!
//! A plugin's whole conformance test (`tests/conformance.rs`):
//!
//! ```no_run
//! #[test]
//! fn conforms() {
//!     tamp_conformance::Kit::for_this_crate()      // builds this crate's cdylib
//!         .config(serde_json::json!({"keep_messages": 6}))
//!         .run()
//!         .assert_passed();                        // panics with the full text report
//! }
//! ```
//!
//! The `tamp` binary it runs is the first of: [`Kit::tamp`]; the `TAMP_BIN` environment
//! variable; a `tamp` in the test's own target directory (inside the tamp repository, the one
//! cargo built); `tamp` on `PATH` (`cargo install tamp-cli`, the same binary that runs the
//! plugin). Its kit must be as new as this crate: the report is read as this crate's
//! [`KitReport`].
//!
//! - [`report`]: the report, as text, JSON and JUnit.
//! - [`locate`]: building the plugin's library and finding `tamp`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod locate;
pub mod report;

pub use report::{CheckOutput, Finding, KitReport, Perf, PluginFacts, RuleResult, Status};

/// The performance measurement's check id (not a rule: it reports, never fails).
pub const PERF: &str = "PERF";

/// The load check's rule id: it always runs, and decides whether the others count.
pub const LOAD_RULE: &str = "TAMP-LOAD-01";

/// What a kit run checks, and how: what [`Kit`] hands `tamp conformance` as flags, and what
/// `tamp conformance` hands each check's process.
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

    /// The default options for `plugin`.
    pub fn new(plugin: impl Into<PathBuf>) -> Self {
        KitOptions {
            plugin: plugin.into(),
            config: None,
            seed: Self::DEFAULT_SEED,
            cases: Self::DEFAULT_CASES,
            only: Vec::new(),
            skip: Vec::new(),
            timeout_secs: Self::DEFAULT_TIMEOUT_SECS,
        }
    }

    /// Whether check `id` runs: the load check always; others unless left out.
    pub fn runs(&self, id: &str) -> bool {
        id == LOAD_RULE
            || ((self.only.is_empty() || self.only.iter().any(|o| o == id))
                && !self.skip.iter().any(|s| s == id))
    }
}

/// The conformance kit for a plugin's tests. Build it, then [`Kit::run`] it.
#[derive(Debug, Clone)]
pub struct Kit {
    options: KitOptions,
    jobs: Option<usize>,
    tamp: Option<PathBuf>,
}

impl Kit {
    /// Checks the plugin library (or WebAssembly component) at `plugin`.
    pub fn new(plugin: impl Into<PathBuf>) -> Self {
        Kit {
            options: KitOptions::new(plugin),
            jobs: None,
            tamp: None,
        }
    }

    /// Checks the library of the crate whose tests are running: asks cargo for its `cdylib`
    /// (`cargo build --lib`, in the test's profile). With `crate-type = ["cdylib", "rlib"]`,
    /// `cargo test` has built it already and this finds it up to date; with `cdylib` alone,
    /// `cargo test` does not build it, and this compiles the crate once more.
    ///
    /// # Panics
    /// When not run by `cargo test` (no `CARGO_MANIFEST_DIR`), or the build fails or makes
    /// no `cdylib` (the message says which).
    pub fn for_this_crate() -> Self {
        match locate::build_this_crate() {
            Ok(library) => Kit::new(library),
            Err(e) => panic!("tamp-conformance: {e}"),
        }
    }

    /// The stage config to check with (default: the plugin's default config).
    pub fn config(mut self, config: serde_json::Value) -> Self {
        self.options.config = Some(config);
        self
    }

    /// Seed of the generated conversations (the same seed gives the same conversations).
    pub fn seed(mut self, seed: u64) -> Self {
        self.options.seed = seed;
        self
    }

    /// Generated conversations per wire format for each property check.
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

    /// Checks run at once (default: `tamp conformance`'s, the number of CPUs).
    pub fn jobs(mut self, jobs: usize) -> Self {
        self.jobs = Some(jobs.max(1));
        self
    }

    /// The `tamp` binary that runs the checks (default: see the crate's docs).
    pub fn tamp(mut self, binary: impl Into<PathBuf>) -> Self {
        self.tamp = Some(binary.into());
        self
    }

    pub fn options(&self) -> &KitOptions {
        &self.options
    }

    /// The arguments of `tamp` that run these checks, with a JSON report.
    pub fn args(&self) -> Vec<String> {
        let o = &self.options;
        let mut args = vec![
            "conformance".to_string(),
            o.plugin.display().to_string(),
            "--output-format".into(),
            "json".into(),
            "--seed".into(),
            o.seed.to_string(),
            "--cases".into(),
            o.cases.to_string(),
            "--timeout".into(),
            o.timeout_secs.to_string(),
        ];
        if let Some(config) = &o.config {
            args.extend(["--stage-config".into(), config.to_string()]);
        }
        for (flag, ids) in [("--only", &o.only), ("--skip", &o.skip)] {
            if !ids.is_empty() {
                args.extend([flag.to_string(), ids.join(",")]);
            }
        }
        if let Some(jobs) = self.jobs {
            args.extend(["--jobs".into(), jobs.to_string()]);
        }
        args
    }

    /// Runs the checks in `tamp conformance` and returns its report.
    ///
    /// # Panics
    /// When no `tamp` binary is found, or it cannot run the checks (a usage error, a report
    /// it cannot give): a failing plugin is a report that did not pass, not a panic.
    pub fn run(&self) -> KitReport {
        let tamp = match &self.tamp {
            Some(tamp) => tamp.clone(),
            None => locate::tamp_binary().unwrap_or_else(|e| panic!("tamp-conformance: {e}")),
        };
        match run_tamp(&tamp, &self.args()) {
            Ok(report) => report,
            Err(e) => panic!("tamp-conformance: {e}"),
        }
    }
}

/// Runs `tamp args…` and reads its JSON report (exit status 0: conforms, 1: does not).
fn run_tamp(tamp: &Path, args: &[String]) -> Result<KitReport, String> {
    let out = Command::new(tamp)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tamp.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(format!(
            "`{} {}` failed ({}): {}",
            tamp.display(),
            args.join(" "),
            out.status,
            stderr.trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "{} printed no report this kit can read ({e}); is it older than tamp-conformance {}? \
             (its stderr: {})",
            tamp.display(),
            env!("CARGO_PKG_VERSION"),
            stderr.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_become_tamp_conformance_flags() {
        let kit = Kit::new("libx.so")
            .config(serde_json::json!({"keep": 2}))
            .seed(7)
            .cases(3)
            .skip("TAMP-EDGE-02")
            .skip("PERF")
            .only("TAMP-INV-01")
            .timeout(Duration::from_millis(2500))
            .jobs(1);
        assert_eq!(
            kit.args().join(" "),
            "conformance libx.so --output-format json --seed 7 --cases 3 --timeout 2.5 \
             --stage-config {\"keep\":2} --only TAMP-INV-01 --skip TAMP-EDGE-02,PERF --jobs 1"
        );
        let plain = Kit::new("libx.so").args().join(" ");
        assert_eq!(
            plain,
            "conformance libx.so --output-format json --seed 1 --cases 12 --timeout 10"
        );
    }

    #[test]
    fn the_load_check_always_runs() {
        let mut o = KitOptions::new("x");
        o.only = vec!["TAMP-INV-01".into()];
        o.skip = vec![LOAD_RULE.into(), "TAMP-INV-01".into()];
        assert!(o.runs(LOAD_RULE));
        assert!(!o.runs("TAMP-INV-01"));
        assert!(!o.runs("TAMP-INV-02"));
        assert!(KitOptions::new("x").runs("PERF"));
    }

    #[test]
    fn a_plugin_that_does_not_conform_is_a_report_that_did_not_pass() {
        let failing = KitReport {
            plugin: "libx.so".into(),
            meta: None,
            config: serde_json::json!({}),
            seed: 1,
            cases: 2,
            isolated: true,
            rules: vec![RuleResult {
                id: "TAMP-INV-01".into(),
                title: "nothing lost".into(),
                level: "MUST".into(),
                status: Status::Fail,
                findings: vec![Finding::new("TAMP-INV-01", "input message 3 lost")],
                notes: Vec::new(),
                duration_ms: 1.0,
            }],
            perf: None,
            passed: false,
            partial: false,
        };
        // `tamp conformance` prints the report and exits 1.
        let script = format!(
            "printf '%s' '{}'; exit 1",
            failing.to_json().replace('\'', "")
        );
        let report = run_tamp(Path::new("sh"), &["-c".into(), script]).unwrap();
        assert!(!report.passed);
        assert_eq!(report.failed_rules(), ["TAMP-INV-01"]);
        let panic = std::panic::catch_unwind(|| report.assert_passed()).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains("input message 3 lost"), "{message}");
    }

    #[test]
    fn a_tamp_that_gives_no_report_is_an_error_naming_it() {
        // `true` exits 0 and prints nothing: not a report.
        let e = run_tamp(Path::new("true"), &[]).unwrap_err();
        assert!(e.contains("printed no report"), "{e}");
        let usage = [
            "-c".to_string(),
            "echo 'error: --only X: no such rule' >&2; exit 2".into(),
        ];
        let e = run_tamp(Path::new("sh"), &usage).unwrap_err();
        assert!(
            e.contains("failed (exit status: 2): error: --only X"),
            "{e}"
        );
        let e = run_tamp(Path::new("/nonexistent/tamp"), &[]).unwrap_err();
        assert!(e.contains("cannot run /nonexistent/tamp"), "{e}");
    }
}
