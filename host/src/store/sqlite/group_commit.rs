//! Group commit: the SQLite store's writes of pages and deferred requests.
//!
//! Callers encode their page (JSON and id) themselves and queue it ([`Write::Page`]); a
//! deferred request is queued the same way ([`Write::Deferred`]). One flusher at a time, on
//! the blocking pool, writes everything queued in one transaction (one fsync, `synchronous =
//! FULL`) and answers each caller. Two things make a compaction pay one commit:
//!
//! - a **staged** page ([`PageStore::stage_page`](crate::store::PageStore::stage_page)) waits
//!   in the queue until something needs it written: its own receipt awaited, or a deferred
//!   request queued after it, which is then written in the same transaction;
//! - the flusher **lingers** up to [`GROUP_LINGER`] for puts still encoding their page, so
//!   pages archived concurrently go out together.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};
use tamp_plugin_api::{FfiOption, Page};
use tokio::sync::oneshot;

use super::queue;
use super::{lock, now_secs, to_i64, Inner, SqliteStore};
use crate::store::queue::NewDeferred;
use crate::store::rows::{
    self, encode_messages, NewPageRow, Value, ENCODE_INLINE_MAX, PAGE_INSERT_COLUMNS,
    PAGE_INSERT_VALUES,
};
use crate::store::search::searchable_text;
use crate::store::{NewPage, StoreError, StoredPage};

/// How long a flusher waits for puts that are still encoding their page before it commits
/// without them. A compaction archives its pages concurrently: waiting the millisecond or two
/// their encoding takes puts them all in one commit, where starting at once would pay a
/// second and third fsync.
const GROUP_LINGER: Duration = Duration::from_millis(3);

/// The writes waiting for the flusher, and the flusher's state.
pub(super) struct WriteQueue {
    pending: Mutex<Vec<Write>>,
    /// Signalled (with `pending` locked) when a put stops encoding.
    encoded: Condvar,
    /// Puts still encoding their page: the flusher waits up to `linger` for them.
    encoding: AtomicUsize,
    /// [`GROUP_LINGER`], except in tests that must not depend on the machine's speed.
    linger: Duration,
    /// Whether a flusher is draining `pending`.
    flushing: AtomicBool,
    /// Transactions run (see [`SqliteStore::commits`]).
    commits: AtomicU64,
}

impl Default for WriteQueue {
    fn default() -> Self {
        WriteQueue {
            pending: Mutex::new(Vec::new()),
            encoded: Condvar::new(),
            encoding: AtomicUsize::new(0),
            linger: GROUP_LINGER,
            flushing: AtomicBool::new(false),
            commits: AtomicU64::new(0),
        }
    }
}

/// One write waiting for the flusher.
enum Write {
    Page(PendingPut),
    Deferred(PendingDeferred),
}

/// A page to write and where to say it is written (its id the caller already has).
struct PendingPut {
    page: NewPage,
    /// `(page id, canonical JSON)`.
    encoded: (String, String),
    /// What the page is searched by (see [`crate::store::search`]).
    text: String,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// Deferred requests to queue and where to send their item ids.
struct PendingDeferred {
    items: Vec<NewDeferred>,
    /// Each item's request, as JSON.
    requests: Vec<String>,
    reply: oneshot::Sender<Result<Vec<i64>, StoreError>>,
}

/// What a write's caller is told once its transaction commits.
enum Answer {
    Page(Result<(), StoreError>),
    Deferred(Result<Vec<i64>, StoreError>),
}

impl Write {
    /// Tells the caller `outcome`: the write's own answer, or why its transaction failed.
    fn answer(self, outcome: Result<Answer, StoreError>) {
        // A caller that stopped waiting is not an error of the batch.
        match (self, outcome) {
            (Write::Page(put), Ok(Answer::Page(result))) => drop(put.reply.send(result)),
            (Write::Page(put), Err(e)) => drop(put.reply.send(Err(e))),
            (Write::Deferred(d), Ok(Answer::Deferred(result))) => drop(d.reply.send(result)),
            (Write::Deferred(d), Err(e)) => drop(d.reply.send(Err(e))),
            _ => unreachable!("answers are made in the batch's order, one per write"),
        }
    }
}

impl SqliteStore {
    /// How many transactions have written pages and queued deferred requests: concurrent
    /// writes share one.
    pub fn commits(&self) -> u64 {
        self.inner.writes.commits.load(Ordering::Relaxed)
    }

    /// Encodes `page` (large pages on the blocking pool) and queues it for the flusher,
    /// without starting one; `written` answers once it is written.
    pub(super) async fn queue_page(
        &self,
        page: NewPage,
    ) -> Result<(String, oneshot::Receiver<Result<(), StoreError>>), StoreError> {
        // Serializing and hashing is CPU work done by the caller, so concurrent puts spread
        // it over the runtime's threads; the flusher only runs SQL.
        let encoding = Encoding::start(&self.inner.writes);
        let encode = |page: NewPage| {
            let encoded = encode_messages(&page.messages);
            let text = searchable_text(&page.messages);
            (page, encoded, text)
        };
        let (page, encoded, text) = if page.messages.len() > ENCODE_INLINE_MAX {
            self.run("encode a page".to_owned(), move |_| Ok(encode(page)))
                .await?
        } else {
            encode(page)
        };
        let id = encoded.0.clone();
        let (reply, written) = oneshot::channel();
        lock(&self.inner.writes.pending).push(Write::Page(PendingPut {
            page,
            encoded,
            text,
            reply,
        }));
        drop(encoding);
        Ok((id, written))
    }

    /// Queues deferred requests (`requests`: each item's as JSON) behind the pages staged
    /// before them, and writes them all in one transaction.
    pub(in crate::store) async fn queue_deferred(
        &self,
        items: Vec<NewDeferred>,
        requests: Vec<String>,
    ) -> Result<Vec<i64>, StoreError> {
        let (reply, answer) = oneshot::channel();
        lock(&self.inner.writes.pending).push(Write::Deferred(PendingDeferred {
            items,
            requests,
            reply,
        }));
        self.flush().await?;
        answer
            .await
            .unwrap_or_else(|_| Err(self.writer_stopped("queue deferred requests")))
    }

    /// Starts a flusher, unless one is running (which will take what is queued now).
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        if self.inner.writes.flushing.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let inner = Arc::clone(&self.inner);
        let flushed = self
            .run("write pages".to_owned(), move |_| {
                flush_pending(&inner);
                Ok(())
            })
            .await;
        if flushed.is_err() {
            // The flusher never ran (the runtime is shutting down): let a later write start
            // one rather than wait forever.
            self.inner.writes.flushing.store(false, Ordering::Release);
        }
        flushed
    }

    pub(super) fn writer_stopped(&self, operation: &str) -> StoreError {
        StoreError::backend(
            &self.inner.location,
            operation,
            "the writer stopped before answering",
        )
    }
}

/// A page still waiting in the queue, as a reader holding the connection would load it: the
/// flusher takes its batch only with the connection held, so such a reader finds every page
/// either queued or committed, never in between.
pub(super) fn queued_page(writes: &WriteQueue, id: &str) -> Option<StoredPage> {
    lock(&writes.pending).iter().find_map(|write| match write {
        Write::Page(put) if put.encoded.0 == id => Some(StoredPage {
            page: Page {
                id: id.into(),
                thread_id: FfiOption::from(put.page.thread_id.clone().map(Into::into)),
                strategy: put.page.strategy.as_str().into(),
                messages: put.page.messages.clone().into(),
                metadata_json: put.page.metadata_json.as_str().into(),
                created_at: now_secs(),
            },
            source_format: put.page.source_format.clone(),
        }),
        _ => None,
    })
}

/// Drains the queue, a batch per transaction, until it stays empty.
fn flush_pending(inner: &Inner) {
    let writes = &inner.writes;
    loop {
        wait_for_encodings(writes, writes.linger);
        // The connection before the batch: see `queued_page`.
        let mut conn = inner.conn();
        let batch = std::mem::take(&mut *lock(&writes.pending));
        if batch.is_empty() {
            drop(conn);
            writes.flushing.store(false, Ordering::Release);
            // A write may have queued between the take and the store: if so, and no other
            // flusher has started since, keep going.
            if lock(&writes.pending).is_empty() || writes.flushing.swap(true, Ordering::AcqRel) {
                return;
            }
            continue;
        }
        write_batch(inner, &mut conn, batch);
    }
}

/// Waits up to `linger` while puts are still encoding their page.
fn wait_for_encodings(writes: &WriteQueue, linger: Duration) {
    let deadline = Instant::now() + linger;
    let mut pending = lock(&writes.pending);
    while writes.encoding.load(Ordering::Acquire) > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        pending = writes
            .encoded
            .wait_timeout(pending, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Counts a put as encoding while it lives: the flusher waits for it (see
/// [`wait_for_encodings`]).
struct Encoding<'a>(&'a WriteQueue);

impl<'a> Encoding<'a> {
    fn start(writes: &'a WriteQueue) -> Self {
        writes.encoding.fetch_add(1, Ordering::AcqRel);
        Encoding(writes)
    }
}

impl Drop for Encoding<'_> {
    fn drop(&mut self) {
        // Under the lock, so a flusher between its check and its wait cannot miss the signal.
        let _pending = lock(&self.0.pending);
        self.0.encoding.fetch_sub(1, Ordering::AcqRel);
        self.0.encoded.notify_all();
    }
}

fn write_batch(inner: &Inner, conn: &mut Connection, batch: Vec<Write>) {
    // A store file deleted or replaced while open would take this commit and lose it at
    // close (a log removed, at a crash): refuse, so no page is acknowledged that a restart
    // would not find.
    if let Err(error) = inner.check_file("write pages") {
        inner.committed_durably(conn);
        for write in batch {
            write.answer(Err(error.clone()));
        }
        return;
    }
    let committed = (|| -> Result<Vec<Answer>, rusqlite::Error> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut answers = Vec::with_capacity(batch.len());
        {
            let mut insert = tx.prepare_cached(&format!(
                "INSERT OR IGNORE INTO pages ({PAGE_INSERT_COLUMNS}, created_at)
                 VALUES ({}, ?{})",
                rows::placeholders('?', 1, PAGE_INSERT_VALUES),
                PAGE_INSERT_VALUES + 1
            ))?;
            let mut index =
                tx.prepare_cached("INSERT INTO page_text (page_id, body) VALUES (?1, ?2)")?;
            for write in &batch {
                answers.push(match write {
                    Write::Page(put) => {
                        let (id, json) = &put.encoded;
                        let row = NewPageRow::new(id, json, &put.page);
                        let created_at = Value::Int(to_i64(now_secs()));
                        let values = row.values().into_iter().chain([created_at]);
                        // A page written before (the same messages) is indexed already.
                        let written = insert
                            .execute(rusqlite::params_from_iter(values))
                            .and_then(|inserted| match inserted {
                                0 => Ok(()),
                                _ => index.execute((id, &put.text)).map(drop),
                            })
                            .map_err(|e| {
                                StoreError::backend(&inner.location, format!("write page {id}"), e)
                            });
                        Answer::Page(written)
                    }
                    Write::Deferred(deferred) => {
                        // A savepoint, so a request that fails halfway leaves nothing behind
                        // while the rest of the batch still commits.
                        tx.execute_batch("SAVEPOINT deferred")?;
                        let queued = queue::insert_items(&tx, &deferred.items, &deferred.requests);
                        tx.execute_batch(if queued.is_ok() {
                            "RELEASE deferred"
                        } else {
                            "ROLLBACK TO deferred; RELEASE deferred"
                        })?;
                        Answer::Deferred(queued.map_err(|e| {
                            StoreError::backend(&inner.location, "queue deferred requests", e)
                        }))
                    }
                });
            }
        }
        tx.commit()?;
        inner.writes.commits.fetch_add(1, Ordering::Relaxed);
        Ok(answers)
    })();
    match committed {
        // The log removed between the check and the commit: acknowledged only once what it
        // holds is in the store file.
        Ok(_) if !inner.committed_durably(conn) => {
            let error = inner.check_file("write pages").err().unwrap_or_else(|| {
                StoreError::backend(
                    &inner.location,
                    "write pages",
                    "the write-ahead log was lost and what it held could not be copied into \
                     the store file",
                )
            });
            for write in batch {
                write.answer(Err(error.clone()));
            }
        }
        Ok(answers) => {
            for (write, answer) in batch.into_iter().zip(answers) {
                write.answer(Ok(answer));
            }
        }
        Err(e) => {
            let error = StoreError::backend(&inner.location, "write pages", e);
            for write in batch {
                write.answer(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tamp_plugin_api::{Message, Role};

    use super::*;
    use crate::store::queue::DeferredQueue;
    use crate::store::sqlite::queue::tests::new_item;
    use crate::store::{PageStore, SqliteStore};

    fn new_page(text: &str, messages: usize) -> NewPage {
        NewPage {
            thread_id: Some("thread-1".into()),
            strategy: "batch-deferred".into(),
            messages: (0..messages)
                .map(|m| Message::text(Role::User, format!("{text} {m} {}", "y".repeat(500))))
                .collect(),
            metadata_json: String::new(),
            source_format: None,
        }
    }

    fn pending_put(text: &str) -> Write {
        let page = new_page(text, 1);
        let encoded = encode_messages(&page.messages);
        let text = searchable_text(&page.messages);
        // The answer is not awaited here.
        let (reply, _) = oneshot::channel();
        Write::Page(PendingPut {
            page,
            encoded,
            text,
            reply,
        })
    }

    fn count(store: &SqliteStore, table: &str) -> i64 {
        store
            .inner
            .conn()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_flusher_waits_for_puts_still_encoding() {
        let store = SqliteStore::in_memory().unwrap();
        let writes = &store.inner.writes;
        lock(&writes.pending).push(pending_put("first"));
        let encoding = Encoding::start(writes);
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                lock(&writes.pending).push(pending_put("second"));
                drop(encoding);
            });
            // A long linger, so the test does not depend on the machine's speed: the
            // flusher goes on when the encoding put arrives, not when the linger ends.
            wait_for_encodings(writes, Duration::from_secs(30));
            assert_eq!(
                lock(&writes.pending).len(),
                2,
                "the put that was encoding joins the batch"
            );
        });
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_flusher_stops_waiting_after_the_linger() {
        let store = SqliteStore::in_memory().unwrap();
        let writes = &store.inner.writes;
        lock(&writes.pending).push(pending_put("first"));
        let stuck = Encoding::start(writes);
        let started = Instant::now();
        wait_for_encodings(writes, Duration::from_millis(20));
        assert!(started.elapsed() >= Duration::from_millis(20));
        drop(stuck);
        assert_eq!(writes.encoding.load(Ordering::Acquire), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pages_of_one_compaction_share_a_commit() {
        let mut store = SqliteStore::in_memory().unwrap();
        // A linger no machine's encoding outlasts, so the count below is exact.
        Arc::get_mut(&mut store.inner).unwrap().writes.linger = Duration::from_secs(30);
        // Five pages large enough to be encoded on the blocking pool, put at once as the
        // plugin SDK's `archive_pages` does.
        let pages = (0..5).map(|p| store.put_page(new_page(&format!("page {p}"), 100)));
        let started = Instant::now();
        // A put whose encoding ends before its first poll returns goes on to queue its page
        // and start the flusher while the later puts have not started encoding yet: held
        // here, the flusher waits until every put has been polled once (and so counted).
        let hold = Encoding::start(&store.inner.writes);
        let mut puts = Box::pin(futures::future::join_all(pages));
        assert!(futures::poll!(&mut puts).is_pending());
        drop(hold);
        let ids = puts.await;
        let took = started.elapsed();
        let failed: Vec<_> = ids.iter().filter_map(|id| id.as_ref().err()).collect();
        assert!(failed.is_empty(), "puts failed: {failed:?}");
        assert_eq!(count(&store, "pages"), 5);
        // Every put is counted as encoding before the flusher may take a batch, so the first
        // to finish waits for the others. Without that wait it commits alone.
        assert_eq!(store.commits(), 1, "five puts in {took:?}");
    }

    #[tokio::test]
    async fn staged_pages_are_written_with_the_deferred_requests_queued_after_them() {
        let store = SqliteStore::in_memory().unwrap();
        let (first, first_written) = store.stage_page(new_page("first", 3)).await.unwrap();
        let (second, second_written) = store.stage_page(new_page("second", 100)).await.unwrap();
        // Staged, not written, yet readable.
        assert_eq!(count(&store, "pages"), 0);
        assert_eq!(store.commits(), 0);
        let read = store.get_page(&second).await.unwrap();
        assert_eq!(read.page.messages.len(), 100);
        assert_eq!(read.page.strategy.as_str(), "batch-deferred");

        let ids = store
            .enqueue(vec![new_item(&first), new_item(&second)])
            .await
            .unwrap();
        assert_eq!(ids.len(), 2);
        assert_eq!(store.commits(), 1, "pages and requests in one transaction");
        assert_eq!(count(&store, "pages"), 2);
        assert_eq!(count(&store, "deferred_items"), 2);
        first_written.await.unwrap();
        second_written.await.unwrap();
        assert_eq!(store.commits(), 1, "nothing left to write");
    }

    #[tokio::test]
    async fn awaiting_a_staged_page_writes_it() {
        let store = SqliteStore::in_memory().unwrap();
        let (id, written) = store.stage_page(new_page("alone", 2)).await.unwrap();
        assert_eq!(count(&store, "pages"), 0);
        written.await.unwrap();
        assert_eq!(count(&store, "pages"), 1);
        assert_eq!(store.get_page(&id).await.unwrap().page.messages.len(), 2);
    }

    #[tokio::test]
    async fn deferred_requests_that_fail_leave_nothing_and_the_pages_still_commit() {
        let store = SqliteStore::in_memory().unwrap();
        // Queuing an item writes its row, then its event: without the events table the
        // second insert fails after the first succeeded.
        store
            .inner
            .conn()
            .execute_batch("DROP TABLE deferred_events")
            .unwrap();
        let (id, written) = store.stage_page(new_page("kept", 2)).await.unwrap();
        let err = store.enqueue(vec![new_item(&id)]).await.unwrap_err();
        assert!(err.to_string().contains("queue deferred requests"), "{err}");
        written.await.unwrap();
        assert_eq!(count(&store, "pages"), 1);
        assert_eq!(
            count(&store, "deferred_items"),
            0,
            "the half-written item is undone"
        );
    }
}
