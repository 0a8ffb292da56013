//! WebAssembly guests built from source, as a strategy author builds them: with the guest
//! SDKs' own build commands (`tamp-guest build`, run from the source tree), which run
//! componentize-py (PyPI) and componentize-js (npm), both pinned, installed once into
//! `target/tools/` (under the same install lock as Prism and the SDKs). The Python venv also
//! holds `build` and `setuptools`, which build the `tamp-guest` wheel (`guest_packages`).
//! A built component is kept in `target/tools/wasm-guests/` under a key made of the pinned
//! versions and the hash of every source it is built from (the WIT package, the guest SDK, the
//! app), so a build is paid once per change, not once per test run.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tools::{install_once, python_venv, tools_dir};
use crate::workspace_root;

/// The Python guest toolchain (PyPI).
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// The JavaScript guest toolchain (npm): SpiderMonkey (StarlingMonkey) as a component.
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";
/// What builds the Python SDK's wheel (`python -m build --no-isolation`), beside
/// componentize-py.
pub const PYTHON_PACKAGING: [&str; 2] = ["build==1.3.0", "setuptools==80.9.0"];

/// A guest the tests build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guest {
    /// `guests/python/template`: the example strategy (`examples/custom-strategy`), in Python.
    PythonTemplate,
    /// `guests/js/template`: the example strategy, in JavaScript.
    JsTemplate,
    /// `tests/plugins/wasm/misbehaving`: the broken fixtures (and a guest that returns no
    /// edits), in Python.
    Misbehaving,
}

impl Guest {
    fn name(self) -> &'static str {
        match self {
            Guest::PythonTemplate => "python-template",
            Guest::JsTemplate => "js-template",
            Guest::Misbehaving => "misbehaving",
        }
    }

    /// The directory of the app, and the other sources the component is built from.
    fn sources(self) -> (PathBuf, Vec<PathBuf>) {
        let root = workspace_root();
        let app = match self {
            Guest::PythonTemplate => root.join("guests/python/template"),
            Guest::JsTemplate => root.join("guests/js/template"),
            Guest::Misbehaving => root.join("tests/plugins/wasm/misbehaving"),
        };
        // The whole SDK directory (the templates in it, hashed twice, are small).
        let sdk = match self {
            Guest::JsTemplate => root.join("guests/js"),
            _ => root.join("guests/python/tamp_guest"),
        };
        (app.clone(), vec![app, sdk, root.join("plugin-abi/wit")])
    }
}

/// The built component of `guest` (built now if its sources changed since the last build),
/// compiled once by the `tamp` binary so that its compiled code is in the host's cache
/// (`~/.cache/tamp/wasm`) before tests load it, several at a time.
pub fn component(guest: Guest) -> PathBuf {
    let wasm = built(guest);
    let compiled = wasm.with_extension("compiled");
    install_once(
        &tools_dir("wasm-guests"),
        &compiled,
        &format!("the compiled {} guest", guest.name()),
        || {
            eprintln!("compiling the {} guest (once)", guest.name());
            run(
                Command::new(crate::tamp_bin())
                    .args(["plugins", "describe"])
                    .arg(&wasm),
                "tamp plugins describe",
            )?;
            std::fs::write(&compiled, b"").map_err(|e| e.to_string())
        },
    );
    wasm
}

fn built(guest: Guest) -> PathBuf {
    let (app, sources) = guest.sources();
    let pins = match guest {
        Guest::JsTemplate => COMPONENTIZE_JS,
        _ => COMPONENTIZE_PY,
    };
    let key = source_key(pins, &sources);
    let dir = tools_dir("wasm-guests");
    let out = dir.join(format!("{}-{key}.wasm", guest.name()));
    install_once(&dir, &out, &format!("the {} guest", guest.name()), || {
        eprintln!(
            "building the {} guest into {} (once per change of its sources)",
            guest.name(),
            out.display()
        );
        let partial = out.with_extension("partial.wasm");
        match guest {
            Guest::JsTemplate => build_js(&app, &partial)?,
            _ => build_python(&app, &partial)?,
        }
        std::fs::rename(&partial, &out).map_err(|e| format!("{}: {e}", out.display()))?;
        remove_older_builds(&dir, guest, &key);
        Ok(())
    })
}

/// Removes the builds of `guest` from sources other than `key`'s (some 20 MB each): a
/// source changed since, and no test asks for them again.
fn remove_older_builds(dir: &Path, guest: Guest, key: &str) {
    let prefix = format!("{}-", guest.name());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let built_by_us = name.ends_with(".wasm") || name.ends_with(".compiled");
        if built_by_us && name.starts_with(&prefix) && !name.contains(key) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A key for the build of `sources` (files or directories, walked) with the `pins` toolchain.
fn source_key(pins: &str, sources: &[PathBuf]) -> String {
    let mut files = Vec::new();
    for source in sources {
        collect(source, &mut files);
    }
    files.sort();
    let mut hasher = DefaultHasher::new();
    pins.hash(&mut hasher);
    for file in &files {
        file.strip_prefix(workspace_root())
            .unwrap_or(file)
            .hash(&mut hasher);
        std::fs::read(file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            let entry = entry.expect("a directory entry");
            let name = entry.file_name();
            // Python's caches and the template directory of the JavaScript SDK (hashed as the
            // app) are not sources of this build.
            if name == "__pycache__" || name == "node_modules" {
                continue;
            }
            collect(&entry.path(), files);
        }
    } else if path.is_file() {
        files.push(path.to_path_buf());
    }
}

/// The Python of a virtual environment of its own in `target/tools/componentize-py`, which
/// holds componentize-py and what builds a wheel ([`PYTHON_PACKAGING`]).
pub fn guest_python() -> PathBuf {
    let mut pins = vec![COMPONENTIZE_PY];
    pins.extend(PYTHON_PACKAGING);
    python_venv(
        "componentize-py",
        &pins,
        "the WebAssembly guest tests need Python 3 with venv to install componentize-py",
    )
    .join("bin/python")
}

/// The CLI script (`src/cli.js`) of componentize-js, installed with npm into
/// `target/tools/componentize-js`: what `tamp-guest build` runs from the source tree
/// (`TAMP_GUEST_COMPONENTIZE_JS`), where the SDK has no `node_modules` of its own.
pub fn componentize_js() -> PathBuf {
    let dir = tools_dir("componentize-js");
    let bin = dir.join("node_modules/@bytecodealliance/componentize-js/src/cli.js");
    let ready = dir.join("installed.txt");
    if std::fs::read_to_string(&ready).is_ok_and(|had| had != COMPONENTIZE_JS) {
        let _ = std::fs::remove_file(&ready);
    }
    install_once(&dir, &ready, COMPONENTIZE_JS, || {
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(COMPONENTIZE_JS),
            "npm install componentize-js (the WebAssembly guest tests need Node.js with npm)",
        )?;
        std::fs::write(&ready, COMPONENTIZE_JS).map_err(|e| e.to_string())
    });
    bin
}

/// `python -m tamp_guest build` from the source tree (`guests/python` on `PYTHONPATH`), as an
/// installed `tamp-guest build` runs.
fn build_python(app: &Path, out: &Path) -> Result<(), String> {
    run(
        Command::new(guest_python())
            .args(["-m", "tamp_guest", "build"])
            .arg(app.join("app.py"))
            .arg("--output")
            .arg(out)
            .env("PYTHONPATH", workspace_root().join("guests/python"))
            // The SDK's and the app's bytecode caches stay out of the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "tamp-guest build (Python)",
    )
}

/// `guests/js/bin/tamp-guest.js build` from the source tree, with the tests' componentize-js.
fn build_js(app: &Path, out: &Path) -> Result<(), String> {
    run(
        Command::new("node")
            .arg(workspace_root().join("guests/js/bin/tamp-guest.js"))
            .arg("build")
            .arg(app.join("app.js"))
            .arg("-o")
            .arg(out)
            .env("TAMP_GUEST_COMPONENTIZE_JS", componentize_js()),
        "tamp-guest build (JavaScript)",
    )
}

/// Runs `command`, or says what failed with its output.
pub fn run(command: &mut Command, what: &str) -> Result<(), String> {
    crate::tools::run_output(command, what, |output| {
        format!(
            ":\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
