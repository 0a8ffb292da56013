//! The deferred-work queue: summary requests a strategy asked the host to finish later,
//! through a batch API (see `crate::deferred`). This module is the backend-neutral part: the
//! [`DeferredQueue`] trait, its types and the SQL both stores share (their row mapping is in
//! `store::rows`); the stores implement it in `store::sqlite::queue` and
//! `store::postgres::queue`.
//!
//! Each item moves `queued → submitted(batch) → done(text, usage) | failed(reason)`, and may
//! go back from `submitted` to `queued` (an errored result retried, a canceled or expired one
//! re-queued). Every transition is one SQL statement guarded by the state the caller saw
//! (`state` and `batch_id`), and is written, with a row in `deferred_events`, before the
//! worker moves on: after a crash nothing lives only in memory, and applying the same batch
//! result twice changes nothing the second time (the item is no longer `submitted` in that
//! batch).
//!
//! **Leases** let several workers (one per host, on a shared store) work one queue: a worker
//! claims queued items ([`DeferredQueue::claim_queued`]) or open batches
//! ([`DeferredQueue::claim_open_batches`]) for a while; nobody else gets them while the lease
//! is live, so no item is ever in two batches, and when a worker dies its lease runs out and
//! another worker takes its items over. Leases only decide who works an item; the guarded
//! transitions still decide what happens to it, so a result is applied once even when two
//! workers hold it in turn. Every transition clears the item's lease.
//!
//! Both stores implement this trait with the same observable results (the PostgreSQL store
//! takes lease times from the database clock, as replicas' clocks differ).

use futures::future::BoxFuture;
use serde::Serialize;
use tamp_plugin_api::{LlmRequest, Usage};

use super::StoreError;

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

    pub(crate) fn parse(s: &str) -> Option<Self> {
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Billing::Batch => "batch",
            Billing::Sync => "sync",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "batch" => Some(Billing::Batch),
            "sync" => Some(Billing::Sync),
            _ => None,
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
    /// The worker holding the item (see [`Lease`]), if any; its lease may have run out.
    pub lease_owner: Option<String>,
    /// Until when `lease_owner` holds it (ms since the epoch, the store's clock).
    pub lease_until_ms: Option<u64>,
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

/// Who claims queue work, and for how long. The owner names one worker (e.g. host and
/// process id); a worker renews its leases by claiming again before they run out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub duration: std::time::Duration,
}

impl Lease {
    /// The duration in whole milliseconds, as stored.
    pub(crate) fn duration_ms(&self) -> i64 {
        i64::try_from(self.duration.as_millis()).unwrap_or(i64::MAX / 4)
    }
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

/// The persistent queue. Object-safe; implemented by the SQLite store (`store::sqlite::queue`)
/// and the PostgreSQL store (`store::postgres::queue`).
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

    /// Applies `to` to item `id` if it is still as `expect` says; whether it was. Clears the
    /// item's lease.
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

    /// Claims at most `limit` queued items, oldest first, that no other owner holds under a
    /// live lease, and leases them to `lease.owner` until now + `lease.duration` (items the
    /// owner already holds are claimed again, renewing their lease). While a lease is live no
    /// other caller gets those items.
    fn claim_queued(
        &self,
        lease: Lease,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<QueueItem>, StoreError>>;

    /// Marks `item_ids` submitted in `batch_id`, only those still queued and leased by
    /// `lease.owner` (a worker whose lease ran out and was taken over marks nothing), and
    /// renews their lease (the submitter polls its batch). Returns how many were marked.
    fn mark_submitted_leased(
        &self,
        item_ids: Vec<i64>,
        batch_id: String,
        lease: Lease,
    ) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// Claims the open batches to poll: every batch with submitted items none of which
    /// another owner holds under a live lease; leases all its submitted items to
    /// `lease.owner` until now + `lease.duration`, and returns them (oldest first, as in
    /// [`DeferredQueue::status`]). A batch whose worker died is claimed by another once the
    /// lease runs out.
    fn claim_open_batches(&self, lease: Lease)
        -> BoxFuture<'_, Result<Vec<OpenBatch>, StoreError>>;

    /// Drops every lease `owner` holds (a graceful shutdown), so others need not wait for
    /// them to run out. Returns how many items were released.
    fn release(&self, owner: String) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// Reads every item back (its request, state and result), naming each one that does not.
    fn verify_queue(&self) -> BoxFuture<'_, Result<super::RecordCheck, StoreError>>;
}

/// What every transition sets: the item's lease ends with it.
pub(super) const UNLEASE: &str = "lease_owner = NULL, lease_until_ms = NULL";
