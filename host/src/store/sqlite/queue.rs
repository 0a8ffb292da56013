//! The deferred queue in the SQLite file (see [`crate::store::queue`]).
//!
//! Every transition is one statement in an immediate transaction, with its event row; a claim
//! is one `UPDATE … RETURNING`, which SQLite runs under the write lock. Queued items go through
//! the store's group commit ([`insert_items`]), so they share a commit with the pages staged
//! before them.

use std::fmt::Display;

use futures::future::BoxFuture;
use rusqlite::{params, params_from_iter, OptionalExtension, Transaction, TransactionBehavior};

use super::{select, select_first, to_i64, Inner, SqliteStore};
use crate::store::queue::{
    DeferredQueue, Expect, Lease, NewDeferred, OpenBatch, QueueEvent, QueueItem, QueueState,
    QueueStatus, RequeueKind, Transition, UNLEASE,
};
use crate::store::rows::{
    self, Value, DONE_COLUMNS, EVENT_COLUMNS, ITEM_COLUMNS, NEW_ITEM_COLUMNS,
};
use crate::store::StoreError;

/// The schema step that creates the queue (`MIGRATIONS[2]`).
pub(super) const MIGRATION: &str = "CREATE TABLE deferred_items (
        id                 INTEGER PRIMARY KEY AUTOINCREMENT,
        page_id            TEXT NOT NULL,
        strategy           TEXT NOT NULL,
        thread_id          TEXT,
        request_json       TEXT NOT NULL,
        state              TEXT NOT NULL,
        batch_id           TEXT,
        attempts           INTEGER NOT NULL DEFAULT 0,
        requeues           INTEGER NOT NULL DEFAULT 0,
        text               TEXT,
        reason             TEXT,
        billing            TEXT,
        input_tokens       INTEGER NOT NULL DEFAULT 0,
        output_tokens      INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        created_ms         INTEGER NOT NULL,
        updated_ms         INTEGER NOT NULL,
        submitted_ms       INTEGER,
        UNIQUE (page_id, strategy)
    );
    CREATE INDEX deferred_by_state ON deferred_items (state, id);
    CREATE INDEX deferred_by_batch ON deferred_items (batch_id);
    CREATE TABLE deferred_events (
        item_id  INTEGER NOT NULL,
        at_ms    INTEGER NOT NULL,
        state    TEXT NOT NULL,
        batch_id TEXT,
        detail   TEXT NOT NULL
    );
    CREATE INDEX deferred_events_by_item ON deferred_events (item_id);";

/// The schema step that adds leases (`MIGRATIONS[3]`): who holds an item, and until when
/// (ms since the epoch).
pub(super) const MIGRATION_LEASES: &str = "ALTER TABLE deferred_items ADD COLUMN lease_owner TEXT;
    ALTER TABLE deferred_items ADD COLUMN lease_until_ms INTEGER;
    CREATE INDEX deferred_by_lease_owner ON deferred_items (lease_owner);";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn record_event(
    tx: &Transaction<'_>,
    id: i64,
    at: u64,
    state: QueueState,
    batch_id: Option<&str>,
    detail: &str,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO deferred_events (item_id, at_ms, state, batch_id, detail)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, to_i64(at), state.as_str(), batch_id, detail])?;
    Ok(())
}

/// Queues `items` (`requests`: each one's request as JSON) inside `tx`, each once per page
/// and strategy: an item already queued keeps its id. Called by the store's group commit.
pub(super) fn insert_items(
    tx: &Transaction<'_>,
    items: &[NewDeferred],
    requests: &[String],
) -> rusqlite::Result<Vec<i64>> {
    let at = now_ms();
    let mut ids = Vec::with_capacity(items.len());
    for (item, request_json) in items.iter().zip(requests) {
        let existing: Option<i64> = tx
            .prepare_cached("SELECT id FROM deferred_items WHERE page_id = ?1 AND strategy = ?2")?
            .query_row(params![item.page_id, item.strategy], |r| r.get(0))
            .optional()?;
        if let Some(id) = existing {
            ids.push(id);
            continue;
        }
        let values = rows::new_item_values(item, request_json);
        tx.prepare_cached(&format!(
            "INSERT INTO deferred_items ({NEW_ITEM_COLUMNS}, state, created_ms, updated_ms)
             VALUES ({}, 'queued', ?{at}, ?{at})",
            rows::placeholders('?', 1, values.len()),
            at = values.len() + 1
        ))?
        .execute(params_from_iter(
            values.into_iter().chain([Value::Int(to_i64(at))]),
        ))?;
        let id = tx.last_insert_rowid();
        record_event(tx, id, at, QueueState::Queued, None, "queued")?;
        ids.push(id);
    }
    Ok(ids)
}

fn fail<'a, E: Display>(inner: &'a Inner, operation: &str) -> impl Fn(E) -> StoreError + 'a {
    let operation = operation.to_owned();
    move |e| StoreError::backend(&inner.location, operation.clone(), e)
}

fn select_items(
    inner: &Inner,
    operation: &str,
    filter: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<QueueItem>, StoreError> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM deferred_items {filter}");
    select(&inner.conn(), &sql, params, rows::read_item).map_err(fail(inner, operation))
}

impl DeferredQueue for SqliteStore {
    /// Goes through the store's group commit (`SqliteStore::queue_deferred`): the items are
    /// written in one transaction with the pages staged before them, so a compaction that
    /// archives pages and defers their summaries pays one commit.
    fn enqueue(&self, items: Vec<NewDeferred>) -> BoxFuture<'_, Result<Vec<i64>, StoreError>> {
        Box::pin(async move {
            let encoded = items
                .iter()
                .map(|item| rows::encode_request(&item.request))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::backend(self.location(), "queue deferred requests", e))?;
            self.queue_deferred(items, encoded).await
        })
    }

    fn lookup(
        &self,
        strategy: String,
        page_ids: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Option<QueueItem>>, StoreError>> {
        Box::pin(
            self.run("read the deferred queue".to_owned(), move |inner| {
                let op = "read the deferred queue";
                let conn = inner.conn();
                let sql = format!(
                    "SELECT {ITEM_COLUMNS} FROM deferred_items WHERE page_id = ?1 AND strategy = ?2"
                );
                page_ids
                    .iter()
                    .map(|page| {
                        select_first(&conn, &sql, params![page, strategy], rows::read_item)
                            .map_err(fail(inner, op))
                    })
                    .collect()
            }),
        )
    }

    fn queued(&self, limit: usize) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>> {
        Box::pin(
            self.run("read the deferred queue".to_owned(), move |inner| {
                select_items(
                    inner,
                    "read the deferred queue",
                    "WHERE state = 'queued' ORDER BY id LIMIT ?1",
                    [to_i64(limit as u64)],
                )
            }),
        )
    }

    fn in_batch(&self, batch_id: String) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>> {
        Box::pin(
            self.run("read the deferred queue".to_owned(), move |inner| {
                select_items(
                    inner,
                    "read the deferred queue",
                    "WHERE state = 'submitted' AND batch_id = ?1 ORDER BY id",
                    [batch_id],
                )
            }),
        )
    }

    fn mark_submitted(
        &self,
        item_ids: Vec<i64>,
        batch_id: String,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(self.run(format!("record batch {batch_id}"), move |inner| {
            let op = format!("record batch {batch_id}");
            let mut conn = inner.writer(&op)?;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(fail(inner, &op))?;
            let at = now_ms();
            let mut marked = 0;
            for id in item_ids {
                let changed = tx
                    .prepare_cached(
                        "UPDATE deferred_items SET state = 'submitted', batch_id = ?2,
                         submitted_ms = ?3, updated_ms = ?3 WHERE id = ?1 AND state = 'queued'",
                    )
                    .and_then(|mut s| s.execute(params![id, batch_id, to_i64(at)]))
                    .map_err(fail(inner, &op))?;
                if changed == 1 {
                    record_event(
                        &tx,
                        id,
                        at,
                        QueueState::Submitted,
                        Some(&batch_id),
                        "submitted",
                    )
                    .map_err(fail(inner, &op))?;
                    marked += 1;
                }
            }
            tx.commit().map_err(fail(inner, &op))?;
            Ok(marked)
        }))
    }

    fn transition(
        &self,
        id: i64,
        expect: Expect,
        to: Transition,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(
            self.run(format!("update deferred item {id}"), move |inner| {
                let op = format!("update deferred item {id}");
                let mut conn = inner.writer(&op)?;
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(fail(inner, &op))?;
                let at = to_i64(now_ms());
                let guard = "WHERE id = ?1 AND state = ?2 AND batch_id IS ?3";
                let from = (id, expect.state.as_str(), expect.batch_id.clone());
                let (changed, state, detail) = match &to {
                    Transition::Done {
                        text,
                        usage,
                        billing,
                    } => {
                        let done = rows::done_values(text, usage, *billing);
                        let guarded = [
                            Value::Int(from.0),
                            Value::Text(from.1),
                            Value::OptionalText(from.2.as_deref()),
                        ];
                        let sql = format!(
                            "UPDATE deferred_items SET state = 'done', {}, reason = NULL,
                             updated_ms = ?{}, {UNLEASE} {guard}",
                            rows::assignments(DONE_COLUMNS, '?', guarded.len() + 1),
                            guarded.len() + done.len() + 1
                        );
                        let values = guarded.into_iter().chain(done).chain([Value::Int(at)]);
                        (
                            tx.execute(&sql, params_from_iter(values)),
                            QueueState::Done,
                            format!("done ({})", billing.as_str()),
                        )
                    }
                    Transition::Requeue { reason, kind } => {
                        let counter = match kind {
                            RequeueKind::Attempt => "attempts",
                            RequeueKind::Requeue => "requeues",
                        };
                        (
                            tx.execute(
                                &format!(
                                    "UPDATE deferred_items SET state = 'queued', batch_id = NULL,
                                 {counter} = {counter} + 1, reason = ?4, updated_ms = ?5, {UNLEASE}
                                 {guard}"
                                ),
                                params![from.0, from.1, from.2, reason, at],
                            ),
                            QueueState::Queued,
                            format!("re-queued: {reason}"),
                        )
                    }
                    Transition::Failed { reason } => (
                        tx.execute(
                            &format!(
                                "UPDATE deferred_items SET state = 'failed', reason = ?4,
                             updated_ms = ?5, {UNLEASE} {guard}"
                            ),
                            params![from.0, from.1, from.2, reason, at],
                        ),
                        QueueState::Failed,
                        format!("failed: {reason}"),
                    ),
                };
                let changed = changed.map_err(fail(inner, &op))? == 1;
                if changed {
                    let batch = match state {
                        QueueState::Done | QueueState::Failed => expect.batch_id.as_deref(),
                        _ => None,
                    };
                    record_event(&tx, id, at as u64, state, batch, &detail)
                        .map_err(fail(inner, &op))?;
                }
                tx.commit().map_err(fail(inner, &op))?;
                Ok(changed)
            }),
        )
    }

    fn status(&self) -> BoxFuture<'_, Result<QueueStatus, StoreError>> {
        Box::pin(
            self.run("read the deferred queue".to_owned(), move |inner| {
                let conn = inner.conn();
                let mut status = QueueStatus::default();
                let read = |status: &mut QueueStatus| -> Result<(), rows::RowError> {
                    select(
                        &conn,
                        "SELECT state, count(*) AS items FROM deferred_items GROUP BY state",
                        [],
                        |row| rows::count_state(status, row),
                    )?;
                    status.oldest_unfinished = select_first(
                        &conn,
                        "SELECT id, created_ms, state FROM deferred_items
                         WHERE state IN ('queued', 'submitted') ORDER BY id LIMIT 1",
                        [],
                        rows::read_oldest,
                    )?
                    .flatten();
                    status.open_batches = select(
                        &conn,
                        "SELECT batch_id, count(*) AS items, min(submitted_ms) AS submitted_ms
                         FROM deferred_items WHERE state = 'submitted' GROUP BY batch_id
                         ORDER BY submitted_ms, batch_id",
                        [],
                        rows::read_open_batch,
                    )?;
                    select(
                        &conn,
                        "SELECT billing, sum(input_tokens) AS input_tokens,
                         sum(output_tokens) AS output_tokens,
                         sum(cache_read_tokens) AS cache_read_tokens,
                         sum(cache_write_tokens) AS cache_write_tokens
                         FROM deferred_items WHERE state = 'done' GROUP BY billing",
                        [],
                        |row| rows::add_billed_usage(status, row),
                    )?;
                    Ok(())
                };
                read(&mut status).map_err(fail(inner, "read the deferred queue"))?;
                Ok(status)
            }),
        )
    }

    fn events(&self, id: i64) -> BoxFuture<'_, Result<Vec<QueueEvent>, StoreError>> {
        Box::pin(
            self.run("read the deferred queue".to_owned(), move |inner| {
                select(
                    &inner.conn(),
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM deferred_events WHERE item_id = ?1
                         ORDER BY rowid"
                    ),
                    [id],
                    rows::read_event,
                )
                .map_err(fail(inner, "read the deferred queue"))
            }),
        )
    }

    fn claim_queued(
        &self,
        lease: Lease,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>> {
        Box::pin(
            self.run("claim deferred requests".to_owned(), move |inner| {
                let op = "claim deferred requests";
                let now = to_i64(now_ms());
                // One statement: SQLite runs it under the write lock, so two claimers (two
                // processes on one file) never see the same items free.
                let sql = format!(
                    "UPDATE deferred_items SET lease_owner = ?1, lease_until_ms = ?2 + ?3
                     WHERE id IN (SELECT id FROM deferred_items WHERE state = 'queued'
                         AND (lease_owner IS NULL OR lease_owner = ?1 OR lease_until_ms <= ?2)
                         ORDER BY id LIMIT ?4)
                     RETURNING {ITEM_COLUMNS}"
                );
                let conn = inner.writer(op)?;
                let mut items = select(
                    &conn,
                    &sql,
                    params![lease.owner, now, lease.duration_ms(), to_i64(limit as u64)],
                    rows::read_item,
                )
                .map_err(fail(inner, op))?;
                items.sort_by_key(|item| item.id);
                Ok(items)
            }),
        )
    }

    fn mark_submitted_leased(
        &self,
        item_ids: Vec<i64>,
        batch_id: String,
        lease: Lease,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(self.run(format!("record batch {batch_id}"), move |inner| {
            let op = format!("record batch {batch_id}");
            let mut conn = inner.writer(&op)?;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(fail(inner, &op))?;
            let at = now_ms();
            let mut marked = 0;
            for id in item_ids {
                let changed = tx
                    .prepare_cached(
                        "UPDATE deferred_items SET state = 'submitted', batch_id = ?2,
                         submitted_ms = ?3, updated_ms = ?3, lease_until_ms = ?3 + ?5
                         WHERE id = ?1 AND state = 'queued' AND lease_owner = ?4",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            id,
                            batch_id,
                            to_i64(at),
                            lease.owner,
                            lease.duration_ms()
                        ])
                    })
                    .map_err(fail(inner, &op))?;
                if changed == 1 {
                    record_event(
                        &tx,
                        id,
                        at,
                        QueueState::Submitted,
                        Some(&batch_id),
                        "submitted",
                    )
                    .map_err(fail(inner, &op))?;
                    marked += 1;
                }
            }
            tx.commit().map_err(fail(inner, &op))?;
            Ok(marked)
        }))
    }

    fn claim_open_batches(
        &self,
        lease: Lease,
    ) -> BoxFuture<'_, Result<Vec<OpenBatch>, StoreError>> {
        Box::pin(self.run("claim open batches".to_owned(), move |inner| {
            let op = "claim open batches";
            let mut conn = inner.writer(op)?;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(fail(inner, op))?;
            let now = to_i64(now_ms());
            let batches = select(
                &tx,
                CLAIMABLE_BATCHES_SQLITE,
                params![lease.owner, now],
                rows::read_open_batch,
            )
            .map_err(fail(inner, op))?;
            for batch in &batches {
                tx.prepare_cached(
                    "UPDATE deferred_items SET lease_owner = ?2, lease_until_ms = ?3 + ?4
                         WHERE state = 'submitted' AND batch_id = ?1",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        batch.batch_id,
                        lease.owner,
                        now,
                        lease.duration_ms()
                    ])
                })
                .map_err(fail(inner, op))?;
            }
            tx.commit().map_err(fail(inner, op))?;
            Ok(batches)
        }))
    }

    fn release(&self, owner: String) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(self.run("release leases".to_owned(), move |inner| {
            inner
                .writer("release leases")?
                .execute(
                    &format!("UPDATE deferred_items SET {UNLEASE} WHERE lease_owner = ?1"),
                    [owner],
                )
                .map_err(fail(inner, "release leases"))
        }))
    }

    fn verify_queue(&self) -> BoxFuture<'_, Result<crate::store::RecordCheck, StoreError>> {
        Box::pin(
            self.run("check the deferred queue".to_owned(), move |inner| {
                let read = select(
                    &inner.conn(),
                    &format!("SELECT {ITEM_COLUMNS} FROM deferred_items ORDER BY id"),
                    [],
                    rows::check_item,
                )
                .map_err(fail(inner, "check the deferred queue"))?;
                Ok(crate::store::cache::record_check(read.into_iter()))
            }),
        )
    }
}

/// The open batches `?1` may claim at time `?2`: those none of whose submitted items another
/// owner holds under a live lease, oldest first.
const CLAIMABLE_BATCHES_SQLITE: &str = "SELECT batch_id, count(*) AS items,
    min(submitted_ms) AS submitted_ms
    FROM deferred_items WHERE state = 'submitted' GROUP BY batch_id
    HAVING sum(CASE WHEN lease_owner IS NOT NULL AND lease_owner <> ?1 AND lease_until_ms > ?2
                    THEN 1 ELSE 0 END) = 0
    ORDER BY submitted_ms, batch_id";

#[cfg(test)]
pub(crate) mod tests {
    use tamp_plugin_api::{LlmRequest, Usage};

    use super::*;
    use crate::store::queue::{item_id_of, Billing};

    pub(crate) fn new_item(page: &str) -> NewDeferred {
        NewDeferred {
            page_id: page.into(),
            strategy: "batch-deferred".into(),
            thread_id: Some("t".into()),
            request: LlmRequest::new("sys", format!("summarize {page}"), 100),
        }
    }

    #[tokio::test]
    async fn enqueue_is_idempotent_per_page_and_strategy() {
        let store = SqliteStore::in_memory().unwrap();
        let a = store.enqueue(vec![new_item("pg_a")]).await.unwrap()[0];
        let mut other = new_item("pg_a");
        other.strategy = "someone-else".into();
        let again = store
            .enqueue(vec![new_item("pg_b"), new_item("pg_a"), other])
            .await
            .unwrap();
        assert_eq!(again[1], a);
        assert!(again[0] != a && again[2] != a && again[0] != again[2]);
        assert_eq!(store.status().await.unwrap().queued, 3);
        let found = store
            .lookup("batch-deferred".into(), vec!["pg_a".into(), "pg_z".into()])
            .await
            .unwrap();
        assert_eq!(found[0].as_ref().unwrap().id, a);
        assert_eq!(
            found[0].as_ref().unwrap().request.prompt.as_str(),
            "summarize pg_a"
        );
        assert!(found[1].is_none());
    }

    #[tokio::test]
    async fn transitions_are_guarded_and_recorded() {
        let store = SqliteStore::in_memory().unwrap();
        let id = store.enqueue(vec![new_item("pg_a")]).await.unwrap()[0];
        assert_eq!(
            store
                .mark_submitted(vec![id], "msgbatch_1".into())
                .await
                .unwrap(),
            1
        );
        // Already submitted: not submitted again.
        assert_eq!(
            store
                .mark_submitted(vec![id], "msgbatch_2".into())
                .await
                .unwrap(),
            0
        );
        let item = store.in_batch("msgbatch_1".into()).await.unwrap().remove(0);
        assert_eq!(item.custom_id(), format!("dq_{id}"));
        assert_eq!(item_id_of(&item.custom_id()), Some(id));
        let done = Transition::Done {
            text: "the summary".into(),
            usage: Usage {
                input_tokens: 100,
                output_tokens: 10,
                ..Usage::default()
            },
            billing: Billing::Batch,
        };
        assert!(store
            .transition(id, Expect::of(&item), done.clone())
            .await
            .unwrap());
        // The same result applied again changes nothing.
        assert!(!store.transition(id, Expect::of(&item), done).await.unwrap());
        let status = store.status().await.unwrap();
        assert_eq!((status.done, status.submitted), (1, 0));
        assert_eq!(status.batch_usage.input_tokens, 100);
        let states: Vec<QueueState> = store
            .events(id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.state)
            .collect();
        assert_eq!(
            states,
            [QueueState::Queued, QueueState::Submitted, QueueState::Done]
        );
    }

    #[tokio::test]
    async fn a_version_two_store_gains_the_queue_and_keeps_its_pages() {
        let dir = std::env::temp_dir().join(format!("tamp-queue-migrate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("store.sqlite3");
        drop(SqliteStore::open(&path).unwrap());
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "DROP TABLE deferred_items; DROP TABLE deferred_events; DROP TABLE threads;
                 ALTER TABLE pages DROP COLUMN seal; DROP TABLE tamp_secrets;
                 ALTER TABLE llm_answers DROP COLUMN seal;
                 ALTER TABLE range_summaries DROP COLUMN seal;
                 DROP TABLE page_owners; DROP TABLE page_text;
                 DROP TABLE activity_requests; DROP TABLE activity_compactions;
                 DROP TABLE activity_threads;",
            )
            .unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let id = store.enqueue(vec![new_item("pg_m")]).await.unwrap()[0];
        assert_eq!(store.queued(5).await.unwrap()[0].id, id);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn lease(owner: &str, ms: u64) -> Lease {
        Lease {
            owner: owner.into(),
            duration: std::time::Duration::from_millis(ms),
        }
    }

    fn ids(items: &[QueueItem]) -> Vec<i64> {
        items.iter().map(|i| i.id).collect()
    }

    /// A store in a temp file, removed on drop: leases are for stores several processes open.
    struct FileStore(SqliteStore, std::path::PathBuf);

    impl FileStore {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "tamp-lease-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            FileStore(SqliteStore::open(&dir.join("store.sqlite3")).unwrap(), dir)
        }
    }

    impl Drop for FileStore {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }

    async fn enqueue_n(store: &SqliteStore, n: usize) -> Vec<i64> {
        store
            .enqueue((0..n).map(|i| new_item(&format!("pg_{i}"))).collect())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_live_lease_keeps_items_from_other_claimers_and_an_expired_one_does_not() {
        let store = FileStore::new("claim");
        let q = &store.0;
        let queued = enqueue_n(q, 6).await;
        let a = q.claim_queued(lease("a", 300), 2).await.unwrap();
        assert_eq!(ids(&a), queued[..2]);
        assert!(a
            .iter()
            .all(|i| i.lease_owner.as_deref() == Some("a") && i.lease_until_ms.is_some()));
        let b = q.claim_queued(lease("b", 60_000), 3).await.unwrap();
        assert_eq!(ids(&b), queued[2..5], "oldest first, skipping A's");
        // The owner claiming again renews its own items.
        let renewed = q.claim_queued(lease("a", 300), 2).await.unwrap();
        assert_eq!(ids(&renewed), queued[..2]);
        assert!(renewed[0].lease_until_ms >= a[0].lease_until_ms);
        assert!(q
            .claim_queued(lease("b", 60_000), 0)
            .await
            .unwrap()
            .is_empty());

        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let taken = q.claim_queued(lease("b", 60_000), 10).await.unwrap();
        assert_eq!(
            ids(&taken),
            queued,
            "A's expired items, B's own and the free one"
        );
        assert_eq!(
            q.mark_submitted_leased(queued[..2].to_vec(), "batch-a".into(), lease("a", 300))
                .await
                .unwrap(),
            0,
            "a worker whose lease was taken over submits nothing"
        );
        assert_eq!(
            q.mark_submitted_leased(queued.clone(), "batch-b".into(), lease("b", 60_000))
                .await
                .unwrap(),
            6
        );
        // Submitted items are not claimable as queued.
        assert!(q
            .claim_queued(lease("c", 1_000), 10)
            .await
            .unwrap()
            .is_empty());
        let events = q.events(queued[0]).await.unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].batch_id.as_deref(), Some("batch-b"));
    }

    #[tokio::test]
    async fn open_batches_go_to_one_poller_until_its_lease_ends_or_it_releases() {
        let store = FileStore::new("batches");
        let q = &store.0;
        let queued = enqueue_n(q, 4).await;
        let a = q.claim_queued(lease("a", 300), 2).await.unwrap();
        q.mark_submitted_leased(ids(&a), "batch-a".into(), lease("a", 300))
            .await
            .unwrap();
        let b = q.claim_queued(lease("b", 60_000), 2).await.unwrap();
        q.mark_submitted_leased(ids(&b), "batch-b".into(), lease("b", 60_000))
            .await
            .unwrap();
        let names = |batches: Vec<OpenBatch>| -> Vec<String> {
            batches.into_iter().map(|b| b.batch_id).collect()
        };
        let mine = q.claim_open_batches(lease("a", 300)).await.unwrap();
        assert_eq!(names(mine.clone()), ["batch-a"]);
        assert_eq!(mine[0].items, 2);
        assert!(mine[0].submitted_ms > 0);
        assert!(q
            .claim_open_batches(lease("c", 60_000))
            .await
            .unwrap()
            .is_empty());

        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let mut taken = names(q.claim_open_batches(lease("b", 60_000)).await.unwrap());
        taken.sort();
        assert_eq!(taken, ["batch-a", "batch-b"]);
        let item = q.in_batch("batch-a".into()).await.unwrap().remove(0);
        assert_eq!(item.lease_owner.as_deref(), Some("b"));
        assert!(q
            .claim_open_batches(lease("a", 300))
            .await
            .unwrap()
            .is_empty());

        assert_eq!(q.release("b".into()).await.unwrap(), 4);
        assert_eq!(q.release("b".into()).await.unwrap(), 0);
        assert_eq!(
            names(q.claim_open_batches(lease("a", 300)).await.unwrap()).len(),
            2
        );
        let _ = queued;
    }

    #[tokio::test]
    async fn transitions_clear_the_lease() {
        let store = FileStore::new("clear");
        let q = &store.0;
        let queued = enqueue_n(q, 3).await;
        let owner = lease("a", 60_000);
        q.claim_queued(owner.clone(), 3).await.unwrap();
        q.mark_submitted_leased(queued.clone(), "b1".into(), owner.clone())
            .await
            .unwrap();
        let items = q.in_batch("b1".into()).await.unwrap();
        let done = Transition::Done {
            text: "s".into(),
            usage: Usage::default(),
            billing: Billing::Batch,
        };
        let requeue = Transition::Requeue {
            reason: "expired".into(),
            kind: RequeueKind::Requeue,
        };
        let failed = Transition::Failed {
            reason: "bad".into(),
        };
        for (item, to) in items.iter().zip([done, requeue, failed]) {
            assert!(q.transition(item.id, Expect::of(item), to).await.unwrap());
        }
        let after = q
            .lookup(
                "batch-deferred".into(),
                (0..3).map(|i| format!("pg_{i}")).collect(),
            )
            .await
            .unwrap();
        for item in after.into_iter().flatten() {
            assert_eq!((item.lease_owner, item.lease_until_ms), (None, None));
        }
        // The re-queued item is free for anyone at once.
        let free = q.claim_queued(lease("z", 1_000), 10).await.unwrap();
        assert_eq!(ids(&free), [queued[1]]);
        assert_eq!(q.release("a".into()).await.unwrap(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_stores_on_one_file_never_claim_the_same_item() {
        let first = FileStore::new("two");
        let second = SqliteStore::open(&first.1.join("store.sqlite3")).unwrap();
        let queued = enqueue_n(&first.0, 300).await;
        let work = |q: SqliteStore, owner: &'static str| {
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let items = q.claim_queued(lease(owner, 60_000), 7).await.unwrap();
                    if items.is_empty() {
                        return mine;
                    }
                    let n = q
                        .mark_submitted_leased(
                            ids(&items),
                            format!("{owner}-{}", mine.len()),
                            lease(owner, 60_000),
                        )
                        .await
                        .unwrap();
                    assert_eq!(n, items.len());
                    mine.extend(ids(&items));
                }
            })
        };
        let (x, y) = tokio::join!(work(first.0.clone(), "x"), work(second, "y"));
        let (x, y) = (x.unwrap(), y.unwrap());
        let mut all: Vec<i64> = x.iter().chain(&y).copied().collect();
        all.sort();
        assert_eq!(all, queued, "each item claimed exactly once");
    }

    #[tokio::test]
    async fn a_version_three_store_gains_leases_and_keeps_its_queue() {
        let store = FileStore::new("v3");
        let path = store.1.join("store.sqlite3");
        let queued = enqueue_n(&store.0, 2).await;
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "DROP INDEX deferred_by_lease_owner;
                 ALTER TABLE deferred_items DROP COLUMN lease_owner;
                 ALTER TABLE deferred_items DROP COLUMN lease_until_ms;
                 DROP TABLE threads;
                 ALTER TABLE pages DROP COLUMN seal; DROP TABLE tamp_secrets;
                 ALTER TABLE llm_answers DROP COLUMN seal;
                 ALTER TABLE range_summaries DROP COLUMN seal;
                 DROP TABLE page_owners; DROP TABLE page_text;
                 DROP TABLE activity_requests; DROP TABLE activity_compactions;
                 DROP TABLE activity_threads;",
            )
            .unwrap();
            conn.pragma_update(None, "user_version", 3).unwrap();
        }
        let reopened = SqliteStore::open(&path).unwrap();
        let claimed = reopened.claim_queued(lease("a", 1_000), 5).await.unwrap();
        assert_eq!(ids(&claimed), queued);
    }

    #[tokio::test]
    async fn requeue_counts_attempts_and_requeues_separately() {
        let store = SqliteStore::in_memory().unwrap();
        let id = store.enqueue(vec![new_item("pg_a")]).await.unwrap()[0];
        for (batch, kind) in [("b1", RequeueKind::Attempt), ("b2", RequeueKind::Requeue)] {
            store.mark_submitted(vec![id], batch.into()).await.unwrap();
            let item = store.in_batch(batch.into()).await.unwrap().remove(0);
            let to = Transition::Requeue {
                reason: "x".into(),
                kind,
            };
            assert!(store.transition(id, Expect::of(&item), to).await.unwrap());
        }
        let item = store.queued(10).await.unwrap().remove(0);
        assert_eq!((item.attempts, item.requeues), (1, 1));
        assert_eq!(item.batch_id, None);
        let status = store.status().await.unwrap();
        assert_eq!(status.queued, 1);
        assert_eq!(status.oldest_unfinished.unwrap().0, format!("dq_{id}"));
    }
}
