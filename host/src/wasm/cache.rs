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
//!
//! A compiled guest is tens of megabytes and every rebuild of a guest adds one, so the cache is
//! trimmed each time it grows: past `TAMP_WASM_CACHE_MAX_MB` (default 1024) the entries used
//! least recently go first (a reuse refreshes an entry's time), and the leftovers of writes
//! that died half-way are removed once they are an hour old.

use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

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
                Ok(component) => {
                    mark_used(&file);
                    return Ok(component);
                }
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
    match store(&dir, &file, &component) {
        Ok(()) => trim(&dir, max_bytes(), &file, SystemTime::now()),
        Err(e) => tracing::warn!(dir = %dir.display(), "compiled component not cached: {e}"),
    }
    Ok(component)
}

/// The cache's size cap: `TAMP_WASM_CACHE_MAX_MB`, or 1 GiB (some thirty compiled Python
/// guests; the test suite's guests fit, so a run never recompiles what it compiled itself).
fn max_bytes() -> u64 {
    const DEFAULT_MB: u64 = 1024;
    let mb = match std::env::var("TAMP_WASM_CACHE_MAX_MB") {
        Ok(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
            tracing::warn!(value = %v, "TAMP_WASM_CACHE_MAX_MB is not a whole number of megabytes; using {DEFAULT_MB}");
            DEFAULT_MB
        }),
        Err(_) => DEFAULT_MB,
    };
    mb.saturating_mul(1024 * 1024)
}

/// A reused entry is the last one the trim removes: its time says when it was last used.
fn mark_used(file: &Path) {
    let touched = std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = touched {
        tracing::debug!(file = %file.display(), "compiled component's use time not recorded: {e}");
    }
}

/// How old a half-written entry must be before it is taken for a dead writer's: a live one
/// finishes in seconds.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

/// Keeps the cache at or under `max_bytes`, removing the least recently used entries first,
/// never `keep` (the entry just written), and the abandoned partial writes. Failures are
/// logged, never returned: a cache that cannot be trimmed still works.
fn trim(dir: &Path, max_bytes: u64, keep: &Path, now: SystemTime) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "compiled-component cache not trimmed: {e}");
            return;
        }
    };
    let mut compiled = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(now);
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.contains(".partial-") {
            if now.duration_since(modified).unwrap_or_default() > ABANDONED_AFTER {
                remove(&path, "an abandoned partial write");
            }
        } else if name.ends_with(".cwasm") && path != keep {
            compiled.push((modified, meta.len(), path));
        }
    }
    let kept_size = std::fs::metadata(keep).map(|m| m.len()).unwrap_or(0);
    let mut total = kept_size + compiled.iter().map(|(_, len, _)| len).sum::<u64>();
    compiled.sort_by_key(|(modified, _, _)| *modified);
    for (_, len, path) in compiled {
        if total <= max_bytes {
            break;
        }
        if remove(&path, "the least recently used entry over the cache's cap") {
            total -= len;
        }
    }
}

fn remove(path: &Path, why: &str) -> bool {
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::debug!(file = %path.display(), "compiled-component cache: removed {why}");
            true
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), "compiled-component cache: {why} not removed: {e}");
            false
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dir: &Path, name: &str, len: usize, age_secs: u64, now: SystemTime) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(now - Duration::from_secs(age_secs)).unwrap();
        path
    }

    #[test]
    fn the_least_recently_used_entries_go_first_and_the_new_one_stays() {
        let dir = crate::scratch::dir("wasm-cache");
        let now = SystemTime::now();
        let oldest = entry(dir.as_path(), "a-1.cwasm", 100, 300, now);
        let older = entry(dir.as_path(), "b-1.cwasm", 100, 200, now);
        let recent = entry(dir.as_path(), "c-1.cwasm", 100, 100, now);
        // The entry just written is the oldest by time (a copy's time can be anything): kept.
        let new = entry(dir.as_path(), "d-1.cwasm", 100, 1000, now);
        trim(dir.as_path(), 250, &new, now);
        assert!(
            !oldest.exists() && !older.exists(),
            "the two least recently used go"
        );
        assert!(recent.exists() && new.exists());
    }

    #[test]
    fn a_reuse_makes_an_entry_the_last_to_go() {
        let dir = crate::scratch::dir("wasm-cache");
        let now = SystemTime::now();
        let reused = entry(dir.as_path(), "a-1.cwasm", 100, 300, now);
        let other = entry(dir.as_path(), "b-1.cwasm", 100, 200, now);
        mark_used(&reused);
        let new = entry(dir.as_path(), "c-1.cwasm", 100, 0, now);
        trim(dir.as_path(), 200, &new, SystemTime::now());
        assert!(reused.exists(), "used just now");
        assert!(!other.exists());
    }

    #[test]
    fn under_the_cap_nothing_goes_but_abandoned_partial_writes() {
        let dir = crate::scratch::dir("wasm-cache");
        let now = SystemTime::now();
        let a = entry(dir.as_path(), "a-1.cwasm", 100, 10_000, now);
        let dead = entry(dir.as_path(), "b-1.partial-42", 100, 7200, now);
        let live = entry(dir.as_path(), "c-1.partial-43", 100, 5, now);
        let unrelated = entry(dir.as_path(), "notes.txt", 10_000, 10_000, now);
        trim(dir.as_path(), 1_000, &a, now);
        assert!(a.exists() && live.exists() && unrelated.exists());
        assert!(
            !dead.exists(),
            "an hour-old partial write is a dead writer's"
        );
    }
}
