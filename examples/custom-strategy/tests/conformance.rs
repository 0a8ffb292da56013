//! The conformance kit from the plugin's own `cargo test`: every rule of
//! `docs/plugin-spec.md` checked against the built plugin library, each check in a child
//! process (this test binary, re-run filtered to this test), so an abort or a hang in the
//! plugin fails the test instead of killing it.

use std::path::PathBuf;

/// The plugin library, built by cargo into `target/<profile>/`. `cargo test` links the
/// crate into this test as an rlib but does not lay the cdylib down there, so build it first
/// (quick when it is up to date).
fn built_plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in target/<profile>/deps");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build
        .args(["build", "--quiet", "-p", env!("CARGO_PKG_NAME")])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "cargo build of the plugin failed");
    let name = format!(
        "{}tamp_custom_strategy{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let path = profile_dir.join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

#[test]
fn the_plugin_conforms_to_the_spec() {
    let report = tamp_conformance::Kit::new(built_plugin())
        // The config a chain file would give the stage (here: also ask for LLM summaries).
        .config(serde_json::json!({"keep_exchanges": 2, "summarize": true}))
        // The 5 MB message takes seconds in a debug build; CI runs every check through
        // `tamp conformance`.
        .skip("TAMP-EDGE-02")
        .skip("PERF")
        .cases(6)
        .run();
    println!("{}", report.to_text());
    assert!(report.isolated, "the checks ran in child processes");
    report.assert_passed();
}
