//! The embedded page store: one SQLite file, no server.
//!
//! - The file and its parent directories are created when missing; the journal is in WAL mode
//!   so readers never wait for a writer (another process may open the same file; a locked
//!   database is retried for [`BUSY_TIMEOUT`]).
//! - `PRAGMA user_version` is the schema version; [`schema`] brings an older file up to
//!   date in one transaction, and a file from a newer tamp is refused rather than misread.
//! - rusqlite is blocking: every operation runs on tokio's blocking pool
//!   (`spawn_blocking`), with the one connection behind a mutex, so the store is usable from
//!   any number of tasks without blocking the async executor. SQLite serializes writers
//!   anyway, and page reads and writes are short.
//! - WAL checkpoints run on a background thread, not in the commit that fills the log
//!   (see [`checkpoint`]).
//! - The file's identity (device and inode) is recorded at open, and every write first checks
//!   that the path still leads to that file ([`Inner::writer`]): a store file deleted or
//!   replaced while open would take writes into an unlinked inode, lost when it closes, so
//!   they fail instead, loudly, and [`PageStore::check_alive`] reports it for `/healthz`. The
//!   write-ahead log and its index are watched the same way ([`log_watch`]): lost, what they
//!   held is copied into the store file, and writes fail.

mod activity;
mod cache;
mod checkpoint;
mod group_commit;
mod log_watch;
mod pages;
mod queue;
mod schema;
mod search;
mod threads;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::types::ToSqlOutput;
use rusqlite::{Connection, OpenFlags, Params};

use super::rows::{Columns, RowError, Value};
use super::{seal, StoreError};
use crate::summary_mac::SummaryKey;
use group_commit::WriteQueue;
use schema::migrate;
pub use schema::SCHEMA_VERSION;

/// How long an operation waits for a lock held by another connection (another process on the
/// same file) before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The embedded SQLite page store. Cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The file path, or `:memory:`; used in `describe` and in every error message.
    pub(super) location: String,
    path: Option<PathBuf>,
    /// The file the store opened, to notice it deleted or replaced (`None`: in memory, or a
    /// platform without inodes).
    identity: Option<FileIdentity>,
    /// Whether the loss of the file has been logged (once, until it comes back).
    loss_logged: std::sync::atomic::AtomicBool,
    /// The write-ahead log and its index, as the store opened them (empty: in memory, not in
    /// WAL mode, or read-only).
    log: Arc<log_watch::LogWatch>,
    conn: Mutex<Connection>,
    /// A connection of the activity record's own (a store file only): the console's writes
    /// and reads never wait for the connection compactions read thread states through, and
    /// its commits are not synced to disk one by one (`synchronous = NORMAL`: a crash of the
    /// machine may lose the last records, never the file).
    activity: Option<Mutex<Connection>>,
    /// Pages and deferred requests waiting to be written (see [`group_commit`]).
    writes: WriteQueue,
    /// The background checkpointer's counts (all zero for an in-memory store).
    checkpoints: Arc<checkpoint::CheckpointStats>,
    /// The checkpointer's thread, ended when the store closes ([`checkpoint::stop`]).
    checkpointer: Option<std::thread::JoinHandle<()>>,
    /// Whether the schema has page seals: false only for an older file opened read-only
    /// (not migrated), whose pages are checked without one.
    sealed: bool,
    /// Whether the schema has seals of thread states and cache entries (likewise).
    pub(super) records_sealed: bool,
    /// The key of the store's summary MACs (`None`: an older file opened read-only).
    summary_key: Option<SummaryKey>,
}

impl Inner {
    /// The connection. Held only for the SQL itself: serializing, hashing and parsing pages
    /// happen outside the lock.
    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection usable (an open transaction
        // rolls back when dropped), so a poisoned lock is taken over.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection, for a write: fails when the store's file, its log or the log's index
    /// is no longer the one opened (see [`Inner::check_file`]), so nothing is acknowledged
    /// that a restart would lose; with the log lost, what it held is first copied into the
    /// store file.
    pub(super) fn writer(&self, operation: &str) -> Result<MutexGuard<'_, Connection>, StoreError> {
        let conn = self.conn();
        if let Err(e) = self.check_file(operation) {
            self.log.rescue(&conn);
            return Err(e);
        }
        Ok(conn)
    }

    /// The activity record's connection (the store's own where it has none of its own),
    /// for `operation`; `write` checks first that the store file is still the one opened.
    pub(super) fn activity(
        &self,
        operation: &str,
        write: bool,
    ) -> Result<MutexGuard<'_, Connection>, StoreError> {
        let Some(activity) = &self.activity else {
            return if write {
                self.writer(operation)
            } else {
                Ok(self.conn())
            };
        };
        if write {
            self.check_file(operation)?;
        }
        Ok(activity.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// After a commit: whether it is durable, which it is unless the log was lost meanwhile
    /// and what it held could not be copied into the store file.
    pub(super) fn committed_durably(&self, conn: &Connection) -> bool {
        self.log.rescue(conn)
    }

    /// Whether the path still leads to the file the store opened. A file deleted (or
    /// replaced: renamed over, restored from a backup) while open is an error naming the
    /// path, logged at error level the first time it is seen.
    pub(super) fn check_file(&self, operation: &str) -> Result<(), StoreError> {
        let (Some(path), Some(opened)) = (&self.path, self.identity) else {
            return Ok(());
        };
        let what = match FileIdentity::of(path) {
            Ok(now) if now == opened => match self.log.lost() {
                None => {
                    if self.loss_logged.swap(false, Ordering::Relaxed) {
                        tracing::warn!(store = %self.location, "page store: the store file is back");
                    }
                    return Ok(());
                }
                Some(lost) => {
                    return Err(StoreError::backend(
                        &self.location,
                        operation,
                        format!(
                            "the store's write-ahead log {lost} was removed or replaced while \
                             open; what it held is copied into the store file, but a write \
                             committed now would be lost if tamp stopped without closing the \
                             store, so writes are refused. Restart to open the store again"
                        ),
                    ))
                }
            },
            Ok(_) => "another file is at its path now".to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                "no file is at its path now".to_owned()
            }
            Err(e) => format!("it cannot be checked: {e}"),
        };
        let error = StoreError::backend(
            &self.location,
            operation,
            format!(
                "the store file {} was deleted or replaced while open ({what}); what is written \
                 now would be lost when the store closes. Restore the file, or restart to \
                 open a new store",
                path.display()
            ),
        );
        if !self.loss_logged.swap(true, Ordering::Relaxed) {
            tracing::error!(store = %self.location, "{error}");
        }
        Err(error)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closed before the store's own connection, which is the last to close.
        drop(self.activity.take());
        if let Some(thread) = self.checkpointer.take() {
            let conn = self.conn.get_mut().unwrap_or_else(PoisonError::into_inner);
            checkpoint::stop(conn, thread);
        }
    }
}

/// What identifies a file while it exists: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    #[cfg(unix)]
    fn of(path: &Path) -> std::io::Result<FileIdentity> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path)?;
        Ok(FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    #[cfg(not(unix))]
    fn of(_path: &Path) -> std::io::Result<FileIdentity> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "no inodes on this platform",
        ))
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// Whether SQLite could not open (`unable to open database file`) or write (`attempt to write
/// a readonly database`) the file at `path` because this user may not read it (`write`: or
/// write it), which SQLite does not say. The file is opened here only after such an error: no
/// connection of this process can then hold locks on it that closing a descriptor of the same
/// file would release.
fn permission_denied(sqlite_error: &str, path: &Path, write: bool) -> bool {
    (sqlite_error.contains("unable to open database file")
        || sqlite_error.contains("readonly database"))
        && std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
}

impl SqliteStore {
    /// What is at `path` when it cannot be a store file, from its metadata alone: a
    /// directory, or something else than a regular file. `None` when nothing is there or it
    /// is a file. Read without opening it: a descriptor closed beside a live SQLite
    /// connection would drop that connection's locks.
    pub fn not_a_file(path: &Path) -> Option<&'static str> {
        let meta = std::fs::metadata(path).ok()?;
        if meta.is_dir() {
            Some("is a directory, not a page store file")
        } else if !meta.is_file() {
            Some("is not a regular file (a page store is a SQLite file)")
        } else {
            None
        }
    }

    /// Opens (creating it and its parent directories if missing) the store file at `path`,
    /// and migrates its schema to the current schema version.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let location = path.display().to_string();
        if path.as_os_str().is_empty() || path.file_name().is_none() {
            return Err(StoreError::backend(
                &location,
                "open",
                "the path does not name a file",
            ));
        }
        if let Some(why) = SqliteStore::not_a_file(&path) {
            return Err(StoreError::backend(&location, "open", why));
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::backend(
                    &location,
                    format!("create directory {}", parent.display()),
                    e,
                )
            })?;
        }
        Connection::open(&path)
            .map_err(|e| StoreError::backend(&location, "open", e))
            .and_then(|conn| Self::init(conn, location.clone(), Some(path.clone())))
            .map_err(|e| {
                if permission_denied(&e.to_string(), &path, true) {
                    StoreError::backend(&location, "open", "permission denied")
                } else {
                    e
                }
            })
    }

    /// Opens the store file at `path` for reading only: it must exist, and it is neither
    /// migrated nor switched to WAL, and no checkpointer starts. A reader that cannot write
    /// the file's directory (where SQLite keeps a WAL file's shared-memory index) reads it as
    /// an immutable file, which is what it is when no server has it open.
    pub fn open_read_only(path: &Path) -> Result<Self, StoreError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let location = path.display().to_string();
        let open = |immutable: bool| -> Result<Connection, rusqlite::Error> {
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let uri = format!(
                "file:{}{}",
                uri_path(&path),
                if immutable { "?immutable=1" } else { "" }
            );
            let conn = Connection::open_with_flags(uri, flags)?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            // Reading the schema version opens the file (and a WAL file's index).
            conn.pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))?;
            Ok(conn)
        };
        let conn = match open(false) {
            Ok(conn) => conn,
            Err(first) => {
                if let Some(why) = SqliteStore::not_a_file(&path) {
                    return Err(StoreError::backend(&location, "open", why));
                }
                if !path.is_file() {
                    return Err(StoreError::backend(&location, "open", "no such file"));
                }
                if permission_denied(&first.to_string(), &path, false) {
                    return Err(StoreError::backend(&location, "open", "permission denied"));
                }
                open(true).map_err(|_| StoreError::backend(&location, "open", first))?
            }
        };
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|e| StoreError::backend(&location, "read the schema version", e))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::UnsupportedSchema {
                location,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < 1 {
            return Err(StoreError::backend(
                &location,
                "open",
                "the file is not a tamp page store (it has no pages table)",
            ));
        }
        let identity = FileIdentity::of(&path).ok();
        let records_sealed = version >= seal::RECORDS_SEALED_SINCE;
        let summary_key = if records_sealed {
            Some(read_summary_key(&conn, &location)?)
        } else {
            None
        };
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                location,
                path: Some(path),
                identity,
                loss_logged: Default::default(),
                log: Arc::default(),
                conn: Mutex::new(conn),
                activity: None,
                writes: WriteQueue::default(),
                checkpoints: Arc::default(),
                checkpointer: None,
                sealed: version >= seal::SEALED_SINCE,
                records_sealed,
                summary_key,
            }),
        })
    }

    /// A store in memory, gone when the last clone is dropped (tests, one-shot runs).
    pub fn in_memory() -> Result<Self, StoreError> {
        let location = ":memory:".to_owned();
        let conn =
            Connection::open_in_memory().map_err(|e| StoreError::backend(&location, "open", e))?;
        Self::init(conn, location, None)
    }

    /// The key of this store's summary MACs ([`crate::summary_mac`]).
    pub(super) fn summary_key(&self) -> Option<SummaryKey> {
        self.inner.summary_key.clone()
    }

    /// SQLite's `PRAGMA integrity_check` on the whole file: its problems, none when it says
    /// `ok` (it finds pages and indexes overwritten in place, which no seal covers).
    pub(super) async fn integrity_problems(&self) -> Result<Vec<String>, StoreError> {
        self.run("check the database's integrity".to_owned(), |inner| {
            let conn = inner.conn();
            let mut stmt = conn
                .prepare("PRAGMA integrity_check")
                .map_err(|e| StoreError::backend(&inner.location, "check its integrity", e))?;
            let lines = stmt
                .query_map([], |row| row.get::<_, String>(0))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| StoreError::backend(&inner.location, "check its integrity", e))?;
            Ok(lines.into_iter().filter(|l| l != "ok").collect())
        })
        .await
    }

    /// The store file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// How many WAL checkpoints the background thread has run (see [`checkpoint`]).
    pub fn background_checkpoints(&self) -> u64 {
        self.inner.checkpoints.background.load(Ordering::Relaxed)
    }

    pub(super) fn location(&self) -> &str {
        &self.inner.location
    }

    fn init(
        mut conn: Connection,
        location: String,
        path: Option<PathBuf>,
    ) -> Result<Self, StoreError> {
        let fail =
            |operation: &str, e: rusqlite::Error| StoreError::backend(&location, operation, e);
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| fail("set the busy timeout", e))?;
        // WAL: readers do not wait for the writer. In-memory databases answer "memory".
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(|e| fail("enable WAL mode", e))?;
        if path.is_some() && !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(store = %location, journal_mode = %mode, "page store: WAL mode unavailable, using the {mode} journal");
        }
        migrate(&mut conn, &location)?;
        let summary_key = read_summary_key(&conn, &location)?;
        // The log exists by now (reading the schema version opened it).
        let log = Arc::new(match &path {
            Some(file) if mode.eq_ignore_ascii_case("wal") => {
                log_watch::LogWatch::of(file, &location)
            }
            _ => log_watch::LogWatch::default(),
        });
        let (checkpoints, checkpointer) = match &path {
            Some(file) if mode.eq_ignore_ascii_case("wal") => {
                checkpoint::move_off_the_write_path(&mut conn, file, &location, Arc::clone(&log))
            }
            _ => (Arc::default(), None),
        };
        // Recorded once the file certainly exists (the pragmas above have opened it).
        let identity = path.as_deref().and_then(|p| FileIdentity::of(p).ok());
        let activity = match &path {
            Some(file) => Some(Mutex::new(
                activity_connection(file).map_err(|e| fail("open the activity record", e))?,
            )),
            None => None,
        };
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                location,
                path,
                identity,
                loss_logged: Default::default(),
                log,
                conn: Mutex::new(conn),
                activity,
                writes: WriteQueue::default(),
                checkpoints,
                checkpointer,
                sealed: true,
                records_sealed: true,
                summary_key: Some(summary_key),
            }),
        })
    }

    /// Runs `op` on the blocking pool (inline when there is no tokio
    /// runtime, e.g. under `futures::executor::block_on`).
    pub(super) async fn run<T, F>(&self, operation: String, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let task = move || op(&inner);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => match handle.spawn_blocking(task).await {
                Ok(result) => result,
                Err(e) => Err(StoreError::backend(&self.inner.location, operation, e)),
            },
            Err(_) => task(),
        }
    }
}

/// The activity record's own connection to the store file (see [`Inner::activity`]).
fn activity_connection(file: &Path) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open(file)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// `path` for a `file:` URI: bytes outside the unreserved set and `/` percent-encoded.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The store's summary key, which migration 7 made.
fn read_summary_key(conn: &Connection, location: &str) -> Result<SummaryKey, StoreError> {
    let hex: Option<String> = select_first(
        conn,
        "SELECT value FROM tamp_secrets WHERE name = ?1",
        [seal::SUMMARY_KEY],
        |row| row.text("value"),
    )
    .map_err(|e| StoreError::backend(location, "read the summary key", e))?;
    hex.as_deref()
        .and_then(SummaryKey::from_hex)
        .ok_or_else(|| {
            StoreError::backend(
                location,
                "read the summary key",
                "tamp_secrets holds no summary key (the row was removed or altered)",
            )
        })
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Columns for rusqlite::Row<'_> {
    fn text(&self, column: &str) -> Result<String, RowError> {
        self.get(column).map_err(RowError::from)
    }

    fn optional_text(&self, column: &str) -> Result<Option<String>, RowError> {
        self.get(column).map_err(RowError::from)
    }

    fn int(&self, column: &str) -> Result<i64, RowError> {
        self.get(column).map_err(RowError::from)
    }

    fn optional_int(&self, column: &str) -> Result<Option<i64>, RowError> {
        self.get(column).map_err(RowError::from)
    }

    fn bytes(&self, column: &str) -> Result<Vec<u8>, RowError> {
        self.get(column).map_err(RowError::from)
    }
}

impl From<rusqlite::Error> for RowError {
    fn from(e: rusqlite::Error) -> Self {
        RowError(e.to_string())
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Value::Text(text) => text.to_sql(),
            Value::OptionalText(text) => text.to_sql(),
            Value::Int(n) => n.to_sql(),
            Value::OptionalInt(n) => n.to_sql(),
        }
    }
}

/// The rows `sql` answers for `params`, each read by `read` (see [`rows`]).
pub(super) fn select<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    mut read: impl FnMut(&dyn Columns) -> Result<T, RowError>,
) -> Result<Vec<T>, RowError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(read(row)?);
    }
    Ok(out)
}

/// The first row `sql` answers for `params`, if any, read by `read`.
pub(super) fn select_first<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    read: impl FnOnce(&dyn Columns) -> Result<T, RowError>,
) -> Result<Option<T>, RowError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    rows.next()?.map(|row| read(row)).transpose()
}

#[cfg(test)]
pub(super) mod tests;
