//! A headless Chromium for the test that opens `tamp eval`'s HTML report in a real browser.
//!
//! Found as `$TAMP_CHROMIUM`, else `chromium-headless-shell`, `chromium` or
//! `chromium-browser` on `PATH`. Where there is none, the tests install Debian's
//! `chromium-headless-shell` package with apt-get when they run as root on a machine with
//! apt (CI, and the team's machines), once, under the tools' install lock
//! (`target/tools/chromium/`), and say on stderr what they installed and from where.
//! Elsewhere the test fails saying what to install. Why not a pinned registry package, as for
//! PostgreSQL: the npm packages that wrap Chromium download it at install time (which
//! fails without a network beyond the registries), and the one that ships the binary inside
//! the package (`@sparticuz/chromium`, built for AWS Lambda) hung without a screenshot when
//! tried here.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::tools::{apt_install, install_once, running_as_root, tools_dir};

/// Debian's package: the headless shell alone (no X11, no GTK), about 100 MB with its
/// libraries.
pub const DEBIAN_PACKAGE: &str = "chromium-headless-shell";

/// The names a headless-capable Chromium goes by on `PATH`, preferred first.
const NAMES: &[&str] = &["chromium-headless-shell", "chromium", "chromium-browser"];

/// The browser's path, installed first if need be (once per test process).
pub fn chromium() -> PathBuf {
    static BROWSER: OnceLock<PathBuf> = OnceLock::new();
    BROWSER.get_or_init(find_or_install).clone()
}

fn find_or_install() -> PathBuf {
    if let Some(path) = std::env::var_os("TAMP_CHROMIUM").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "TAMP_CHROMIUM={} is no file",
            path.display()
        );
        return path;
    }
    if let Some(found) = on_path() {
        return found;
    }
    let dir = tools_dir("chromium");
    // Written last, naming the binary: an install that died half-way is not taken for one
    // that finished. A record whose binary is gone (the package removed since) is redone.
    let ready = dir.join("installed.txt");
    if std::fs::read_to_string(&ready).is_ok_and(|path| !Path::new(path.trim()).is_file()) {
        let _ = std::fs::remove_file(&ready);
    }
    install_once(&dir, &ready, DEBIAN_PACKAGE, || {
        // Another test binary may have installed it while this one waited for the lock.
        let installed = match on_path() {
            Some(found) => found,
            None => install_debian_package()?,
        };
        std::fs::write(&ready, installed.display().to_string())
            .map_err(|e| format!("{}: {e}", ready.display()))
    });
    let path = PathBuf::from(std::fs::read_to_string(&ready).unwrap().trim());
    assert!(path.is_file(), "{} names no browser", ready.display());
    path
}

fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    NAMES.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// `apt-get install chromium-headless-shell` (after `apt-get update`), as root only; says on
/// stderr what it does and what it installed.
fn install_debian_package() -> Result<PathBuf, String> {
    let how = format!(
        "the HTML report test needs a headless Chromium: install Debian's {DEBIAN_PACKAGE} \
         (apt-get install {DEBIAN_PACKAGE}), or set TAMP_CHROMIUM to a Chromium binary"
    );
    if !running_as_root() || Command::new("apt-get").arg("--version").output().is_err() {
        return Err(format!(
            "{how}; the tests install it themselves only when they run as root with apt-get"
        ));
    }
    // Not through eprintln!, which the test harness captures: this is for whoever runs the
    // tests, once.
    let _ = writeln!(
        std::io::stderr(),
        "tamp tests: no headless Chromium on PATH; installing Debian's {DEBIAN_PACKAGE} with \
         apt-get (running as root)"
    );
    apt_install(DEBIAN_PACKAGE).map_err(|e| format!("{how}: {e}"))?;
    let installed = on_path().ok_or_else(|| {
        format!("{how}: apt-get installed {DEBIAN_PACKAGE}, but no {NAMES:?} is on PATH")
    })?;
    let version = Command::new(&installed)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(
        std::io::stderr(),
        "tamp tests: installed {DEBIAN_PACKAGE} from Debian's apt repositories: {} ({version})",
        installed.display()
    );
    Ok(installed)
}
