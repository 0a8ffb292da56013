//! `tamp plugins`: list, describe, print the schema of and hash plugin libraries.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use clap::Subcommand;
use tamp_host::loader::{resolve_plugin, LoadedPlugin};

use crate::{io_reason, logging, write_stdout};

#[derive(Subcommand)]
pub(crate) enum PluginsCommand {
    /// Name, version, description, config schema and default config of a plugin.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins describe tamp_custom_strategy\n  \
        tamp plugins describe target/debug/libtamp_custom_strategy.so --json"
    )]
    Describe {
        /// A plugin file (a `.so` library or a `.wasm` component), or a name looked up like a
        /// chain file's `plugin = "..."`.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a plugin's config JSON Schema.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins schema tamp_custom_strategy"
    )]
    Schema {
        /// A plugin file (a `.so` library or a `.wasm` component), or a name looked up like a
        /// chain file's `plugin = "..."`.
        plugin: String,
    },
    /// Print the `sha256 = "..."` line that pins a plugin file in a chain file's [[stage]].
    /// The file is read, never loaded: none of its code runs.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins hash target/debug/libtamp_custom_strategy.so\n  \
        sha256 = \"3f0c...\"   (paste under the stage's plugin = \"...\")\n\n\
        With a pin, tamp refuses the stage when the file holds other bytes (a rebuild, a \
        replacement), at start and at every reload of tamp serve. See docs/security.md."
    )]
    Hash {
        /// A plugin file (a `.so` library or a `.wasm` component), or a name looked up like a
        /// chain file's `plugin = "..."`.
        plugin: String,
    },
    /// List the plugins in a directory (default: next to this executable and TAMP_PLUGIN_PATH).
    /// A library that does not load is named on stderr, with why.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins list\n  \
        tamp plugins list --dir target/debug"
    )]
    List {
        /// A directory to list instead of the default ones (repeat for several).
        #[arg(long, value_name = "DIR")]
        dir: Vec<PathBuf>,
        /// Also list tamp's own test fixtures (`libtamp_test_*`), which a build of the whole
        /// workspace puts beside the shipped plugins.
        #[arg(long)]
        all: bool,
    },
}

fn find_plugin(spec: &str) -> Result<Arc<LoadedPlugin>> {
    let path = resolve_plugin(spec, Path::new("."), &[])?;
    Ok(tamp_host::loader::load_plugin(&path)?)
}

pub(crate) fn plugins(cmd: PluginsCommand) -> Result<()> {
    match cmd {
        PluginsCommand::Describe { plugin, json } => {
            let p = find_plugin(&plugin)?;
            let meta = p.meta();
            if json {
                out!("{}", serde_json::to_string_pretty(meta)?);
            } else {
                out!("name:        {}", meta.name);
                out!("version:     {}", meta.version);
                out!("description: {}", meta.description);
                out!("plugin-api:  {}", meta.plugin_api_version);
                out!(
                    "kind:        {}",
                    match p.kind() {
                        "wasm" => "WebAssembly component (sandboxed)",
                        _ => "native library",
                    }
                );
                out!("file:        {}", p.path().display());
                out!(
                    "default config:\n{}",
                    serde_json::to_string_pretty(&meta.default_config)?
                );
                out!(
                    "config schema:\n{}",
                    serde_json::to_string_pretty(&meta.config_schema)?
                );
            }
        }
        PluginsCommand::Hash { plugin } => {
            let path = resolve_plugin(&plugin, Path::new("."), &[])?;
            check_plugin_header(&path)?;
            out!("sha256 = \"{}\"", tamp_host::loader::sha256_of_file(&path)?);
        }
        PluginsCommand::Schema { plugin } => {
            out!(
                "{}",
                serde_json::to_string_pretty(&find_plugin(&plugin)?.meta().config_schema)?
            );
        }
        PluginsCommand::List { dir, all } => list_plugins(dir, all)?,
    }
    Ok(())
}

/// `tamp plugins list`: a line per plugin, first the name a chain file's `plugin = "..."`
/// takes; a line on stderr per library that does not load (and why); when none is found, what
/// each directory held instead. tamp's test fixtures only with `all`.
fn list_plugins(given: Vec<PathBuf>, all: bool) -> Result<()> {
    let explicit = !given.is_empty();
    let mut fixtures = 0;
    let mut header = false;
    let dirs = if explicit {
        given
    } else {
        tamp_host::loader::plugin_search_dirs(Path::new("."), &[])
    };
    let mut found = 0;
    // Each directory that held no plugin, and what it held instead.
    let mut empty: Vec<(String, String)> = Vec::new();
    for d in &dirs {
        let entries = match std::fs::read_dir(d) {
            Ok(entries) => entries,
            Err(e) => {
                let what = match std::fs::metadata(d) {
                    Err(m) if m.kind() == std::io::ErrorKind::NotFound => {
                        "no such directory".to_string()
                    }
                    Ok(m) if !m.is_dir() => "not a directory".to_string(),
                    _ => format!("cannot read it: {}", io_reason(&e)),
                };
                empty.push((d.display().to_string(), what));
                continue;
            }
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        let libraries: Vec<&PathBuf> = paths
            .iter()
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
                    || tamp_host::wasm::is_component_path(p)
            })
            .collect();
        let mut here = 0;
        for path in &libraries {
            let chain_name =
                tamp_host::loader::chain_name(path).unwrap_or_else(|| path.display().to_string());
            if !all && chain_name.starts_with(tamp_host::loader::FIXTURE_PREFIX) {
                fixtures += 1;
                continue;
            }
            match tamp_host::loader::load_plugin(path) {
                Ok(p) => {
                    here += 1;
                    let name = match p.meta().name.trim() {
                        "" => "(no name)",
                        _ => p.meta().name.as_str(),
                    };
                    if !header {
                        out!(
                            "{:<30} {:<24} {:<10} FILE",
                            "PLUGIN = \"...\"",
                            "NAME",
                            "VERSION"
                        );
                        header = true;
                    }
                    out!(
                        "{:<30} {:<24} {:<10} {}",
                        chain_name,
                        name,
                        p.meta().version,
                        path.display()
                    );
                }
                Err(e) => eprintln!("skipped: {e}"),
            }
        }
        found += here;
        if here == 0 {
            let what = match (paths.len(), libraries.len()) {
                (0, _) => "empty".to_string(),
                (_, 0) => format!(
                    "no .{} or .wasm file in it",
                    std::env::consts::DLL_EXTENSION
                ),
                (_, n) => format!("none of its {n} libraries loads as a tamp plugin"),
            };
            empty.push((d.display().to_string(), what));
        }
    }
    if found == 0 {
        bail!(
            "no tamp plugins found in {}",
            empty
                .iter()
                .map(|(dir, what)| format!("{dir} ({what})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if explicit {
        // A directory asked for that is not there, with plugins found in another.
        for (dir, what) in &empty {
            eprintln!("warning: --dir {dir}: {what}");
        }
    }
    if fixtures > 0 && !logging::quiet() {
        eprintln!("({fixtures} test fixture(s) of tamp's own tests not listed; --all lists them)");
    }
    Ok(())
}

/// Refuses a file `tamp plugins hash` would pin that is no plugin at all: empty, or neither a
/// shared library (its object-file header) nor a WebAssembly component (`\0asm`). Devices
/// and FIFOs are refused before they are opened.
fn check_plugin_header(path: &Path) -> Result<()> {
    const WASM: &[u8] = b"\0asm";
    #[cfg(target_os = "macos")]
    const NATIVE: &[&[u8]] = &[
        b"\xcf\xfa\xed\xfe",
        b"\xce\xfa\xed\xfe",
        b"\xca\xfe\xba\xbe",
    ];
    #[cfg(windows)]
    const NATIVE: &[&[u8]] = &[b"MZ"];
    #[cfg(not(any(target_os = "macos", windows)))]
    const NATIVE: &[&[u8]] = &[b"\x7fELF"];
    tamp_host::loader::regular_file_stamp(path)?;
    let mut head = Vec::with_capacity(4);
    std::fs::File::open(path)
        .and_then(|f| f.take(4).read_to_end(&mut head))
        .with_context(|| format!("plugin {}: cannot read", path.display()))?;
    if head.is_empty() {
        bail!(
            "plugin {}: the file is empty, not a plugin (a shared library or a WebAssembly \
             component); nothing to pin",
            path.display()
        );
    }
    if !head.starts_with(WASM) && !NATIVE.iter().any(|m| head.starts_with(m)) {
        bail!(
            "plugin {}: not a shared library (no {} header) nor a WebAssembly component (no \
             \\0asm header); nothing to pin",
            path.display(),
            if cfg!(target_os = "macos") {
                "Mach-O"
            } else if cfg!(windows) {
                "PE"
            } else {
                "ELF"
            }
        );
    }
    Ok(())
}
