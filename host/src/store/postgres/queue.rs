//! The deferred queue on PostgreSQL, worked by several hosts at once.
//!
//! The same states, events and guarded transitions as the SQLite queue (see
//! `store::queue`); each transition is one statement that updates the item and records its
//! event together. Several workers share the queue through leases:
//!
//! - [`claim_queued`](DeferredQueue::claim_queued) locks the oldest claimable items with
//!   `FOR UPDATE SKIP LOCKED` and leases them in the same statement, so concurrent claimers
//!   never wait on each other nor get the same item;
//! - [`claim_open_batches`](DeferredQueue::claim_open_batches) decides per batch, so it runs
//!   under a transaction-scoped advisory lock: claims of open batches (one per poll, rare)
//!   take turns, and a batch goes to one worker whole;
//! - lease times come from the database clock ([`NOW_MS`]).

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio_postgres::Row;

use super::{bind, read_all, Failure, PostgresStore, NOW_MS};
use crate::store::queue::{
    DeferredQueue, Expect, Lease, NewDeferred, OpenBatch, QueueEvent, QueueItem, QueueState,
    QueueStatus, RequeueKind, Transition, UNLEASE,
};
use crate::store::rows::{self, DONE_COLUMNS, EVENT_COLUMNS, ITEM_COLUMNS, NEW_ITEM_COLUMNS};
use crate::store::StoreError;

/// The key of the advisory lock under which open batches are claimed ("tamp" + "bat").
const BATCH_CLAIM_LOCK: i64 = 0x7461_6d70_0062_6174;

/// The items of `answer`, in id order (`RETURNING` gives them in any order).
fn read_items(answer: &[Row]) -> Result<Vec<QueueItem>, Failure> {
    let mut items = read_all(answer, rows::read_item)?;
    items.sort_by_key(|item| item.id);
    Ok(items)
}

/// [`ITEM_COLUMNS`] of the table aliased `alias`.
fn item_columns_of(alias: &str) -> String {
    ITEM_COLUMNS
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn read_batches(answer: &[Row]) -> Result<Vec<OpenBatch>, Failure> {
    Ok(read_all(answer, rows::read_open_batch)?)
}

/// Queues one item (or finds it) and records its event, in one statement. Returns no row
/// only when another host inserted the same item after this statement's snapshot. Binds
/// [`rows::new_item_values`], whose first two are the page id and the strategy.
fn enqueue_sql() -> String {
    format!(
        "WITH ins AS (
            INSERT INTO deferred_items ({NEW_ITEM_COLUMNS}, state, created_ms, updated_ms)
            VALUES ({}, 'queued', {NOW_MS}, {NOW_MS})
            ON CONFLICT (page_id, strategy) DO NOTHING
            RETURNING id, created_ms
        ), ev AS (
            INSERT INTO deferred_events (item_id, at_ms, state, batch_id, detail)
            SELECT id, created_ms, 'queued', NULL, 'queued' FROM ins
        )
        SELECT id FROM ins
        UNION ALL
        SELECT id FROM deferred_items WHERE page_id = $1 AND strategy = $2",
        rows::placeholders('$', 1, NEW_ITEM_COLUMNS.split(',').count())
    )
}

/// Marks `$1` (ids) submitted in batch `$2` when still queued and `extra_guard` holds,
/// with `extra_set`, recording their events; returns the count.
fn mark_submitted_sql(extra_set: &str, extra_guard: &str) -> String {
    format!(
        "WITH up AS (
            UPDATE deferred_items SET state = 'submitted', batch_id = $2,
                submitted_ms = {NOW_MS}, updated_ms = {NOW_MS} {extra_set}
            WHERE id = ANY($1) AND state = 'queued' {extra_guard}
            RETURNING id, updated_ms
        ), ev AS (
            INSERT INTO deferred_events (item_id, at_ms, state, batch_id, detail)
            SELECT id, updated_ms, 'submitted', $2, 'submitted' FROM up ORDER BY id
        )
        SELECT count(*)::bigint FROM up"
    )
}

/// One attempt at [`DeferredQueue::enqueue`], in one transaction.
async fn enqueue_once(
    client: &mut deadpool_postgres::Object,
    items: &[NewDeferred],
    encoded: &[String],
) -> Result<Vec<i64>, Failure> {
    let tx = client.transaction().await?;
    let stmt = tx.prepare_cached(&enqueue_sql()).await?;
    // Pipelined: the statements go out in order without waiting for each answer
    // (a later duplicate of an earlier item sees the earlier one's row).
    let (tx_ref, stmt_ref) = (&tx, &stmt);
    let answers =
        futures::future::try_join_all(items.iter().zip(encoded).map(|(item, json)| async move {
            let values = rows::new_item_values(item, json);
            tx_ref.query(stmt_ref, &bind(&values)).await
        }))
        .await?;
    let mut ids = Vec::with_capacity(items.len());
    for (item, rows) in items.iter().zip(answers) {
        let id = match rows.first() {
            Some(row) => row.try_get(0)?,
            None => {
                // Inserted by another host meanwhile: a new statement sees it.
                tx.query_one(
                    "SELECT id FROM deferred_items WHERE page_id = $1 AND strategy = $2",
                    &[&item.page_id, &item.strategy],
                )
                .await?
                .try_get(0)?
            }
        };
        ids.push(id);
    }
    tx.commit().await?;
    Ok(ids)
}

impl DeferredQueue for PostgresStore {
    fn enqueue(&self, items: Vec<NewDeferred>) -> BoxFuture<'_, Result<Vec<i64>, StoreError>> {
        self.run(
            "queue deferred requests".to_owned(),
            move |mut client| async move {
                let encoded = items
                    .iter()
                    .map(|item| rows::encode_request(&item.request))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| Failure::Other(format!("encode a request: {e}")))?;
                // Two hosts queueing overlapping items in different orders can deadlock on
                // the unique key; the server aborts one of them, which simply tries again.
                let mut attempt = 1;
                loop {
                    match enqueue_once(&mut client, &items, &encoded).await {
                        Err(Failure::Pg(e))
                            if attempt < 3
                                && e.code()
                                    == Some(
                                        &tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED,
                                    ) =>
                        {
                            attempt += 1;
                        }
                        result => return result,
                    }
                }
            },
        )
        .boxed()
    }

    fn lookup(
        &self,
        strategy: String,
        page_ids: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Option<QueueItem>>, StoreError>> {
        self.run(
            "read the deferred queue".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {ITEM_COLUMNS} FROM deferred_items
                         WHERE strategy = $1 AND page_id = ANY($2)"
                    ))
                    .await?;
                let found = read_items(&client.query(&stmt, &[&strategy, &page_ids]).await?)?;
                Ok(page_ids
                    .iter()
                    .map(|page| found.iter().find(|item| &item.page_id == page).cloned())
                    .collect())
            },
        )
        .boxed()
    }

    fn queued(&self, limit: usize) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>> {
        self.run(
            "read the deferred queue".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {ITEM_COLUMNS} FROM deferred_items
                         WHERE state = 'queued' ORDER BY id LIMIT $1"
                    ))
                    .await?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                read_items(&client.query(&stmt, &[&limit]).await?)
            },
        )
        .boxed()
    }

    fn in_batch(&self, batch_id: String) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>> {
        self.run(
            "read the deferred queue".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {ITEM_COLUMNS} FROM deferred_items
                         WHERE state = 'submitted' AND batch_id = $1 ORDER BY id"
                    ))
                    .await?;
                read_items(&client.query(&stmt, &[&batch_id]).await?)
            },
        )
        .boxed()
    }

    fn mark_submitted(
        &self,
        item_ids: Vec<i64>,
        batch_id: String,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.run(
            format!("record batch {batch_id}"),
            move |client| async move {
                let stmt = client.prepare_cached(&mark_submitted_sql("", "")).await?;
                let marked: i64 = client
                    .query_one(&stmt, &[&item_ids, &batch_id])
                    .await?
                    .try_get(0)?;
                Ok(marked as usize)
            },
        )
        .boxed()
    }

    fn transition(
        &self,
        id: i64,
        expect: Expect,
        to: Transition,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.run(
            format!("update deferred item {id}"),
            move |client| async move {
                // $1 id, $2 and $3 the state and batch the caller saw, $4 the event's batch,
                // $5 its detail; the transition's own values from $6.
                let (set, state, detail) = match &to {
                    Transition::Done { billing, .. } => (
                        format!(
                            "state = 'done', {}, reason = NULL",
                            rows::assignments(DONE_COLUMNS, '$', 6)
                        ),
                        QueueState::Done,
                        format!("done ({})", billing.as_str()),
                    ),
                    Transition::Requeue { reason, kind } => {
                        let counter = match kind {
                            RequeueKind::Attempt => "attempts",
                            RequeueKind::Requeue => "requeues",
                        };
                        (
                            format!(
                                "state = 'queued', batch_id = NULL,
                                 {counter} = {counter} + 1, reason = $6"
                            ),
                            QueueState::Queued,
                            format!("re-queued: {reason}"),
                        )
                    }
                    Transition::Failed { reason } => (
                        "state = 'failed', reason = $6".to_owned(),
                        QueueState::Failed,
                        format!("failed: {reason}"),
                    ),
                };
                let event_batch = match state {
                    QueueState::Done | QueueState::Failed => expect.batch_id.clone(),
                    _ => None,
                };
                let sql = format!(
                    "WITH up AS (
                        UPDATE deferred_items SET {set}, updated_ms = {NOW_MS}, {UNLEASE}
                        WHERE id = $1 AND state = $2 AND batch_id IS NOT DISTINCT FROM $3::text
                        RETURNING id, updated_ms
                    ), ev AS (
                        INSERT INTO deferred_events (item_id, at_ms, state, batch_id, detail)
                        SELECT id, updated_ms, '{}', $4::text, $5 FROM up
                    )
                    SELECT count(*)::bigint FROM up",
                    state.as_str()
                );
                let stmt = client.prepare_cached(&sql).await?;
                let from_state = expect.state.as_str();
                let common: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                    [&id, &from_state, &expect.batch_id, &event_batch, &detail];
                let changed: i64 = match &to {
                    Transition::Done {
                        text,
                        usage,
                        billing,
                    } => {
                        let done = rows::done_values(text, usage, *billing);
                        let mut params = common.to_vec();
                        params.extend(bind(&done));
                        client.query_one(&stmt, &params).await?.try_get(0)?
                    }
                    Transition::Requeue { reason, .. } | Transition::Failed { reason } => {
                        let mut params = common.to_vec();
                        params.push(reason);
                        client.query_one(&stmt, &params).await?.try_get(0)?
                    }
                };
                Ok(changed == 1)
            },
        )
        .boxed()
    }

    fn status(&self) -> BoxFuture<'_, Result<QueueStatus, StoreError>> {
        self.run(
            "read the deferred queue".to_owned(),
            move |mut client| async move {
                // One snapshot for all four reads, so the counts and batches agree.
                let tx = client
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let mut status = QueueStatus::default();
                for row in tx
                    .query(
                        "SELECT state, count(*)::bigint AS items FROM deferred_items
                         GROUP BY state",
                        &[],
                    )
                    .await?
                {
                    rows::count_state(&mut status, &row)?;
                }
                if let Some(row) = tx
                    .query_opt(
                        "SELECT id, created_ms, state FROM deferred_items
                         WHERE state IN ('queued', 'submitted') ORDER BY id LIMIT 1",
                        &[],
                    )
                    .await?
                {
                    status.oldest_unfinished = rows::read_oldest(&row)?;
                }
                status.open_batches = read_batches(
                    &tx.query(
                        "SELECT batch_id, count(*)::bigint AS items,
                         min(submitted_ms) AS submitted_ms FROM deferred_items
                         WHERE state = 'submitted' GROUP BY batch_id
                         ORDER BY submitted_ms, batch_id",
                        &[],
                    )
                    .await?,
                )?;
                for row in tx
                    .query(
                        "SELECT billing, sum(input_tokens)::bigint AS input_tokens,
                         sum(output_tokens)::bigint AS output_tokens,
                         sum(cache_read_tokens)::bigint AS cache_read_tokens,
                         sum(cache_write_tokens)::bigint AS cache_write_tokens
                         FROM deferred_items WHERE state = 'done' GROUP BY billing",
                        &[],
                    )
                    .await?
                {
                    rows::add_billed_usage(&mut status, &row)?;
                }
                tx.commit().await?;
                Ok(status)
            },
        )
        .boxed()
    }

    fn events(&self, id: i64) -> BoxFuture<'_, Result<Vec<QueueEvent>, StoreError>> {
        self.run(
            "read the deferred queue".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {EVENT_COLUMNS} FROM deferred_events
                         WHERE item_id = $1 ORDER BY seq"
                    ))
                    .await?;
                let events = client.query(&stmt, &[&id]).await?;
                Ok(read_all(&events, rows::read_event)?)
            },
        )
        .boxed()
    }

    fn claim_queued(
        &self,
        lease: Lease,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>> {
        self.run(
            "claim deferred requests".to_owned(),
            move |client| async move {
                if limit == 0 {
                    return Ok(Vec::new());
                }
                // Rows another claimer has locked are skipped, not waited for; a row changed
                // since this statement's snapshot is checked again once locked.
                let sql = format!(
                    "WITH c AS (
                        SELECT id FROM deferred_items
                        WHERE state = 'queued'
                          AND (lease_owner IS NULL OR lease_owner = $1
                               OR lease_until_ms <= {NOW_MS})
                        ORDER BY id LIMIT $3
                        FOR UPDATE SKIP LOCKED
                    )
                    UPDATE deferred_items d SET lease_owner = $1, lease_until_ms = {NOW_MS} + $2
                    FROM c WHERE d.id = c.id
                    RETURNING {}",
                    item_columns_of("d")
                );
                let stmt = client.prepare_cached(&sql).await?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                read_items(
                    &client
                        .query(&stmt, &[&lease.owner, &lease.duration_ms(), &limit])
                        .await?,
                )
            },
        )
        .boxed()
    }

    fn mark_submitted_leased(
        &self,
        item_ids: Vec<i64>,
        batch_id: String,
        lease: Lease,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.run(
            format!("record batch {batch_id}"),
            move |client| async move {
                let sql = mark_submitted_sql(
                    &format!(", lease_until_ms = {NOW_MS} + $4"),
                    "AND lease_owner = $3",
                );
                let stmt = client.prepare_cached(&sql).await?;
                let marked: i64 = client
                    .query_one(
                        &stmt,
                        &[&item_ids, &batch_id, &lease.owner, &lease.duration_ms()],
                    )
                    .await?
                    .try_get(0)?;
                Ok(marked as usize)
            },
        )
        .boxed()
    }

    fn claim_open_batches(
        &self,
        lease: Lease,
    ) -> BoxFuture<'_, Result<Vec<OpenBatch>, StoreError>> {
        self.run(
            "claim open batches".to_owned(),
            move |mut client| async move {
                let tx = client.transaction().await?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&BATCH_CLAIM_LOCK])
                    .await?;
                // A statement after the lock: it sees every claim committed before.
                let sql = format!(
                    "WITH open AS (
                        SELECT batch_id FROM deferred_items WHERE state = 'submitted'
                        GROUP BY batch_id
                        HAVING bool_and(lease_owner IS NULL OR lease_owner = $1
                                        OR lease_until_ms <= {NOW_MS})
                    ), up AS (
                        UPDATE deferred_items SET lease_owner = $1,
                            lease_until_ms = {NOW_MS} + $2
                        WHERE state = 'submitted' AND batch_id IN (SELECT batch_id FROM open)
                        RETURNING batch_id, submitted_ms
                    )
                    SELECT batch_id, count(*)::bigint AS items, min(submitted_ms) AS submitted_ms
                    FROM up GROUP BY batch_id ORDER BY submitted_ms, batch_id"
                );
                let stmt = tx.prepare_cached(&sql).await?;
                let batches = read_batches(
                    &tx.query(&stmt, &[&lease.owner, &lease.duration_ms()])
                        .await?,
                )?;
                tx.commit().await?;
                Ok(batches)
            },
        )
        .boxed()
    }

    fn release(&self, owner: String) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.run("release leases".to_owned(), move |client| async move {
            let released = client
                .execute(
                    &format!("UPDATE deferred_items SET {UNLEASE} WHERE lease_owner = $1"),
                    &[&owner],
                )
                .await?;
            Ok(released as usize)
        })
        .boxed()
    }

    fn verify_queue(&self) -> BoxFuture<'_, Result<crate::store::RecordCheck, StoreError>> {
        self.run(
            "check the deferred queue".to_owned(),
            move |client| async move {
                let answer = client
                    .query(
                        &format!("SELECT {ITEM_COLUMNS} FROM deferred_items ORDER BY id"),
                        &[],
                    )
                    .await?;
                let read = read_all(&answer, rows::check_item)?;
                Ok(crate::store::cache::record_check(read.into_iter()))
            },
        )
        .boxed()
    }
}
