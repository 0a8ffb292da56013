//! The soak (issue 22): `tamp serve` for 10 minutes under mixed load, its chain file rewritten
//! every 5 s, with two stages that fail on purpose now and then.
//!
//! The real binary serves a chain of real plugin libraries on a SQLite store file, with the
//! offline extractive summarizer: the test fixture `misbehaving` twice (one stage panics on
//! 1% of its calls, one hangs on 0.1% and is cut by a 1 s stage timeout; otherwise each
//! archives one old unit), then buffered tool-call and map-reduce summarization. Loopback
//! clients keep it busy: one-shot compactions of the corpus conversations in both formats
//! (with and without thread continuity), threads that grow call by call under their
//! `thread_id`, and reads of the pages named in the answers' reports. A writer rewrites the
//! chain file every 5 s (an editor's atomic save, alternating a stage parameter).
//!
//! Every answer is classified: a rollback of the panicking stage for a panic, or of the
//! hanging stage for a timeout, is an injected failure; anything else (a non-2xx answer, a
//! rollback of another stage or kind, an answer in the wrong format, a transport error) is a
//! real one. Printed per minute: requests, injected and other failures, compaction latency
//! p50/p99, the server's RSS and open file descriptors, reloads applied; at the end, pages
//! written (named in reports) against pages readable (`GET /v1/pages/{id}` for each, and
//! `tamp pages verify` on the store), and the targets: no failure but the injected ones, RSS
//! and descriptors flat after warm-up, every page written readable.
//!
//! `cargo bench -p tamp-e2e --bench soak` (10 minutes); `-- quick` or `TAMP_BENCH_QUICK=1`
//! for one minute reported per 10 s; `-- minutes=N` for another length.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tamp_e2e::stats::percentile;

use serde_json::{json, Value};
use tamp_e2e::serve_support::{write_atomically, ScratchDir, Server};
use tamp_e2e::{corpus, corpus_names, plugin, write_chain};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{sdk, Conversation};

/// Clients posting one corpus conversation at a time.
const ONE_SHOT_CLIENTS: usize = 3;
/// Clients growing a thread call by call.
const THREAD_CLIENTS: usize = 3;
/// Clients reading pages named in the answers.
const PAGE_READERS: usize = 2;
/// Pause between two page reads of one reader (page reads are cheap; unpaced they would be
/// most of the requests).
const PAGE_READ_PAUSE: Duration = Duration::from_millis(10);
const REWRITE_EVERY: Duration = Duration::from_secs(5);
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The hanging stage's time limit.
const HANG_TIMEOUT_SECS: f64 = 1.0;
const PANIC_STAGE: &str = "flaky-panic";
const HANG_STAGE: &str = "flaky-hang";

/// The chain file; `group_size` is the parameter the writer alternates.
fn chain(group_size: u32) -> String {
    format!(
        r#"# Written by the soak bench (tests/benches/soak.rs).
[budget]
max_tokens = 8000
keep_recent = 6

[provider]
kind = "extractive"

[store]
path = "store.sqlite3"

[[stage]]
name = "{PANIC_STAGE}"
plugin = "misbehaving.so"
trigger = "always"
[stage.config]
mode = "ok"
panic_per_mille = 10

[[stage]]
name = "{HANG_STAGE}"
plugin = "misbehaving.so"
trigger = "always"
timeout_secs = {HANG_TIMEOUT_SECS:.1}
[stage.config]
mode = "ok"
hang_per_mille = 1

[[stage]]
name = "tool-calls"
plugin = "buffered.so"
[stage.config]
messages_old_threshold = 20
min_tool_calls_to_summarize = 10
group_size = {group_size}

[[stage]]
name = "fold-old-turns"
plugin = "map_reduce.so"
[stage.config]
content_type = "conversation"
"#
    )
}

/// A small deterministic random source (splitmix64), one per client, so a run's choices
/// are the same every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Compact,
    Page,
}

/// How a request ended: answered, with the injected faults it met, or failed.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Outcome {
    injected_panic: bool,
    injected_hang: bool,
    failed: bool,
}

const FAILED: Outcome = Outcome {
    injected_panic: false,
    injected_hang: false,
    failed: true,
};

/// One answered (or failed) request.
struct Record {
    /// When it ended, from the start of the load.
    at: Duration,
    kind: Kind,
    latency: Duration,
    outcome: Outcome,
}

/// One sample of the server process.
#[derive(Clone, Copy, Default)]
struct ProcSample {
    at: Duration,
    rss_kib: u64,
    fds: usize,
    reloads_applied: u64,
    store_bytes: u64,
}

/// What the clients share.
struct Shared {
    server: Server,
    client: reqwest::Client,
    started: Instant,
    stop: AtomicBool,
    records: Mutex<Vec<Record>>,
    /// Real failures, by description.
    failures: Mutex<BTreeMap<String, u64>>,
    /// Every page id named in a report, in the order first seen.
    pages: Mutex<(Vec<String>, HashSet<String>)>,
    thread_calls: AtomicU64,
}

impl Shared {
    fn record(&self, kind: Kind, began: Instant, outcome: Outcome) {
        let now = Instant::now();
        self.records.lock().unwrap().push(Record {
            at: now - self.started,
            kind,
            latency: now - began,
            outcome,
        });
    }

    fn fail(&self, kind: Kind, began: Instant, what: String) {
        *self.failures.lock().unwrap().entry(what).or_default() += 1;
        self.record(kind, began, FAILED);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Posts a compaction and classifies its answer.
    async fn compact(&self, body: Vec<u8>, format: WireFormat) {
        let began = Instant::now();
        let response = self
            .client
            .post(self.server.url("/v1/compact"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::Compact, began, format!("compact: transport: {e}")),
        };
        let status = response.status().as_u16();
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) => return self.fail(Kind::Compact, began, format!("compact: body: {e}")),
        };
        if status != 200 {
            let code = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
                .unwrap_or_default();
            return self.fail(Kind::Compact, began, format!("compact: {status} {code}"));
        }
        let answer: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return self.fail(Kind::Compact, began, format!("compact: not JSON: {e}")),
        };
        if answer["format"] != format.as_str() {
            return self.fail(
                Kind::Compact,
                began,
                format!("compact: answered in {} for {format}", answer["format"]),
            );
        }
        let mut outcome = Outcome::default();
        let mut new_pages = Vec::new();
        for stage in answer["report"]["stages"].as_array().into_iter().flatten() {
            let name = stage["stage"].as_str().unwrap_or("?");
            if stage["status"] == "rolled_back" {
                let kind = stage["error"]["kind"].as_str().unwrap_or("?");
                match (name, kind) {
                    (PANIC_STAGE, "panicked") => outcome.injected_panic = true,
                    (HANG_STAGE, "timeout") => outcome.injected_hang = true,
                    _ => {
                        let message = stage["error"]["message"].as_str().unwrap_or("");
                        // Page ids and numbers vary; the first words say what happened.
                        let message: String = message.chars().take(120).collect();
                        return self.fail(
                            Kind::Compact,
                            began,
                            format!("compact: stage {name} rolled back ({kind}): {message}"),
                        );
                    }
                }
            }
            for page in stage["pages"].as_array().into_iter().flatten() {
                if let Some(id) = page.as_str() {
                    new_pages.push(id.to_string());
                }
            }
        }
        if !new_pages.is_empty() {
            let mut pages = self.pages.lock().unwrap();
            for id in new_pages {
                if pages.1.insert(id.clone()) {
                    pages.0.push(id);
                }
            }
        }
        self.record(Kind::Compact, began, outcome);
    }

    /// `GET /v1/pages/{id}`; whether it answered 200 with the page.
    async fn read_page(&self, id: &str, query: &str) -> Result<(), String> {
        let response = self
            .client
            .get(self.server.url(&format!("/v1/pages/{id}{query}")))
            .send()
            .await
            .map_err(|e| format!("page: transport: {e}"))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| format!("page: body: {e}"))?;
        if status != 200 {
            return Err(format!("page: {status}"));
        }
        let page: Value = serde_json::from_str(&text).map_err(|e| format!("page: JSON: {e}"))?;
        if page["id"] != id || page["messages"].as_array().is_none_or(|m| m.is_empty()) {
            return Err("page: not the page asked for, or no messages".into());
        }
        Ok(())
    }
}

/// A corpus conversation in one format, with the message counts it may be cut at (unit
/// boundaries, so no tool call is left without its result).
struct Source {
    name: String,
    format: WireFormat,
    conversation: Conversation,
    cuts: Vec<usize>,
}

fn sources() -> Vec<Source> {
    let mut out = Vec::new();
    for name in corpus_names() {
        for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
            let (conversation, read_as) =
                wire::parse_str(&corpus(format.as_str(), &name), None).expect("corpus parses");
            assert_eq!(read_as, format, "{name}");
            let cuts = sdk::units(&conversation.messages)
                .iter()
                .map(|u| u.range.end)
                .filter(|&end| end >= 12)
                .collect();
            out.push(Source {
                name: name.clone(),
                format,
                conversation,
                cuts,
            });
        }
    }
    out
}

/// One-shot bodies: every corpus conversation in both formats, once compacted from what it
/// sends (`thread_continuity: false`) and once continuing the thread its system prompt and
/// first user message name.
fn one_shot_bodies(sources: &[Source]) -> Vec<(Vec<u8>, WireFormat)> {
    let mut out = Vec::new();
    for s in sources {
        let conversation = wire::to_value(&s.conversation, s.format);
        for continuity in [false, true] {
            let body = json!({"conversation": conversation, "thread_continuity": continuity});
            out.push((serde_json::to_vec(&body).unwrap(), s.format));
        }
    }
    out
}

async fn one_shot_client(shared: Arc<Shared>, bodies: Arc<Vec<(Vec<u8>, WireFormat)>>, n: u64) {
    let mut rng = Rng(0x5eed_0000 + n);
    while !shared.stopped() {
        let (body, format) = &bodies[rng.below(bodies.len())];
        shared.compact(body.clone(), *format).await;
    }
}

/// Grows threads: a corpus conversation posted from its first dozen messages on, one to
/// three units more each call, under one `thread_id`; at its end, another thread.
async fn thread_client(shared: Arc<Shared>, sources: Arc<Vec<Source>>, n: u64) {
    let mut rng = Rng(0x7ead_0000 + n);
    let mut thread = 0u64;
    while !shared.stopped() {
        let source = &sources[rng.below(sources.len())];
        let thread_id = format!("soak-{n}-{thread}-{}", source.name);
        thread += 1;
        let mut i = 0;
        while i < source.cuts.len() && !shared.stopped() {
            let prefix = Conversation {
                messages: source.conversation.messages[..source.cuts[i]]
                    .to_vec()
                    .into(),
                thread_id: source.conversation.thread_id.clone(),
                metadata_json: source.conversation.metadata_json.clone(),
            };
            let body = json!({
                "conversation": wire::to_value(&prefix, source.format),
                "thread_id": thread_id,
            });
            shared
                .compact(serde_json::to_vec(&body).unwrap(), source.format)
                .await;
            shared.thread_calls.fetch_add(1, Ordering::Relaxed);
            i += 1 + rng.below(3);
        }
    }
}

async fn page_reader(shared: Arc<Shared>, n: u64) {
    let mut rng = Rng(0x9a9e_0000 + n);
    while !shared.stopped() {
        tokio::time::sleep(PAGE_READ_PAUSE).await;
        let id = {
            let pages = shared.pages.lock().unwrap();
            if pages.0.is_empty() {
                continue;
            }
            // Half the reads from the newest hundred pages, half from all.
            let len = pages.0.len();
            let i = if rng.below(2) == 0 {
                len - 1 - rng.below(len.min(100))
            } else {
                rng.below(len)
            };
            pages.0[i].clone()
        };
        let query = ["", "?format=anthropic", "?format=openai"][rng.below(3)];
        let began = Instant::now();
        match shared.read_page(&id, query).await {
            Ok(()) => shared.record(Kind::Page, began, Outcome::default()),
            Err(e) => shared.fail(Kind::Page, began, e),
        }
    }
}

/// Rewrites the chain file every [`REWRITE_EVERY`], alternating `group_size` 4 and 5;
/// returns how many times it wrote.
async fn rewriter(shared: Arc<Shared>, config: PathBuf) -> u64 {
    let mut writes = 0;
    let mut next = Instant::now() + REWRITE_EVERY;
    loop {
        tokio::time::sleep_until(next.into()).await;
        if shared.stopped() {
            return writes;
        }
        writes += 1;
        let group_size = if writes % 2 == 1 { 4 } else { 5 };
        write_atomically(&config, chain(group_size).as_bytes());
        next += REWRITE_EVERY;
    }
}

fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn store_bytes(dir: &Path) -> u64 {
    ["store.sqlite3", "store.sqlite3-wal", "store.sqlite3-shm"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// Samples the server process every [`SAMPLE_EVERY`] until stopped.
async fn sampler(shared: Arc<Shared>, dir: PathBuf) -> Vec<ProcSample> {
    let pid = shared.server.pid();
    let mut samples = Vec::new();
    let mut next = Instant::now();
    loop {
        let metrics = match shared
            .client
            .get(shared.server.url("/metrics"))
            .send()
            .await
        {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        samples.push(ProcSample {
            at: shared.started.elapsed(),
            rss_kib: rss_kib(pid),
            fds: open_fds(pid),
            reloads_applied: counter(&metrics, "tamp_reloads_total{result=\"applied\"}"),
            store_bytes: store_bytes(&dir),
        });
        if shared.stopped() {
            return samples;
        }
        next += SAMPLE_EVERY;
        tokio::time::sleep_until(next.into()).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One row of the table: a bucket of the run.
#[derive(Default)]
struct Row {
    requests: usize,
    compactions: usize,
    page_reads: usize,
    panics: usize,
    hangs: usize,
    failed: usize,
    compact_latency: Vec<Duration>,
    page_latency: Vec<Duration>,
    /// The last sample in the bucket, and the largest RSS and descriptor count seen in it.
    last: ProcSample,
    max_rss_kib: u64,
    max_fds: usize,
}

struct Args {
    duration: Duration,
    bucket: Duration,
    bucket_name: &'static str,
}

fn args() -> Args {
    let quick = std::env::args().any(|a| a == "quick")
        || std::env::var("TAMP_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let minutes = std::env::args()
        .find_map(|a| a.strip_prefix("minutes=")?.parse::<f64>().ok())
        .unwrap_or(if quick { 1.0 } else { 10.0 });
    let duration = Duration::from_secs_f64(minutes * 60.0);
    if minutes < 3.0 {
        Args {
            duration,
            bucket: Duration::from_secs(10),
            bucket_name: "10 s",
        }
    } else {
        Args {
            duration,
            bucket: Duration::from_secs(60),
            bucket_name: "minute",
        }
    }
}

/// Whether a series is flat after warm-up: the largest value in the second half of the
/// post-warm-up buckets is at most `slack` above the largest in the first half.
fn flat(values: &[f64], warm_up: usize, slack: impl Fn(f64) -> f64) -> (bool, f64, f64) {
    let after = &values[warm_up.min(values.len())..];
    if after.len() < 2 {
        return (false, 0.0, 0.0);
    }
    let (first, second) = after.split_at(after.len() / 2);
    let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    let (a, b) = (max(first), max(second));
    (b <= a + slack(a), a, b)
}

/// The least-squares slope of `values` against their index (0 with fewer than two).
fn slope(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    if values.len() < 2 {
        return 0.0;
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = values.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in values.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (y - mean_y);
        den += dx * dx;
    }
    num / den
}

fn main() {
    let args = args();
    tamp_e2e::ensure_built();
    let dir = ScratchDir::new("bench-soak");
    for (lib, file) in [
        ("tamp_test_misbehaving", "misbehaving.so"),
        ("tamp_buffered_tool_call", "buffered.so"),
        ("tamp_map_reduce_adaptive", "map_reduce.so"),
    ] {
        std::fs::copy(plugin(lib), dir.join(file)).unwrap();
    }
    let config = write_chain(&dir, &chain(5));
    let sources = Arc::new(sources());
    let bodies = Arc::new(one_shot_bodies(&sources));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    // Backtraces of ~1% of calls would be most of the server's log.
    let server = Server::start_with_env(&config, &[], &[("RUST_BACKTRACE", "0")]);
    // Idle connections are dropped before the server's 10 s idle timeout closes them, so a
    // request never goes out on a connection the server is closing.
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let shared = Arc::new(Shared {
        server,
        client,
        started: Instant::now(),
        stop: AtomicBool::new(false),
        records: Mutex::new(Vec::new()),
        failures: Mutex::new(BTreeMap::new()),
        pages: Mutex::new((Vec::new(), HashSet::new())),
        thread_calls: AtomicU64::new(0),
    });
    eprintln!(
        "soak: tamp serve (pid {}) for {:.1} min: {ONE_SHOT_CLIENTS} one-shot, {THREAD_CLIENTS} \
         thread and {PAGE_READERS} page-reading clients, chain rewritten every {} s",
        shared.server.pid(),
        args.duration.as_secs_f64() / 60.0,
        REWRITE_EVERY.as_secs()
    );

    let mut clients = Vec::new();
    for n in 0..ONE_SHOT_CLIENTS as u64 {
        clients.push(runtime.spawn(one_shot_client(Arc::clone(&shared), Arc::clone(&bodies), n)));
    }
    for n in 0..THREAD_CLIENTS as u64 {
        clients.push(runtime.spawn(thread_client(Arc::clone(&shared), Arc::clone(&sources), n)));
    }
    for n in 0..PAGE_READERS as u64 {
        clients.push(runtime.spawn(page_reader(Arc::clone(&shared), n)));
    }
    let writer = runtime.spawn(rewriter(Arc::clone(&shared), config.clone()));
    let sampling = runtime.spawn(sampler(Arc::clone(&shared), dir.to_path_buf()));

    // Progress on stderr, once per bucket.
    runtime.block_on(async {
        let mut next = shared.started + args.bucket;
        let end = shared.started + args.duration;
        while next <= end {
            tokio::time::sleep_until(next.into()).await;
            let records = shared.records.lock().unwrap();
            let failed = records.iter().filter(|r| r.outcome.failed).count();
            eprintln!(
                "soak: {:>4.0} s: {} requests, {failed} failed (not injected), RSS {} MiB, {} fds",
                shared.started.elapsed().as_secs_f64(),
                records.len(),
                rss_kib(shared.server.pid()) / 1024,
                open_fds(shared.server.pid()),
            );
            next += args.bucket;
        }
        tokio::time::sleep_until(end.into()).await;
    });
    shared.stop.store(true, Ordering::Relaxed);
    let load_time = shared.started.elapsed();
    runtime.block_on(async {
        for c in clients {
            c.await.unwrap();
        }
    });
    let writes = runtime.block_on(writer).unwrap();
    let samples = runtime.block_on(sampling).unwrap();

    // The end: metrics, every page read back, then a clean shutdown and the store verified.
    let metrics = runtime.block_on(shared.server.metrics());
    let pages: Vec<String> = shared.pages.lock().unwrap().0.clone();
    let unreadable: Vec<(String, String)> = runtime.block_on(async {
        use futures::StreamExt as _;
        futures::stream::iter(pages.iter())
            .map(|id| {
                let shared = Arc::clone(&shared);
                async move { (id.clone(), shared.read_page(id, "").await) }
            })
            .buffer_unordered(8)
            .filter_map(|(id, r)| async move { r.err().map(|e| (id, e)) })
            .collect()
            .await
    });
    let log_before_stop = shared.server.log();
    let log_path = tamp_e2e::artifact_dir().join("soak-server.log");
    std::fs::write(&log_path, &log_before_stop).expect("write the server log");
    let Ok(shared) = Arc::try_unwrap(shared) else {
        panic!("a client still holds the shared state");
    };
    let Shared {
        mut server,
        records,
        failures,
        thread_calls,
        ..
    } = shared;
    server.sigterm();
    let exit = server.wait_exit(Duration::from_secs(60));
    let verify = std::process::Command::new(tamp_e2e::tamp_bin())
        .args(["pages", "verify", "--config"])
        .arg(&config)
        .output()
        .expect("run tamp pages verify");
    let verify_text = String::from_utf8_lossy(&verify.stdout).trim().to_string()
        + String::from_utf8_lossy(&verify.stderr).trim();
    let stored_pages: Option<u64> = verify_text
        .strip_prefix("ok: ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok());

    // The table.
    let records = records.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    // Requests still in flight when the load stopped end in the last bucket.
    let buckets = (args.duration.as_secs_f64() / args.bucket.as_secs_f64()).ceil() as usize;
    let mut rows: Vec<Row> = (0..buckets.max(1)).map(|_| Row::default()).collect();
    let last_row = rows.len() - 1;
    let bucket_of =
        |at: Duration| ((at.as_secs_f64() / args.bucket.as_secs_f64()) as usize).min(last_row);
    for r in &records {
        let row = &mut rows[bucket_of(r.at)];
        row.requests += 1;
        match r.kind {
            Kind::Compact => {
                row.compactions += 1;
                row.compact_latency.push(r.latency);
            }
            Kind::Page => {
                row.page_reads += 1;
                row.page_latency.push(r.latency);
            }
        }
        row.panics += usize::from(r.outcome.injected_panic);
        row.hangs += usize::from(r.outcome.injected_hang);
        row.failed += usize::from(r.outcome.failed);
    }
    for s in &samples {
        // The final sample, taken as the load stopped, belongs to the last bucket.
        let row =
            &mut rows[bucket_of(s.at.min(load_time.saturating_sub(Duration::from_millis(1))))];
        row.last = row.last.max_by_time(*s);
        row.max_rss_kib = row.max_rss_kib.max(s.rss_kib);
        row.max_fds = row.max_fds.max(s.fds);
    }
    println!(
        "soak: tamp serve for {:.1} min, {ONE_SHOT_CLIENTS} one-shot + {THREAD_CLIENTS} thread \
         + {PAGE_READERS} page-reading loopback clients, chain rewritten every {} s; stage \
         {PANIC_STAGE} panics on 1% of calls, {HANG_STAGE} hangs on 0.1% (timeout {HANG_TIMEOUT_SECS:.0} s)",
        load_time.as_secs_f64() / 60.0,
        REWRITE_EVERY.as_secs()
    );
    println!(
        "{:>6} {:>8} {:>8} {:>6} {:>8} {:>6} {:>8} {:>8} {:>8} {:>9} {:>8} {:>5} {:>7} {:>9}",
        args.bucket_name,
        "requests",
        "compact",
        "pages",
        "inj p/h",
        "failed",
        "p50 ms",
        "p99 ms",
        "page p99",
        "RSS MiB",
        "max RSS",
        "fds",
        "reloads",
        "store MiB"
    );
    let mut previous_reloads = 0;
    for (i, row) in rows.iter_mut().enumerate() {
        row.compact_latency.sort();
        row.page_latency.sort();
        let reloads = row.last.reloads_applied.saturating_sub(previous_reloads);
        previous_reloads = row.last.reloads_applied.max(previous_reloads);
        println!(
            "{:>6} {:>8} {:>8} {:>6} {:>8} {:>6} {:>8.1} {:>8.1} {:>8.2} {:>9.1} {:>8.1} {:>5} {:>7} {:>9.1}",
            i + 1,
            row.requests,
            row.compactions,
            row.page_reads,
            format!("{}/{}", row.panics, row.hangs),
            row.failed,
            ms(percentile(&row.compact_latency, 50.0)),
            ms(percentile(&row.compact_latency, 99.0)),
            ms(percentile(&row.page_latency, 99.0)),
            row.last.rss_kib as f64 / 1024.0,
            row.max_rss_kib as f64 / 1024.0,
            row.last.fds,
            reloads,
            row.last.store_bytes as f64 / (1024.0 * 1024.0),
        );
    }
    let count = |f: fn(&Outcome) -> bool| records.iter().filter(|r| f(&r.outcome)).count();
    let compactions = records.iter().filter(|r| r.kind == Kind::Compact).count();
    let (panics, hangs, failed) = (
        count(|o| o.injected_panic),
        count(|o| o.injected_hang),
        count(|o| o.failed),
    );
    let pct = |n: usize| 100.0 * n as f64 / compactions.max(1) as f64;
    println!(
        "requests: {} ({compactions} compactions, {} of them in threads; {} page reads)",
        records.len(),
        thread_calls.load(Ordering::Relaxed),
        records.len() - compactions
    );
    // The plugin says when it injects a fault (a warning in the server's log): every one must
    // show as a rollback, and no rollback of those stages may come without one.
    let injected_panics_logged = log_before_stop
        .matches("misbehaving: injected panic")
        .count();
    let injected_hangs_logged = log_before_stop
        .matches("misbehaving: injected hang")
        .count();
    println!(
        "injected failures: {panics} panics ({:.2}% of compactions; the plugin logged {injected_panics_logged}), \
         {hangs} hangs cut by the timeout ({:.2}%; logged {injected_hangs_logged})",
        pct(panics),
        pct(hangs)
    );
    println!("other failures: {failed}");
    for (what, n) in &failures {
        println!("  {n:>6} x {what}");
    }
    let applied = counter(&metrics, "tamp_reloads_total{result=\"applied\"}");
    let rejected = counter(&metrics, "tamp_reloads_total{result=\"rejected\"}");
    let unchanged = counter(&metrics, "tamp_reloads_total{result=\"unchanged\"}");
    println!(
        "reloads: {writes} writes, {applied} applied, {rejected} rejected, {unchanged} unchanged"
    );
    let server_5xx: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("tamp_http_requests_total{") && l.contains("status=\"5"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .map(|n| n as u64)
        .sum();
    println!("server-side 5xx answers (/metrics): {server_5xx}");
    println!(
        "pages: {} written (named in reports), {} readable by GET /v1/pages/{{id}}; \
         tamp pages verify: {}",
        pages.len(),
        pages.len() - unreadable.len(),
        verify_text
    );
    for (id, e) in unreadable.iter().take(10) {
        println!("  unreadable {id}: {e}");
    }
    println!("shutdown: {exit}; the server's log: {}", log_path.display());

    let warm_up = (rows.len() / 5).max(1);
    let rss: Vec<f64> = rows.iter().map(|r| r.max_rss_kib as f64 / 1024.0).collect();
    let fds: Vec<f64> = rows.iter().map(|r| r.max_fds as f64).collect();
    let (rss_flat, rss_a, rss_b) = flat(&rss, warm_up, |a| a * 0.10);
    let (fds_flat, fds_a, fds_b) = flat(&fds, warm_up, |_| 4.0);
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    let warm_up_text = match args.bucket.as_secs() * warm_up as u64 {
        secs if secs % 60 == 0 => format!("{} min", secs / 60),
        secs => format!("{secs} s"),
    };
    println!("targets (warm-up: the first {warm_up_text}):");
    println!(
        "  failures other than the injected ones: {failed} (target 0): {}",
        mark(failed == 0)
    );
    println!(
        "  RSS after warm-up, largest in the first half {rss_a:.1} MiB, in the second {rss_b:.1} \
         MiB (flat: at most +10%): {}",
        mark(rss_flat)
    );
    let last_rss: Vec<f64> = rows
        .iter()
        .map(|r| r.last.rss_kib as f64 / 1024.0)
        .collect();
    println!(
        "    (end-of-{} RSS after warm-up: least-squares slope {:+.2} MiB per {})",
        args.bucket_name,
        slope(&last_rss[warm_up.min(last_rss.len())..]),
        args.bucket_name
    );
    println!(
        "  open fds after warm-up, largest in the first half {fds_a:.0}, in the second \
         {fds_b:.0} (flat: at most +4): {}",
        mark(fds_flat)
    );
    let pages_equal =
        unreadable.is_empty() && stored_pages.is_some_and(|n| n >= pages.len() as u64);
    println!(
        "  pages written {} = readable {} (store holds {}): {}",
        pages.len(),
        pages.len() - unreadable.len(),
        stored_pages.map_or("?".to_string(), |n| n.to_string()),
        mark(pages_equal)
    );
    println!(
        "  every rewrite applied, none rejected: {}; injected faults all seen as rollbacks: {}; clean shutdown: {}",
        mark(applied == writes && rejected == 0),
        mark(injected_panics_logged == panics && injected_hangs_logged == hangs),
        mark(exit.success())
    );
    drop(dir);
}

impl ProcSample {
    /// The later of two samples.
    fn max_by_time(self, other: ProcSample) -> ProcSample {
        if other.at >= self.at {
            other
        } else {
            self
        }
    }
}
