//! The shared store: pages, summary cache and deferred queue in one PostgreSQL database, for
//! several hosts (`tamp serve` replicas) at once.
//!
//! - Same semantics and the same observable results as [`SqliteStore`](super::SqliteStore):
//!   content-addressed immutable pages (`INSERT … ON CONFLICT DO NOTHING`: two replicas
//!   archiving the same messages store one page), first cached answer wins, the same queue
//!   states, events and guarded transitions. Queue leases use the database clock, as the
//!   replicas' clocks differ.
//! - Versioned migrations ([`MIGRATIONS`]) are applied at open, in one transaction under a
//!   transaction-scoped advisory lock, and recorded in `tamp_schema_migrations`: two replicas
//!   starting at once migrate once, and a database migrated by a newer tamp is refused.
//! - The store owns a small tokio runtime that drives its connection pool: every operation
//!   is spawned there and awaited through its `JoinHandle`, so the store works from any
//!   executor (or none, under `futures::executor::block_on`), and [`PostgresStore::open`] is
//!   a plain synchronous call, inside a runtime or outside one.
//! - A database that is down fails operations within seconds ([`CONNECT_TIMEOUT`],
//!   [`POOL_TIMEOUT`], [`OPERATION_TIMEOUT`]) with an error naming the server (never the
//!   password); broken connections are dropped from the pool, so the store recovers by
//!   itself when the server is back.
//! - Chains are rebuilt on every reload: [`PostgresStore::open`] shares one store (one pool)
//!   per URL, pool size and CA file in the process while any chain still holds it.
//! - TLS follows libpq's `sslmode` and `sslrootcert` in the URL (or `[store] ca_file`), with
//!   rustls: see [`tls`].

mod activity;
mod cache;
mod pages;
mod queue;
mod search;
mod threads;
pub mod tls;

use crate::error_text::error_chain;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::config::Host;
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

use super::rows::{self, Columns, RowError, Value, SEALED_COLUMNS};
use super::StoreError;

/// How long opening a connection may take before the operation fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operation waits for a free connection (and for one to be created or checked).
pub const POOL_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest any one operation may take, connection included: a server that accepts
/// connections but stops answering must not hang compactions.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Worker threads of the runtime each store owns: the work is network waits.
const RUNTIME_THREADS: usize = 2;

/// Schema migrations: `MIGRATIONS[n]` takes a database from version `n` to `n + 1`, the same
/// steps as the SQLite store's. Append only; never edit a released step.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: pages. `seq` orders pages written in the same second (SQLite's rowid).
    // Messages are TEXT, not JSONB: a page keeps the exact bytes its id hashes.
    "CREATE TABLE pages (
        id            TEXT PRIMARY KEY,
        thread_id     TEXT,
        strategy      TEXT NOT NULL,
        source_format TEXT,
        messages_json TEXT NOT NULL,
        metadata_json TEXT NOT NULL,
        message_count BIGINT NOT NULL,
        created_at    BIGINT NOT NULL,
        seq           BIGSERIAL NOT NULL
    );
    CREATE INDEX pages_by_created_at ON pages (created_at, seq);
    CREATE INDEX pages_by_thread ON pages (thread_id, created_at);",
    // 1 -> 2: the summary cache.
    "CREATE TABLE llm_answers (
        key         BYTEA PRIMARY KEY,
        answer_json TEXT NOT NULL,
        created_at  BIGINT NOT NULL
    );
    CREATE TABLE range_summaries (
        key           BYTEA PRIMARY KEY,
        message_count BIGINT NOT NULL,
        summary       TEXT NOT NULL,
        created_at    BIGINT NOT NULL
    );",
    // 2 -> 3: the deferred-work queue. `seq` orders events (SQLite's rowid).
    "CREATE TABLE deferred_items (
        id                 BIGSERIAL PRIMARY KEY,
        page_id            TEXT NOT NULL,
        strategy           TEXT NOT NULL,
        thread_id          TEXT,
        request_json       TEXT NOT NULL,
        state              TEXT NOT NULL,
        batch_id           TEXT,
        attempts           BIGINT NOT NULL DEFAULT 0,
        requeues           BIGINT NOT NULL DEFAULT 0,
        text               TEXT,
        reason             TEXT,
        billing            TEXT,
        input_tokens       BIGINT NOT NULL DEFAULT 0,
        output_tokens      BIGINT NOT NULL DEFAULT 0,
        cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
        cache_write_tokens BIGINT NOT NULL DEFAULT 0,
        created_ms         BIGINT NOT NULL,
        updated_ms         BIGINT NOT NULL,
        submitted_ms       BIGINT,
        UNIQUE (page_id, strategy)
    );
    CREATE INDEX deferred_by_state ON deferred_items (state, id);
    CREATE INDEX deferred_by_batch ON deferred_items (batch_id);
    CREATE TABLE deferred_events (
        seq      BIGSERIAL PRIMARY KEY,
        item_id  BIGINT NOT NULL,
        at_ms    BIGINT NOT NULL,
        state    TEXT NOT NULL,
        batch_id TEXT,
        detail   TEXT NOT NULL
    );
    CREATE INDEX deferred_events_by_item ON deferred_events (item_id, seq);",
    // 3 -> 4: leases on queue items, for several workers.
    "ALTER TABLE deferred_items ADD COLUMN lease_owner TEXT;
    ALTER TABLE deferred_items ADD COLUMN lease_until_ms BIGINT;
    CREATE INDEX deferred_by_lease_owner ON deferred_items (lease_owner);",
    // 4 -> 5: thread states (see `store::threads`).
    crate::store::threads::MIGRATION_POSTGRES,
    // 5 -> 6: page seals (see `store::seal`); `migrate` seals the pages already there.
    "ALTER TABLE pages ADD COLUMN seal TEXT;",
    // 6 -> 7: seals of thread states and cache entries, and the summary key (see
    // `store::seal`); `migrate` seals the records already there and makes the key.
    crate::store::seal::MIGRATION_RECORDS,
    // 7 -> 8: page owners and the search index (see `store::search`); `migrate` indexes the
    // pages already there and makes the owner key.
    search::MIGRATION,
    // 8 -> 9: the activity record the console reads (see `store::activity`).
    activity::MIGRATION,
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The key of the advisory lock held while migrating ("tamp" + "mig" in ASCII).
const MIGRATION_LOCK: i64 = 0x7461_6d70_006d_6967;

/// The database clock in milliseconds since the epoch, for one statement: every replica
/// agrees on it, whatever its own clock says.
pub(super) const NOW_MS: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";
/// The database clock in seconds since the epoch.
pub(super) const NOW_SECS: &str = "(floor(extract(epoch FROM statement_timestamp())))::bigint";

/// The PostgreSQL store. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `postgres://user@host:port/db`: the server without the password; in `describe` and
    /// every error message.
    location: String,
    /// The URL's `sslmode`, for explaining TLS failures.
    ssl_mode: tls::SslMode,
    pool: Pool,
    /// Where the pool's connections and every operation run.
    handle: tokio::runtime::Handle,
    /// Owned so it lives as long as the store; shut down without waiting on drop, which may
    /// happen inside another runtime.
    runtime: Option<tokio::runtime::Runtime>,
    /// The key of the store's summary MACs, read once migrated (the same for every replica).
    summary_key: std::sync::OnceLock<crate::summary_mac::SummaryKey>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// The stores open in this process, by URL, pool size and CA file.
type Registry = HashMap<(String, usize, Option<PathBuf>), Weak<Inner>>;

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: std::sync::OnceLock<Mutex<Registry>> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

impl PostgresStore {
    /// Opens the database at `url` (`postgres://user:password@host:port/db`, or the key=value
    /// form) with at most `pool_size` connections, and migrates its schema. A store already
    /// open in this process for the same URL and pool size is returned instead, so rebuilding
    /// a chain on reload does not open a second pool. TLS as the URL's `sslmode` and
    /// `sslrootcert` say ([`tls`]).
    pub fn open(url: &str, pool_size: usize) -> Result<Self, StoreError> {
        Self::open_with_ca_file(url, pool_size, None)
    }

    /// [`open`](PostgresStore::open), with `ca_file` (`[store] ca_file`) as the CA that signs
    /// the server's certificate.
    pub fn open_with_ca_file(
        url: &str,
        pool_size: usize,
        ca_file: Option<&Path>,
    ) -> Result<Self, StoreError> {
        let key = (url.to_owned(), pool_size, ca_file.map(Path::to_path_buf));
        // Held while opening: two chains built at once share one store too.
        let mut open = registry().lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, store| store.strong_count() > 0);
        if let Some(inner) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(PostgresStore { inner });
        }
        let store = Self::open_unshared_with_ca_file(url, pool_size, ca_file)?;
        open.insert(key, Arc::downgrade(&store.inner));
        Ok(store)
    }

    /// Opens the database with a pool of its own, never shared: what another host would
    /// have (tests, benchmarks).
    pub fn open_unshared(url: &str, pool_size: usize) -> Result<Self, StoreError> {
        Self::open_unshared_with_ca_file(url, pool_size, None)
    }

    /// [`open_unshared`](PostgresStore::open_unshared) with `[store] ca_file`.
    pub fn open_unshared_with_ca_file(
        url: &str,
        pool_size: usize,
        ca_file: Option<&Path>,
    ) -> Result<Self, StoreError> {
        let (client_url, tls) = tls::split_url(url, ca_file).map_err(|e| {
            StoreError::backend(&redacted_url(url), "open", format!("TLS settings: {e}"))
        })?;
        let mut config = tokio_postgres::Config::from_str(&client_url).map_err(|e| {
            StoreError::backend(
                &redacted_url(url),
                "open",
                format!("invalid PostgreSQL URL: {}", error_chain(&e)),
            )
        })?;
        tls.apply(&mut config);
        let location = location_of(&config);
        let connector = tls.connector().map_err(|e| {
            StoreError::backend(
                &location,
                "open",
                format!("TLS settings (sslmode={}): {e}", tls.mode().as_str()),
            )
        })?;
        config
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("tamp");
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("tamp-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::backend(&location, "start the store's runtime", e))?;
        let manager_config = ManagerConfig {
            // A connection the server closed (a restart) is seen closed and replaced; no
            // extra round trip per checkout.
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match connector {
            Some(rustls) => Manager::from_config(config, rustls, manager_config),
            None => Manager::from_config(config, NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .wait_timeout(Some(POOL_TIMEOUT))
            .create_timeout(Some(POOL_TIMEOUT))
            .recycle_timeout(Some(POOL_TIMEOUT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::backend(&location, "create the connection pool", e))?;
        let store = PostgresStore {
            inner: Arc::new(Inner {
                location,
                ssl_mode: tls.mode(),
                pool,
                handle: runtime.handle().clone(),
                runtime: Some(runtime),
                summary_key: std::sync::OnceLock::new(),
            }),
        };
        // Blocks this thread only (the work runs on the store's runtime), so it is safe
        // from sync code inside or outside a runtime.
        futures::executor::block_on(store.run("migrate the schema".to_owned(), migrate))?;
        let key = futures::executor::block_on(store.run(
            "read the summary key".to_owned(),
            |client| async move {
                let row = client
                    .query_opt(
                        "SELECT value FROM tamp_secrets WHERE name = $1",
                        &[&crate::store::seal::SUMMARY_KEY],
                    )
                    .await?;
                row.and_then(|row| row.text("value").ok())
                    .as_deref()
                    .and_then(crate::summary_mac::SummaryKey::from_hex)
                    .ok_or_else(|| {
                        Failure::Other(
                            "tamp_secrets holds no summary key (the row was removed or altered)"
                                .into(),
                        )
                    })
            },
        ))?;
        let _ = store.inner.summary_key.set(key);
        Ok(store)
    }

    /// The key of this store's summary MACs ([`crate::summary_mac`]).
    pub(super) fn summary_key(&self) -> Option<crate::summary_mac::SummaryKey> {
        self.inner.summary_key.get().cloned()
    }

    /// Whether both share one pool (one was opened as the other's shared store).
    pub fn shares_pool_with(&self, other: &PostgresStore) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The server and database, without the password.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// Runs `work` with a pooled connection on the store's runtime, within
    /// [`OPERATION_TIMEOUT`]; failures become [`StoreError`]s naming the store and
    /// `operation`.
    pub(super) fn run<T, F, Fut>(
        &self,
        operation: String,
        work: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Failure>> + Send + 'static,
    {
        let pool = self.inner.pool.clone();
        let location = self.inner.location.clone();
        let ssl_mode = self.inner.ssl_mode;
        let task = self.inner.handle.spawn(async move {
            let attempt = async {
                let client = pool.get().await.map_err(Failure::Pool)?;
                work(client).await
            };
            match tokio::time::timeout(OPERATION_TIMEOUT, attempt).await {
                Ok(result) => result,
                Err(_) => Err(Failure::Other(format!(
                    "no answer from the server within {} s",
                    OPERATION_TIMEOUT.as_secs()
                ))),
            }
        });
        async move {
            match task.await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(failure)) => Err(failure.into_store_error(&location, ssl_mode, operation)),
                Err(e) => Err(StoreError::backend(&location, operation, e)),
            }
        }
    }
}

/// Why an operation failed, before it is named.
pub(super) enum Failure {
    Pg(tokio_postgres::Error),
    Pool(PoolError),
    /// A stored page that does not parse.
    Corrupt {
        id: String,
        detail: String,
    },
    /// A finished error (not found).
    Store(StoreError),
    /// A record that no longer matches its seal.
    Damaged(crate::store::DamagedRecord),
    /// The database was migrated by a newer tamp, to this version.
    NewerSchema(i64),
    Other(String),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl From<RowError> for Failure {
    fn from(e: RowError) -> Self {
        Failure::Other(e.0)
    }
}

impl Columns for tokio_postgres::Row {
    fn text(&self, column: &str) -> Result<String, RowError> {
        self.try_get(column).map_err(row_error)
    }

    fn optional_text(&self, column: &str) -> Result<Option<String>, RowError> {
        self.try_get(column).map_err(row_error)
    }

    fn int(&self, column: &str) -> Result<i64, RowError> {
        self.try_get(column).map_err(row_error)
    }

    fn optional_int(&self, column: &str) -> Result<Option<i64>, RowError> {
        self.try_get(column).map_err(row_error)
    }

    fn bytes(&self, column: &str) -> Result<Vec<u8>, RowError> {
        self.try_get(column).map_err(row_error)
    }
}

/// Every row of `answer`, read by `read` (see [`rows`]).
pub(super) fn read_all<T>(
    answer: &[tokio_postgres::Row],
    mut read: impl FnMut(&dyn Columns) -> Result<T, RowError>,
) -> Result<Vec<T>, RowError> {
    answer.iter().map(|row| read(row)).collect()
}

fn row_error(e: tokio_postgres::Error) -> RowError {
    RowError(error_chain(&e))
}

/// `values` as tokio-postgres binds them.
pub(super) fn bind<'a>(values: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    values
        .iter()
        .map(|value| -> &(dyn ToSql + Sync) {
            match value {
                Value::Text(text) => text,
                Value::OptionalText(text) => text,
                Value::Int(n) => n,
                Value::OptionalInt(n) => n,
            }
        })
        .collect()
}

impl Failure {
    fn into_store_error(
        self,
        location: &str,
        ssl_mode: tls::SslMode,
        operation: String,
    ) -> StoreError {
        let detail = match self {
            Failure::Store(e) => return e,
            Failure::NewerSchema(found) => {
                return StoreError::UnsupportedSchema {
                    location: location.to_owned(),
                    found,
                    supported: SCHEMA_VERSION,
                }
            }
            Failure::Corrupt { id, detail } => {
                return StoreError::Corrupt {
                    location: location.to_owned(),
                    id,
                    detail,
                }
            }
            Failure::Damaged(damaged) => {
                return StoreError::Damaged {
                    location: location.to_owned(),
                    what: damaged.what,
                    detail: damaged.detail,
                }
            }
            Failure::Pg(e) => explain_tls(error_chain(&e), ssl_mode),
            Failure::Pool(PoolError::Timeout(_)) => format!(
                "no database connection within {} s (the server is slow or unreachable, or \
                 all pooled connections are busy)",
                POOL_TIMEOUT.as_secs()
            ),
            Failure::Pool(PoolError::Backend(e)) => explain_tls(error_chain(&e), ssl_mode),
            Failure::Pool(e) => e.to_string(),
            Failure::Other(detail) => detail,
        };
        StoreError::backend(location, operation, detail)
    }
}

/// `detail`, with what to do when it says the server refused TLS the URL requires.
fn explain_tls(mut detail: String, ssl_mode: tls::SslMode) -> String {
    if detail.contains("server does not support TLS") {
        detail.push_str(&format!(
            " (the URL's sslmode={} requires TLS: turn on ssl on the server, or set \
             sslmode=prefer or disable to connect without it)",
            ssl_mode.as_str()
        ));
    }
    detail
}

/// `postgres://user@host:port/db`: where `config` points, without its password.
fn location_of(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) if name.contains(':') => format!("[{name}]"),
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            };
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            format!("{name}:{port}")
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(",")
    };
    let user = config.get_user().unwrap_or("");
    let at = if user.is_empty() { "" } else { "@" };
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}{at}{hosts}/{db}")
}

/// `url` without its password, for messages about a URL that may not even parse. The TLS
/// options do not change it: it names the database.
pub(crate) fn redacted_url(url: &str) -> String {
    let client_url = tls::without_tls_options(url);
    if let Ok(config) = tokio_postgres::Config::from_str(&client_url) {
        return location_of(&config);
    }
    // Unparseable: keep only what cannot be a secret.
    super::url_scheme_and_host(url)
}

/// Brings the schema to [`SCHEMA_VERSION`], once even when several hosts open the database
/// at the same moment.
async fn migrate(mut client: deadpool_postgres::Object) -> Result<(), Failure> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS tamp_schema_migrations (
            version    BIGINT PRIMARY KEY,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await?;
    let found: i64 = tx
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint FROM tamp_schema_migrations",
            &[],
        )
        .await?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(Failure::NewerSchema(found));
    }
    for (step, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        tx.batch_execute(sql).await.map_err(|e| {
            Failure::Other(format!(
                "migrate the schema from version {step} to {}: {}",
                step + 1,
                error_chain(&e)
            ))
        })?;
        tx.execute(
            "INSERT INTO tamp_schema_migrations (version) VALUES ($1)",
            &[&(step as i64 + 1)],
        )
        .await?;
    }
    if found < crate::store::seal::SEALED_SINCE {
        seal_existing_pages(&tx)
            .await
            .map_err(|e| Failure::Other(format!("seal the pages already stored: {e}")))?;
    }
    if found < crate::store::seal::RECORDS_SEALED_SINCE {
        seal_existing_records(&tx).await.map_err(|e| {
            Failure::Other(format!("seal the thread states and cache entries: {e}"))
        })?;
        tx.execute(
            "INSERT INTO tamp_secrets (name, value) VALUES ($1, $2)",
            &[
                &crate::store::seal::SUMMARY_KEY,
                &crate::summary_mac::SummaryKey::random().to_hex(),
            ],
        )
        .await?;
    }
    if found < crate::store::search::INDEXED_SINCE {
        search::index_existing_pages(&tx)
            .await
            .map_err(|e| Failure::Other(format!("index the pages already stored: {e}")))?;
        tx.execute(
            "INSERT INTO tamp_secrets (name, value) VALUES ($1, $2)",
            &[
                &crate::store::search::OWNER_KEY,
                &hex::encode(crate::store::search::new_owner_key()),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Seals every thread state and cache entry (written before schema version 7), as they are.
async fn seal_existing_records(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), RowError> {
    for (table, columns, seal_of) in rows::SEALED_TABLES {
        let answer = tx
            .query(&format!("SELECT {columns} FROM {table}"), &[])
            .await
            .map_err(row_error)?;
        let update = format!("UPDATE {table} SET seal = $1 WHERE key = $2");
        for (key, seal) in read_all(&answer, seal_of)? {
            let key: &(dyn ToSql + Sync) = match &key {
                rows::RecordKey::Text(key) => key,
                rows::RecordKey::Bytes(key) => key,
            };
            tx.execute(&update, &[&seal, key])
                .await
                .map_err(row_error)?;
        }
    }
    Ok(())
}

/// Seals every page without a seal (those written before schema version 6), as they are.
async fn seal_existing_pages(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), RowError> {
    let unsealed = tx
        .query(
            &format!("SELECT {SEALED_COLUMNS} FROM pages WHERE seal IS NULL"),
            &[],
        )
        .await
        .map_err(row_error)?;
    let update = tx
        .prepare("UPDATE pages SET seal = $1 WHERE id = $2")
        .await
        .map_err(row_error)?;
    for row in &unsealed {
        let (id, seal) = rows::seal_of(row)?;
        tx.execute(&update, &[&seal, &id])
            .await
            .map_err(row_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Behaviour against a real server is tested in tests/e2e/postgres_store.rs.

    #[test]
    fn locations_name_the_server_and_never_the_password() {
        assert_eq!(
            redacted_url("postgres://tamp:s3cret@127.0.0.1:5433/tamp"),
            "postgres://tamp@127.0.0.1:5433/tamp"
        );
        assert_eq!(
            redacted_url("postgresql://tamp:s3cret@db.internal/tamp?sslmode=prefer"),
            "postgres://tamp@db.internal:5432/tamp"
        );
        assert_eq!(
            redacted_url("host=db port=6000 user=tamp password=s3cret dbname=pages"),
            "postgres://tamp@db:6000/pages"
        );
        assert_eq!(
            redacted_url("postgres://tamp:s3cret@[::1]:5432/tamp"),
            "postgres://tamp@[::1]:5432/tamp"
        );
        // Unparseable: only the host part survives.
        let bad = redacted_url("postgres://tamp:s3cret@db:notaport/tamp");
        assert!(!bad.contains("s3cret"), "{bad}");
        assert_eq!(bad, "postgres://db:notaport");
        assert!(!redacted_url("password=s3cret =bad").contains("s3cret"));
    }

    #[test]
    fn an_invalid_url_fails_at_open_without_echoing_it() {
        let err = PostgresStore::open_unshared("postgres://u:s3cret@h:99999999/db", 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid PostgreSQL URL"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn migrations_match_the_sqlite_schema_steps() {
        // One version number means the same schema on both backends.
        assert_eq!(SCHEMA_VERSION, crate::store::sqlite::SCHEMA_VERSION);
    }
}
