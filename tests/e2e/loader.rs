//! The real loader against real libraries: a plugin, a file that is not one, a library that
//! is not a tamp plugin, a plugin built against another plugin-api, a missing file.

use tamp_e2e::assert_contains;
use tamp_e2e::{plugin, scratch_dir, workspace_root};
use tamp_host::loader::{LoadError, LoadedPlugin};

#[test]
fn loads_a_plugin_and_reads_its_metadata() {
    let p = LoadedPlugin::load(&plugin("tamp_custom_strategy")).expect("loads");
    let meta = p.meta();
    assert_eq!(meta.name, "custom-strategy");
    assert_eq!(meta.version, "0.1.0");
    assert_eq!(meta.plugin_api_version, tamp_plugin_api::PLUGIN_API_VERSION);
    assert!(meta.description.contains("tool"));
    assert_eq!(meta.config_schema["type"], "object");
    assert!(meta.config_schema["properties"]["keep_exchanges"].is_object());
    assert_eq!(meta.default_config["keep_exchanges"], 3);
}

#[test]
fn two_plugins_live_side_by_side() {
    let a = LoadedPlugin::load(&plugin("tamp_custom_strategy")).unwrap();
    let b = LoadedPlugin::load(&plugin("tamp_test_misbehaving")).unwrap();
    assert_eq!(a.meta().name, "custom-strategy");
    assert_eq!(b.meta().name, "misbehaving");
    // Both constructors work after both loads (the root modules are not one cached module).
    a.instantiate(&serde_json::json!({})).unwrap();
    b.instantiate(&serde_json::json!({"mode": "ok"})).unwrap();
}

#[test]
fn a_missing_file_says_so() {
    let err = LoadedPlugin::load(std::path::Path::new("/nonexistent/libnope.so")).unwrap_err();
    assert!(matches!(err, LoadError::NotFound { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "plugin /nonexistent/libnope.so: no such file"
    );
}

#[test]
fn a_file_that_is_not_a_library_is_not_a_plugin() {
    let dir = scratch_dir("loader");
    let path = dir.join("libfake.so");
    std::fs::write(&path, b"this is not an ELF file").unwrap();
    let err = LoadedPlugin::load(&path).unwrap_err();
    assert!(matches!(err, LoadError::NotAPlugin { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("libfake.so") && text.contains("cannot be loaded as a shared library"),
        "{text}"
    );
}

#[test]
fn a_library_without_a_root_module_is_not_a_plugin() {
    let err = LoadedPlugin::load(&plugin("tamp_test_not_a_plugin")).unwrap_err();
    assert!(matches!(err, LoadError::NotAPlugin { .. }), "{err}");
    assert!(
        err.to_string().contains("exports no tamp root module"),
        "{err}"
    );
}

#[test]
fn an_incompatible_plugin_api_is_refused_naming_both_versions() {
    let err = LoadedPlugin::load(&plugin("tamp_test_incompatible_abi")).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LoadError::IncompatibleVersion { .. }),
        "{text}"
    );
    assert_contains(&text, "plugin ABI 0.9.0");
    assert!(
        text.contains(&format!(
            "this host uses plugin ABI {}",
            tamp_plugin_api::ABI_VERSION
        )),
        "{text}"
    );
}

/// A real build of examples/custom-strategy against plugin-api 0.1, kept as a fixture (see
/// its README): refused, with both ABI versions named.
#[test]
fn a_plugin_built_against_plugin_api_0_1_is_refused_naming_both_versions() {
    let path = workspace_root().join("tests/fixtures/plugins/api-0.1/libtamp_custom_strategy.so");
    let err = LoadedPlugin::load(&path).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LoadError::IncompatibleVersion { .. }),
        "{text}"
    );
    assert_contains(&text, "built against plugin ABI 0.1.0");
    assert!(
        text.contains(&format!(
            "this host uses plugin ABI {}",
            tamp_plugin_api::ABI_VERSION
        )),
        "{text}"
    );
    assert_contains(&text, "libtamp_custom_strategy.so");
}

#[test]
fn a_panicking_constructor_is_an_error_not_a_crash() {
    let p = LoadedPlugin::load(&plugin("tamp_test_misbehaving")).unwrap();
    let err = p
        .instantiate(&serde_json::json!({"mode": "panic_in_new"}))
        .err()
        .expect("refused");
    assert_eq!(err.kind, tamp_plugin_api::ErrorKind::Panicked);
    assert!(
        err.message.contains("panic in constructor"),
        "{}",
        err.message
    );
    // The host is alive and the plugin still usable.
    p.instantiate(&serde_json::json!({"mode": "ok"})).unwrap();
}

#[test]
fn an_invalid_config_is_refused_by_the_plugin_with_the_field() {
    let p = LoadedPlugin::load(&plugin("tamp_custom_strategy")).unwrap();
    let err = p
        .instantiate(&serde_json::json!({"keep_exchanges": "many"}))
        .err()
        .expect("refused");
    assert_eq!(err.kind, tamp_plugin_api::ErrorKind::InvalidConfig);
    assert!(
        err.message.starts_with("keep_exchanges:"),
        "{}",
        err.message
    );
    let err = p
        .instantiate(&serde_json::json!({"min_exchanges": 0}))
        .err()
        .expect("refused");
    assert!(err.message.contains("min_exchanges"), "{}", err.message);
}

#[test]
fn a_layout_mismatch_is_refused_with_a_short_summary() {
    let err = LoadedPlugin::load(&plugin("tamp_test_layout_mismatch")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LoadError::LayoutMismatch { .. }), "{text}");
    assert_contains(&text, "ABI layout does not match");
    assert_contains(&text, "more lines; TAMP_LOG=debug");
    assert!(
        text.lines().count() == 1 && text.len() < 1_000,
        "summarized: {text}"
    );
}
