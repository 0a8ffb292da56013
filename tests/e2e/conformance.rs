//! The conformance kit through the real `tamp` binary: every shipped plugin and the template
//! conform; each deliberately broken variant fails exactly the rule it breaks, and the failure
//! names the rule, the message and what the plugin returned; a plugin that aborts the process
//! or hangs fails those checks (child processes, time limits) without taking the kit down;
//! text, JSON and JUnit output.

use std::path::Path;
use std::process::Command;

use tamp_conformance::{KitReport, Status};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::{plugin, tamp_bin};

/// Every check but the 5 MB message and the SHOULD rule, for the broken variants: the rules
/// they could break by accident are all here, and the run stays short (the WebAssembly
/// fixtures' checks too, `wasm.rs`).
pub(crate) const ALL_BUT_SLOW: &str =
    "TAMP-META-01,TAMP-CFG-01,TAMP-CFG-02,TAMP-INV-01,TAMP-INV-02,\
    TAMP-INV-03,TAMP-INV-04,TAMP-INV-05,TAMP-INV-06,TAMP-INV-07,TAMP-INV-09,TAMP-ERR-01,\
    TAMP-EDGE-01,TAMP-EDGE-03,TAMP-CONC-01,TAMP-INV-10,TAMP-INV-11,TAMP-INV-12,TAMP-INV-13";

/// Runs `tamp conformance` with `args` after the plugin; returns the exit code and stdout.
fn kit(plugin: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(tamp_bin())
        .arg("conformance")
        .arg(plugin)
        .args(args)
        .output()
        .expect("run tamp conformance");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
    let code = out.status.code().expect("tamp exits, it is not killed");
    (code, stdout)
}

/// Fails the test unless `plugin` passes every check but the slow ones, 3 cases each.
#[track_caller]
pub(crate) fn assert_conforms_on_the_quick_checks(plugin: &Path) {
    let (code, report) = kit_json(plugin, &["--only", ALL_BUT_SLOW, "--cases", "3"]);
    assert_eq!(
        (code, report.failed_rules()),
        (0, vec![]),
        "{}",
        report.to_text()
    );
}

/// `tamp conformance` with `args` and `--format json`: the exit code and the parsed report.
pub(crate) fn kit_json(plugin: &Path, args: &[&str]) -> (i32, KitReport) {
    let mut all = vec!["--output-format", "json"];
    all.extend_from_slice(args);
    let (code, stdout) = kit(plugin, &all);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("the JSON report parses ({e}):\n{stdout}"));
    (code, report)
}

#[test]
fn shipped_plugins_and_the_template_conform() {
    for lib in [
        "tamp_buffered_tool_call",
        "tamp_map_reduce_adaptive",
        "tamp_anchored_structured",
        "tamp_batch_deferred",
        "tamp_tool_result_clearing",
        "tamp_custom_strategy",
    ] {
        // Default checks; a generous time limit, since the 5 MB message takes seconds in a
        // debug build and CI machines are shared (a slow plugin still fails at 60 s × 3).
        let (code, report) = kit_json(&plugin(lib), &["--timeout", "60", "--cases", "8"]);
        assert!(
            report.passed && code == 0,
            "{lib} does not conform (exit {code}):\n{}",
            report.to_text()
        );
        assert!(report.failed_rules().is_empty());
        // Every rule was checked (none skipped), and the plugin was really exercised.
        assert!(
            report.rules.iter().all(|r| r.status != Status::Skipped),
            "{lib}: {}",
            report.to_text()
        );
        let meta = report
            .meta
            .as_ref()
            .expect("the load check reports the metadata");
        assert!(!meta.name.is_empty());
        let perf = report.perf.as_ref().expect("a performance line");
        assert!(perf.messages >= 1000 && perf.plugin_ms > 0.0, "{perf:?}");
        let changed = &report.rule("TAMP-INV-01").unwrap().notes;
        assert!(
            changed.iter().any(|n| !n.contains("changed 0 of")),
            "{lib} never acted on the generated conversations: {changed:?}"
        );
    }
}

#[test]
fn each_broken_variant_fails_exactly_the_rule_it_breaks() {
    let breaker = plugin("tamp_test_rule_breaker");
    let invariant_breaks = [
        "TAMP-INV-01",
        "TAMP-INV-02",
        "TAMP-INV-03",
        "TAMP-INV-04",
        "TAMP-INV-06",
        // Broken clearings, by the rule before the colon.
        "TAMP-INV-10:no-page",
        "TAMP-INV-10:tool-id",
        "TAMP-INV-10:dropped-block",
        "TAMP-INV-01:clearing",
        "TAMP-INV-03:clearing",
        // What stays where it stands: every generated case has a mid-conversation system
        // message and an opaque unit, and those of two formats a compaction boundary.
        "TAMP-INV-11",
        "TAMP-INV-12",
        "TAMP-INV-13",
    ];
    let other_breaks = [
        "TAMP-CFG-02",
        "TAMP-INV-05",
        "TAMP-INV-07",
        "TAMP-INV-09",
        "TAMP-EDGE-03",
        "TAMP-CONC-01",
    ];
    // The unbroken configuration conforms on the same checks.
    assert_conforms_on_the_quick_checks(&breaker);
    for breaks in invariant_breaks.iter().chain(&other_breaks) {
        let config = format!("{{\"break\": \"{breaks}\"}}");
        let rule = &breaks.split(':').next().unwrap();
        let (code, report) = kit_json(
            &breaker,
            &[
                "--stage-config",
                &config,
                "--only",
                ALL_BUT_SLOW,
                "--cases",
                "3",
            ],
        );
        assert_eq!(code, 1, "{breaks}: {}", report.to_text());
        assert_eq!(report.failed_rules(), [*rule], "{}", report.to_text());
        let finding = &report.rule(rule).unwrap().findings[0];
        assert_eq!(finding.rule, *rule);
        if invariant_breaks.contains(breaks) {
            // The rule's id and the message at fault, what the plugin returned, and the
            // smallest failing conversation, which is a valid request in its wire format.
            assert!(finding.message.starts_with(rule), "{finding:?}");
            if *rule != "TAMP-INV-06" {
                assert!(
                    finding.message.contains("message ") || finding.message.contains("messages["),
                    "{finding:?}"
                );
            }
            let returned = finding
                .returned
                .as_deref()
                .expect("what the plugin returned");
            assert_contains(returned, "[0]");
            let case = finding.case.as_deref().expect("how to rerun the case");
            assert!(case.contains("seed") && case.contains("--seed 1"), "{case}");
            let conversation = finding
                .conversation
                .clone()
                .expect("the smallest failing case");
            let (small, _) = tamp_host::wire::parse_value(conversation, None)
                .expect("the smallest case is a valid request");
            assert!(
                small.messages.len() <= 8,
                "shrunk to {} messages",
                small.messages.len()
            );
        }
    }
    // What no config can break: metadata and the schema.
    let (code, report) = kit_json(&plugin("tamp_test_bad_metadata"), &["--only", ALL_BUT_SLOW]);
    assert_eq!(code, 1);
    assert_eq!(
        report.failed_rules(),
        ["TAMP-META-01", "TAMP-CFG-01"],
        "{}",
        report.to_text()
    );
    let meta = &report.rule("TAMP-META-01").unwrap().findings;
    assert!(meta.iter().any(|f| f.message.contains("name")), "{meta:?}");
    assert!(
        meta.iter().any(|f| f.message.contains("description")),
        "{meta:?}"
    );
    let schema = &report.rule("TAMP-CFG-01").unwrap().findings[0].message;
    assert_contains(schema, "/group_size");
}

#[test]
fn a_plugin_that_aborts_or_hangs_fails_those_checks_not_the_kit() {
    let breaker = plugin("tamp_test_rule_breaker");
    let (code, report) = kit_json(
        &breaker,
        &[
            "--stage-config",
            r#"{"break": "abort"}"#,
            "--only",
            "TAMP-META-01,TAMP-INV-01,TAMP-EDGE-01",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        report.failed_rules(),
        ["TAMP-INV-01", "TAMP-EDGE-01"],
        "{}",
        report.to_text()
    );
    let message = &report.rule("TAMP-INV-01").unwrap().findings[0].message;
    assert_contains(message, "SIGABRT");
    // The checks after the abort ran in a fresh child.
    assert_eq!(report.rule("TAMP-META-01").unwrap().status, Status::Pass);

    // Blocking its thread: only killing the child ends it.
    let (code, report) = kit_json(
        &breaker,
        &[
            "--stage-config",
            r#"{"break": "hang"}"#,
            "--only",
            "TAMP-EDGE-01",
            "--timeout",
            "0.5",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(report.failed_rules(), ["TAMP-EDGE-01"]);
    let message = &report.rule("TAMP-EDGE-01").unwrap().findings[0].message;
    assert!(
        message.contains("hung") && message.contains("killed"),
        "{message}"
    );

    // A future that never finishes: the compaction's own time limit reports it.
    let (code, report) = kit_json(
        &plugin("tamp_test_misbehaving"),
        &[
            "--stage-config",
            r#"{"mode": "hang"}"#,
            "--only",
            "TAMP-EDGE-01",
            "--timeout",
            "0.5",
        ],
    );
    assert_eq!(code, 1);
    let message = &report.rule("TAMP-EDGE-01").unwrap().findings[0].message;
    assert_contains(message, "returned nothing within 0.5s");

    // A panic inside the future is caught and reported by rule.
    let (_, report) = kit_json(
        &plugin("tamp_test_misbehaving"),
        &[
            "--stage-config",
            r#"{"mode": "panic_in_compact"}"#,
            "--only",
            "TAMP-ERR-01",
            "--cases",
            "2",
        ],
    );
    assert_eq!(report.failed_rules(), ["TAMP-ERR-01"]);
    let message = &report.rule("TAMP-ERR-01").unwrap().findings[0].message;
    assert_contains(message, "panic inside the future");
}

#[test]
fn a_plugin_that_does_not_load_fails_the_load_rule_and_skips_the_rest() {
    let (code, report) = kit_json(&plugin("tamp_test_incompatible_abi"), &[]);
    assert_eq!(code, 1);
    assert_eq!(report.failed_rules(), ["TAMP-LOAD-01"]);
    assert!(report
        .rules
        .iter()
        .filter(|r| r.id != "TAMP-LOAD-01")
        .all(|r| r.status == Status::Skipped));
    let message = &report.rule("TAMP-LOAD-01").unwrap().findings[0].message;
    assert_contains(message, "tamp-plugin-api");
}

#[test]
fn text_junit_and_json_reports_and_reproducible_seeds() {
    let breaker = plugin("tamp_test_rule_breaker");
    let args = |format: &'static str| {
        vec![
            "--stage-config",
            r#"{"break": "TAMP-INV-01"}"#,
            "--only",
            "TAMP-INV-01,TAMP-INV-04",
            "--cases",
            "3",
            "--seed",
            "9",
            "--output-format",
            format,
        ]
    };
    let (code, text) = kit(&breaker, &args("text"));
    assert_eq!(code, 1);
    assert_contains(&text, "PASS  TAMP-LOAD-01");
    assert_contains(&text, "FAIL  TAMP-INV-01");
    assert_contains(&text, "PASS  TAMP-INV-04");
    assert_contains(&text, "the plugin returned:");
    assert_contains(&text, "smallest failing conversation: {");
    assert_contains(&text, "--seed 9");
    assert_contains(&text, "result: DOES NOT CONFORM");

    let (code, junit) = kit(&breaker, &args("junit"));
    assert_eq!(code, 1);
    assert!(junit.starts_with("<?xml"), "{junit}");
    let testcases = junit.matches("<testcase ").count();
    assert_eq!(testcases, tamp_host::rules::RULES.len(), "{junit}");
    assert_eq!(junit.matches("<failure ").count(), 1, "{junit}");
    assert_contains(&junit, "failures=\"1\"");
    assert_contains(&junit, "name=\"TAMP-INV-01 MUST nothing lost\"");

    // The same seed gives the same failure; the report's JSON round-trips.
    let (_, a) = kit_json(&breaker, &args("json")[..8]);
    let (_, b) = kit_json(&breaker, &args("json")[..8]);
    let (fa, fb) = (
        &a.rule("TAMP-INV-01").unwrap().findings,
        &b.rule("TAMP-INV-01").unwrap().findings,
    );
    assert!(!fa.is_empty(), "the broken rule has a finding to reproduce");
    assert_eq!(fa, fb);
    assert_eq!(a.seed, 9);

    // A usage error is exit status 2 with a message naming the argument.
    let out = Command::new(tamp_bin())
        .args(["conformance", "nowhere.so"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere.so"));
    let (code, _) = kit(&breaker, &["--stage-config", "{not json"]);
    assert_eq!(code, 2);
}

/// The crates of a package's build as cargo resolves them for that package alone, through
/// the dependency `edges` (`normal`, or `normal,dev` for its tests).
fn package_dependencies(package: &str, edges: &str) -> std::collections::BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(tamp_e2e::workspace_root())
        .args([
            "tree",
            "--offline",
            "-e",
            edges,
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .output()
        .expect("run cargo tree");
    assert_ok(&out, format!("cargo tree -p {package}: "));
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The kit runs its checks in the `tamp` binary, so a plugin's tests compile the plugin's own
/// crates and the kit crate, nothing else: no host, JSON Schema validator, SQLite or tokio.
#[test]
fn a_plugin_tested_with_the_kit_compiles_no_crate_but_the_kit_more() {
    let plugin = package_dependencies("tamp-custom-strategy", "normal");
    let tests = package_dependencies("tamp-custom-strategy", "normal,dev");
    // The plugin's own tree is real (not empty by mistake) ...
    for wanted in ["tamp-plugin-api", "abi_stable", "serde_json"] {
        assert!(plugin.contains(wanted), "{wanted} missing: {plugin:?}");
    }
    // ... and its tests add the kit alone.
    let added: Vec<&String> = tests.difference(&plugin).collect();
    assert_eq!(
        added,
        ["tamp-conformance"],
        "the kit brings more: {added:?}"
    );
    // Nor does plugin-api bring what no plugin uses (docs/benchmarks.md, "The conformance
    // kit in a plugin's tests"): tracing's `#[instrument]` proc macro, the `futures` facade's
    // async-await macro, executor, io and sinks, abi_stable's channels.
    let unused = [
        "tracing-attributes",
        "futures-macro",
        "futures-executor",
        "futures-io",
        "futures-sink",
        "futures-channel",
        "crossbeam-channel",
        "const-oid",
    ];
    let pulled: Vec<&str> = unused.into_iter().filter(|c| plugin.contains(*c)).collect();
    assert!(pulled.is_empty(), "a plugin's build compiles {pulled:?}");
}

/// The author's path as docs/writing-a-plugin.md gives it: a crate beside a clone of tamp,
/// made of the guide's own files (`Cargo.toml`, `src/lib.rs`, `tests/conformance.rs`: its
/// `<!-- file: ... -->` blocks, written by `tamp_e2e::docs`), its two tamp dependencies by
/// path into the clone; its first `cargo test` builds the plugin and passes the kit's checks,
/// run by the `tamp` binary. (The crate and its target directory stay under target/, so later
/// runs are quick.)
#[test]
fn a_plugin_written_from_the_guide_passes_its_kit_test() {
    let (dir, _cargo) = tamp_e2e::docs::guide_plugin();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&dir)
        .args(["test", "--offline", "--test", "conformance"])
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("TAMP_BIN", tamp_bin())
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test conforms ... ok"),
        "the guide's plugin fails its kit test:\n{stdout}\n{stderr}"
    );
    // The guide's `crate-type = ["cdylib", "rlib"]` has `cargo test` build the library the
    // kit loads, in the same profile, so the kit's own `cargo build --lib` (its output goes
    // to this stderr) finds it up to date rather than compiling the plugin a second time.
    let kit_build = &stderr[stderr
        .find("Running tests/conformance.rs")
        .expect("cargo ran the conformance test")..];
    assert!(
        !kit_build.contains("Compiling"),
        "the kit compiled the plugin again for its cdylib:\n{stderr}"
    );
}

/// `tamp conformance` with `args` after the plugin: the exit code, stdout and stderr.
fn kit_all(plugin: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(tamp_bin())
        .arg("conformance")
        .arg(plugin)
        .args(args)
        .output()
        .expect("run tamp conformance");
    (
        out.status.code().expect("tamp exits, it is not killed"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `--config` the plugin refuses is the user's mistake: a usage error (exit 2) naming
/// `--config` and the field, and no report; what is the plugin's fault (its own default
/// config that its schema refuses, a constructor that panics) is still a finding.
#[test]
fn a_config_the_plugin_refuses_is_a_usage_error_naming_the_field() {
    let clearing = plugin("tamp_tool_result_clearing");
    for (config, field) in [
        (
            r#"{"keep":"x"}"#,
            "field \"keep\": \"x\" is not of type \"integer\"",
        ),
        (r#"{"kep": 3}"#, "field \"kep\""),
        ("[1]", "the config as a whole"),
    ] {
        let (code, stdout, stderr) = kit_all(&clearing, &["--stage-config", config]);
        assert_eq!(code, 2, "{config}: {stdout}{stderr}");
        assert!(
            stderr.contains("error: --stage-config: ") && stderr.contains(field),
            "{config}: {stderr}"
        );
        assert_contains(&stderr, "config schema of plugin tool-result-clearing");
        assert!(stdout.is_empty(), "no verdict on the plugin: {stdout}");
    }
    // The schema takes it, the plugin's constructor refuses it as an invalid config.
    let breaker = plugin("tamp_test_rule_breaker");
    let (code, stdout, stderr) =
        kit_all(&breaker, &["--stage-config", r#"{"break": "TAMP-NOPE"}"#]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_contains(
        &stderr,
        "--stage-config: plugin rule-breaker refuses it: break: unknown rule",
    );
    assert!(stdout.is_empty(), "{stdout}");
    // A config the schema refuses, of a plugin whose own default it refuses too.
    let bad = plugin("tamp_test_bad_metadata");
    let (code, _, stderr) = kit_all(&bad, &["--stage-config", r#"{"group_size": 1}"#]);
    assert_eq!(code, 2, "{stderr}");
    assert_contains(&stderr, "field \"group_size\"");

    // The plugin's faults stay findings: its default config given as --stage-config ...
    let (code, report) = kit_json(
        &bad,
        &[
            "--stage-config",
            r#"{"group_size": 0}"#,
            "--only",
            "TAMP-META-01,TAMP-CFG-01,TAMP-INV-01",
            "--cases",
            "2",
        ],
    );
    assert_eq!(code, 1, "{}", report.to_text());
    assert_eq!(
        report.failed_rules(),
        ["TAMP-META-01", "TAMP-CFG-01"],
        "{}",
        report.to_text()
    );
    // ... and a constructor that panics on a config its schema takes.
    let (code, report) = kit_json(
        &plugin("tamp_test_misbehaving"),
        &[
            "--stage-config",
            r#"{"mode": "panic_in_new"}"#,
            "--only",
            "TAMP-INV-01",
            "--cases",
            "1",
        ],
    );
    assert_eq!(code, 1, "{}", report.to_text());
    assert_eq!(
        report.failed_rules(),
        ["TAMP-INV-01"],
        "{}",
        report.to_text()
    );
}

/// A run that `--only`/`--skip` cut short claims no verdict on the whole plugin: the text's
/// result line, the JSON report's `partial` and the JUnit `result` property say it is partial.
#[test]
fn a_partial_run_claims_no_verdict_on_the_rules_left_out() {
    let breaker = plugin("tamp_test_rule_breaker");
    let args = ["--only", "TAMP-INV-01,TAMP-INV-02", "--cases", "2"];
    let skipped = tamp_host::rules::RULES.len() - 3;
    let (code, text) = kit(&breaker, &args);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!(
            "result: no failures in the 3 checks run (partial: {skipped} skipped by --only/--skip)"
        )),
        "{text}"
    );
    assert!(!text.contains("CONFORMS"), "{text}");

    let (code, report) = kit_json(&breaker, &args);
    assert_eq!(code, 0);
    assert!(
        report.passed && report.partial && !report.conforms(),
        "{report:?}"
    );
    report.assert_passed();

    let mut junit_args = args.to_vec();
    junit_args.extend(["--output-format", "junit"]);
    let (code, junit) = kit(&breaker, &junit_args);
    assert_eq!(code, 0);
    assert_contains(&junit, "<property name=\"partial\" value=\"true\"/>");
    assert_contains(
        &junit,
        "<property name=\"result\" value=\"no failures in the 3 checks run",
    );

    // A failure in a partial run is still a failure.
    let (code, report) = kit_json(
        &breaker,
        &[
            "--stage-config",
            r#"{"break": "TAMP-INV-01"}"#,
            "--only",
            "TAMP-INV-01",
            "--cases",
            "2",
        ],
    );
    assert_eq!(code, 1);
    assert!(!report.passed && report.partial, "{}", report.to_text());
    assert!(
        report.to_text().contains("result: DOES NOT CONFORM"),
        "{}",
        report.to_text()
    );
}

/// `--cases 0` and `--jobs 0` are refused with the range; the plugin may be named as
/// `tamp plugins describe` takes it.
#[test]
fn counts_of_zero_are_refused_and_a_plugin_is_found_by_name() {
    let breaker = plugin("tamp_test_rule_breaker");
    for flag in ["--cases", "--jobs"] {
        let (code, stdout, stderr) = kit_all(&breaker, &[flag, "0"]);
        assert_eq!(code, 2, "{flag}: {stdout}{stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("must be at least 1, got 0"),
            "{flag}: {stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
    }

    // By name, from a directory that holds no plugin: found next to the tamp executable.
    let dir = tamp_e2e::scratch_dir("conformance-by-name");
    let out = Command::new(tamp_bin())
        .current_dir(&dir)
        .args([
            "conformance",
            "tamp_tool_result_clearing",
            "--only",
            "TAMP-META-01",
            "--output-format",
            "json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: KitReport = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report.meta.as_ref().unwrap().name, "tool-result-clearing");
    assert!(
        report.plugin.ends_with("libtamp_tool_result_clearing.so"),
        "{}",
        report.plugin.display()
    );
    assert_eq!(report.rule("TAMP-META-01").unwrap().status, Status::Pass);

    let (code, _, stderr) = kit_all(Path::new("tamp_no_such_plugin"), &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("libtamp_no_such_plugin.so") && stderr.contains("looked up in"),
        "{stderr}"
    );

    // `--help` says all this.
    let (code, help, _) = kit_all(Path::new("--help"), &[]);
    assert_eq!(code, 0);
    for said in [
        "by path or by name",
        "is a usage error naming the field",
        "the run is partial",
        "Exit status: 0 when every MUST rule checked passes",
        "(at least 1; default: the number of CPUs)",
    ] {
        assert!(help.contains(said), "{said:?} not in:\n{help}");
    }
}
