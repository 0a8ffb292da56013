//! The embedded page store: one SQLite file, no server.
//!
//! - The file and its parent directories are created when missing; the journal is in WAL mode
//!   so readers never wait for a writer (another process may open the same file; a locked
//!   database is retried for [`BUSY_TIMEOUT`]).
//! - `PRAGMA user_version` is the schema version; [`MIGRATIONS`] brings an older file up to
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
//!   they fail instead, loudly, and [`PageStore::check_alive`] reports it for `/healthz`.

mod checkpoint;
mod group_commit;
mod queue;
mod threads;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use futures::FutureExt;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use tamp_plugin_api::{FfiOption, LlmResponse, Page};

use super::cache::{CacheKey, SummaryCache};
use super::{seal, NewPage, PageStore, PageSummary, StoreError, StoredPage, Written};
use group_commit::WriteQueue;

/// How long an operation waits for a lock held by another connection (another process on the
/// same file) before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Schema migrations: `MIGRATIONS[n]` takes a file from schema version `n` to `n + 1`.
/// Append only; never edit a released step.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the pages table.
    "CREATE TABLE pages (
        id            TEXT PRIMARY KEY NOT NULL,
        thread_id     TEXT,
        strategy      TEXT NOT NULL,
        source_format TEXT,
        messages_json TEXT NOT NULL,
        metadata_json TEXT NOT NULL,
        message_count INTEGER NOT NULL,
        created_at    INTEGER NOT NULL
    );
    CREATE INDEX pages_by_created_at ON pages (created_at);
    CREATE INDEX pages_by_thread ON pages (thread_id, created_at);",
    // 1 -> 2: the summary cache (see `store::cache`).
    "CREATE TABLE llm_answers (
        key         BLOB PRIMARY KEY NOT NULL,
        answer_json TEXT NOT NULL,
        created_at  INTEGER NOT NULL
    );
    CREATE TABLE range_summaries (
        key           BLOB PRIMARY KEY NOT NULL,
        message_count INTEGER NOT NULL,
        summary       TEXT NOT NULL,
        created_at    INTEGER NOT NULL
    );",
    // 2 -> 3: the deferred-work queue (see `store::queue`).
    queue::MIGRATION,
    // 3 -> 4: leases on queue items, for several workers.
    queue::MIGRATION_LEASES,
    // 4 -> 5: thread states (see `store::threads`).
    super::threads::MIGRATION_SQLITE,
    // 5 -> 6: page seals (see `store::seal`); `migrate` seals the pages already there.
    "ALTER TABLE pages ADD COLUMN seal TEXT;",
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

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
    conn: Mutex<Connection>,
    /// Pages and deferred requests waiting to be written (see [`group_commit`]).
    writes: WriteQueue,
    /// The background checkpointer's counts (all zero for an in-memory store).
    checkpoints: Arc<checkpoint::CheckpointStats>,
    /// Whether the schema has page seals: false only for an older file opened read-only
    /// (not migrated), whose pages are checked without one.
    sealed: bool,
}

impl Inner {
    /// The connection. Held only for the SQL itself: serializing, hashing and parsing pages
    /// happen outside the lock.
    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection usable (an open transaction
        // rolls back when dropped), so a poisoned lock is taken over.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection, for a write: fails when the store's file is no longer the one opened
    /// (see [`Inner::check_file`]), so nothing is acknowledged that a restart would lose.
    pub(super) fn writer(&self, operation: &str) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.check_file(operation)?;
        Ok(self.conn())
    }

    /// Whether the path still leads to the file the store opened. A file deleted (or
    /// replaced: renamed over, restored from a backup) while open is an error naming the
    /// path, logged at error level the first time it is seen.
    pub(super) fn check_file(&self, operation: &str) -> Result<(), StoreError> {
        let (Some(path), Some(opened)) = (&self.path, self.identity) else {
            return Ok(());
        };
        let what = match FileIdentity::of(path) {
            Ok(now) if now == opened => {
                if self.loss_logged.swap(false, Ordering::Relaxed) {
                    tracing::warn!(store = %self.location, "page store: the store file is back");
                }
                return Ok(());
            }
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

/// What identifies a file while it exists: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIdentity {
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

impl SqliteStore {
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
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::backend(
                    &location,
                    format!("create directory {}", parent.display()),
                    e,
                )
            })?;
        }
        let conn =
            Connection::open(&path).map_err(|e| StoreError::backend(&location, "open", e))?;
        Self::init(conn, location, Some(path))
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
                if !path.is_file() {
                    return Err(StoreError::backend(&location, "open", "no such file"));
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
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                location,
                path: Some(path),
                identity,
                loss_logged: Default::default(),
                conn: Mutex::new(conn),
                writes: WriteQueue::default(),
                checkpoints: Arc::default(),
                sealed: version >= seal::SEALED_SINCE,
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
        let checkpoints = match &path {
            Some(file) if mode.eq_ignore_ascii_case("wal") => {
                checkpoint::move_off_the_write_path(&mut conn, file, &location)
            }
            _ => Arc::default(),
        };
        // Recorded once the file certainly exists (the pragmas above have opened it).
        let identity = path.as_deref().and_then(|p| FileIdentity::of(p).ok());
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                location,
                path,
                identity,
                loss_logged: Default::default(),
                conn: Mutex::new(conn),
                writes: WriteQueue::default(),
                checkpoints,
                sealed: true,
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

fn migrate(conn: &mut Connection, location: &str) -> Result<(), StoreError> {
    let fail = |operation: &str, e: rusqlite::Error| StoreError::backend(location, operation, e);
    let read_version = |conn: &Connection| -> Result<i64, StoreError> {
        conn.pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|e| fail("read the schema version", e))
    };
    let check = |found: i64| {
        if found > SCHEMA_VERSION {
            Err(StoreError::UnsupportedSchema {
                location: location.to_owned(),
                found,
                supported: SCHEMA_VERSION,
            })
        } else {
            Ok(())
        }
    };
    let version = read_version(conn)?;
    check(version)?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    // Another process may be migrating the same file: take the write lock, then read again.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| fail("migrate the schema", e))?;
    let version = read_version(&tx)?;
    check(version)?;
    for (step, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        tx.execute_batch(sql).map_err(|e| {
            fail(
                &format!("migrate the schema from version {step} to {}", step + 1),
                e,
            )
        })?;
    }
    if version < seal::SEALED_SINCE {
        seal_existing_pages(&tx).map_err(|e| fail("seal the pages already stored", e))?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|e| fail("migrate the schema", e))?;
    tx.commit().map_err(|e| fail("migrate the schema", e))
}

/// Seals every page without a seal (those written before schema version 6), as they are.
fn seal_existing_pages(tx: &rusqlite::Transaction<'_>) -> Result<(), rusqlite::Error> {
    type Row = (String, Option<String>, String, Option<String>, String, i64);
    let rows: Vec<Row> = tx
        .prepare(
            "SELECT id, thread_id, strategy, source_format, metadata_json, message_count
             FROM pages WHERE seal IS NULL",
        )?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let mut update = tx.prepare("UPDATE pages SET seal = ?1 WHERE id = ?2")?;
    for (id, thread_id, strategy, source_format, metadata_json, message_count) in &rows {
        let row = seal::PageRow {
            id,
            thread_id: thread_id.as_deref(),
            strategy,
            source_format: source_format.as_deref(),
            metadata_json,
            message_count: *message_count,
        };
        update.execute(params![row.seal(), id])?;
    }
    Ok(())
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

impl PageStore for SqliteStore {
    /// Written through the group commit (see [`group_commit`]): concurrent puts share one
    /// transaction and one fsync, with full durability.
    fn put_page(&self, page: NewPage) -> BoxFuture<'_, Result<String, StoreError>> {
        async move {
            let (id, written) = self.stage_page(page).await?;
            written.await?;
            Ok(id)
        }
        .boxed()
    }

    /// The page waits in the group commit's queue until `written` is awaited or a deferred
    /// request is queued after it (see [`group_commit`]).
    fn stage_page(&self, page: NewPage) -> BoxFuture<'_, Result<(String, Written), StoreError>> {
        async move {
            let (id, answer) = self.queue_page(page).await?;
            let store = self.clone();
            let written: Written = async move {
                store.flush().await?;
                answer
                    .await
                    .unwrap_or_else(|_| Err(store.writer_stopped("write a page")))
            }
            .boxed();
            Ok((id, written))
        }
        .boxed()
    }

    fn get_page(&self, id: &str) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        let id = id.to_owned();
        async move {
            self.run(format!("read page {id}"), move |inner| {
                type Row = (
                    Option<String>,
                    String,
                    Option<String>,
                    String,
                    String,
                    i64,
                    i64,
                    Option<String>,
                );
                let conn = inner.conn();
                if let Some(queued) = group_commit::queued_page(&inner.writes, &id) {
                    return Ok(queued);
                }
                // A file of a schema before seals, opened read-only, has no seal column.
                let seal_column = if inner.sealed { "seal" } else { "NULL" };
                let row: Option<Row> = conn
                    .query_row(
                        &format!(
                            "SELECT thread_id, strategy, source_format, messages_json,
                                    metadata_json, created_at, message_count, {seal_column}
                             FROM pages WHERE id = ?1"
                        ),
                        [&id],
                        |r| {
                            Ok((
                                r.get(0)?,
                                r.get(1)?,
                                r.get(2)?,
                                r.get(3)?,
                                r.get(4)?,
                                r.get(5)?,
                                r.get(6)?,
                                r.get(7)?,
                            ))
                        },
                    )
                    .optional()
                    .map_err(|e| {
                        StoreError::backend(&inner.location, format!("read page {id}"), e)
                    })?;
                // Checking and parsing the page need no connection.
                drop(conn);
                let Some((
                    thread_id,
                    strategy,
                    source_format,
                    messages_json,
                    metadata_json,
                    created_at,
                    message_count,
                    seal,
                )) = row
                else {
                    return Err(StoreError::NotFound(id));
                };
                let fields = seal::PageRow {
                    id: &id,
                    thread_id: thread_id.as_deref(),
                    strategy: &strategy,
                    source_format: source_format.as_deref(),
                    metadata_json: &metadata_json,
                    message_count,
                };
                let messages = fields
                    .check(&messages_json, inner.sealed.then_some(seal.as_deref()))
                    .map_err(|detail| StoreError::Corrupt {
                        location: inner.location.clone(),
                        id: id.clone(),
                        detail,
                    })?;
                Ok(StoredPage {
                    page: Page {
                        id: id.into(),
                        thread_id: FfiOption::from(thread_id.map(Into::into)),
                        strategy: strategy.into(),
                        messages: messages.into(),
                        metadata_json: metadata_json.into(),
                        created_at: u64::try_from(created_at).unwrap_or(0),
                    },
                    source_format,
                })
            })
            .await
        }
        .boxed()
    }

    fn list_pages(&self, limit: usize) -> BoxFuture<'_, Result<Vec<PageSummary>, StoreError>> {
        async move {
            self.run("list pages".to_owned(), move |inner| {
                let fail =
                    |e: rusqlite::Error| StoreError::backend(&inner.location, "list pages", e);
                let conn = inner.conn();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT id, thread_id, strategy, message_count, created_at, source_format
                         FROM pages ORDER BY created_at DESC, rowid DESC LIMIT ?1",
                    )
                    .map_err(fail)?;
                let rows = stmt
                    .query_map([to_i64(limit as u64)], |r| {
                        Ok(PageSummary {
                            id: r.get(0)?,
                            thread_id: r.get(1)?,
                            strategy: r.get(2)?,
                            message_count: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                            created_at: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                            source_format: r.get(5)?,
                        })
                    })
                    .map_err(fail)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(fail)
            })
            .await
        }
        .boxed()
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.inner.location)
    }

    fn check_alive(&self) -> Result<(), StoreError> {
        self.inner.check_file("keep pages")
    }
}

/// Range keys looked up per query: well under SQLite's bound on parameters.
const RANGE_KEYS_PER_QUERY: usize = 500;

impl SummaryCache for SqliteStore {
    fn get_answer(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<LlmResponse>, StoreError>> {
        self.run("read the summary cache".to_owned(), move |inner| {
            let json: Option<String> = inner
                .conn()
                .query_row(
                    "SELECT answer_json FROM llm_answers WHERE key = ?1",
                    params![&key[..]],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| StoreError::backend(&inner.location, "read the summary cache", e))?;
            match json {
                None => Ok(None),
                // An entry this build cannot read is a miss, not an error: the call is made.
                Some(json) => Ok(serde_json::from_str(&json).ok()),
            }
        })
        .boxed()
    }

    fn put_answer(
        &self,
        key: CacheKey,
        answer: LlmResponse,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.run("write the summary cache".to_owned(), move |inner| {
            let json = serde_json::to_string(&answer)
                .map_err(|e| StoreError::backend(&inner.location, "encode a cached answer", e))?;
            inner
                .writer("write the summary cache")?
                .execute(
                    "INSERT OR IGNORE INTO llm_answers (key, answer_json, created_at)
                     VALUES (?1, ?2, ?3)",
                    params![&key[..], json, to_i64(now_secs())],
                )
                .map_err(|e| StoreError::backend(&inner.location, "write the summary cache", e))?;
            Ok(())
        })
        .boxed()
    }

    fn longest_range(
        &self,
        range_keys: Vec<CacheKey>,
    ) -> BoxFuture<'_, Result<Option<(usize, String)>, StoreError>> {
        self.run("read the summary cache".to_owned(), move |inner| {
            let fail = |e| StoreError::backend(&inner.location, "read the summary cache", e);
            let conn = inner.conn();
            // From the longest runs down: the first chunk with a hit holds the longest one.
            for chunk in range_keys.rchunks(RANGE_KEYS_PER_QUERY) {
                let placeholders = vec!["?"; chunk.len()].join(",");
                let sql = format!(
                    "SELECT message_count, summary FROM range_summaries WHERE key IN \
                     ({placeholders}) ORDER BY message_count DESC LIMIT 1"
                );
                let mut stmt = conn.prepare_cached(&sql).map_err(fail)?;
                let found = stmt
                    .query_row(
                        rusqlite::params_from_iter(chunk.iter().map(|k| &k[..])),
                        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
                    )
                    .optional()
                    .map_err(fail)?;
                if let Some((count, summary)) = found {
                    return Ok(Some((usize::try_from(count).unwrap_or(0), summary)));
                }
            }
            Ok(None)
        })
        .boxed()
    }

    fn put_range(
        &self,
        key: CacheKey,
        len: usize,
        summary: String,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.run("write the summary cache".to_owned(), move |inner| {
            inner
                .writer("write the summary cache")?
                .execute(
                    "INSERT OR REPLACE INTO range_summaries (key, message_count, summary, created_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![&key[..], to_i64(len as u64), summary, to_i64(now_secs())],
                )
                .map_err(|e| StoreError::backend(&inner.location, "write the summary cache", e))?;
            Ok(())
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::page_id;
    use tamp_plugin_api::{ContentBlock, Message, Role, ToolResultPart};

    /// A unique directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "tamp-store-test-{tag}-{}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed),
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn conversation(tag: &str) -> Vec<Message> {
        let mut tool_use = Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text(format!("let me look {tag}")),
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "read_file".into(),
                    input_json: r#"{"path":"/etc/hosts"}"#.into(),
                    extra_json: r#"{"cache_control":{"type":"ephemeral"}}"#.into(),
                },
            ],
        );
        tool_use.extra_json = r#"{"name":"bot"}"#.into();
        vec![
            Message::text(Role::User, format!("question {tag} — ünïcødé 👋")),
            tool_use,
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "toolu_1".into(),
                    content: vec![
                        ToolResultPart::Text {
                            text: "127.0.0.1 localhost".into(),
                        },
                        ToolResultPart::Opaque {
                            json: r#"{"type":"image","source":{"data":"AAAA"}}"#.into(),
                        },
                    ]
                    .into(),
                    is_error: false,
                    extra_json: Default::default(),
                }],
            ),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Opaque {
                    json: r#"{"type":"thinking","thinking":"hmm"}"#.into(),
                }],
            ),
        ]
    }

    /// A store at `path` holding one page of `messages`, taken back to schema version 1 (the
    /// pages table alone); returns the page's id.
    async fn version_one_store(path: &std::path::Path, messages: Vec<Message>) -> String {
        let id = {
            let store = SqliteStore::open(path).unwrap();
            store.put_page(new_page(messages)).await.unwrap()
        };
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "DROP TABLE llm_answers; DROP TABLE range_summaries;
             DROP TABLE deferred_items; DROP TABLE deferred_events; DROP TABLE threads;
             ALTER TABLE pages DROP COLUMN seal;",
        )
        .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        id
    }

    fn new_page(messages: Vec<Message>) -> NewPage {
        NewPage {
            thread_id: Some("thread-1".into()),
            strategy: "anchored-structured".into(),
            messages,
            metadata_json: r#"{"k":1}"#.into(),
            source_format: Some("anthropic".into()),
        }
    }

    fn count_rows(store: &SqliteStore) -> i64 {
        let conn = store.inner.conn.lock().unwrap();
        conn.query_row("SELECT count(*) FROM pages", [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test]
    async fn put_get_round_trip() {
        let store = SqliteStore::in_memory().unwrap();
        let messages = conversation("a");
        let id = store.put_page(new_page(messages.clone())).await.unwrap();
        assert_eq!(id, page_id(&messages));
        let stored = store.get_page(&id).await.unwrap();
        assert_eq!(stored.page.id.as_str(), id);
        assert_eq!(stored.page.messages.as_slice(), messages.as_slice());
        assert_eq!(
            serde_json::to_vec(&stored.page.messages).unwrap(),
            serde_json::to_vec(&messages).unwrap(),
            "messages come back byte-equal"
        );
        assert_eq!(
            stored
                .page
                .thread_id
                .as_ref()
                .map(|s| s.as_str())
                .into_option(),
            Some("thread-1")
        );
        assert_eq!(stored.page.strategy.as_str(), "anchored-structured");
        assert_eq!(stored.page.metadata_json.as_str(), r#"{"k":1}"#);
        assert_eq!(stored.source_format.as_deref(), Some("anthropic"));
        assert!(stored.page.created_at > 1_600_000_000);
    }

    #[tokio::test]
    async fn no_thread_and_no_format_round_trip() {
        let store = SqliteStore::in_memory().unwrap();
        let mut page = new_page(conversation("b"));
        page.thread_id = None;
        page.source_format = None;
        page.metadata_json = String::new();
        let id = store.put_page(page).await.unwrap();
        let stored = store.get_page(&id).await.unwrap();
        assert!(stored.page.thread_id.is_none());
        assert!(stored.source_format.is_none());
        assert_eq!(stored.page.metadata_json.as_str(), "");
    }

    #[tokio::test]
    async fn same_content_same_id_one_row() {
        let store = SqliteStore::in_memory().unwrap();
        let first = store.put_page(new_page(conversation("a"))).await.unwrap();
        let mut again = new_page(conversation("a"));
        again.strategy = "someone-else".into();
        again.thread_id = Some("thread-2".into());
        let second = store.put_page(again).await.unwrap();
        assert_eq!(first, second);
        assert_eq!(count_rows(&store), 1);
        // Immutable: the first write wins.
        let stored = store.get_page(&first).await.unwrap();
        assert_eq!(stored.page.strategy.as_str(), "anchored-structured");
    }

    #[tokio::test]
    async fn different_content_different_id() {
        let store = SqliteStore::in_memory().unwrap();
        let a = store.put_page(new_page(conversation("a"))).await.unwrap();
        let b = store.put_page(new_page(conversation("b"))).await.unwrap();
        assert_ne!(a, b);
        assert_eq!(count_rows(&store), 2);
    }

    #[tokio::test]
    async fn unknown_id_is_not_found_with_the_id() {
        let store = SqliteStore::in_memory().unwrap();
        let err = store.get_page("pg_0123456789abcdef").await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(ref id) if id == "pg_0123456789abcdef"));
        assert!(err.to_string().contains("pg_0123456789abcdef"), "{err}");
    }

    #[tokio::test]
    async fn list_pages_newest_first_with_limit() {
        let store = SqliteStore::in_memory().unwrap();
        let mut ids = Vec::new();
        for tag in ["1", "2", "3"] {
            ids.push(store.put_page(new_page(conversation(tag))).await.unwrap());
        }
        let listed = store.list_pages(10).await.unwrap();
        let listed_ids: Vec<&str> = listed.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            listed_ids,
            vec![ids[2].as_str(), ids[1].as_str(), ids[0].as_str()]
        );
        assert_eq!(listed[0].message_count, 4);
        assert_eq!(listed[0].thread_id.as_deref(), Some("thread-1"));
        assert_eq!(listed[0].strategy, "anchored-structured");
        assert!(listed[0].created_at > 0);
        assert_eq!(store.list_pages(2).await.unwrap().len(), 2);
        assert!(store.list_pages(0).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn checkpoints_run_in_the_background_not_in_commits() {
        let dir = TempDir::new("checkpoint");
        let path = dir.0.join("store.sqlite3");
        let store = SqliteStore::open(&path).unwrap();
        // About 6 MB in 60 commits: past the log size that asks for a checkpoint (1,000
        // pages, ~4 MB), far below the one at which a commit would checkpoint by itself.
        for i in 0..60 {
            let text = format!("{i} {}", "x".repeat(100_000));
            store
                .put_page(new_page(vec![Message::text(Role::User, text)]))
                .await
                .unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while store.background_checkpoints() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no background checkpoint after 20 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The checkpoint moved the pages from the log into the database file.
        let file_len = std::fs::metadata(&path).unwrap().len();
        assert!(file_len > 3_000_000, "database file is {file_len} bytes");
        // And the store reads them back, from a new connection too.
        drop(store);
        let again = SqliteStore::open(&path).unwrap();
        assert_eq!(count_rows(&again), 60);
    }

    #[tokio::test]
    async fn persists_across_reopen() {
        let dir = TempDir::new("reopen");
        let path = dir.0.join("nested").join("store.sqlite3");
        let messages = conversation("persist");
        let id = {
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(store.describe(), format!("sqlite:{}", path.display()));
            store.put_page(new_page(messages.clone())).await.unwrap()
        };
        assert!(path.exists());
        let store = SqliteStore::open(&path).unwrap();
        let stored = store.get_page(&id).await.unwrap();
        assert_eq!(stored.page.messages.as_slice(), messages.as_slice());
        let conn = store.inner.conn.lock().unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode.to_ascii_lowercase(), "wal");
    }

    #[tokio::test]
    async fn newer_schema_is_refused() {
        let dir = TempDir::new("schema");
        let path = dir.0.join("store.sqlite3");
        drop(SqliteStore::open(&path).unwrap());
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
                .unwrap();
        }
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::UnsupportedSchema { .. }), "{err}");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_puts_from_50_tasks() {
        let dir = TempDir::new("concurrent");
        let store: Arc<dyn PageStore> =
            Arc::new(SqliteStore::open(&dir.0.join("store.sqlite3")).unwrap());
        let mut tasks = Vec::new();
        for i in 0..50 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                // Every fifth task repeats an earlier page's content.
                let tag = (i % 40).to_string();
                let messages = conversation(&tag);
                let id = store.put_page(new_page(messages.clone())).await.unwrap();
                assert_eq!(id, page_id(&messages));
                let back = store.get_page(&id).await.unwrap();
                assert_eq!(back.page.messages.as_slice(), messages.as_slice());
                id
            }));
        }
        let mut ids = Vec::new();
        for t in tasks {
            ids.push(t.await.unwrap());
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 40);
        assert_eq!(store.list_pages(1000).await.unwrap().len(), 40);
    }

    #[test]
    fn unwritable_path_names_the_path() {
        let dir = TempDir::new("unwritable");
        std::fs::create_dir_all(&dir.0).unwrap();
        // A regular file where a directory should be: fails even for root.
        let blocker = dir.0.join("not-a-dir");
        std::fs::write(&blocker, b"x").unwrap();
        let path = blocker.join("sub").join("store.sqlite3");
        let err = SqliteStore::open(&path).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.starts_with("page store "), "{text}");
        assert!(text.contains("cannot create directory"), "{text}");

        // A directory where the file should be.
        let err = SqliteStore::open(&dir.0).unwrap_err();
        assert!(
            err.to_string().contains(&dir.0.display().to_string()),
            "{err}"
        );
    }

    #[tokio::test]
    async fn five_megabyte_message_round_trips() {
        let dir = TempDir::new("large");
        let store = SqliteStore::open(&dir.0.join("store.sqlite3")).unwrap();
        let big: String = (0..5 * 1024 * 1024)
            .map(|i: usize| char::from(b'a' + (i % 26) as u8))
            .collect();
        let messages = vec![
            Message::text(Role::User, big),
            Message::new(
                Role::User,
                vec![ContentBlock::Opaque {
                    json: format!(r#"{{"type":"image","data":"{}"}}"#, "QUJD".repeat(1024)).into(),
                }],
            ),
        ];
        let id = store.put_page(new_page(messages.clone())).await.unwrap();
        let stored = store.get_page(&id).await.unwrap();
        assert_eq!(stored.page.messages.as_slice(), messages.as_slice());
    }

    #[tokio::test]
    async fn a_store_file_deleted_or_replaced_while_open_fails_writes_and_health() {
        let dir = TempDir::new("deleted");
        let path = dir.0.join("store.sqlite3");
        let store = SqliteStore::open(&path).unwrap();
        store
            .put_page(new_page(conversation("before")))
            .await
            .unwrap();
        store.check_alive().unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        // Without the check, this write is acknowledged into the unlinked file.
        let err = store
            .put_page(new_page(conversation("after")))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(
            text.contains("was deleted or replaced while open"),
            "{text}"
        );
        assert!(text.contains("no file is at its path"), "{text}");
        let health = store.check_alive().unwrap_err().to_string();
        assert!(
            health.contains("was deleted or replaced while open"),
            "{health}"
        );
        let key = crate::store::cache::CacheScope::new(None, "s", "c")
            .request_key("p", &tamp_plugin_api::LlmRequest::new("", "x", 1));
        let cache = store
            .put_answer(
                key,
                LlmResponse {
                    text: "t".into(),
                    structured_json: FfiOption::RNone,
                    usage: Default::default(),
                    model: "m".into(),
                    stop_reason: "end_turn".into(),
                },
            )
            .await
            .unwrap_err();
        assert!(
            cache.to_string().contains("was deleted or replaced"),
            "{cache}"
        );

        // Replaced: another file renamed over the path.
        let path = dir.0.join("replaced.sqlite3");
        let store = SqliteStore::open(&path).unwrap();
        let other = dir.0.join("other.sqlite3");
        drop(SqliteStore::open(&other).unwrap());
        std::fs::rename(&other, &path).unwrap();
        let err = store
            .put_page(new_page(conversation("replaced")))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("another file is at its path"),
            "{err}"
        );
        assert!(store.check_alive().is_err());
    }

    #[tokio::test]
    async fn a_page_whose_text_was_altered_is_refused_and_verify_names_it() {
        let store = SqliteStore::in_memory().unwrap();
        let kept = store
            .put_page(new_page(conversation("kept")))
            .await
            .unwrap();
        let altered = store
            .put_page(new_page(conversation("altered")))
            .await
            .unwrap();
        let clean = store.verify_pages().await.unwrap();
        assert_eq!((clean.checked, clean.damaged.len()), (2, 0));
        store
            .inner
            .conn()
            .execute(
                "UPDATE pages SET messages_json = replace(messages_json, 'question', 'answer')
                 WHERE id = ?1",
                [&altered],
            )
            .unwrap();
        // Still valid JSON of messages: only the hash tells.
        let err = store.get_page(&altered).await.unwrap_err();
        assert!(err.is_corrupt(), "{err}");
        assert!(err.to_string().contains("no longer match its id"), "{err}");
        assert!(store.get_page(&kept).await.is_ok());
        let check = store.verify_pages().await.unwrap();
        assert_eq!(check.checked, 2);
        assert_eq!(check.damaged.len(), 1);
        assert_eq!(check.damaged[0].id, altered);
    }

    #[tokio::test]
    async fn every_field_of_a_page_is_checked_and_verify_names_the_altered_ones() {
        let store = SqliteStore::in_memory().unwrap();
        let mut ids = Vec::new();
        for tag in [
            "kept", "thread", "strategy", "format", "metadata", "count", "seal",
        ] {
            ids.push(store.put_page(new_page(conversation(tag))).await.unwrap());
        }
        let alterations = [
            "UPDATE pages SET thread_id = 'thread-2' WHERE id = ?1",
            "UPDATE pages SET strategy = 'other' WHERE id = ?1",
            "UPDATE pages SET source_format = 'openai' WHERE id = ?1",
            r#"UPDATE pages SET metadata_json = '{"k":2}' WHERE id = ?1"#,
            "UPDATE pages SET message_count = message_count + 1 WHERE id = ?1",
            "UPDATE pages SET seal = NULL WHERE id = ?1",
        ];
        for (sql, id) in alterations.iter().zip(&ids[1..]) {
            store.inner.conn().execute(sql, [id]).unwrap();
        }
        for (id, says) in ids[1..].iter().zip([
            "no longer match its seal",
            "no longer match its seal",
            "no longer match its seal",
            "no longer match its seal",
            "its message count says",
            "it has no seal",
        ]) {
            let err = store.get_page(id).await.unwrap_err();
            assert!(err.is_corrupt() && err.to_string().contains(says), "{err}");
        }
        assert!(store.get_page(&ids[0]).await.is_ok());
        let check = store.verify_pages().await.unwrap();
        assert_eq!(check.checked, 7);
        let mut damaged: Vec<&str> = check.damaged.iter().map(|d| d.id.as_str()).collect();
        damaged.sort();
        let mut altered: Vec<&str> = ids[1..].iter().map(String::as_str).collect();
        altered.sort();
        assert_eq!(damaged, altered);
    }

    /// The probe's largest pages (issue 32): 100,001 messages, and one message of 10 MB,
    /// recovered exactly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_largest_pages_are_recovered_exactly() {
        let store = SqliteStore::in_memory().unwrap();
        let many: Vec<Message> = (0..100_001)
            .map(|i| {
                Message::text(
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    format!("m{i}"),
                )
            })
            .collect();
        let big = vec![Message::text(
            Role::User,
            "é\u{1F600}x".repeat(10 << 20 >> 3),
        )];
        for messages in [many, big] {
            let id = store.put_page(new_page(messages.clone())).await.unwrap();
            let back = store.get_page(&id).await.unwrap().page;
            assert_eq!(back.messages.len(), messages.len());
            assert!(back.messages.as_slice() == messages.as_slice());
        }
        assert_eq!(store.verify_pages().await.unwrap().damaged, []);
    }

    #[tokio::test]
    async fn a_store_from_before_seals_is_sealed_when_it_migrates() {
        let dir = TempDir::new("seal-migrate");
        let path = dir.0.join("store.sqlite3");
        let id = version_one_store(&path, conversation("old")).await;
        // Read without migrating: nothing to check the seal against, the rest still checked.
        let reader = SqliteStore::open_read_only(&path).unwrap();
        assert!(reader.get_page(&id).await.is_ok());
        assert_eq!(reader.verify_pages().await.unwrap().damaged, []);
        drop(reader);
        // Migrated by a writer: sealed as it is, so a later change is seen.
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.verify_pages().await.unwrap().damaged, []);
        store
            .inner
            .conn()
            .execute(
                "UPDATE pages SET thread_id = 'elsewhere' WHERE id = ?1",
                [&id],
            )
            .unwrap();
        let check = store.verify_pages().await.unwrap();
        assert_eq!(check.damaged.len(), 1, "{check:?}");
        assert!(check.damaged[0].detail.contains("seal"), "{check:?}");
    }

    #[tokio::test]
    async fn a_read_only_open_neither_creates_migrates_nor_writes() {
        let dir = TempDir::new("read-only");
        let missing = dir.0.join("missing").join("store.sqlite3");
        let err = SqliteStore::open_read_only(&missing).unwrap_err();
        assert!(err.to_string().contains("no such file"), "{err}");
        assert!(!missing.parent().unwrap().exists());

        let path = dir.0.join("store.sqlite3");
        let messages = conversation("ro");
        // An older schema: a writer would migrate it.
        let id = version_one_store(&path, messages.clone()).await;
        let store = SqliteStore::open_read_only(&path).unwrap();
        assert_eq!(
            store.get_page(&id).await.unwrap().page.messages.as_slice(),
            messages.as_slice()
        );
        assert_eq!(store.list_pages(10).await.unwrap().len(), 1);
        assert!(store.put_page(new_page(conversation("no"))).await.is_err());
        drop(store);
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1, "a read-only open migrated the file");
    }

    #[test]
    fn works_without_a_tokio_runtime() {
        let store = SqliteStore::in_memory().unwrap();
        let messages = conversation("sync");
        let id = futures::executor::block_on(store.put_page(new_page(messages.clone()))).unwrap();
        let back = futures::executor::block_on(store.get_page(&id)).unwrap();
        assert_eq!(back.page.messages.as_slice(), messages.as_slice());
    }

    #[test]
    fn store_is_object_safe_and_shareable() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SqliteStore>();
        let store: Arc<dyn PageStore> = Arc::new(SqliteStore::in_memory().unwrap());
        assert_eq!(store.describe(), "sqlite::memory:");
    }

    mod summary_cache {
        use super::*;
        use crate::store::cache::{CacheScope, SummaryCache};
        use tamp_plugin_api::{LlmRequest, Usage};

        fn answer(text: &str) -> LlmResponse {
            LlmResponse {
                text: text.into(),
                structured_json: FfiOption::RNone,
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 2,
                    ..Usage::default()
                },
                model: "scripted".into(),
                stop_reason: "end_turn".into(),
            }
        }

        #[tokio::test]
        async fn answers_round_trip_and_the_first_one_stands() {
            let store = SqliteStore::in_memory().unwrap();
            let key = CacheScope::new(Some("t"), "s", "c")
                .request_key("scripted", &LlmRequest::new("", "summarize", 50));
            assert_eq!(store.get_answer(key).await.unwrap(), None);
            store.put_answer(key, answer("first")).await.unwrap();
            store.put_answer(key, answer("second")).await.unwrap();
            assert_eq!(store.get_answer(key).await.unwrap(), Some(answer("first")));
        }

        #[tokio::test]
        async fn the_longest_cached_leading_run_wins_across_query_chunks() {
            let store = SqliteStore::in_memory().unwrap();
            let scope = CacheScope::new(None, "s", "c");
            let messages: Vec<Message> = (0..1_200)
                .map(|i| Message::text(Role::User, format!("message {i}")))
                .collect();
            let keys = scope.range_keys(&messages);
            assert_eq!(store.longest_range(keys.clone()).await.unwrap(), None);
            // Runs of 3, 450 and 700 messages: 700 lies in another query chunk than 3.
            for len in [3, 450, 700] {
                store
                    .put_range(keys[len - 1], len, format!("summary of {len}"))
                    .await
                    .unwrap();
            }
            assert_eq!(
                store.longest_range(keys.clone()).await.unwrap(),
                Some((700, "summary of 700".to_string()))
            );
            assert_eq!(
                store.longest_range(keys[..600].to_vec()).await.unwrap(),
                Some((450, "summary of 450".to_string()))
            );
            // A different second message: only the run of its first message could match.
            let mut changed = messages.clone();
            changed[1] = Message::text(Role::User, "edited");
            assert_eq!(
                store
                    .longest_range(scope.range_keys(&changed))
                    .await
                    .unwrap(),
                None
            );
        }

        #[tokio::test]
        async fn a_version_one_store_is_migrated_and_keeps_its_pages() {
            let dir = TempDir::new("migrate");
            let path = dir.0.join("store.sqlite3");
            let messages = conversation("v1");
            let id = version_one_store(&path, messages.clone()).await;
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(
                store.get_page(&id).await.unwrap().page.messages.as_slice(),
                messages.as_slice()
            );
            let key =
                CacheScope::new(None, "s", "c").request_key("p", &LlmRequest::new("", "x", 1));
            store
                .put_answer(key, answer("after migration"))
                .await
                .unwrap();
            assert_eq!(
                store.get_answer(key).await.unwrap(),
                Some(answer("after migration"))
            );
        }
    }
}
