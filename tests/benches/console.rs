//! The console's views on a large store: 1,000 threads and 100,000 requests recorded (a
//! compaction every twentieth, with its report), then `tamp proxy` started on that store and
//! each view asked for in turn, against `/tamp/healthz` on the same server (the HTTP round
//! trip with no work, the floor) asked for in turn with it. Target: the threads view under
//! 200 ms.
//!
//! Printed per view: p50 and p99 over the requests, the floor's, and the view's p50 as a
//! multiple of the floor's. The store is SQLite; `-- postgres` runs the same on a PostgreSQL
//! server the bench starts on 127.0.0.1 (`tamp_e2e::postgres`). `-- quick`: fewer requests.
//!
//! `cargo bench -p tamp-e2e --bench console` (or `--profile dev`).

use std::time::Instant;

use serde_json::json;
use tamp_e2e::serve_support::{ScratchDir, Server};
use tamp_e2e::write_chain;
use tamp_host::store::activity::{CompactionRecord, RequestRecord};
use tamp_host::store::{self, StoreSpec};

const THREADS: usize = 1_000;
const REQUESTS_PER_THREAD: usize = 100;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The requests of `thread`, as an agent's session grows: its context grows by 400 tokens a
/// request and falls back at each compaction (every 20th request).
fn session(thread: usize, start_ms: u64) -> Vec<RequestRecord> {
    let report = json!({"tokens_before": 90_000, "tokens_after": 40_000, "stages": [{
        "stage": "fold-old-turns", "plugin": "map-reduce-adaptive", "plugin_version": "0.1.0",
        "status": "acted", "reason": "summarized 40 messages", "tokens_before": 90_000,
        "tokens_after": 40_000, "duration_ms": 850.0, "llm_calls": 2, "failed_llm_calls": 0,
        "cache_hits": 0, "usage": {"input_tokens": 52_000, "output_tokens": 900,
        "cache_read_tokens": 0, "cache_write_tokens": 0}, "pages": ["pg_0"],
        "messages_removed": 40, "summaries_added": 1, "messages_cleared": 0, "warnings": []}]})
    .to_string();
    let mut context = 30_000u64;
    (0..REQUESTS_PER_THREAD)
        .map(|i| {
            let compacts = i % 20 == 19;
            let sent = context + 400;
            let forwarded = if compacts { sent / 2 } else { sent };
            context = forwarded;
            let mut request = RequestRecord {
                at_ms: start_ms + (thread * REQUESTS_PER_THREAD + i) as u64,
                server: "proxy".into(),
                route: "POST /v1/messages".into(),
                status: 200,
                duration_ms: 400,
                thread: Some(format!("session:{thread:08x}-bench")),
                model: Some(
                    if thread.is_multiple_of(3) {
                        "gpt-5"
                    } else {
                        "claude-opus-5-5"
                    }
                    .into(),
                ),
                outcome: Some(if compacts { "compacted" } else { "unchanged" }.into()),
                pages: u32::from(compacts),
                prefix_kept: compacts.then_some(12_000),
                compaction: compacts.then(|| CompactionRecord {
                    report_json: report.clone(),
                    replacements_json: "[]".into(),
                }),
                ..RequestRecord::default()
            };
            request.set_tokens(Some((sent, forwarded)));
            request.set_budget(Some((200_000, 140_000, 80_000)));
            if compacts {
                (request.llm_input_tokens, request.llm_output_tokens) = (52_000, 900);
            }
            request
        })
        .collect()
}

/// Records 1,000 threads of 100 requests in `spec`'s store, a thread per transaction.
fn fill(rt: &tokio::runtime::Runtime, spec: &StoreSpec) {
    let store = store::open(spec).expect("open the store");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let started = Instant::now();
    rt.block_on(async {
        for thread in 0..THREADS {
            let start = now - ((THREADS * REQUESTS_PER_THREAD) as u64);
            store
                .activity
                .record_requests(session(thread, start))
                .await
                .expect("record");
        }
    });
    println!(
        "  recorded {THREADS} threads, {} requests in {:.1} s",
        THREADS * REQUESTS_PER_THREAD,
        started.elapsed().as_secs_f64()
    );
}

async fn time(client: &reqwest::Client, url: &str) -> f64 {
    let started = Instant::now();
    let answer = client.get(url).send().await.unwrap();
    assert_eq!(answer.status(), 200, "{url}");
    answer.bytes().await.unwrap();
    started.elapsed().as_secs_f64() * 1e3
}

fn run(
    rt: &tokio::runtime::Runtime,
    label: &str,
    chain_store: &str,
    env: &[(&str, &str)],
    n: usize,
) {
    let dir = ScratchDir::new("bench-console");
    let chain = write_chain(&dir, &format!("store = {chain_store}\n"));
    let proxy = Server::start_command("proxy", &chain, &[], env);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let thread = "session:000001f3-bench";
    let views = [
        (
            "threads view (200 threads)",
            "/tamp/ui/api/threads".to_string(),
        ),
        (
            "threads view (all 1,000)",
            "/tamp/ui/api/threads?limit=1000".to_string(),
        ),
        (
            "threads view, filtered",
            "/tamp/ui/api/threads?q=gpt&compacted=true".to_string(),
        ),
        (
            "a thread (100 requests)",
            format!("/tamp/ui/api/thread?id={thread}"),
        ),
        (
            "a thread's timeline (SVG)",
            format!("/tamp/ui/api/timeline.svg?thread={thread}"),
        ),
        (
            "savings (1,000 threads)",
            "/tamp/ui/api/savings".to_string(),
        ),
        ("GET /tamp/v1/threads", "/tamp/v1/threads".to_string()),
    ];
    println!();
    println!("{label}: {n} requests per view, each after one to /tamp/healthz (the floor)");
    println!(
        "{:<30} {:>9} {:>9} {:>11} {:>11} {:>9}",
        "view", "p50 ms", "p99 ms", "floor p50", "floor p99", "p50/floor"
    );
    for (name, path) in views {
        let (mut view, mut floor) = (Vec::with_capacity(n), Vec::with_capacity(n));
        rt.block_on(async {
            for _ in 0..3 {
                time(&client, &proxy.url(&path)).await;
            }
            for _ in 0..n {
                floor.push(time(&client, &proxy.url("/tamp/healthz")).await);
                view.push(time(&client, &proxy.url(&path)).await);
            }
        });
        view.sort_by(f64::total_cmp);
        floor.sort_by(f64::total_cmp);
        let (p50, p99) = (percentile(&view, 0.5), percentile(&view, 0.99));
        let (f50, f99) = (percentile(&floor, 0.5), percentile(&floor, 0.99));
        println!(
            "{name:<30} {p50:>9.2} {p99:>9.2} {f50:>11.3} {f99:>11.3} {:>8.1}x",
            p50 / f50
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "quick");
    let n = if quick { 20 } else { 100 };
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!(
        "tamp console bench: {THREADS} threads, {} requests ({} compactions) in the store",
        THREADS * REQUESTS_PER_THREAD,
        THREADS * REQUESTS_PER_THREAD / 20
    );
    {
        let dir = ScratchDir::new("bench-console-store");
        let path = dir.join("store.sqlite3");
        println!("SQLite:");
        fill(&rt, &StoreSpec::Sqlite { path: path.clone() });
        run(
            &rt,
            "SQLite",
            &format!("{{ path = \"{}\" }}", path.display()),
            &[],
            n,
        );
    }
    if args.iter().any(|a| a == "postgres") {
        let url = tamp_e2e::postgres::PgServer::shared().create_database("bench_console");
        println!();
        println!("PostgreSQL:");
        fill(
            &rt,
            &StoreSpec::Postgres {
                url: url.clone(),
                pool_size: 4,
                ca_file: None,
            },
        );
        run(
            &rt,
            "PostgreSQL",
            "{ kind = \"postgres\", url_env = \"TAMP_DATABASE_URL\", pool_size = 4 }",
            &[("TAMP_DATABASE_URL", &url)],
            n,
        );
    }
}
