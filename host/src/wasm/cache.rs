//! Compiled components, kept on disk: compiling a componentize-py guest (an interpreter and
//! its standard library, some 18 MB of WebAssembly) takes Cranelift tens of seconds, and a
//! `tamp serve` restart, a reload or each of the conformance kit's child processes would pay
//! it again. The compiled code is kept under the SHA-256 of the component's bytes and the
//! engine's compatibility hash (wasmtime's version and settings), and mapped back in
//! milliseconds.
//!
//! Loading compiled code runs it without the checks a compilation makes, so the directory is
//! this user's alone (0700, refused otherwise, as the loader's private copies are): whoever
//! could write it could put code under a pinned stage. `TAMP_WASM_CACHE` names the directory
//! (`off`: no cache); by default it is `$XDG_CACHE_HOME/tamp/wasm`, or `~/.cache/tamp/wasm`.

use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::Engine;

/// The cache directory, or `None` when caching is off (or no home directory is known).
pub fn dir() -> Option<PathBuf> {
    match std::env::var_os("TAMP_WASM_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .map(|base| base.join("tamp/wasm")),
    }
}

/// The component of `bytes` (whose SHA-256 is `sha256`), compiled, or read back compiled from
/// the cache. A cache that cannot be read or written is skipped (and logged): it only costs
/// time.
pub fn compile(engine: &Engine, bytes: &[u8], sha256: &str) -> wasmtime::Result<Component> {
    let Some(dir) = dir() else {
        return Component::new(engine, bytes);
    };
    let file = dir.join(format!("{sha256}-{:016x}.cwasm", compatibility(engine)));
    if file.is_file() {
        match private(&dir) {
            // SAFETY: the file was written by `Component::serialize` for this engine's
            // version and settings (its name says so), in a directory only this user can
            // write; wasmtime checks its header before it maps it.
            Ok(()) => match unsafe { Component::deserialize_file(engine, &file) } {
                Ok(component) => return Ok(component),
                Err(e) => {
                    tracing::warn!(file = %file.display(), "compiled component not reused: {e}")
                }
            },
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "compiled-component cache not used: {e}")
            }
        }
    }
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(&dir, &file, &component) {
        tracing::warn!(dir = %dir.display(), "compiled component not cached: {e}");
    }
    Ok(component)
}

/// What makes compiled code reusable by this engine: wasmtime's version and settings.
fn compatibility(engine: &Engine) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

fn private(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    crate::plugin_load::ensure_private_dir(dir)
}

fn store(dir: &Path, file: &Path, component: &Component) -> std::io::Result<()> {
    private(dir)?;
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    // Written aside and renamed: a reader never maps a half-written file.
    let partial = file.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, file)
}
