//! Shared-store benchmark (issue 10), against a real PostgreSQL server the bench starts on
//! 127.0.0.1 (`tamp_e2e::postgres`), side by side in one run:
//!
//! 1. **Store overhead per compaction**: the same chain (map-reduce-adaptive, scripted
//!    provider answering at once, summary cache on) compacts the ten corpus conversations
//!    with its pages and cache in the embedded SQLite file, then in PostgreSQL, interleaved
//!    conversation by conversation; each round uses a new thread id, so every round archives
//!    and caches the same amount. Prints p50 and mean per compaction and the ratio.
//! 2. **Deferred queue claim rate**: `N` queued items claimed and marked submitted, `BATCH`
//!    at a time (what a worker's submit pass does to the store), by one worker and by two
//!    workers with their own connection pools (two replicas), on a fresh database each. Once
//!    with no time between claim and mark (the store alone), once with a pause standing for
//!    the batch creation call. Prints items/s and the ratio two/one (target: at least 1, the
//!    shared store must not serialize the replicas).
//!
//! Run: `cargo bench -p tamp-e2e --bench shared_store` (`-- quick`: fewer items and rounds).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tamp_e2e::stats::percentile;

use serde_json::json;
use tamp_e2e::postgres::PgServer;
use tamp_e2e::{corpus_conversation, corpus_names, scratch_dir, StageChain};
use tamp_host::chain::{CompactOptions, StageStatus};
use tamp_host::providers::ScriptedProvider;
use tamp_host::store::queue::Lease;
use tamp_host::store::{self, NewDeferred, StoreSpec};
use tamp_plugin_api::{FfiOption, LlmRequest};

const BATCH: usize = 100;

fn summary(ms: &mut [f64]) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    (
        percentile(ms, 50.0),
        ms.iter().sum::<f64>() / ms.len() as f64,
    )
}

fn chain(store: &store::Store) -> tamp_host::chain::Chain {
    StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({}),
        Arc::new(ScriptedProvider::always(
            "Summary: the user and the assistant worked through the task; files read, commands run and decisions are kept here.",
        )),
    )
    .max_tokens(4_000)
    .store(Arc::clone(&store.pages))
    .cache_in(Arc::clone(&store.cache))
    .build()
}

fn compaction_overhead(rt: &tokio::runtime::Runtime, pg: &PgServer, rounds: usize) {
    let dir = scratch_dir("bench-shared-store");
    let sqlite = store::open(&StoreSpec::Sqlite {
        path: dir.join("store.sqlite3"),
    })
    .unwrap();
    let postgres = store::open(&StoreSpec::Postgres {
        url: pg.create_database("bench_compaction"),
        pool_size: 8,
        ca_file: None,
    })
    .unwrap();
    let chains = [("sqlite", chain(&sqlite)), ("postgres", chain(&postgres))];
    let conversations: Vec<_> = corpus_names()
        .iter()
        .map(|name| corpus_conversation("anthropic", name))
        .collect();
    let mut ms = [Vec::new(), Vec::new()];
    let mut acted = [0u32, 0];
    rt.block_on(async {
        for round in 0..=rounds {
            for conv in &conversations {
                for (i, (_, chain)) in chains.iter().enumerate() {
                    let mut conv = conv.clone();
                    conv.thread_id = FfiOption::RSome(format!("round-{round}").into());
                    let started = Instant::now();
                    let out = chain
                        .compact(conv, &CompactOptions::default())
                        .await
                        .unwrap();
                    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
                    // Round 0 warms both up (connections, statement caches, token memo).
                    if round > 0 {
                        ms[i].push(elapsed);
                        acted[i] += (out.report.stages[0].status == StageStatus::Acted) as u32;
                    }
                }
            }
        }
    });
    assert_eq!(acted[0], acted[1], "both stores saw the same work");
    let (sqlite_p50, sqlite_mean) = summary(&mut ms[0]);
    let (pg_p50, pg_mean) = summary(&mut ms[1]);
    println!(
        "store overhead per compaction ({} compactions each, {} acted; 10 corpus conversations, map-reduce-adaptive, scripted provider, cache on):",
        ms[0].len(),
        acted[0]
    );
    println!("  sqlite (embedded file): p50 {sqlite_p50:.2} ms, mean {sqlite_mean:.2} ms");
    println!("  postgres (127.0.0.1):   p50 {pg_p50:.2} ms, mean {pg_mean:.2} ms");
    println!(
        "  ratio postgres/sqlite: p50 {:.2}x, mean {:.2}x; overhead {:+.2} ms per compaction",
        pg_p50 / sqlite_p50,
        pg_mean / sqlite_mean,
        pg_mean - sqlite_mean
    );
}

fn item(n: usize) -> NewDeferred {
    NewDeferred {
        page_id: format!("pg_bench_{n:06}"),
        strategy: "batch-deferred".into(),
        thread_id: None,
        request: LlmRequest::new("sys", format!("Summarize item {n}."), 64),
    }
}

/// Claims every queued item with `workers` workers, each on its own pool; items per second.
fn claim_rate(
    rt: &tokio::runtime::Runtime,
    pg: &PgServer,
    tag: &str,
    items: usize,
    workers: usize,
    pause: Duration,
) -> f64 {
    let url = pg.create_database(&format!("bench_claims_{tag}_{workers}"));
    let seed = store::open(&StoreSpec::Postgres {
        url: url.clone(),
        pool_size: 4,
        ca_file: None,
    })
    .unwrap();
    rt.block_on(async {
        for chunk in (0..items).collect::<Vec<_>>().chunks(1_000) {
            seed.queue
                .enqueue(chunk.iter().map(|n| item(*n)).collect())
                .await
                .unwrap();
        }
    });
    // One store per worker: a different pool size keys a different pool, as on another host.
    let queues: Vec<_> = (0..workers)
        .map(|w| {
            store::open(&StoreSpec::Postgres {
                url: url.clone(),
                pool_size: 2 + w,
                ca_file: None,
            })
            .unwrap()
            .queue
        })
        .collect();
    let started = Instant::now();
    let claimed: Vec<Vec<i64>> = rt.block_on(async {
        let tasks = queues.into_iter().enumerate().map(|(w, queue)| {
            tokio::spawn(async move {
                let lease = Lease {
                    owner: format!("bench-worker-{w}"),
                    duration: Duration::from_secs(300),
                };
                let mut mine = Vec::new();
                let mut batch = 0;
                loop {
                    let items = queue.claim_queued(lease.clone(), BATCH).await.unwrap();
                    if items.is_empty() {
                        break;
                    }
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                    batch += 1;
                    let ids: Vec<i64> = items.iter().map(|i| i.id).collect();
                    let marked = queue
                        .mark_submitted_leased(ids.clone(), format!("b_{w}_{batch}"), lease.clone())
                        .await
                        .unwrap();
                    assert_eq!(marked, ids.len());
                    mine.extend(ids);
                }
                mine
            })
        });
        futures::future::join_all(tasks)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let all: Vec<i64> = claimed.iter().flatten().copied().collect();
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), items, "every item claimed");
    assert_eq!(unique.len(), items, "no item claimed twice");
    if workers > 1 {
        assert!(
            claimed.iter().all(|c| !c.is_empty()),
            "every worker claimed some"
        );
    }
    items as f64 / elapsed
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let (rounds, items) = if quick { (2, 2_000) } else { (5, 10_000) };
    let rt = tamp_e2e::two_worker_rt();
    let pg = PgServer::start();
    compaction_overhead(&rt, &pg, rounds);

    println!(
        "deferred queue claim rate ({items} items, claimed {BATCH} at a time and marked submitted):"
    );
    for (tag, pause) in [
        ("store", Duration::ZERO),
        ("api", Duration::from_millis(20)),
    ] {
        let one = claim_rate(&rt, &pg, tag, items, 1, pause);
        let two = claim_rate(&rt, &pg, tag, items, 2, pause);
        let what = if pause.is_zero() {
            "store alone".to_string()
        } else {
            format!("{} ms per batch creation", pause.as_millis())
        };
        println!(
            "  {what}: 1 worker {one:.0} items/s, 2 workers {two:.0} items/s, ratio 2/1 {:.2}x",
            two / one
        );
    }
}
