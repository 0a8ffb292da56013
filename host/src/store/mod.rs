//! The page store: immutable archives of the original messages a compaction stage replaced.
//!
//! Every summary a stage inserts carries the id of a page holding the messages it stands for,
//! so every compaction is reversible. Strategies and the chain only ever see
//! `Arc<dyn PageStore>`; the embedded [`SqliteStore`] (one file, no server) is the default, and
//! [`PostgresStore`] is one database shared by several hosts. Both also hold the summary cache
//! ([`SummaryCache`]) and the deferred queue ([`DeferredQueue`]); [`open`] opens either from a
//! [`StoreSpec`] and hands out the three as one [`Store`].
//!
//! Pages are **content-addressed** ([`page_id`]) and **immutable**: archiving the same messages
//! twice stores one page and returns the same id, and a stored page is never updated. The id
//! depends on the messages only, so when two threads archive identical messages the page keeps
//! the thread id, strategy and metadata of whichever was written first.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use tamp_plugin_api::{Message, Page, PageDraft};

pub mod activity;
pub mod cache;
pub mod config;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod queue;
mod rows;
mod seal;
pub mod search;
mod sqlite;
pub mod threads;

pub use activity::ActivityStore;
pub use cache::{CacheScope, SummaryCache};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use queue::{DeferredQueue, Lease, NewDeferred, OpenBatch, QueueItem, QueueState, QueueStatus};
pub use search::{PageSearch, Scope, SearchHit};
pub use sqlite::SqliteStore;
pub use threads::{ThreadLimits, ThreadState, ThreadStore};

use crate::summary_mac::SummaryKey;

/// Which store to open.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// The embedded store: one SQLite file, created when missing.
    Sqlite { path: PathBuf },
    /// A PostgreSQL database shared by several hosts; `pool_size` connections at most;
    /// `ca_file` (`[store] ca_file`) the CA that signs the server's certificate, when the
    /// URL's `sslrootcert` does not name one.
    Postgres {
        url: String,
        pool_size: usize,
        ca_file: Option<PathBuf>,
    },
}

impl StoreSpec {
    /// Which store this is, spelled the same however the config wrote it: `sqlite:` and the
    /// file's absolute path (its directory's symlinks resolved), or the PostgreSQL server,
    /// user and database (no password; the pool size does not make another store). Two specs
    /// with the same location hold the same pages.
    pub fn location(&self) -> String {
        match self {
            StoreSpec::Sqlite { path } => {
                let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                let path = match (path.parent(), path.file_name()) {
                    (Some(dir), Some(name)) => dir
                        .canonicalize()
                        .map(|d| d.join(name))
                        .unwrap_or_else(|_| path.clone()),
                    _ => path,
                };
                format!("sqlite:{}", path.display())
            }
            StoreSpec::Postgres { url, .. } => redacted_postgres_url(url),
        }
    }
}

impl fmt::Debug for StoreSpec {
    /// Never prints a PostgreSQL password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            StoreSpec::Postgres {
                url,
                pool_size,
                ca_file,
            } => f
                .debug_struct("Postgres")
                .field("url", &redacted_postgres_url(url))
                .field("pool_size", pool_size)
                .field("ca_file", ca_file)
                .finish(),
        }
    }
}

/// An open store: its pages, summary cache, deferred queue, thread states, search index and
/// activity record (one backend behind all six). Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub pages: Arc<dyn PageStore>,
    pub cache: Arc<dyn SummaryCache>,
    pub queue: Arc<dyn DeferredQueue>,
    pub threads: Arc<dyn ThreadStore>,
    pub search: Arc<dyn PageSearch>,
    pub activity: Arc<dyn ActivityStore>,
}

impl Store {
    /// Which store this is, for logs and `tamp` output (never with a password).
    pub fn describe(&self) -> String {
        self.pages.describe()
    }

    fn of<S>(store: S) -> Self
    where
        S: PageStore + SummaryCache + DeferredQueue + ThreadStore + PageSearch + ActivityStore,
        S: 'static,
    {
        let store = Arc::new(store);
        Store {
            pages: Arc::clone(&store) as Arc<dyn PageStore>,
            cache: Arc::clone(&store) as Arc<dyn SummaryCache>,
            queue: Arc::clone(&store) as Arc<dyn DeferredQueue>,
            threads: Arc::clone(&store) as Arc<dyn ThreadStore>,
            search: Arc::clone(&store) as Arc<dyn PageSearch>,
            activity: store,
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Store").field(&self.describe()).finish()
    }
}

/// Opens the store `spec` names, migrating its schema. Synchronous, callable with or
/// without a tokio runtime; a PostgreSQL store already open in this process for the same URL
/// and pool size is shared rather than opened again (see [`PostgresStore::open`]).
pub fn open(spec: &StoreSpec) -> Result<Store, StoreError> {
    match spec {
        StoreSpec::Sqlite { path } => SqliteStore::open(path).map(Store::of),
        StoreSpec::Postgres {
            url,
            pool_size,
            ca_file,
        } => open_postgres(url, *pool_size, ca_file.as_deref()),
    }
}

#[cfg(feature = "postgres")]
fn open_postgres(
    url: &str,
    pool_size: usize,
    ca_file: Option<&std::path::Path>,
) -> Result<Store, StoreError> {
    PostgresStore::open_with_ca_file(url, pool_size, ca_file).map(Store::of)
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(
    url: &str,
    _pool_size: usize,
    _ca_file: Option<&std::path::Path>,
) -> Result<Store, StoreError> {
    Err(StoreError::backend(
        &redacted_postgres_url(url),
        "open",
        "this build of tamp has no PostgreSQL store (tamp-host's `postgres` feature is off)",
    ))
}

/// A PostgreSQL connection URL without its password, naming the server, user and database.
fn redacted_postgres_url(url: &str) -> String {
    #[cfg(feature = "postgres")]
    return postgres::redacted_url(url);
    #[cfg(not(feature = "postgres"))]
    url_scheme_and_host(url)
}

/// The scheme and host of a URL, and nothing that could be a secret (user, password, query).
/// Hand-written, not the `url` crate: it reads strings that failed to parse as a connection
/// URL, and `url` (with IDNA's Unicode tables) would join the core build the conformance kit
/// depends on.
fn url_scheme_and_host(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            let host = host.split(['/', '?']).next().unwrap_or("");
            format!("{scheme}://{host}")
        }
        None => "postgres (an unparseable connection string)".to_owned(),
    }
}

/// Opens the store `spec` names as [`open`] does, but leaves nothing behind (`tamp
/// check-config`): a SQLite file that does not exist yet is checked to be creatable (the
/// nearest existing directory on its path is one, and a file can be made in it: one is made
/// and removed at once) and stood in for by a store in memory.
pub fn open_without_creating(spec: &StoreSpec) -> Result<Store, StoreError> {
    let StoreSpec::Sqlite { path } = spec else {
        return open(spec);
    };
    if path.exists() {
        return open(spec);
    }
    let location = path.display().to_string();
    let cannot = |detail: String| StoreError::backend(&location, "open", detail);
    let mut ancestor = path.parent();
    while let Some(dir) = ancestor.filter(|d| !d.as_os_str().is_empty()) {
        if dir.exists() {
            if !dir.is_dir() {
                return Err(cannot(format!("{} is not a directory", dir.display())));
            }
            let probe = dir.join(format!(".tamp-check-{}", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
                .map_err(|e| cannot(format!("cannot create files in {}: {e}", dir.display())))?;
            let _ = std::fs::remove_file(&probe);
            break;
        }
        ancestor = dir.parent();
    }
    SqliteStore::in_memory().map(Store::of)
}

/// Opens the store `spec` names for reading only (`tamp pages list/show/verify`): a SQLite
/// file is opened read-only, neither created, migrated nor switched to WAL, so a directory
/// the reader cannot write is no obstacle. A PostgreSQL store opens as [`open`] does.
pub fn open_read_only(spec: &StoreSpec) -> Result<Store, StoreError> {
    match spec {
        StoreSpec::Sqlite { path } => SqliteStore::open_read_only(path).map(Store::of),
        StoreSpec::Postgres { .. } => open(spec),
    }
}

/// A page to archive.
#[derive(Clone, Debug, PartialEq)]
pub struct NewPage {
    /// The conversation's thread, when the request named one.
    pub thread_id: Option<String>,
    /// The strategy that replaced these messages.
    pub strategy: String,
    /// The original messages, in conversation order.
    pub messages: Vec<Message>,
    /// Plugin-defined JSON object stored with the page, or empty. Stored as given.
    pub metadata_json: String,
    /// The wire format the messages arrived in (`"anthropic"` or `"openai"`), for display.
    pub source_format: Option<String>,
}

impl NewPage {
    /// The page a plugin's [`PageDraft`] describes, for the given thread and wire format.
    pub fn from_draft(
        draft: PageDraft,
        thread_id: Option<String>,
        source_format: Option<String>,
    ) -> Self {
        NewPage {
            thread_id,
            strategy: draft.strategy.into_string(),
            messages: draft.messages.into_vec(),
            metadata_json: draft.metadata_json.into_string(),
            source_format,
        }
    }
}

/// A page as loaded back from a store.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredPage {
    pub page: Page,
    /// The wire format the messages arrived in, when it was recorded.
    pub source_format: Option<String>,
}

/// One line of [`PageStore::list_pages`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PageSummary {
    pub id: String,
    pub thread_id: Option<String>,
    pub strategy: String,
    pub message_count: u64,
    /// Seconds since the Unix epoch when the page was first written.
    pub created_at: u64,
    pub source_format: Option<String>,
}

/// Why a page store operation failed.
///
/// Messages name the store (its file path for [`SqliteStore`], its server and database without
/// the password for [`PostgresStore`]) and the operation, e.g.
/// `page store /x/y.sqlite3: cannot open: unable to open database file`.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// No page has this id.
    #[error("page {0} not found in the page store")]
    NotFound(String),
    /// The store could not perform an operation (I/O, database or runtime error).
    #[error("page store {location}: cannot {operation}: {detail}")]
    Backend {
        /// Where the store lives: a file path, `:memory:`, a server address.
        location: String,
        /// What was being done, e.g. `open`, `write page pg_…`.
        operation: String,
        detail: String,
    },
    /// A stored page exists but cannot be read back.
    #[error("page store {location}: page {id} is unreadable: {detail}")]
    Corrupt {
        location: String,
        id: String,
        detail: String,
    },
    /// A stored record other than a page (a thread state, a summary-cache entry) that no longer
    /// matches its seal (see [`seal`]): it is not used.
    #[error("page store {location}: {what} is damaged: {detail}")]
    Damaged {
        location: String,
        what: String,
        detail: String,
    },
    /// The store was written by a newer tamp whose schema this one does not know.
    #[error(
        "page store {location}: schema version {found} is newer than this tamp supports \
         ({supported}); use a newer tamp or another store"
    )]
    UnsupportedSchema {
        location: String,
        found: i64,
        supported: i64,
    },
}

impl StoreError {
    /// Whether this is [`StoreError::Corrupt`]: a stored page that cannot be read back as
    /// written (it does not parse, or its messages no longer hash to its id).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }

    /// Whether this is [`StoreError::Damaged`]: a record altered after it was written.
    pub fn is_damaged(&self) -> bool {
        matches!(self, StoreError::Damaged { .. })
    }

    /// Whether this is [`StoreError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound(_))
    }

    pub(crate) fn backend(
        location: &str,
        operation: impl Into<String>,
        detail: impl fmt::Display,
    ) -> Self {
        StoreError::Backend {
            location: location.to_owned(),
            operation: operation.into(),
            detail: detail.to_string(),
        }
    }
}

/// Resolves when a staged page is durable, or fails with why it could not be written (see
/// [`PageStore::stage_page`]).
pub type Written = BoxFuture<'static, Result<(), StoreError>>;

/// Where pages are archived. Object-safe: the host holds an `Arc<dyn PageStore>`.
///
/// Implementations must be usable from many tasks at once and must never block the async
/// executor (a blocking backend runs its work on `tokio::task::spawn_blocking`).
pub trait PageStore: Send + Sync {
    /// Archives `page` and returns its id ([`page_id`] of its messages). Storing messages that
    /// are already archived is not an error: the existing page is kept, unchanged, and its id
    /// is returned.
    fn put_page(&self, page: NewPage) -> BoxFuture<'_, Result<String, StoreError>>;

    /// Archives `page` like [`put_page`](PageStore::put_page), but may answer before the page
    /// is durable: its id, and [`Written`], which resolves once it is. Until then the page is
    /// readable through this store. A store that groups writes holds a staged page back so it
    /// shares a commit with what follows (the SQLite store writes it with the next deferred
    /// requests queued); the chain awaits every staged page before it accepts a stage's
    /// output. By default, the page is written before the call answers.
    fn stage_page(&self, page: NewPage) -> BoxFuture<'_, Result<(String, Written), StoreError>> {
        Box::pin(async move {
            let id = self.put_page(page).await?;
            let written: Written = Box::pin(async { Ok(()) });
            Ok((id, written))
        })
    }

    /// Loads a page; [`StoreError::NotFound`] when no page has this id.
    fn get_page(&self, id: &str) -> BoxFuture<'_, Result<StoredPage, StoreError>>;

    /// At most `limit` pages, newest first.
    fn list_pages(&self, limit: usize) -> BoxFuture<'_, Result<Vec<PageSummary>, StoreError>>;

    /// Which store this is, for logs and `tamp` output, e.g. `sqlite:/path/to/store.sqlite3`.
    fn describe(&self) -> String;

    /// Whether the store can still keep what is written to it; the error says why not. The
    /// SQLite store checks that its file is still the one it opened (not deleted, not
    /// replaced): an open handle to a deleted file takes writes that vanish when it closes.
    /// Cheap (one `stat`), for `/healthz`. By default, always fine.
    fn check_alive(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The key of this store's summary MACs ([`crate::summary_mac`]): a secret the store keeps
    /// (made when its schema reached version 7), so that a restart, and every replica of a
    /// shared store, recognizes the summaries any of them wrote. `None` for a store that keeps
    /// none (a chain then makes one for its own life).
    fn summary_key(&self) -> Option<SummaryKey> {
        None
    }

    /// The database's own check of its files and indexes (SQLite's `integrity_check`): the
    /// problems it found, none when it found none; `None` where there is no such check.
    fn check_integrity(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    /// Reads every page back and checks it: its messages parse and still hash to its id.
    /// Pages that fail are listed in the answer; an error means the store could not be read.
    fn verify_pages(&self) -> BoxFuture<'_, Result<PageCheck, StoreError>> {
        Box::pin(async move {
            let pages = self.list_pages(usize::MAX).await?;
            let mut check = PageCheck::default();
            for summary in pages {
                check.checked += 1;
                match self.get_page(&summary.id).await {
                    Ok(_) => {}
                    Err(StoreError::Corrupt { detail, .. }) => check.damaged.push(DamagedPage {
                        id: summary.id,
                        detail,
                    }),
                    // Listed a moment ago: another process may be changing the store.
                    Err(StoreError::NotFound(_)) => check.checked -= 1,
                    Err(e) => return Err(e),
                }
            }
            Ok(check)
        })
    }
}

/// What [`PageStore::verify_pages`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PageCheck {
    /// Pages read back.
    pub checked: u64,
    /// Those that failed, oldest listed last (the store's listing order).
    pub damaged: Vec<DamagedPage>,
}

/// What [`verify`] found in a whole store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreCheck {
    pub pages: PageCheck,
    /// Thread states: each one's seal.
    pub threads: RecordCheck,
    /// The summary cache's answers and ranges: each one's seal.
    pub cache: RecordCheck,
    /// The deferred queue's items: each one reads back.
    pub queue: RecordCheck,
    /// What the database's own check found (empty: nothing); `None` where it has none.
    pub integrity: Option<Vec<String>>,
}

impl StoreCheck {
    /// Every problem found, `what: detail`, pages first.
    pub fn problems(&self) -> Vec<String> {
        let pages = self
            .pages
            .damaged
            .iter()
            .map(|p| format!("{}: {}", p.id, p.detail));
        let records = [&self.threads, &self.cache, &self.queue]
            .into_iter()
            .flat_map(|c| c.damaged.iter())
            .map(|r| format!("{}: {}", r.what, r.detail));
        let integrity = self
            .integrity
            .iter()
            .flatten()
            .map(|line| format!("the database's integrity check: {line}"));
        pages.chain(records).chain(integrity).collect()
    }
}

/// What the check of one kind of record found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecordCheck {
    pub checked: u64,
    pub damaged: Vec<DamagedRecord>,
}

/// A record that cannot be read back as it was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DamagedRecord {
    /// What it is: `the thread state of id:t1`, `deferred item 12`.
    pub what: String,
    pub detail: String,
}

/// Checks a whole store: every page ([`PageStore::verify_pages`]), thread state, cache entry
/// and queue item, and the database's own integrity check. An error means the store could not
/// be read.
pub async fn verify(store: &Store) -> Result<StoreCheck, StoreError> {
    Ok(StoreCheck {
        pages: store.pages.verify_pages().await?,
        threads: store.threads.verify_threads().await?,
        cache: store.cache.verify_cache().await?,
        queue: store.queue.verify_queue().await?,
        integrity: store.pages.check_integrity().await?,
    })
}

/// A page that cannot be read back as it was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DamagedPage {
    pub id: String,
    /// Why, e.g. `its messages no longer match its id (they hash to pg_…)`.
    pub detail: String,
}

/// The messages of page `id` from the JSON text a store keeps, checked against the id: a page
/// is content-addressed, so text that no longer hashes to its id was altered or damaged
/// after it was written, and is refused rather than served as the original. The error is
/// the [`StoreError::Corrupt`] detail.
pub(crate) fn decode_page_messages(id: &str, messages_json: &str) -> Result<Vec<Message>, String> {
    // Parsed first: text that does not parse no longer hashes to its id either, and the
    // parse error says more about the damage than the hash does.
    let messages = serde_json::from_str(messages_json)
        .map_err(|e| format!("its messages do not parse: {e}"))?;
    let actual = page_id_of_json(messages_json.as_bytes());
    if actual != id {
        return Err(format!(
            "its messages no longer match its id (they hash to {actual}): the stored page \
             was altered or damaged after it was written"
        ));
    }
    Ok(messages)
}

// Page ids are made by the ABI crate: plugins name pages too (a clearing's placeholder, a
// `Replace`), so host and plugin must agree on them.
pub use tamp_plugin_api::page::{
    canonical_json, page_id, page_id_of_json, prefix_ref, short_ref, PAGE_ID_HEX_LEN,
    SHORT_REF_HEX_LEN,
};

/// The page a short ref names, from the (at most two) records whose ids start with it: none,
/// the one, or an error when two pages share the start (`reference` names it).
pub(crate) fn one_page<T>(mut records: Vec<T>, reference: &str) -> Result<Option<T>, StoreError> {
    if records.len() > 1 {
        return Err(StoreError::NotFound(format!(
            "{reference} (more than one page's id starts with it: give more of the id)"
        )));
    }
    Ok(records.pop())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::Role;

    /// Run by `.ci/run`'s test of the core alone (`--no-default-features`).
    #[cfg(not(feature = "postgres"))]
    #[test]
    fn without_postgres_a_postgres_store_is_refused_naming_the_feature_not_the_password() {
        let spec = StoreSpec::Postgres {
            url: "postgres://tamp:s3cret@db.example:5432/pages".into(),
            pool_size: 2,
            ca_file: None,
        };
        let e = open(&spec).expect_err("refused").to_string();
        assert!(e.contains("`postgres` feature is off"), "{e}");
        assert!(
            e.contains("db.example:5432") && !e.contains("s3cret"),
            "{e}"
        );
    }

    #[test]
    fn a_short_ref_that_two_pages_share_names_neither() {
        assert_eq!(one_page(Vec::<u8>::new(), "pg_0123456789ab").unwrap(), None);
        assert_eq!(one_page(vec![1], "pg_0123456789ab").unwrap(), Some(1));
        let err = one_page(vec![1, 2], "pg_0123456789ab").unwrap_err();
        assert!(
            err.to_string()
                .contains("pg_0123456789ab (more than one page's id starts with it"),
            "{err}"
        );
    }

    #[test]
    fn page_id_matches_sha256_of_serde_json() {
        use sha2::{Digest, Sha256};
        let messages = vec![Message::text(Role::Assistant, "x")];
        let json = serde_json::to_vec(&messages).unwrap();
        let full = hex::encode(Sha256::digest(&json));
        assert_eq!(page_id(&messages), format!("pg_{}", &full[..32]));
    }

    #[test]
    fn page_text_that_does_not_hash_to_its_id_is_refused() {
        let messages = vec![Message::text(Role::User, "the original")];
        let json = String::from_utf8(canonical_json(&messages)).unwrap();
        let id = page_id(&messages);
        assert_eq!(decode_page_messages(&id, &json).unwrap(), messages);
        let altered = json.replace("original", "forgery!");
        let err = decode_page_messages(&id, &altered).unwrap_err();
        assert!(err.contains("no longer match its id"), "{err}");
        assert!(err.contains(&page_id_of_json(altered.as_bytes())), "{err}");
    }

    #[test]
    fn not_found_names_the_id() {
        let e = StoreError::NotFound("pg_abc".into());
        assert!(e.to_string().contains("pg_abc"));
        assert!(e.is_not_found());
    }
}
