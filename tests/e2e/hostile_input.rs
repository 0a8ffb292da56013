//! Issue 32: what a hostile-input probe found short, through the real `tamp` binary:
//!
//! - a huge duration in a chain file (`timeout_secs = inf`, `1e20`, `1e300`) is a
//!   `file:line: field` error from `check-config` and `compact`, never a panic (point 3);
//! - the smaller findings of point 7, each in its own test below.
//!
//! The probe's other cases, and the test that covers each, are listed in docs/security.md
//! ("What a hostile-input probe checks").

use std::path::Path;
use std::process::{Command, Output, Stdio};

use tamp_e2e::serve_support::ScratchDir;
use tamp_e2e::{corpus, plugin, tamp_bin, write_chain};

fn tamp(args: &[&str], dir: &Path) -> Output {
    Command::new(tamp_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .env_remove("TAMP_LOG")
        .output()
        .expect("run tamp")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_huge_duration_is_a_field_error_never_a_panic() {
    let dir = ScratchDir::new("huge-duration");
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let input = dir.join("input.json");
    std::fs::write(
        &input,
        corpus("anthropic", "taubench_gpt4o_airline_task2_trial2"),
    )
    .unwrap();
    for value in ["inf", "1e20", "1e300", "nan", "-1"] {
        for (table, line) in [
            (
                format!("[provider]\ntimeout_secs = {value}\n"),
                "provider.timeout_secs",
            ),
            (
                format!("[proxy]\ncompaction_timeout_secs = {value}\n"),
                "proxy.compaction_timeout_secs",
            ),
            (
                format!("[batch]\nlease_secs = {value}\n"),
                "batch.lease_secs",
            ),
            (String::new(), "stage \"a\": timeout_secs"),
        ] {
            let stage_timeout = if table.is_empty() {
                format!("timeout_secs = {value}\n")
            } else {
                String::new()
            };
            let config = write_chain(
                &dir,
                &format!(
                    "[store]\npath = \"store.sqlite3\"\n{table}\n[[stage]]\nname = \"a\"\n\
                     plugin = \"strategy.so\"\n{stage_timeout}"
                ),
            );
            let config = config.to_str().unwrap();
            for args in [
                vec!["check-config", config],
                vec!["compact", input.to_str().unwrap(), "--config", config],
            ] {
                let out = tamp(&args, &dir);
                let stderr = text(&out.stderr);
                assert_eq!(out.status.code(), Some(1), "{args:?} {value}: {stderr}");
                assert!(!stderr.contains("panicked"), "{args:?} {value}: {stderr}");
                assert!(
                    stderr.starts_with(&format!("error: {config}:"))
                        && stderr
                            .contains(&format!("{line}: must be a positive number of seconds")),
                    "{args:?} {value}: {stderr}"
                );
            }
        }
    }
    // And on the command line: a flag's seconds are checked by the same rule.
    let out = tamp(
        &[
            "serve",
            "--config",
            "x.toml",
            "--shutdown-grace-secs",
            "1e300",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("at most 2592000"),
        "{}",
        text(&out.stderr)
    );
}
