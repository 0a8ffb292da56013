//! What the kit needs on disk: the plugin's library, built by cargo, and a `tamp` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Builds the `cdylib` of the crate whose tests are running (`CARGO_MANIFEST_DIR`, which
/// `cargo test` sets) in the running test's profile, and returns the library's path as cargo
/// reports it (so any target directory and library name work).
pub fn build_this_crate() -> Result<PathBuf, String> {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").ok_or(
        "Kit::for_this_crate() needs CARGO_MANIFEST_DIR: run the test through `cargo test`, \
         or give the library's path to Kit::new",
    )?;
    let manifest = Path::new(&manifest_dir).join("Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--lib", "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        // Compiler errors go to the test's output as cargo renders them.
        .stderr(Stdio::inherit())
        .stdin(Stdio::null());
    if let Some(profile) = std::env::current_exe().ok().and_then(|e| test_profile(&e)) {
        build.args(["--profile", &profile]);
    }
    let out = build
        .output()
        .map_err(|e| format!("cannot run cargo to build the plugin: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo build --lib --manifest-path {}` failed ({}); its errors are above",
            manifest.display(),
            out.status
        ));
    }
    cdylib_artifact(&String::from_utf8_lossy(&out.stdout), &manifest).ok_or_else(|| {
        format!(
            "{} builds no cdylib: a plugin's Cargo.toml needs `[lib] crate-type = [\"cdylib\"]`",
            manifest.display()
        )
    })
}

/// The cargo profile a test binary was built in, from its path
/// (`target/<profile dir>/deps/<test>`): `debug` is the `dev` profile.
fn test_profile(exe: &Path) -> Option<String> {
    let dir = exe.parent()?.parent()?.file_name()?.to_str()?;
    Some(if dir == "debug" { "dev" } else { dir }.to_string())
}

/// The shared library cargo built for the package of `manifest`, out of `cargo build
/// --message-format=json`'s lines.
fn cdylib_artifact(messages: &str, manifest: &Path) -> Option<PathBuf> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let manifest = canonical(manifest);
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["manifest_path"]
                .as_str()
                .is_some_and(|p| canonical(Path::new(p)) == manifest)
        })
        .filter(|m| {
            m["target"]["crate_types"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "cdylib"))
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .collect::<Vec<_>>()
        })
        .find(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(std::env::consts::DLL_SUFFIX))
        })
}

/// The `tamp` that runs the checks: `TAMP_BIN`; else a `tamp` in the running test's target
/// directory (one cargo built beside the plugin, as in the tamp repository); else `tamp` on
/// `PATH`.
pub fn tamp_binary() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("TAMP_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let name = format!("tamp{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join(&name)));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(&name));
    beside
        .into_iter()
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "the checks run in the `tamp` binary, and there is none: install it \
         (`cargo install tamp-cli`), or set TAMP_BIN=/path/to/tamp"
                .to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_comes_from_the_test_binarys_directory() {
        let p = |s: &str| test_profile(Path::new(s));
        assert_eq!(
            p("/w/target/debug/deps/conformance-1a2b").as_deref(),
            Some("dev")
        );
        assert_eq!(
            p("/w/target/release/deps/conformance-1a2b").as_deref(),
            Some("release")
        );
        assert_eq!(
            p("/w/target/ci/deps/conformance-1a2b").as_deref(),
            Some("ci")
        );
    }

    #[test]
    fn the_cdylib_is_the_packages_shared_library_artifact() {
        let dir = std::env::temp_dir();
        let manifest = dir.join("Cargo.toml");
        let lib = format!(
            "{}my_strategy{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        );
        let artifact = |manifest: &Path, kinds: &str, files: &[String]| {
            serde_json::json!({
                "reason": "compiler-artifact",
                "manifest_path": manifest,
                "target": {"crate_types": serde_json::from_str::<serde_json::Value>(kinds).unwrap()},
                "filenames": files,
            })
            .to_string()
        };
        let messages = [
            artifact(
                &dir.join("dep/Cargo.toml"),
                r#"["cdylib"]"#,
                &[format!(
                    "/t/debug/{}dep{}",
                    std::env::consts::DLL_PREFIX,
                    std::env::consts::DLL_SUFFIX
                )],
            ),
            "not json".to_string(),
            artifact(
                &manifest,
                r#"["lib"]"#,
                &["/t/debug/libmy_strategy.rlib".into()],
            ),
            artifact(
                &manifest,
                r#"["cdylib", "rlib"]"#,
                &[
                    "/t/debug/libmy_strategy.rlib".into(),
                    format!("/t/debug/{lib}"),
                ],
            ),
            r#"{"reason":"build-finished","success":true}"#.to_string(),
        ]
        .join("\n");
        assert_eq!(
            cdylib_artifact(&messages, &manifest),
            Some(PathBuf::from(format!("/t/debug/{lib}")))
        );
        let no_cdylib = artifact(&manifest, r#"["lib"]"#, &["/t/libx.rlib".into()]);
        assert_eq!(cdylib_artifact(&no_cdylib, &manifest), None);
    }
}
