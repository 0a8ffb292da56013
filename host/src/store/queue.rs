//! The deferred-work queue: summary requests a strategy asked the host to finish later,
//! through a batch API (see `crate::deferred`).
//!
//! Each item moves `queued → submitted(batch) → done(text, usage) | failed(reason)`, and may
//! go back from `submitted` to `queued` (an errored result retried, a canceled or expired one
//! re-queued). Every transition is one SQL statement guarded by the state the caller saw
//! (`state` and `batch_id`), and is written, with a row in `deferred_events`, before the
//! worker moves on: after a crash nothing lives only in memory, and applying the same batch
//! result twice changes nothing the second time (the item is no longer `submitted` in that
//! batch).

use futures::future::BoxFuture;
use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};
use serde::Serialize;
use tamp_plugin_api::{LlmRequest, Usage};

use super::sqlite::{to_i64, Inner, SqliteStore};
use super::StoreError;

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

/// Where a queue item stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueState {
    Queued,
    Submitted,
    Done,
    Failed,
}

impl QueueState {
    pub const ALL: [QueueState; 4] = [
        QueueState::Queued,
        QueueState::Submitted,
        QueueState::Done,
        QueueState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            QueueState::Queued => "queued",
            QueueState::Submitted => "submitted",
            QueueState::Done => "done",
            QueueState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        QueueState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
    }
}

/// How a finished answer was paid for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Billing {
    /// Through a batch, at the batch discount.
    Batch,
    /// Through the chain's provider, at the normal price (the sync fallback).
    Sync,
}

impl Billing {
    fn as_str(self) -> &'static str {
        match self {
            Billing::Batch => "batch",
            Billing::Sync => "sync",
        }
    }
}

/// A request to queue.
#[derive(Clone, Debug, PartialEq)]
pub struct NewDeferred {
    pub page_id: String,
    pub strategy: String,
    pub thread_id: Option<String>,
    pub request: LlmRequest,
}

/// A queue item as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueItem {
    /// The row id; the batch `custom_id` is [`QueueItem::custom_id`].
    pub id: i64,
    pub page_id: String,
    pub strategy: String,
    pub thread_id: Option<String>,
    pub request: LlmRequest,
    pub state: QueueState,
    /// The batch it was last submitted in (only while `submitted`).
    pub batch_id: Option<String>,
    /// Errored results and failed submissions so far.
    pub attempts: u32,
    /// Times a canceled or expired result put it back in the queue.
    pub requeues: u32,
    /// The answer, when `done`.
    pub text: Option<String>,
    /// Why it failed (when `failed`), or why it was last re-queued.
    pub reason: Option<String>,
    pub billing: Option<Billing>,
    pub usage: Usage,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    pub updated_ms: u64,
    pub submitted_ms: Option<u64>,
}

/// The prefix of every batch `custom_id` (`dq_<item id>`).
pub const CUSTOM_ID_PREFIX: &str = "dq_";

impl QueueItem {
    /// The `custom_id` this item carries in a batch.
    pub fn custom_id(&self) -> String {
        format!("{CUSTOM_ID_PREFIX}{}", self.id)
    }
}

/// The item id a `custom_id` names, if it is one of ours.
pub fn item_id_of(custom_id: &str) -> Option<i64> {
    custom_id.strip_prefix(CUSTOM_ID_PREFIX)?.parse().ok()
}

/// What the caller saw before a transition; the transition happens only if it still holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub state: QueueState,
    pub batch_id: Option<String>,
}

impl Expect {
    pub fn of(item: &QueueItem) -> Self {
        Expect {
            state: item.state,
            batch_id: item.batch_id.clone(),
        }
    }
}

/// What a retried or re-queued item counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueKind {
    /// An errored result or a failed submission (`attempts`, bounded by `max_attempts`).
    Attempt,
    /// A canceled or expired result (`requeues`).
    Requeue,
}

/// A state change.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    Done {
        text: String,
        usage: Usage,
        billing: Billing,
    },
    Requeue {
        reason: String,
        kind: RequeueKind,
    },
    Failed {
        reason: String,
    },
}

/// A batch that still has submitted items.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OpenBatch {
    pub batch_id: String,
    pub items: u64,
    /// When its items were submitted (ms since the epoch).
    pub submitted_ms: u64,
}

/// The queue at a glance (`tamp batch status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueueStatus {
    pub queued: u64,
    pub submitted: u64,
    pub done: u64,
    pub failed: u64,
    /// The oldest item not finished yet: `(custom id, created ms, state)`.
    pub oldest_unfinished: Option<(String, u64, QueueState)>,
    pub open_batches: Vec<OpenBatch>,
    /// Usage of the answers that came through batches, and through the sync fallback.
    pub batch_usage: Usage,
    pub sync_usage: Usage,
}

/// One recorded transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueueEvent {
    pub at_ms: u64,
    pub state: QueueState,
    pub batch_id: Option<String>,
    pub detail: String,
}

/// The persistent queue. Object-safe; the SQLite store implements it in its own file.
pub trait DeferredQueue: Send + Sync {
    /// Queues `items` in one transaction and returns their ids, in order; an item for a page
    /// and strategy already in the queue (in any state) is kept, and its id returned.
    fn enqueue(&self, items: Vec<NewDeferred>) -> BoxFuture<'_, Result<Vec<i64>, StoreError>>;

    /// The items of `page_ids` for `strategy`, in the order asked (`None`: never queued).
    fn lookup(
        &self,
        strategy: String,
        page_ids: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Option<QueueItem>>, StoreError>>;

    /// At most `limit` queued items, oldest first.
    fn queued(&self, limit: usize) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>>;

    /// The items submitted in `batch_id` and not finished.
    fn in_batch(&self, batch_id: String) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>>;

    /// Marks `item_ids` (still queued) submitted in `batch_id`, in one transaction; returns
    /// how many were.
    fn mark_submitted(
        &self,
        item_ids: Vec<i64>,
        batch_id: String,
    ) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// Applies `to` to item `id` if it is still as `expect` says; whether it was.
    fn transition(
        &self,
        id: i64,
        expect: Expect,
        to: Transition,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Counts, the oldest unfinished item, open batches and billed usage.
    fn status(&self) -> BoxFuture<'_, Result<QueueStatus, StoreError>>;

    /// Every transition of item `id`, oldest first.
    fn events(&self, id: i64) -> BoxFuture<'_, Result<Vec<QueueEvent>, StoreError>>;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

const ITEM_COLUMNS: &str = "id, page_id, strategy, thread_id, request_json, state, batch_id, \
    attempts, requeues, text, reason, billing, input_tokens, output_tokens, cache_read_tokens, \
    cache_write_tokens, created_ms, updated_ms, submitted_ms";

fn read_item(row: &rusqlite::Row<'_>) -> rusqlite::Result<QueueItem> {
    let request_json: String = row.get(4)?;
    let state: String = row.get(5)?;
    let bad = |column: usize, what: String| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, what.into())
    };
    let request: LlmRequest = serde_json::from_str(&request_json)
        .map_err(|e| bad(4, format!("the stored request does not parse: {e}")))?;
    let state =
        QueueState::parse(&state).ok_or_else(|| bad(5, format!("unknown state \"{state}\"")))?;
    let billing: Option<String> = row.get(11)?;
    let n = |i: usize| -> rusqlite::Result<u64> {
        Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or(0))
    };
    Ok(QueueItem {
        id: row.get(0)?,
        page_id: row.get(1)?,
        strategy: row.get(2)?,
        thread_id: row.get(3)?,
        request,
        state,
        batch_id: row.get(6)?,
        attempts: n(7)? as u32,
        requeues: n(8)? as u32,
        text: row.get(9)?,
        reason: row.get(10)?,
        billing: match billing.as_deref() {
            Some("batch") => Some(Billing::Batch),
            Some("sync") => Some(Billing::Sync),
            _ => None,
        },
        usage: Usage {
            input_tokens: n(12)?,
            output_tokens: n(13)?,
            cache_read_tokens: n(14)?,
            cache_write_tokens: n(15)?,
        },
        created_ms: n(16)?,
        updated_ms: n(17)?,
        submitted_ms: row.get::<_, Option<i64>>(18)?.map(|v| v.max(0) as u64),
    })
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

fn fail<'a>(inner: &'a Inner, operation: &str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    let operation = operation.to_owned();
    move |e| StoreError::backend(&inner.location, operation.clone(), e)
}

fn select_items(
    inner: &Inner,
    operation: &str,
    filter: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<QueueItem>, StoreError> {
    let conn = inner.conn();
    let sql = format!("SELECT {ITEM_COLUMNS} FROM deferred_items {filter}");
    let mut stmt = conn.prepare_cached(&sql).map_err(fail(inner, operation))?;
    let rows = stmt
        .query_map(params, read_item)
        .map_err(fail(inner, operation))?;
    rows.collect::<Result<Vec<_>, _>>()
        .map_err(fail(inner, operation))
}

impl DeferredQueue for SqliteStore {
    fn enqueue(&self, items: Vec<NewDeferred>) -> BoxFuture<'_, Result<Vec<i64>, StoreError>> {
        Box::pin(
            self.run("queue deferred requests".to_owned(), move |inner| {
                let op = "queue deferred requests";
                let encoded = items
                    .iter()
                    .map(|item| serde_json::to_string(&item.request))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| StoreError::backend(&inner.location, op, e))?;
                let mut conn = inner.conn();
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(fail(inner, op))?;
                let at = now_ms();
                let mut ids = Vec::with_capacity(items.len());
                for (item, request_json) in items.iter().zip(encoded) {
                    let existing: Option<i64> = tx
                        .prepare_cached(
                            "SELECT id FROM deferred_items WHERE page_id = ?1 AND strategy = ?2",
                        )
                        .and_then(|mut s| {
                            s.query_row(params![item.page_id, item.strategy], |r| r.get(0))
                                .optional()
                        })
                        .map_err(fail(inner, op))?;
                    if let Some(id) = existing {
                        ids.push(id);
                        continue;
                    }
                    tx.prepare_cached(
                        "INSERT INTO deferred_items (page_id, strategy, thread_id, request_json,
                     state, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?5)",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            item.page_id,
                            item.strategy,
                            item.thread_id,
                            request_json,
                            to_i64(at)
                        ])
                    })
                    .map_err(fail(inner, op))?;
                    let id = tx.last_insert_rowid();
                    record_event(&tx, id, at, QueueState::Queued, None, "queued")
                        .map_err(fail(inner, op))?;
                    ids.push(id);
                }
                tx.commit().map_err(fail(inner, op))?;
                Ok(ids)
            }),
        )
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
                let mut stmt = conn.prepare_cached(&sql).map_err(fail(inner, op))?;
                page_ids
                    .iter()
                    .map(|page| {
                        stmt.query_row(params![page, strategy], read_item)
                            .optional()
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
            let mut conn = inner.conn();
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
                let mut conn = inner.conn();
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
                    } => (
                        tx.execute(
                            &format!(
                                "UPDATE deferred_items SET state = 'done', text = ?4, billing = ?5,
                             input_tokens = ?6, output_tokens = ?7, cache_read_tokens = ?8,
                             cache_write_tokens = ?9, reason = NULL, updated_ms = ?10 {guard}"
                            ),
                            params![
                                from.0,
                                from.1,
                                from.2,
                                text,
                                billing.as_str(),
                                to_i64(usage.input_tokens),
                                to_i64(usage.output_tokens),
                                to_i64(usage.cache_read_tokens),
                                to_i64(usage.cache_write_tokens),
                                at
                            ],
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
                            tx.execute(
                                &format!(
                                    "UPDATE deferred_items SET state = 'queued', batch_id = NULL,
                                 {counter} = {counter} + 1, reason = ?4, updated_ms = ?5 {guard}"
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
                             updated_ms = ?5 {guard}"
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
                let op = "read the deferred queue";
                let conn = inner.conn();
                let mut status = QueueStatus::default();
                let mut counts = conn
                    .prepare_cached("SELECT state, count(*) FROM deferred_items GROUP BY state")
                    .map_err(fail(inner, op))?;
                let rows = counts
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                    .map_err(fail(inner, op))?;
                for row in rows {
                    let (state, n) = row.map_err(fail(inner, op))?;
                    let n = n.max(0) as u64;
                    match QueueState::parse(&state) {
                        Some(QueueState::Queued) => status.queued = n,
                        Some(QueueState::Submitted) => status.submitted = n,
                        Some(QueueState::Done) => status.done = n,
                        Some(QueueState::Failed) => status.failed = n,
                        None => {}
                    }
                }
                status.oldest_unfinished = conn
                    .query_row(
                        "SELECT id, created_ms, state FROM deferred_items
                     WHERE state IN ('queued', 'submitted') ORDER BY id LIMIT 1",
                        [],
                        |r| {
                            Ok((
                                r.get::<_, i64>(0)?,
                                r.get::<_, i64>(1)?,
                                r.get::<_, String>(2)?,
                            ))
                        },
                    )
                    .optional()
                    .map_err(fail(inner, op))?
                    .and_then(|(id, at, state)| {
                        Some((
                            format!("{CUSTOM_ID_PREFIX}{id}"),
                            at.max(0) as u64,
                            QueueState::parse(&state)?,
                        ))
                    });
                let mut batches = conn
                    .prepare_cached(
                        "SELECT batch_id, count(*), min(submitted_ms) FROM deferred_items
                     WHERE state = 'submitted' GROUP BY batch_id ORDER BY min(submitted_ms)",
                    )
                    .map_err(fail(inner, op))?;
                status.open_batches = batches
                    .query_map([], |r| {
                        Ok(OpenBatch {
                            batch_id: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                            items: r.get::<_, i64>(1)?.max(0) as u64,
                            submitted_ms: r.get::<_, Option<i64>>(2)?.unwrap_or(0).max(0) as u64,
                        })
                    })
                    .map_err(fail(inner, op))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(fail(inner, op))?;
                let mut usage = conn
                    .prepare_cached(
                        "SELECT billing, sum(input_tokens), sum(output_tokens),
                     sum(cache_read_tokens), sum(cache_write_tokens)
                     FROM deferred_items WHERE state = 'done' GROUP BY billing",
                    )
                    .map_err(fail(inner, op))?;
                let rows = usage
                    .query_map([], |r| {
                        let n = |i: usize| -> rusqlite::Result<u64> {
                            Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0).max(0) as u64)
                        };
                        Ok((
                            r.get::<_, Option<String>>(0)?,
                            Usage {
                                input_tokens: n(1)?,
                                output_tokens: n(2)?,
                                cache_read_tokens: n(3)?,
                                cache_write_tokens: n(4)?,
                            },
                        ))
                    })
                    .map_err(fail(inner, op))?;
                for row in rows {
                    match row.map_err(fail(inner, op))? {
                        (Some(b), u) if b == "batch" => status.batch_usage = u,
                        (Some(b), u) if b == "sync" => status.sync_usage = u,
                        _ => {}
                    }
                }
                Ok(status)
            }),
        )
    }

    fn events(&self, id: i64) -> BoxFuture<'_, Result<Vec<QueueEvent>, StoreError>> {
        Box::pin(
            self.run("read the deferred queue".to_owned(), move |inner| {
                let op = "read the deferred queue";
                let conn = inner.conn();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT at_ms, state, batch_id, detail FROM deferred_events
                     WHERE item_id = ?1 ORDER BY rowid",
                    )
                    .map_err(fail(inner, op))?;
                let rows = stmt
                    .query_map([id], |r| {
                        let state: String = r.get(1)?;
                        Ok(QueueEvent {
                            at_ms: r.get::<_, i64>(0)?.max(0) as u64,
                            state: QueueState::parse(&state).unwrap_or(QueueState::Failed),
                            batch_id: r.get(2)?,
                            detail: r.get(3)?,
                        })
                    })
                    .map_err(fail(inner, op))?;
                rows.collect::<Result<Vec<_>, _>>().map_err(fail(inner, op))
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_item(page: &str) -> NewDeferred {
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
            conn.execute_batch("DROP TABLE deferred_items; DROP TABLE deferred_events;")
                .unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let id = store.enqueue(vec![new_item("pg_m")]).await.unwrap()[0];
        assert_eq!(store.queued(5).await.unwrap()[0].id, id);
        let _ = std::fs::remove_dir_all(&dir);
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
