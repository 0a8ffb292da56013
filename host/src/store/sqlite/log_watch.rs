//! The files SQLite keeps beside a store in WAL mode, watched: the write-ahead log (`-wal`)
//! and its index (`-shm`).
//!
//! A commit is durable once it is in the log; it reaches the store file at the next
//! checkpoint. Remove the log while the store is open and SQLite goes on writing into the
//! unlinked file through its open descriptor: every commit is acknowledged, and `kill -9`
//! loses them all, the ones before the removal that no checkpoint had copied yet included (a
//! clean stop checkpoints, which hid it). So the two files' identities are recorded when the
//! store opens, and checked before every write ([`super::Inner::check_file`]), after every
//! group commit, by `/healthz`, and every [`WATCH_INTERVAL`] by the checkpoint thread. Once
//! either is gone or replaced:
//!
//! - what the unlinked log holds is copied into the store file at once, by a FULL checkpoint
//!   through a connection that still has it open ([`LogWatch::rescue`]), so nothing committed
//!   is lost to a crash;
//! - every later write fails, naming the file, and `/healthz` answers 503: a write committed
//!   now could not survive a crash. A restart opens the store with a new log.
//!
//! No new connection may open the store meanwhile: it would make a new log while the others
//! still read the old one. The checkpoint thread's connection is opened with the store's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::wal::CheckpointMode;
use rusqlite::Connection;

use super::FileIdentity;

/// How often the checkpoint thread looks at the files when no commit wakes it.
pub(super) const WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// The log and its index as they were when the store opened, and whether their loss has
/// been told.
#[derive(Debug, Default)]
pub(super) struct LogWatch {
    files: Vec<(PathBuf, FileIdentity)>,
    rescued: AtomicBool,
    location: String,
}

impl LogWatch {
    /// The identities of `db`'s `-wal` and `-shm` files now (those that exist: none when the
    /// store is not in WAL mode).
    pub(super) fn of(db: &Path, location: &str) -> LogWatch {
        let files = ["-wal", "-shm"]
            .iter()
            .filter_map(|suffix| {
                let mut path = db.as_os_str().to_owned();
                path.push(suffix);
                let path = PathBuf::from(path);
                let identity = FileIdentity::of(&path).ok()?;
                Some((path, identity))
            })
            .collect();
        LogWatch {
            files,
            rescued: AtomicBool::new(false),
            location: location.to_owned(),
        }
    }

    /// The first of the two that is gone or replaced, in words; `None` while both are the
    /// files the store opened.
    pub(super) fn lost(&self) -> Option<String> {
        self.files.iter().find_map(|(path, opened)| {
            let what = match FileIdentity::of(path) {
                Ok(now) if now == *opened => return None,
                Ok(_) => "another file is at its path now",
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no file is at its path now",
                Err(_) => "it cannot be checked",
            };
            Some(format!("{} ({what})", path.display()))
        })
    }

    /// When the log or its index is lost: copies everything the unlinked log holds into the
    /// store file through `conn` (a FULL checkpoint, synced; little to do once done). Whether
    /// it is all there. Logged at error level the first time.
    pub(super) fn rescue(&self, conn: &Connection) -> bool {
        let Some(lost) = self.lost() else {
            return true;
        };
        match conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::FULL) {
            Ok((log, copied)) if log >= 0 && copied == log => {
                if self.rescued.swap(true, Ordering::AcqRel) {
                    return true;
                }
                tracing::error!(
                    store = %self.location,
                    "page store: {lost} was removed or replaced while open; the {log} page(s) \
                     its log held were copied into the store file, and writes are refused \
                     until a restart"
                );
                true
            }
            Ok((log, copied)) => {
                tracing::error!(store = %self.location, "page store: {lost} was removed or replaced while open; only {copied} of the {log} page(s) its log held could be copied into the store file");
                false
            }
            Err(e) => {
                tracing::error!(store = %self.location, "page store: {lost} was removed or replaced while open; its log could not be copied into the store file: {e}");
                false
            }
        }
    }
}
