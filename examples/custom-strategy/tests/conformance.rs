//! The conformance kit from the plugin's own `cargo test`: every rule of
//! `docs/plugin-spec.md` checked against the built plugin library, each check in a child
//! process (this test binary, re-run filtered to this test), so an abort or a hang in the
//! plugin fails the test instead of killing it.

use std::path::PathBuf;

/// The plugin library cargo built next to this test binary (`target/<profile>/`).
fn built_plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in target/<profile>/deps");
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
    let report = tamp_host::conformance::Kit::new(built_plugin())
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
