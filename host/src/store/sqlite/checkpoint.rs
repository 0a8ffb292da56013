//! WAL checkpoints off the write path.
//!
//! By default SQLite checkpoints inside the commit that takes the write-ahead log past 1,000
//! pages: that commit copies about 4 MB into the database file and fsyncs it, and whoever
//! waits on the commit (a compaction archiving its pages) pays tens of milliseconds for it.
//! Here a commit only nudges a background thread, which checkpoints on a connection of its
//! own. The checkpoint is PASSIVE, so it never blocks the writer or the readers, and every
//! commit is still fsynced to the log: durability is unchanged. Between nudges the thread
//! watches the log's files ([`super::log_watch`]) and, should they go, copies what the log
//! held into the store file.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;

use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;
use rusqlite::Connection;

use super::log_watch::{LogWatch, WATCH_INTERVAL};
use super::BUSY_TIMEOUT;

/// The log size, in pages, at which a commit asks for a checkpoint: SQLite's own default.
pub(super) const NUDGE_PAGES: c_int = 1_000;

/// The log size at which the committing connection checkpoints by itself, as SQLite would by
/// default: the background thread is not keeping up (a long-lived reader pins the log, or its
/// checkpoints fail), and the log must not grow without bound.
pub(super) const INLINE_PAGES: c_int = 16 * NUDGE_PAGES;

/// What the background checkpointer has done, for tests and diagnostics.
#[derive(Debug, Default)]
pub(super) struct CheckpointStats {
    pub(super) background: AtomicU64,
}

/// Starts the checkpointer for the database file at `path` and hands `conn`'s checkpoints to
/// it; its thread, to be joined once `conn`'s hook is gone ([`stop`]). On failure (no thread
/// could be started) `conn` keeps SQLite's inline checkpoints.
pub(super) fn move_off_the_write_path(
    conn: &mut Connection,
    path: &Path,
    location: &str,
    log: Arc<LogWatch>,
) -> (Arc<CheckpointStats>, Option<JoinHandle<()>>) {
    let stats = Arc::new(CheckpointStats::default());
    // One pending nudge is enough: a checkpoint covers every commit before it.
    let (nudge, nudged) = sync_channel::<()>(1);
    let checkpointer = Checkpointer {
        path: path.to_path_buf(),
        location: location.to_owned(),
        stats: Arc::clone(&stats),
        log,
    };
    // Opened here, before the store answers anything: a connection the thread opened itself
    // could come after a write and the loss of its log (a busy machine starts threads late),
    // and would then see a new, empty log instead of the one to copy.
    let own = checkpointer.connect();
    let started = std::thread::Builder::new()
        .name("tamp-sqlite-checkpoint".into())
        .spawn(move || checkpointer.run(own, nudged));
    let thread = match started {
        Ok(thread) => thread,
        Err(e) => {
            tracing::warn!(store = %location, error = %e, "page store: no checkpoint thread, checkpointing in commits");
            return (stats, None);
        }
    };
    // The hook replaces SQLite's automatic checkpoints on this connection. When the
    // connection closes, the hook and with it the sender are dropped, and the thread ends.
    let hooked = conn.wal_hook(Some(move |wal: &mut Wal, log_pages: c_int| {
        if log_pages >= INLINE_PAGES {
            return wal.checkpoint();
        }
        if log_pages >= NUDGE_PAGES {
            // Full means a nudge is already pending.
            let _ = nudge.try_send(());
        }
        Ok(())
    }));
    if let Err(e) = hooked {
        tracing::warn!(store = %location, error = %e, "page store: cannot hook commits, checkpointing in commits");
    }
    (stats, Some(thread))
}

/// Ends the checkpointer of `conn` (its hook goes, and with it the thread's reason to run) and
/// waits for its connection to close, so that `conn`, closed last, checkpoints its log into
/// the file as SQLite does at a last close: a process that exits right after leaves the file
/// whole, without a log beside it.
pub(super) fn stop(conn: &mut Connection, thread: JoinHandle<()>) {
    let _ = conn.wal_hook(None::<fn(&mut Wal, c_int) -> rusqlite::Result<()>>);
    let _ = thread.join();
}

struct Checkpointer {
    path: PathBuf,
    location: String,
    stats: Arc<CheckpointStats>,
    log: Arc<LogWatch>,
}

impl Checkpointer {
    fn run(self, mut conn: Option<Connection>, nudged: Receiver<()>) {
        loop {
            match nudged.recv_timeout(WATCH_INTERVAL) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(c) = &conn {
                        self.log.rescue(c);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if conn.is_none() && self.log.lost().is_none() {
                conn = self.connect();
            }
            let Some(c) = &conn else { continue };
            if self.log.lost().is_some() {
                self.log.rescue(c);
                continue;
            }
            match c.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE) {
                // -1: the connection is not in WAL mode, so nothing was done.
                Ok((log_pages, _)) if log_pages >= 0 => {
                    self.stats.background.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {
                    tracing::warn!(store = %self.location, "page store: background checkpoint found no write-ahead log")
                }
                // The next nudge tries again; past INLINE_PAGES the writer checkpoints itself.
                Err(e) => {
                    tracing::warn!(store = %self.location, error = %e, "page store: background checkpoint failed")
                }
            }
        }
    }

    fn connect(&self) -> Option<Connection> {
        let opened = Connection::open(&self.path).and_then(|c| {
            c.busy_timeout(BUSY_TIMEOUT)?;
            // A connection opens the log on its first read; until then a checkpoint is a no-op.
            c.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
            Ok(c)
        });
        match opened {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(store = %self.location, error = %e, "page store: checkpoint connection failed");
                None
            }
        }
    }
}
