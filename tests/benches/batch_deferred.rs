//! batch-deferred benchmark (issue 7). On the same ~1,000-message conversation of real corpus
//! messages (`tamp_e2e::corpus_mix`), from one run, side by side:
//!
//! - compaction latency (p50/p99) of the `batch-deferred` plugin (archive, defer, pending
//!   summary; no LLM wait) against synchronous summarization (`map-reduce-adaptive`) with the
//!   scripted provider answering every call after 2 s, and the ratio;
//! - cost: the deferred requests sent through the local Message Batches server, billed at the
//!   batch discount (`PriceConfig::batch_cost_of`, × 0.5), against the same usage at the
//!   synchronous price, and against the synchronous strategy's own reported usage.
//!
//! Each deferred iteration edits the first user message so every run archives and queues new
//! pages (nothing is answered from a page or queue entry made by an earlier iteration).
//!
//! Run: `cargo bench -p tamp-e2e --bench batch_deferred` (`-- quick`: fewer iterations).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tamp_e2e::stats::percentile;

use serde_json::json;
use tamp_e2e::mock_batches::MockBatches;
use tamp_e2e::{corpus_mix, scratch_dir, StageChain};
use tamp_host::chain::{CompactOptions, StageStatus};
use tamp_host::deferred::config::BatchConfig;
use tamp_host::deferred::Worker;
use tamp_host::providers::batches::BatchesClient;
use tamp_host::providers::PriceConfig;
use tamp_host::providers::{ApiKey, ClientSettings, RetryPolicy, ScriptedProvider, StructuredMode};
use tamp_host::store::queue::DeferredQueue;
use tamp_host::store::{PageStore, SqliteStore};
use tamp_plugin_api::Conversation;

const MESSAGES: usize = 1_000;
const KEEP_RECENT: u32 = 10;
const SYNC_DELAY: Duration = Duration::from_secs(2);

fn price() -> PriceConfig {
    PriceConfig {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        ..PriceConfig::default()
    }
}

/// `base` with its first user text changed, so its pages are new.
fn variant(base: &Conversation, n: usize) -> Conversation {
    tamp_e2e::variant(base, format!("(iteration {n})"))
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let (deferred_runs, sync_runs) = if quick { (40, 2) } else { (200, 5) };
    let rt = tamp_e2e::two_worker_rt();
    let base = corpus_mix(MESSAGES);
    let dir = scratch_dir("bench-batch-deferred");
    let store = Arc::new(SqliteStore::open(&dir.join("store.sqlite3")).unwrap());

    // The deferred plugin: compacts on every call, with the chain's file store.
    let deferred = StageChain::new(
        "tamp_batch_deferred",
        json!({"compact_when": "always"}),
        Arc::new(ScriptedProvider::always("never called")),
    )
    .keep_recent(KEEP_RECENT)
    .store(Arc::clone(&store) as Arc<dyn PageStore>)
    .queue_in(Arc::clone(&store) as Arc<dyn DeferredQueue>)
    .build();
    let mut deferred_ms = Vec::new();
    let mut stage_ms = Vec::new();
    let mut pending_summaries = 0;
    // The first compaction counts every message's tokens cold (later ones hit the token
    // memo for all but the edited message): timed apart, left out of the percentiles.
    let cold_ms = rt.block_on(async {
        let started = Instant::now();
        deferred
            .compact(variant(&base, usize::MAX), &CompactOptions::default())
            .await
            .unwrap();
        started.elapsed().as_secs_f64() * 1000.0
    });
    let commits_before = store.commits();
    rt.block_on(async {
        for n in 0..deferred_runs {
            let conv = variant(&base, n);
            let started = Instant::now();
            let out = deferred
                .compact(conv, &CompactOptions::default())
                .await
                .unwrap();
            deferred_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(out.report.stages[0].status, StageStatus::Acted);
            assert_eq!(out.report.llm_calls, 0);
            stage_ms.push(out.report.stages[0].duration_ms);
            pending_summaries = out.report.stages[0].summaries_added;
        }
    });

    // WAL checkpoints ran beside the compactions, not inside their commits.
    let checkpoints = store.background_checkpoints();
    let commits = (store.commits() - commits_before) as f64 / deferred_runs as f64;

    // The same on an in-memory store: the difference is the durable writes (one SQLite
    // commit of the pages and their queued requests, an fsync of the pages' size).
    let memory = Arc::new(SqliteStore::in_memory().unwrap());
    let in_memory = StageChain::new(
        "tamp_batch_deferred",
        json!({"compact_when": "always"}),
        Arc::new(ScriptedProvider::always("never called")),
    )
    .keep_recent(KEEP_RECENT)
    .store(Arc::clone(&memory) as Arc<dyn PageStore>)
    .queue_in(memory as Arc<dyn DeferredQueue>)
    .build();
    let mut memory_ms = Vec::new();
    rt.block_on(async {
        in_memory
            .compact(variant(&base, usize::MAX), &CompactOptions::default())
            .await
            .unwrap();
        for n in 0..deferred_runs {
            let started = Instant::now();
            let out = in_memory
                .compact(variant(&base, n), &CompactOptions::default())
                .await
                .unwrap();
            memory_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(out.report.stages[0].status, StageStatus::Acted);
        }
    });

    // Synchronous summarization of the same conversation, 2 s per LLM call.
    let sync = StageChain::new(
        "tamp_map_reduce_adaptive",
        // Calls at once: the synchronous baseline at its fastest.
        json!({"max_concurrency": 256}),
        Arc::new(ScriptedProvider::always(
            "Summary: the user and the assistant worked through the task; files read, commands run, results and decisions are kept here in brief.",
        )
        .with_delay(SYNC_DELAY)),
    )
    .keep_recent(KEEP_RECENT)
    .without_cache()
    .build();
    let mut sync_ms = Vec::new();
    let mut sync_calls = 0;
    let mut sync_usage = tamp_plugin_api::Usage::default();
    rt.block_on(async {
        for n in 0..sync_runs {
            let started = Instant::now();
            let out = sync
                .compact(variant(&base, n), &CompactOptions::default())
                .await
                .unwrap();
            sync_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            sync_calls = out.report.llm_calls;
            sync_usage = out.report.usage;
        }
    });

    // The deferred requests of the last iteration... and every other one: send them all
    // through the local batches server and read the usage its results report.
    let mock = MockBatches::start();
    let client = BatchesClient::new(
        ClientSettings {
            model: "claude-sonnet-4-5".into(),
            base_url: mock.url(),
            key: Some(ApiKey::new("sk-ant-bench")),
            structured: StructuredMode::Auto,
            timeout: Duration::from_secs(30),
        },
        RetryPolicy {
            max_retries: 2,
            initial: Duration::from_millis(10),
            max: Duration::from_millis(100),
        },
    )
    .unwrap();
    let queue: Arc<dyn DeferredQueue> = store.clone();
    let worker = Worker::new(
        queue.clone(),
        client,
        None,
        BatchConfig {
            max_batch_requests: 1_000,
            ..BatchConfig::default()
        },
    )
    // The queued prompts are filled in from the pages, as `tamp serve` does.
    .with_pages(Arc::clone(&store) as Arc<dyn PageStore>);
    let status = rt.block_on(async {
        let pass = worker.run_once().await.unwrap();
        assert_eq!(pass.failed, 0, "{pass}");
        queue.status().await.unwrap()
    });
    let metrics = worker.metrics().snapshot();
    assert_eq!(metrics.batch_usage, status.batch_usage);

    deferred_ms.sort_by(f64::total_cmp);
    sync_ms.sort_by(f64::total_cmp);
    stage_ms.sort_by(f64::total_cmp);
    memory_ms.sort_by(f64::total_cmp);
    let (d50, d99) = (
        percentile(&deferred_ms, 50.0),
        percentile(&deferred_ms, 99.0),
    );
    let (s50, s99) = (percentile(&sync_ms, 50.0), percentile(&sync_ms, 99.0));
    println!(
        "conversation: {} messages (corpus_mix), keep_recent {KEEP_RECENT}",
        base.messages.len()
    );
    println!(
        "batch-deferred compaction:   p50 {d50:8.2} ms   p99 {d99:8.2} ms   (n={deferred_runs}, {pending_summaries} pending summaries per run, 0 LLM calls; target p99 < 20 ms)"
    );
    println!("  first (cold) compaction: {cold_ms:.2} ms (every message's tokens counted)");
    println!(
        "  of which the stage itself: p50 {:8.2} ms   p99 {:8.2} ms   (the rest: the chain's token count and invariant checks)",
        percentile(&stage_ms, 50.0),
        percentile(&stage_ms, 99.0)
    );
    println!(
        "  same, in-memory store:     p50 {:8.2} ms   p99 {:8.2} ms   (what the durable writes cost: the difference)",
        percentile(&memory_ms, 50.0),
        percentile(&memory_ms, 99.0)
    );
    println!(
        "  store commits per compaction (pages and queued requests): {commits:.2}; WAL checkpoints run in the background: {checkpoints}"
    );
    println!(
        "synchronous map-reduce:      p50 {s50:8.2} ms   p99 {s99:8.2} ms   (n={sync_runs}, {sync_calls} LLM calls per run at {} s each)",
        SYNC_DELAY.as_secs()
    );
    println!(
        "latency ratio sync/deferred: p50 ×{:.0}   p99 ×{:.0}",
        s50 / d50,
        s99 / d99
    );
    let price = price();
    let batch = status.batch_usage;
    println!(
        "batches: {} request(s) in {} batch(es); billed {} input + {} output tokens (usage from the results)",
        metrics.submitted, metrics.batches_created, batch.input_tokens, batch.output_tokens
    );
    // Identical pages are archived and queued once (content-addressed), so the requests sent
    // are fewer than runs × pending summaries: cost per request, then per compaction.
    let per_request = |usd: f64| usd / metrics.submitted.max(1) as f64;
    let per_compaction = |usd: f64| per_request(usd) * f64::from(pending_summaries);
    println!(
        "cost per compaction ({pending_summaries} requests) at $3/$15 per Mtok: batch ${:.5} (×{}) vs the same requests synchronously ${:.5}: ratio {:.2}",
        per_compaction(metrics.batch_cost(&price)),
        price.batch_factor,
        per_compaction(metrics.sync_cost_of_batch_tokens(&price)),
        metrics.batch_cost(&price) / metrics.sync_cost_of_batch_tokens(&price)
    );
    println!(
        "synchronous map-reduce's own usage per compaction: {} input + {} output tokens = ${:.5} (scripted provider's estimate)",
        sync_usage.input_tokens,
        sync_usage.output_tokens,
        price.cost_of(&sync_usage)
    );
}
