//! Hot reload: watch the config file (and the plugin files it names), rebuild the chain
//! aside when they change, and swap it in atomically.
//!
//! The watch is on the **directories**, not the files: an editor's atomic save (write a
//! temporary file, rename it over the config), vim's backup dance and a symlink swap all
//! replace the file's inode, and a watch on the old inode would go quiet. Events are filtered
//! to the names of interest, access events are ignored, and a burst is debounced: the reload
//! starts once no relevant event has come for the debounce interval, so a file still being
//! written is not read half-way.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use notify::{EventKind, RecursiveMode, Watcher as _};
use serde::Serialize;
use tokio::sync::mpsc;

use super::active::{ActiveChain, ConfigProblem};
use super::metrics::{Metrics, ReloadOutcome};
use crate::chain::FileOverrides;

/// However busy the files are, a reload starts at most this many debounce intervals after
/// the first event of a burst.
const MAX_DEBOUNCE_FACTOR: u32 = 10;

/// The last reload that failed, shown until a good config lands.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadFailure {
    #[serde(flatten)]
    pub problem: ConfigProblem,
    /// `file:line: message`, as logged.
    pub text: String,
    /// HTTP date of the failed attempt.
    pub at: String,
}

/// The chain the server answers with, and how reloading it went.
pub struct ChainSlot {
    active: ArcSwap<ActiveChain>,
    last_error: Mutex<Option<ReloadFailure>>,
    config_path: PathBuf,
    overrides: FileOverrides,
    metrics: Arc<Metrics>,
    /// One reload at a time (the watcher's, or a test's), so two builds never race to swap.
    reloading: tokio::sync::Mutex<()>,
    /// The command that serves it (`tamp serve`, `tamp proxy`), for its log lines.
    label: &'static str,
}

impl ChainSlot {
    pub fn new(
        first: ActiveChain,
        config_path: PathBuf,
        overrides: FileOverrides,
        metrics: Arc<Metrics>,
    ) -> Self {
        ChainSlot {
            active: ArcSwap::from_pointee(first),
            last_error: Mutex::new(None),
            config_path,
            overrides,
            metrics,
            reloading: tokio::sync::Mutex::new(()),
            label: "tamp serve",
        }
    }

    /// The same slot, its log lines headed `label` (`tamp proxy`).
    pub fn labelled(mut self, label: &'static str) -> Self {
        self.label = label;
        self
    }

    /// The active chain. A request holds this `Arc` to its end, so a swap never changes the
    /// chain under a compaction in flight.
    pub fn current(&self) -> Arc<ActiveChain> {
        self.active.load_full()
    }

    pub fn last_error(&self) -> Option<ReloadFailure> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_last_error(&self, value: Option<ReloadFailure>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = value;
    }

    /// Whether the server can keep what it archives: the active chain's store still has the
    /// file it opened (see [`crate::store::PageStore::check_alive`]). For `/healthz`; one
    /// `stat`, no I/O on the store itself.
    pub fn health(&self) -> Result<(), crate::store::StoreError> {
        self.current().chain.store().check_alive()
    }

    /// Rebuilds the chain from the config file and swaps it in if it differs from the active
    /// one; an invalid config keeps the active chain and is recorded, and so is one that
    /// would lose work silently: no stages, or another store (see [`ActiveChain::rebuild`]).
    pub async fn reload(&self) -> ReloadOutcome {
        let _one_at_a_time = self.reloading.lock().await;
        let current = self.current();
        let overrides = self.overrides.clone();
        let built = tokio::task::spawn_blocking(move || current.rebuild(overrides))
            .await
            .unwrap_or_else(|e| {
                Err(ConfigProblem {
                    file: self.config_path.clone(),
                    line: None,
                    message: format!("building the chain panicked: {e}"),
                })
            });
        let outcome = match built {
            Ok(new) if new.config_hash == self.current().config_hash => {
                // Saved without change, or back to the active config after a bad edit.
                self.set_last_error(None);
                ReloadOutcome::Unchanged
            }
            Ok(new) => {
                let summary = new.summary();
                // The error goes first: a reader that sees the new chain must not also see
                // the refusal it replaced (the two are read separately).
                self.set_last_error(None);
                self.active.store(Arc::new(new));
                eprintln!("{}: reloaded {summary}", self.label);
                ReloadOutcome::Applied
            }
            Err(problem) => {
                let text = problem.to_string();
                tracing::error!("reload rejected, the previous chain stays active: {text}");
                self.set_last_error(Some(ReloadFailure {
                    problem,
                    text,
                    at: httpdate::fmt_http_date(SystemTime::now()),
                }));
                ReloadOutcome::Rejected
            }
        };
        self.metrics.reload(outcome);
        outcome
    }

    /// The files whose change means a reload: the config as named, its symlink target, and
    /// the plugin files of the active chain. Directories are canonical; names are not
    /// resolved, so an event on the link's own name matches too.
    fn files_of_interest(&self) -> HashSet<PathBuf> {
        let mut files = HashSet::new();
        files.extend(in_canonical_dir(&self.config_path));
        if let Ok(target) = self.config_path.canonicalize() {
            files.insert(target);
        }
        for stage in self.current().chain.stages() {
            files.extend(in_canonical_dir(stage.plugin.source_path()));
        }
        files
    }
}

/// `path` with its directory canonicalized (the file itself may not exist right now).
fn in_canonical_dir(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(dir.canonicalize().ok()?.join(name))
}

/// Watches the files of interest and reloads on change, until the returned handle is dropped
/// or aborted.
pub fn spawn_watcher(
    slot: Arc<ChainSlot>,
    debounce: Duration,
) -> notify::Result<tokio::task::JoinHandle<()>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })?;
    let mut watch = WatchSet {
        watcher,
        dirs: HashSet::new(),
        files: HashSet::new(),
    };
    watch.update(slot.files_of_interest());
    Ok(tokio::spawn(watch_loop(slot, watch, rx, debounce)))
}

struct WatchSet {
    watcher: notify::RecommendedWatcher,
    dirs: HashSet<PathBuf>,
    files: HashSet<PathBuf>,
}

impl WatchSet {
    /// Watches the directories of `files` (adding and dropping watches as the set changes).
    fn update(&mut self, files: HashSet<PathBuf>) {
        let dirs: HashSet<PathBuf> = files
            .iter()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect();
        for gone in self.dirs.difference(&dirs) {
            let _ = self.watcher.unwatch(gone);
        }
        for new in dirs.difference(&self.dirs) {
            if let Err(e) = self.watcher.watch(new, RecursiveMode::NonRecursive) {
                tracing::warn!("cannot watch {}: {e}", new.display());
                eprintln!(
                    "tamp serve: warning: cannot watch {} for changes: {e}",
                    new.display()
                );
            }
        }
        self.dirs = dirs;
        self.files = files;
    }

    fn is_relevant(&self, event: &notify::Result<notify::Event>) -> bool {
        match event {
            // A lost event queue (overflow) or a watch error: reload to be safe.
            Err(_) => true,
            Ok(e) if e.need_rescan() => true,
            Ok(e) if matches!(e.kind, EventKind::Access(_)) => false,
            Ok(e) => e.paths.iter().any(|p| self.files.contains(p)),
        }
    }
}

async fn watch_loop(
    slot: Arc<ChainSlot>,
    mut watch: WatchSet,
    mut rx: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    debounce: Duration,
) {
    // A save that landed while the first chain was being built, before this watch existed,
    // raised no event: check once now (`unchanged` in the metrics when nothing changed).
    slot.reload().await;
    watch.update(slot.files_of_interest());
    while let Some(event) = rx.recv().await {
        if !watch.is_relevant(&event) {
            continue;
        }
        let burst_start = Instant::now();
        let latest_start = burst_start + debounce * MAX_DEBOUNCE_FACTOR;
        let mut quiet_from = burst_start;
        loop {
            let deadline = (quiet_from + debounce).min(latest_start);
            match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
                Ok(Some(event)) => {
                    if watch.is_relevant(&event) {
                        quiet_from = Instant::now();
                    }
                }
                Ok(None) => return,
                Err(_elapsed) => break,
            }
        }
        slot.reload().await;
        // The new chain may name other plugin files, or the symlink another target.
        watch.update(slot.files_of_interest());
    }
}
