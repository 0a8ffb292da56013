//! `tamp conformance`'s usage errors, through the built binary. (Being an integration test of
//! this package, it also makes `cargo test` build `tamp` itself into the target directory,
//! where the kit in a plugin's tests, `examples/custom-strategy`'s among them, finds it.)

use std::process::Command;

fn tamp(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tamp"))
        .args(args)
        .output()
        .expect("run tamp");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_rule_in_only_or_skip_is_a_usage_error_naming_it() {
    for flag in ["--only", "--skip"] {
        let (code, stderr) = tamp(&["conformance", "libx.so", flag, "TAMP-INV-01,TAMP-NOPE"]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("{flag} TAMP-NOPE: no such rule")),
            "{stderr}"
        );
        assert!(
            stderr.contains("TAMP-LOAD-01"),
            "the rules are listed: {stderr}"
        );
    }
    // Known rules pass that check; the missing plugin is the error then.
    let (code, stderr) = tamp(&["conformance", "nowhere.so", "--skip", "TAMP-EDGE-02,PERF"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("nowhere.so: no such file"), "{stderr}");
}
