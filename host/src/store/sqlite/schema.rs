//! The file's schema: the migrations, each taking a file one version up, and the one
//! transaction that runs those a file lacks.

use rusqlite::{params, Connection, TransactionBehavior};

use super::{activity, queue, search, select};
use crate::store::rows::{self, RowError, SEALED_COLUMNS};
use crate::store::{seal, StoreError};
use crate::summary_mac::SummaryKey;

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
    crate::store::threads::MIGRATION_SQLITE,
    // 5 -> 6: page seals (see `store::seal`); `migrate` seals the pages already there.
    "ALTER TABLE pages ADD COLUMN seal TEXT;",
    // 6 -> 7: seals of thread states and cache entries, and the summary key (see
    // `store::seal`); `migrate` seals the records already there and makes the key.
    seal::MIGRATION_RECORDS,
    // 7 -> 8: page owners and the search index (see `store::search`); `migrate` indexes the
    // pages already there and makes the owner key.
    search::MIGRATION,
    // 8 -> 9: the activity record the console reads (see `store::activity`).
    activity::MIGRATION,
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub(super) fn migrate(conn: &mut Connection, location: &str) -> Result<(), StoreError> {
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
        seal_existing_pages(&tx)
            .map_err(|e| StoreError::backend(location, "seal the pages already stored", e))?;
    }
    if version < seal::RECORDS_SEALED_SINCE {
        seal_existing_records(&tx).map_err(|e| {
            StoreError::backend(location, "seal the thread states and cache entries", e)
        })?;
        tx.execute(
            "INSERT INTO tamp_secrets (name, value) VALUES (?1, ?2)",
            params![seal::SUMMARY_KEY, SummaryKey::random().to_hex()],
        )
        .map_err(|e| fail("make the summary key", e))?;
    }
    if version < crate::store::search::INDEXED_SINCE {
        search::index_existing_pages(&tx)
            .map_err(|e| StoreError::backend(location, "index the pages already stored", e))?;
        tx.execute(
            "INSERT INTO tamp_secrets (name, value) VALUES (?1, ?2)",
            params![
                crate::store::search::OWNER_KEY,
                hex::encode(crate::store::search::new_owner_key())
            ],
        )
        .map_err(|e| fail("make the owner key", e))?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|e| fail("migrate the schema", e))?;
    tx.commit().map_err(|e| fail("migrate the schema", e))
}

/// Seals every page without a seal (those written before schema version 6), as they are.
fn seal_existing_pages(tx: &rusqlite::Transaction<'_>) -> Result<(), RowError> {
    let sealed = select(
        tx,
        &format!("SELECT {SEALED_COLUMNS} FROM pages WHERE seal IS NULL"),
        [],
        rows::seal_of,
    )?;
    let mut update = tx.prepare("UPDATE pages SET seal = ?1 WHERE id = ?2")?;
    for (id, seal) in &sealed {
        update.execute(params![seal, id])?;
    }
    Ok(())
}

/// Seals every thread state and cache entry (written before schema version 7), as they are.
fn seal_existing_records(tx: &rusqlite::Transaction<'_>) -> Result<(), RowError> {
    for (table, columns, seal_of) in rows::SEALED_TABLES {
        let sealed = select(tx, &format!("SELECT {columns} FROM {table}"), [], seal_of)?;
        let mut update = tx.prepare(&format!("UPDATE {table} SET seal = ?1 WHERE key = ?2"))?;
        for (key, seal) in &sealed {
            match key {
                rows::RecordKey::Text(key) => update.execute(params![seal, key])?,
                rows::RecordKey::Bytes(key) => update.execute(params![seal, key])?,
            };
        }
    }
    Ok(())
}
