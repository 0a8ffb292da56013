//! The PostgreSQL store against a real server (`support/postgres.rs`): pages, summary cache
//! and deferred queue shared by two separately opened stores on one database, as two
//! `tamp serve` replicas would have; the queue's leases under concurrent claimers; the same
//! queue scenario, and the console's activity record, on SQLite and PostgreSQL giving the same
//! results; migrations; and a database that goes down and comes back.
//!
//! The tests share one server per test process, each in a database of its own; the test
//! that stops the server starts its own.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tamp_e2e::assert_contains;
use tamp_e2e::postgres::PgServer;
use tamp_e2e::scratch_dir;
use tamp_host::store::activity::{
    ActivityStore, CompactionRecord, Pruned, RequestRecord, ThreadQuery, ThreadTotals,
};
use tamp_host::store::cache::{CacheScope, SummaryCache};
use tamp_host::store::queue::{
    Billing, DeferredQueue, Expect, Lease, NewDeferred, OpenBatch, QueueEvent, QueueItem,
    QueueState, QueueStatus, RequeueKind, Transition,
};
use tamp_host::store::{
    self, page_id, short_ref, NewPage, PageSearch, PageStore, PostgresStore, Scope, SqliteStore,
    StoreError, StoreSpec,
};
use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Message, Role, Usage};

/// Two stores with pools of their own on `url`: two hosts.
fn replicas(url: &str) -> (PostgresStore, PostgresStore) {
    (
        PostgresStore::open_unshared(url, 4).expect("open replica A"),
        PostgresStore::open_unshared(url, 4).expect("open replica B"),
    )
}

fn database(name: &str) -> String {
    PgServer::shared().create_database(name)
}

fn messages(tag: &str) -> Vec<Message> {
    vec![
        Message::text(Role::User, format!("question {tag} — ünïcødé 👋")),
        Message::text(Role::Assistant, format!("answer {tag}")),
    ]
}

fn new_page(messages: Vec<Message>, strategy: &str) -> NewPage {
    NewPage {
        thread_id: Some("thread-1".into()),
        strategy: strategy.into(),
        messages,
        metadata_json: r#"{"k":1}"#.into(),
        source_format: Some("anthropic".into()),
    }
}

fn new_item(page: &str) -> NewDeferred {
    NewDeferred {
        page_id: page.into(),
        strategy: "batch-deferred".into(),
        thread_id: Some("t".into()),
        request: LlmRequest::new("sys", format!("summarize {page}"), 100),
    }
}

fn lease(owner: &str, duration: Duration) -> Lease {
    Lease {
        owner: owner.into(),
        duration,
    }
}

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

fn done(text: &str) -> Transition {
    Transition::Done {
        text: text.into(),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 10,
            ..Usage::default()
        },
        billing: Billing::Batch,
    }
}

fn ids(items: &[QueueItem]) -> Vec<i64> {
    items.iter().map(|i| i.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_are_content_addressed_and_shared_between_two_replicas() {
    let url = database("pages_shared");
    let (a, b) = replicas(&url);
    assert!(!a.shares_pool_with(&b));

    let written = messages("one");
    let id = a
        .put_page(new_page(written.clone(), "anchored-structured"))
        .await
        .unwrap();
    assert_eq!(id, page_id(&written), "the same id as every store gives");
    let read = b.get_page(&id).await.unwrap();
    assert_eq!(read.page.messages.as_slice(), written.as_slice());
    // Found by its short ref too, as a ledger names it.
    let by_short_ref = b.get_page(short_ref(&id)).await.unwrap();
    assert_eq!(by_short_ref.page.id.as_str(), id);
    let unknown = if id.starts_with("pg_000000000000") {
        "pg_ffffffffffff"
    } else {
        "pg_000000000000"
    };
    assert!(matches!(
        b.get_page(unknown).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    assert_eq!(
        serde_json::to_vec(&read.page.messages).unwrap(),
        serde_json::to_vec(&written).unwrap(),
        "messages come back byte-equal"
    );
    assert_eq!(read.page.strategy.as_str(), "anchored-structured");
    assert_eq!(read.page.metadata_json.as_str(), r#"{"k":1}"#);
    assert_eq!(read.source_format.as_deref(), Some("anthropic"));
    assert!(read.page.created_at > 1_600_000_000);

    // The other replica archives the same messages: one page, the first write kept.
    let again = b
        .put_page(new_page(written.clone(), "someone-else"))
        .await
        .unwrap();
    assert_eq!(again, id);
    assert_eq!(
        a.get_page(&id).await.unwrap().page.strategy.as_str(),
        "anchored-structured"
    );

    // Both replicas racing to archive the same 10 conversations, 5 times each.
    let mut tasks = Vec::new();
    for (n, store) in [a.clone(), b.clone()]
        .into_iter()
        .cycle()
        .take(10)
        .enumerate()
    {
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for round in 0..5 {
                let tag = format!("race {}", (n + round) % 10);
                ids.push(store.put_page(new_page(messages(&tag), "s")).await.unwrap());
            }
            ids
        }));
    }
    let mut raced = BTreeSet::new();
    for task in tasks {
        raced.extend(task.await.unwrap());
    }
    assert_eq!(raced.len(), 10);
    let rows = PgServer::shared().psql("pages_shared", "SELECT count(*) FROM pages");
    assert_eq!(rows, "11", "one row per distinct content");
    let listed = b.list_pages(100).await.unwrap();
    assert_eq!(listed.len(), 11);
    assert_eq!(a.list_pages(3).await.unwrap().len(), 3);
    assert!(listed.iter().any(|p| p.id == id && p.message_count == 2));

    let missing = b.get_page("pg_0123456789abcdef").await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_cached_by_one_replica_is_a_hit_on_the_other() {
    let url = database("cache_shared");
    let (a, b) = replicas(&url);
    let scope = CacheScope::new(Some("t"), "s", "c");
    let key = scope.request_key("scripted", &LlmRequest::new("", "summarize", 50));
    assert_eq!(b.get_answer(key).await.unwrap(), None);
    a.put_answer(key, answer("first")).await.unwrap();
    assert_eq!(b.get_answer(key).await.unwrap(), Some(answer("first")));
    b.put_answer(key, answer("second")).await.unwrap();
    assert_eq!(
        a.get_answer(key).await.unwrap(),
        Some(answer("first")),
        "the first answer stands"
    );

    let conversation: Vec<Message> = (0..1_200)
        .map(|i| Message::text(Role::User, format!("message {i}")))
        .collect();
    let keys = scope.range_keys(&conversation);
    assert_eq!(b.longest_range(keys.clone()).await.unwrap(), None);
    for len in [3, 450, 700] {
        a.put_range(keys[len - 1], len, format!("summary of {len}"))
            .await
            .unwrap();
    }
    assert_eq!(
        b.longest_range(keys.clone()).await.unwrap(),
        Some((700, "summary of 700".to_string()))
    );
    assert_eq!(
        b.longest_range(keys[..600].to_vec()).await.unwrap(),
        Some((450, "summary of 450".to_string()))
    );
    b.put_range(keys[2], 3, "newer summary of 3".into())
        .await
        .unwrap();
    assert_eq!(
        a.longest_range(keys[..10].to_vec()).await.unwrap(),
        Some((3, "newer summary of 3".to_string()))
    );
    assert_eq!(a.longest_range(Vec::new()).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_is_idempotent_across_replicas() {
    let url = database("queue_enqueue");
    let (a, b) = replicas(&url);
    let pages: Vec<String> = (0..200).map(|n| format!("pg_{n:04}")).collect();
    let items = |range: std::ops::Range<usize>| -> Vec<NewDeferred> {
        pages[range].iter().map(|p| new_item(p)).collect()
    };
    // Overlapping halves queued by both hosts at once, plus a duplicate within one call.
    let (from_a, from_b) = tokio::join!(a.enqueue(items(0..150)), b.enqueue(items(50..200)));
    let (from_a, from_b) = (from_a.unwrap(), from_b.unwrap());
    assert_eq!(
        from_a[50..],
        from_b[..100],
        "the overlap has one id per item"
    );
    let mut twice = items(10..12);
    twice.push(new_item(&pages[10]));
    let again = b.enqueue(twice).await.unwrap();
    assert_eq!(again, vec![from_a[10], from_a[11], from_a[10]]);

    let status = a.status().await.unwrap();
    assert_eq!(status.queued, 200);
    let all: HashSet<i64> = from_a.iter().chain(&from_b).copied().collect();
    assert_eq!(all.len(), 200);
    let found = b
        .lookup(
            "batch-deferred".into(),
            vec![pages[199].clone(), "pg_never".into(), pages[0].clone()],
        )
        .await
        .unwrap();
    assert_eq!(found[0].as_ref().unwrap().id, from_b[149]);
    assert!(found[1].is_none());
    assert_eq!(
        found[2].as_ref().unwrap().request.prompt.as_str(),
        "summarize pg_0000"
    );
    for id in [from_a[60], from_a[0]] {
        let events = a.events(id).await.unwrap();
        assert_eq!(events.len(), 1, "one `queued` event per item: {events:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claimers_never_get_the_same_item_and_together_get_all() {
    let url = database("queue_claims");
    let (a, b) = replicas(&url);
    let pages: Vec<NewDeferred> = (0..1_000)
        .map(|n| new_item(&format!("pg_{n:05}")))
        .collect();
    let all: BTreeSet<i64> = a.enqueue(pages).await.unwrap().into_iter().collect();
    assert_eq!(all.len(), 1_000);

    // Four workers, two on each replica, each claiming 25 at a time and submitting them.
    let start = Arc::new(tokio::sync::Barrier::new(4));
    let workers: Vec<_> = [a.clone(), a.clone(), b.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(w, store)| {
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                let lease = lease(&format!("worker-{w}"), Duration::from_secs(60));
                start.wait().await;
                let mut mine = Vec::new();
                for round in 0.. {
                    let items = store.claim_queued(lease.clone(), 25).await.unwrap();
                    if items.is_empty() {
                        break;
                    }
                    assert!(items.iter().all(|i| i.state == QueueState::Queued
                        && i.lease_owner.as_deref() == Some(lease.owner.as_str())));
                    let batch = format!("batch-{w}-{round}");
                    let marked = store
                        .mark_submitted_leased(ids(&items), batch, lease.clone())
                        .await
                        .unwrap();
                    assert_eq!(marked, items.len(), "every claimed item is still ours");
                    mine.extend(ids(&items));
                }
                mine
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut per_worker = Vec::new();
    for worker in workers {
        let mine = worker.await.unwrap();
        per_worker.push(mine.len());
        for id in mine {
            assert!(seen.insert(id), "item {id} was claimed twice");
        }
    }
    assert_eq!(seen, all, "every item claimed once");
    assert!(
        per_worker.iter().filter(|n| **n > 0).count() >= 2,
        "the claimers did not overlap: {per_worker:?}"
    );
    let status = b.status().await.unwrap();
    assert_eq!((status.queued, status.submitted), (0, 1_000));
    for id in [*all.first().unwrap(), *all.last().unwrap(), 500] {
        let submitted = a
            .events(id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.state == QueueState::Submitted)
            .count();
        assert_eq!(submitted, 1, "item {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_taken_over_and_the_old_holder_cannot_submit() {
    let url = database("queue_takeover");
    let (a, b) = replicas(&url);
    let queued = a
        .enqueue((0..10).map(|n| new_item(&format!("pg_{n}"))).collect())
        .await
        .unwrap();
    let short = lease("replica-a", Duration::from_millis(1_000));
    let long = lease("replica-b", Duration::from_secs(60));

    let held_by_a = a.claim_queued(short.clone(), 5).await.unwrap();
    assert_eq!(ids(&held_by_a), queued[..5]);
    let until = held_by_a[0].lease_until_ms.unwrap();
    assert!(
        until > held_by_a[0].created_ms,
        "the lease ends in the future"
    );
    let held_by_b = b.claim_queued(long.clone(), 10).await.unwrap();
    assert_eq!(ids(&held_by_b), queued[5..], "A's live lease is respected");
    // Claiming again renews one's own items.
    assert_eq!(
        ids(&b.claim_queued(long.clone(), 10).await.unwrap()),
        queued[5..]
    );

    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let taken = b.claim_queued(long.clone(), 10).await.unwrap();
    assert_eq!(ids(&taken), queued, "A's expired items are B's now");
    assert_eq!(
        a.mark_submitted_leased(ids(&held_by_a), "batch-a".into(), short.clone())
            .await
            .unwrap(),
        0,
        "a lost lease submits nothing"
    );
    assert_eq!(
        b.mark_submitted_leased(queued.clone(), "batch-b".into(), long.clone())
            .await
            .unwrap(),
        10
    );
    let events = a.events(queued[0]).await.unwrap();
    let batches: Vec<_> = events.iter().map(|e| e.batch_id.clone()).collect();
    assert_eq!(batches, [None, Some("batch-b".to_string())], "{events:?}");
    assert!(a.claim_queued(short, 10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_batches_go_to_one_poller_and_are_taken_over_after_expiry() {
    let url = database("queue_batches");
    let (a, b) = replicas(&url);
    let queued = a
        .enqueue((0..6).map(|n| new_item(&format!("pg_{n}"))).collect())
        .await
        .unwrap();
    let short = lease("replica-a", Duration::from_millis(1_000));
    let long = lease("replica-b", Duration::from_secs(60));
    let mine = a.claim_queued(short.clone(), 3).await.unwrap();
    a.mark_submitted_leased(ids(&mine), "batch-a".into(), short.clone())
        .await
        .unwrap();
    let theirs = b.claim_queued(long.clone(), 3).await.unwrap();
    b.mark_submitted_leased(ids(&theirs), "batch-b".into(), long.clone())
        .await
        .unwrap();

    let names = |batches: Vec<OpenBatch>| -> Vec<String> {
        batches.into_iter().map(|b| b.batch_id).collect()
    };
    let polled = a.claim_open_batches(short.clone()).await.unwrap();
    assert_eq!(polled.len(), 1);
    assert_eq!(
        (polled[0].batch_id.as_str(), polled[0].items),
        ("batch-a", 3)
    );
    assert!(polled[0].submitted_ms > 0);
    assert_eq!(
        names(b.claim_open_batches(long.clone()).await.unwrap()),
        ["batch-b"]
    );

    // A stops renewing (it died): after its lease, B polls its batch too.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let mut taken = names(b.claim_open_batches(long.clone()).await.unwrap());
    taken.sort();
    assert_eq!(taken, ["batch-a", "batch-b"]);
    assert!(a
        .claim_open_batches(short.clone())
        .await
        .unwrap()
        .is_empty());
    let item = &b.in_batch("batch-a".into()).await.unwrap()[0];
    assert_eq!(item.lease_owner.as_deref(), Some("replica-b"));

    // A graceful shutdown hands everything back at once.
    assert_eq!(b.release("replica-b".into()).await.unwrap(), 6);
    assert_eq!(b.release("replica-b".into()).await.unwrap(), 0);
    let mut back = names(a.claim_open_batches(short).await.unwrap());
    back.sort();
    assert_eq!(back, ["batch-a", "batch-b"]);

    // Unleased batches claimed by both at once, in rounds of ten (each round's claimers
    // are new owners): each batch goes to exactly one.
    for round in 0..8 {
        let more = a
            .enqueue(
                (0..10)
                    .map(|n| new_item(&format!("pg_more_{round}_{n}")))
                    .collect(),
            )
            .await
            .unwrap();
        for (n, id) in more.iter().enumerate() {
            a.mark_submitted(vec![*id], format!("open-{round}-{n}"))
                .await
                .unwrap();
        }
        let (x, y) = tokio::join!(
            a.claim_open_batches(lease(&format!("x{round}"), Duration::from_secs(60))),
            b.claim_open_batches(lease(&format!("y{round}"), Duration::from_secs(60)))
        );
        let this_round = |claimed: Vec<OpenBatch>| -> BTreeSet<String> {
            let prefix = format!("open-{round}-");
            names(claimed)
                .into_iter()
                .filter(|n| n.starts_with(&prefix))
                .collect()
        };
        let (x, y) = (this_round(x.unwrap()), this_round(y.unwrap()));
        assert!(
            x.is_disjoint(&y),
            "a batch went to two pollers: {x:?} {y:?}"
        );
        assert_eq!(x.len() + y.len(), 10);
    }
    let _ = queued;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_applied_by_both_replicas_lands_once() {
    let url = database("queue_exactly_once");
    let (a, b) = replicas(&url);
    let queued = a
        .enqueue((0..50).map(|n| new_item(&format!("pg_{n}"))).collect())
        .await
        .unwrap();
    let owner = lease("replica-a", Duration::from_secs(60));
    let claimed = a.claim_queued(owner.clone(), 50).await.unwrap();
    assert_eq!(
        a.mark_submitted_leased(ids(&claimed), "batch-1".into(), owner)
            .await
            .unwrap(),
        50
    );
    let items = b.in_batch("batch-1".into()).await.unwrap();
    assert_eq!(ids(&items), queued);

    // Both replicas download the same results and apply each one, concurrently.
    let apply = |store: PostgresStore, items: Vec<QueueItem>| {
        tokio::spawn(async move {
            let mut applied = 0;
            for item in items {
                if store
                    .transition(
                        item.id,
                        Expect::of(&item),
                        done(&format!("summary {}", item.id)),
                    )
                    .await
                    .unwrap()
                {
                    applied += 1;
                }
            }
            applied
        })
    };
    let (x, y) = tokio::join!(apply(a.clone(), items.clone()), apply(b.clone(), items));
    assert_eq!(
        x.unwrap() + y.unwrap(),
        50,
        "each result applied exactly once"
    );
    let status = a.status().await.unwrap();
    assert_eq!((status.done, status.submitted), (50, 0));
    assert_eq!(status.batch_usage.input_tokens, 50 * 100);
    for n in [0, 49] {
        let id = queued[n];
        let events = b.events(id).await.unwrap();
        let states: Vec<QueueState> = events.iter().map(|e| e.state).collect();
        assert_eq!(
            states,
            [QueueState::Queued, QueueState::Submitted, QueueState::Done]
        );
        let item = b
            .lookup("batch-deferred".into(), vec![format!("pg_{n}")])
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        assert_eq!(item.id, id);
        assert_eq!(
            (item.lease_owner, item.lease_until_ms),
            (None, None),
            "done clears the lease"
        );
    }
}

/// Every observable result of one queue scenario, with the clock's values zeroed.
#[derive(Debug, PartialEq)]
struct Observed {
    returned: Vec<String>,
    status: QueueStatus,
    items: Vec<Option<QueueItem>>,
    events: Vec<Vec<QueueEvent>>,
}

async fn scenario(q: &dyn DeferredQueue) -> Observed {
    let pages: Vec<String> = (0..8).map(|n| format!("pg_{n}")).collect();
    let mut returned = Vec::new();
    let mut note = |what: &str, value: String| returned.push(format!("{what}: {value}"));
    let mut batch = pages.iter().map(|p| new_item(p)).collect::<Vec<_>>();
    batch.push(new_item(&pages[3]));
    let ids_ = q.enqueue(batch).await.unwrap();
    note("enqueue", format!("{ids_:?}"));
    let a = lease("a", Duration::from_secs(60));
    let b = lease("b", Duration::from_secs(60));
    let brief = lease("c", Duration::from_millis(1_000));

    let claimed_a = q.claim_queued(a.clone(), 3).await.unwrap();
    note("claim a", format!("{:?}", ids(&claimed_a)));
    let claimed_c = q.claim_queued(brief.clone(), 2).await.unwrap();
    note("claim c", format!("{:?}", ids(&claimed_c)));
    let claimed_b = q.claim_queued(b.clone(), 10).await.unwrap();
    note("claim b", format!("{:?}", ids(&claimed_b)));
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let took_over = q.claim_queued(b.clone(), 10).await.unwrap();
    note("claim b after c expired", format!("{:?}", ids(&took_over)));
    note(
        "c submits",
        q.mark_submitted_leased(ids(&claimed_c), "batch-c".into(), brief)
            .await
            .unwrap()
            .to_string(),
    );
    note(
        "a submits",
        q.mark_submitted_leased(ids(&claimed_a)[..2].to_vec(), "batch-a".into(), a.clone())
            .await
            .unwrap()
            .to_string(),
    );
    note(
        "b submits",
        q.mark_submitted_leased(ids(&took_over), "batch-b".into(), b.clone())
            .await
            .unwrap()
            .to_string(),
    );
    let polls_a = q.claim_open_batches(a.clone()).await.unwrap();
    note(
        "a polls",
        format!(
            "{:?}",
            polls_a
                .iter()
                .map(|b| (&b.batch_id, b.items))
                .collect::<Vec<_>>()
        ),
    );
    let polls_b = q.claim_open_batches(b.clone()).await.unwrap();
    note(
        "b polls",
        format!(
            "{:?}",
            polls_b
                .iter()
                .map(|b| (&b.batch_id, b.items))
                .collect::<Vec<_>>()
        ),
    );

    let in_a = q.in_batch("batch-a".into()).await.unwrap();
    let in_b = q.in_batch("batch-b".into()).await.unwrap();
    for (item, to) in [
        (&in_a[0], done("first")),
        (
            &in_a[1],
            Transition::Requeue {
                reason: "errored".into(),
                kind: RequeueKind::Attempt,
            },
        ),
        (
            &in_b[0],
            Transition::Failed {
                reason: "invalid request".into(),
            },
        ),
        (
            &in_b[1],
            Transition::Requeue {
                reason: "expired".into(),
                kind: RequeueKind::Requeue,
            },
        ),
        (&in_b[2], done("second")),
        // The same result again: no change.
        (&in_a[0], done("first")),
    ] {
        let changed = q.transition(item.id, Expect::of(item), to).await.unwrap();
        note("transition", format!("{} {changed}", item.id));
    }
    let sync = Transition::Done {
        text: "sync answer".into(),
        usage: Usage {
            input_tokens: 7,
            output_tokens: 3,
            cache_read_tokens: 1,
            cache_write_tokens: 2,
        },
        billing: Billing::Sync,
    };
    let queued_now = q.queued(100).await.unwrap();
    note("queued", format!("{:?}", ids(&queued_now)));
    let last = queued_now.last().unwrap();
    note(
        "sync fallback",
        q.transition(last.id, Expect::of(last), sync)
            .await
            .unwrap()
            .to_string(),
    );
    note(
        "release a",
        q.release("a".into()).await.unwrap().to_string(),
    );
    // The old worker's path, without leases.
    let first = q.queued(1).await.unwrap();
    note(
        "legacy submit",
        q.mark_submitted(ids(&first), "batch-legacy".into())
            .await
            .unwrap()
            .to_string(),
    );

    let mut status = q.status().await.unwrap();
    if let Some(oldest) = status.oldest_unfinished.as_mut() {
        oldest.1 = 0;
    }
    for batch in &mut status.open_batches {
        batch.submitted_ms = 0;
    }
    let mut items = q.lookup("batch-deferred".into(), pages).await.unwrap();
    for item in items.iter_mut().flatten() {
        item.created_ms = 0;
        item.updated_ms = 0;
        item.submitted_ms = item.submitted_ms.map(|_| 0);
        item.lease_until_ms = item.lease_until_ms.map(|_| 0);
    }
    let mut events = Vec::new();
    for id in ids_ {
        let mut list = q.events(id).await.unwrap();
        for event in &mut list {
            event.at_ms = 0;
        }
        events.push(list);
    }
    Observed {
        returned,
        status,
        items,
        events,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_queue_scenario_gives_the_same_results_on_sqlite_and_postgres() {
    let dir = scratch_dir("postgres-store-compare");
    let sqlite = SqliteStore::open(&dir.join("store.sqlite3")).unwrap();
    let postgres = PostgresStore::open_unshared(&database("queue_compare"), 2).unwrap();
    let (on_sqlite, on_postgres) = tokio::join!(scenario(&sqlite), scenario(&postgres));
    assert_eq!(on_sqlite.returned, on_postgres.returned);
    assert_eq!(on_sqlite.status, on_postgres.status);
    assert_eq!(on_sqlite.items, on_postgres.items);
    assert_eq!(on_sqlite.events, on_postgres.events);
    // The scenario exercised what it meant to.
    let s = &on_postgres.status;
    assert_eq!(
        (s.queued, s.submitted, s.done, s.failed),
        (1, 3, 3, 1),
        "{s:?}"
    );
    assert_eq!(s.sync_usage.cache_write_tokens, 2);
    assert!(
        on_postgres.returned.iter().any(|r| r == "c submits: 0"),
        "{:?}",
        on_postgres.returned
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn activity_request(thread: &str, at_ms: u64, tokens: Option<(u64, u64)>) -> RequestRecord {
    let mut r = RequestRecord {
        at_ms,
        server: "proxy".into(),
        route: "POST /v1/messages".into(),
        status: 200,
        duration_ms: 12,
        thread: Some(thread.into()),
        model: Some("claude-opus-5-5".into()),
        outcome: Some("unchanged".into()),
        ..RequestRecord::default()
    };
    r.set_tokens(tokens);
    r.set_budget(Some((10_000, 8_000, 5_000)));
    r
}

/// What the activity scenario read back, the store's request numbers left out.
#[derive(Debug, PartialEq)]
struct ActivitySeen {
    threads: Vec<ThreadTotals>,
    filtered: Vec<Vec<String>>,
    timeline: Vec<(bool, RequestRecord)>,
    compaction: Option<(RequestRecord, String, String)>,
    failed: Vec<RequestRecord>,
    pruned: Pruned,
    left: Vec<u64>,
    threads_left: Vec<ThreadTotals>,
}

/// Requests of three threads recorded in two batches (a compaction, a request forwarded
/// unread, a failure among them), read back every way the console reads them, then pruned.
async fn activity_scenario(store: &dyn ActivityStore) -> ActivitySeen {
    let mut compacted = activity_request("session:a", 4_000, Some((9_000, 3_000)));
    compacted.outcome = Some("compacted".into());
    compacted.pages = 2;
    compacted.prefix_kept = Some(1_000);
    (compacted.llm_input_tokens, compacted.llm_output_tokens) = (500, 80);
    compacted.llm_cost_micro_usd = Some(1_250);
    compacted.compaction = Some(CompactionRecord {
        report_json: "{\"stages\":[]}".into(),
        replacements_json: "[]".into(),
    });
    let mut unread = activity_request("session:a", 2_000, None);
    unread.tokens_at_most = Some(7_000);
    let mut failed = activity_request("session:c", 9_000, None);
    (failed.status, failed.error) = (502, Some("upstream_unreachable".into()));
    failed.model = None;
    store
        .record_requests(vec![
            activity_request("session:old", 500, Some((10, 10))),
            activity_request("session:a", 1_000, Some((5_000, 5_000))),
            unread,
            activity_request("session:a", 3_000, Some((6_000, 6_000))),
            compacted,
        ])
        .await
        .unwrap();
    // A second batch continues session:a's totals from the row the first one left.
    store
        .record_requests(vec![
            activity_request("session:a", 5_000, Some((9_500, 3_500))),
            activity_request("session:c", 6_000, Some((100, 100))),
            activity_request("session:c", 7_000, Some((120, 120))),
            failed,
        ])
        .await
        .unwrap();
    let query = |text: Option<&str>, compacted_only| ThreadQuery {
        text: text.map(str::to_string),
        compacted_only,
        limit: 10,
    };
    let threads = store.threads(query(None, false)).await.unwrap();
    let mut filtered = Vec::new();
    for (text, compacted_only) in [
        (Some("SION:C"), false),
        (Some("opus"), true),
        (Some("%"), false),
        (Some("_"), false),
        (None, true),
    ] {
        let names = store.threads(query(text, compacted_only)).await.unwrap();
        filtered.push(names.into_iter().map(|t| t.thread).collect());
    }
    let rows = store.thread_requests("session:a", 100).await.unwrap();
    let marked = rows.iter().find(|r| r.compacted).map(|r| r.seq);
    let compaction = match marked {
        Some(seq) => store
            .compaction(seq)
            .await
            .unwrap()
            .map(|c| (c.request.request, c.report_json, c.replacements_json)),
        None => None,
    };
    let timeline = rows.into_iter().map(|r| (r.compacted, r.request)).collect();
    let failed = store
        .failed_requests(10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.request)
        .collect();
    // Older than 2 s, and past the 5 latest.
    let pruned = store.prune(2_000, 5).await.unwrap();
    let mut left = Vec::new();
    for thread in ["session:old", "session:a", "session:c"] {
        for r in store.thread_requests(thread, 100).await.unwrap() {
            left.push(r.request.at_ms);
        }
    }
    let threads_left = store.threads(query(None, false)).await.unwrap();
    ActivitySeen {
        threads,
        filtered,
        timeline,
        compaction,
        failed,
        pruned,
        left,
        threads_left,
    }
}

/// The console's record reads back the same from both stores: the threads' totals (with the
/// prefix a prompt cache could read, reckoned across batches), the filters (a `%` or `_` is
/// text), a thread's requests with its compaction, the failures, and what retention deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_activity_scenario_gives_the_same_results_on_sqlite_and_postgres() {
    let dir = scratch_dir("postgres-store-activity");
    let sqlite = SqliteStore::open(&dir.join("store.sqlite3")).unwrap();
    let postgres = PostgresStore::open_unshared(&database("activity_compare"), 2).unwrap();
    let on_sqlite = activity_scenario(&sqlite).await;
    let on_postgres = activity_scenario(&postgres).await;
    assert_eq!(on_sqlite, on_postgres);
    // The scenario exercised what it meant to.
    let seen = &on_postgres;
    assert_eq!(
        seen.threads
            .iter()
            .map(|t| t.thread.as_str())
            .collect::<Vec<_>>(),
        ["session:c", "session:a", "session:old"]
    );
    let a = &seen.threads[1];
    assert_eq!((a.requests, a.counted), (5, 4));
    assert_eq!((a.tokens_in, a.tokens_out), (29_500, 17_500));
    assert_eq!((a.in_cached, a.out_cached), (20_000, 9_000));
    assert_eq!(
        (a.compactions, a.pages, a.llm_cost_micro_usd),
        (1, 2, 1_250)
    );
    assert_eq!(a.model.as_deref(), Some("claude-opus-5-5"));
    // The failure named no model: the thread keeps the one named before.
    assert_eq!(seen.threads[0].model.as_deref(), Some("claude-opus-5-5"));
    assert_eq!(
        seen.filtered,
        [
            vec!["session:c".to_string()],
            vec!["session:a".to_string()],
            vec![],
            vec![],
            vec!["session:a".to_string()],
        ]
    );
    assert_eq!(seen.timeline.len(), 5);
    assert_eq!(seen.timeline[1].1.tokens_at_most, Some(7_000));
    assert_eq!(seen.timeline.iter().filter(|(c, _)| *c).count(), 1);
    let (request, report, _) = seen.compaction.as_ref().unwrap();
    assert_eq!((request.pages, report.as_str()), (2, "{\"stages\":[]}"));
    assert_eq!(seen.failed.len(), 1);
    assert_eq!(
        seen.failed[0].error.as_deref(),
        Some("upstream_unreachable")
    );
    assert_eq!(
        seen.pruned,
        Pruned {
            requests: 4,
            threads: 1
        }
    );
    assert_eq!(seen.left, [4_000, 5_000, 6_000, 7_000, 9_000]);
    assert_eq!(seen.threads_left.len(), 2);
    assert_eq!(
        seen.threads_left[1].requests, 5,
        "totals keep deleted requests"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn migrations_run_once_when_replicas_start_together_and_open_is_idempotent() {
    let pg = PgServer::shared();
    let url = pg.create_database("migrations");
    let start = Arc::new(Barrier::new(4));
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let (url, start) = (url.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                PostgresStore::open_unshared(&url, 1)
            })
        })
        .collect();
    for handle in opened {
        handle.join().unwrap().expect("a concurrent open");
    }
    let versions = pg.psql(
        "migrations",
        "SELECT string_agg(version::text, ',' ORDER BY version) FROM tamp_schema_migrations",
    );
    let every: Vec<String> = (1..=store::postgres::SCHEMA_VERSION)
        .map(|v| v.to_string())
        .collect();
    assert_eq!(versions, every.join(","));
    drop(PostgresStore::open_unshared(&url, 1).unwrap());
    assert_eq!(
        pg.psql("migrations", "SELECT count(*) FROM tamp_schema_migrations"),
        store::postgres::SCHEMA_VERSION.to_string(),
        "opening a migrated database changes nothing"
    );
    let columns = pg.psql(
        "migrations",
        "SELECT string_agg(column_name, ',' ORDER BY column_name) FROM information_schema.columns
         WHERE table_name = 'deferred_items' AND column_name LIKE 'lease%'",
    );
    assert_eq!(columns, "lease_owner,lease_until_ms");

    pg.psql(
        "migrations",
        "INSERT INTO tamp_schema_migrations (version) VALUES (99)",
    );
    let err = PostgresStore::open_unshared(&url, 1).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::UnsupportedSchema {
                found: 99,
                supported: store::postgres::SCHEMA_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("127.0.0.1:{}/migrations", pg.port())),
        "{err}"
    );
}

#[test]
fn open_shares_one_pool_per_url_and_size_and_works_with_or_without_a_runtime() {
    let url = database("shared_open");
    let first = PostgresStore::open(&url, 3).unwrap();
    let second = PostgresStore::open(&url, 3).unwrap();
    assert!(first.shares_pool_with(&second), "a reload reuses the pool");
    let other_size = PostgresStore::open(&url, 2).unwrap();
    assert!(!first.shares_pool_with(&other_size));

    // No runtime at all: the store drives itself.
    let id = futures::executor::block_on(first.put_page(new_page(messages("sync"), "s"))).unwrap();

    // Opened and dropped inside a runtime's worker thread, as chain building may be.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let spec = StoreSpec::Postgres {
        url: url.clone(),
        pool_size: 5,
        ca_file: None,
    };
    rt.block_on(async {
        let store = store::open(&spec).unwrap();
        assert_eq!(
            store
                .pages
                .get_page(&id)
                .await
                .unwrap()
                .page
                .messages
                .as_slice(),
            messages("sync").as_slice()
        );
        assert_eq!(store.queue.status().await.unwrap().queued, 0);
        drop(store);
    });
    drop(rt);

    let sqlite_dir = scratch_dir("postgres-store-spec");
    let sqlite = store::open(&StoreSpec::Sqlite {
        path: sqlite_dir.join("store.sqlite3"),
    })
    .unwrap();
    assert!(
        sqlite.describe().starts_with("sqlite:"),
        "{}",
        sqlite.describe()
    );
    let _ = std::fs::remove_dir_all(&sqlite_dir);
}

#[test]
fn the_password_never_appears_in_descriptions_or_errors() {
    let pg = PgServer::shared();
    pg.create_database("secret_url");
    // Trust authentication ignores the password, so the store opens.
    let url = format!(
        "postgres://postgres:s3cret-pw@127.0.0.1:{}/secret_url",
        pg.port()
    );
    let store = store::open(&StoreSpec::Postgres {
        url: url.clone(),
        pool_size: 1,
        ca_file: None,
    })
    .unwrap();
    let location = format!("postgres://postgres@127.0.0.1:{}/secret_url", pg.port());
    assert_eq!(store.describe(), location);
    let spec = format!(
        "{:?}",
        StoreSpec::Postgres {
            url: url.clone(),
            pool_size: 1,
            ca_file: None,
        }
    );
    assert!(!spec.contains("s3cret"), "{spec}");

    // Nobody listens on this port; the error names the server, not the password.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let started = Instant::now();
    let err = PostgresStore::open_unshared(
        &format!("postgres://tamp:s3cret-pw@127.0.0.1:{port}/tamp"),
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(
        err.starts_with(&format!(
            "page store postgres://tamp@127.0.0.1:{port}/tamp: cannot"
        )),
        "{err}"
    );
    assert_contains(&err, "connect");
    assert!(!err.contains("s3cret"), "{err}");
    let bad = PostgresStore::open_unshared("postgres://tamp:s3cret-pw@127.0.0.1:notaport/x", 1)
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("invalid PostgreSQL URL") && !bad.contains("s3cret"),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_down_fails_fast_and_the_same_store_recovers_when_it_returns() {
    // Its own server: this test stops it.
    let mut pg = PgServer::start();
    let url = pg.create_database("downtime");
    let store = PostgresStore::open_unshared(&url, 2).unwrap();
    let location = format!("postgres://postgres@127.0.0.1:{}/downtime", pg.port());
    assert_eq!(store.describe(), location);
    let before = store
        .put_page(new_page(messages("before"), "s"))
        .await
        .unwrap();
    let queued = store.enqueue(vec![new_item("pg_down")]).await.unwrap();

    pg.stop();
    let started = Instant::now();
    let errors: Vec<(StoreError, Duration)> = vec![
        timed(store.put_page(new_page(messages("while down"), "s"))).await,
        timed(store.get_page(&before)).await,
        timed(store.list_pages(5)).await,
        timed(store.get_answer([7; 32])).await,
        timed(store.status()).await,
        timed(store.claim_queued(lease("w", Duration::from_secs(5)), 5)).await,
    ];
    for (err, took) in &errors {
        assert!(*took < Duration::from_secs(8), "took {took:?}: {err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("page store {location}: cannot ")),
            "{text}"
        );
        assert!(matches!(err, StoreError::Backend { .. }), "{text}");
    }
    assert!(
        errors[0].0.to_string().contains("cannot write page pg_"),
        "{}",
        errors[0].0
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let reopen = PostgresStore::open_unshared(&url, 1).unwrap_err();
    assert!(reopen.to_string().contains(&location), "{reopen}");

    pg.start_again();
    // The same instance, not reopened: its first operations succeed.
    let page = store.get_page(&before).await.unwrap();
    assert_eq!(page.page.messages.as_slice(), messages("before").as_slice());
    store
        .put_page(new_page(messages("after"), "s"))
        .await
        .unwrap();
    let claimed = store
        .claim_queued(lease("w", Duration::from_secs(5)), 5)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), queued);

    // A restart with only idle connections in the pool: they are replaced, not reused.
    pg.restart();
    assert_eq!(store.list_pages(10).await.unwrap().len(), 2);
    assert_eq!(store.status().await.unwrap().queued, 1);
}

async fn timed<T: std::fmt::Debug>(
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> (StoreError, Duration) {
    let started = Instant::now();
    let err = op.await.expect_err("the database is down");
    (err, started.elapsed())
}

/// What `tamp mcp` reads: a page found by its words, recalled as text, and only by its owner's
/// credential, on `search`'s backend; pages written through `pages` (the same store).
async fn search_and_owners(pages: &dyn PageStore, search: &dyn PageSearch) {
    use tamp_host::recall;
    use tamp_host::store::search::owner_of_credential;
    use tamp_plugin_api::ContentBlock;
    let output = |text: &str| NewPage {
        messages: vec![Message::new(
            Role::User,
            vec![ContentBlock::tool_result("t1", text, false)],
        )],
        ..new_page(Vec::new(), "tool-result-clearing")
    };
    let fact = pages
        .put_page(output("step 1\ndeploy code: K7-4481-QX\nbuild ok"))
        .await
        .unwrap();
    let other = pages.put_page(output("nothing here")).await.unwrap();
    let key = search.owner_key().await.unwrap();
    assert_eq!(key, search.owner_key().await.unwrap(), "one key per store");
    let alice = owner_of_credential(&key, "sk-alice");
    let bob = owner_of_credential(&key, "sk-bob");
    search
        .record_owner(&alice, std::slice::from_ref(&fact), Some("thread-1"))
        .await
        .unwrap();
    search.record_owner(&bob, &[other], None).await.unwrap();

    let hits = recall::search(search, Scope::Owner(&alice), "deploy K7-4481-QX", 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].page_id, fact);
    assert!(hits[0].snippet.contains("[deploy]"), "{hits:?}");
    let hits = recall::search(search, Scope::Owner(&bob), "deploy K7-4481-QX", 10)
        .await
        .unwrap();
    assert!(hits.is_empty(), "bob found alice's page: {hits:?}");
    // Query syntax is text, never an error.
    for odd in ["\"", "a & | !b", "code:*", ""] {
        recall::search(search, Scope::All, odd, 10).await.unwrap();
    }

    let read = recall::recall(pages, search, Scope::Owner(&alice), &fact, 0)
        .await
        .unwrap();
    assert!(
        read.text.contains("deploy code: K7-4481-QX"),
        "{}",
        read.text
    );
    assert!(read.text.contains("thread thread-1"), "{}", read.text);
    let refused = recall::recall(pages, search, Scope::Owner(&bob), &fact, 0)
        .await
        .unwrap_err();
    assert!(refused.to_string().starts_with("no page "), "{refused}");
    // A short ref names the page for its owner alone as well.
    let refused = recall::recall(pages, search, Scope::Owner(&bob), short_ref(&fact), 0)
        .await
        .unwrap_err();
    assert!(refused.to_string().starts_with("no page "), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_messages_are_found_and_recalled_by_their_owner_alone_on_both_backends() {
    let url = database("search_owners");
    let (a, b) = replicas(&url);
    // Written through one replica, found through the other.
    search_and_owners(&a, &b).await;
    let sqlite = SqliteStore::in_memory().unwrap();
    search_and_owners(&sqlite, &sqlite).await;
}
