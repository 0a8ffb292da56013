//! `tamp serve` under steady load while its config is rewritten.
//!
//! Two runs of the real binary, side by side: a loopback client keeps `CLIENTS` compactions
//! in flight for the whole run; in the second run the config is rewritten every 2 s
//! (alternating two valid chains whose stage names differ, saved by atomic rename as editors
//! do). Printed: requests and failures per run (target: 0 failed), throughput with reloads
//! against without (ratio), and reload latency, from the write to the first answer served by
//! the new chain (p50/p99/max; target p99 < 250 ms with the default 200 ms debounce).
//!
//! `cargo bench -p tamp-e2e --bench serve` (30 s per run); `-- quick` for a 6 s smoke run.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tamp_e2e::stats::percentile;

use serde_json::{json, Value};
use tamp_e2e::serve_support::{report_stage_names, write_atomically, ScratchDir, Server};
use tamp_e2e::{corpus, plugin, write_chain};

const CLIENTS: usize = 8;
const REWRITE_EVERY: Duration = Duration::from_secs(2);

fn chain(stage: &str, keep_exchanges: u32) -> String {
    format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [[stage]]\nname = \"{stage}\"\nplugin = \"strategy.so\"\n\
         [stage.config]\nkeep_exchanges = {keep_exchanges}\nsummarize = false\n"
    )
}

/// One answer: when it arrived and which stage answered.
struct Answer {
    at: Instant,
    stage: String,
}

struct RunResult {
    ok: usize,
    failed: usize,
    elapsed: Duration,
    answers: Vec<Answer>,
    /// (when written, the stage name of the chain written).
    writes: Vec<(Instant, String)>,
    applied: u64,
    /// Build time of each applied reload, from the server's `reloaded ... built in X ms` lines.
    build_ms: Vec<f64>,
}

/// A scratch directory with the plugin and the first chain file; the chain file's path.
fn setup(tag: &str) -> (ScratchDir, std::path::PathBuf) {
    let dir = ScratchDir::new(tag);
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let config = write_chain(&dir, &chain("blue", 1));
    (dir, config)
}

async fn run(config: &Path, duration: Duration, rewrite: bool) -> RunResult {
    let server = Arc::new(Server::start(config, &[]));
    let body: Value = json!({
        "conversation": serde_json::from_str::<Value>(
            &corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")
        ).unwrap(),
    });
    let body = Arc::new(serde_json::to_vec(&body).unwrap());
    // Warm up: the first compactions fill caches (tokenizer memo, connection pool).
    for _ in 0..CLIENTS {
        server
            .compact(&serde_json::from_slice(&body).unwrap())
            .await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (server, stop, answers, body) = (
                Arc::clone(&server),
                Arc::clone(&stop),
                Arc::clone(&answers),
                Arc::clone(&body),
            );
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let response = server
                        .client
                        .post(server.url("/v1/compact"))
                        .header("content-type", "application/json")
                        .body(body.as_ref().clone())
                        .send()
                        .await;
                    let answer = match response {
                        Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
                        _ => None,
                    };
                    match answer.and_then(|a| report_stage_names(&a).into_iter().next()) {
                        Some(stage) => {
                            ok += 1;
                            answers.lock().unwrap().push(Answer {
                                at: Instant::now(),
                                stage,
                            });
                        }
                        None => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();

    let mut writes = Vec::new();
    let deadline = started + duration;
    let mut next = if rewrite { "green" } else { "blue" };
    loop {
        let wake = (Instant::now() + REWRITE_EVERY).min(deadline);
        tokio::time::sleep_until(wake.into()).await;
        if Instant::now() >= deadline {
            break;
        }
        if rewrite {
            let keep = if next == "green" { 2 } else { 1 };
            write_atomically(config, chain(next, keep).as_bytes());
            writes.push((Instant::now(), next.to_string()));
            next = if next == "green" { "blue" } else { "green" };
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for c in clients {
        let (o, f) = c.await.unwrap();
        ok += o;
        failed += f;
    }
    let elapsed = started.elapsed();
    let metrics = server.metrics().await;
    let applied = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tamp_reloads_total{result=\"applied\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    let mut build_ms: Vec<f64> = server
        .log()
        .lines()
        .filter(|l| l.starts_with("tamp serve: reloaded "))
        .filter_map(|l| {
            l.rsplit_once("built in ")?
                .1
                .strip_suffix(" ms")?
                .parse()
                .ok()
        })
        .collect();
    build_ms.sort_by(f64::total_cmp);
    RunResult {
        ok,
        failed,
        elapsed,
        answers,
        writes,
        applied,
        build_ms,
    }
}

/// For each write: the time from the write to the first answer from the chain written.
fn reload_latencies(result: &RunResult) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::new();
    let mut never = 0;
    for (i, (at, stage)) in result.writes.iter().enumerate() {
        let until = result.writes.get(i + 1).map(|(t, _)| *t);
        let first = result
            .answers
            .iter()
            .filter(|a| a.at >= *at && until.is_none_or(|u| a.at < u))
            .filter(|a| &a.stage == stage)
            .map(|a| a.at)
            .min();
        match first {
            Some(t) => latencies.push(t - *at),
            None => never += 1,
        }
    }
    latencies.sort();
    (latencies, never)
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let duration = if quick {
        Duration::from_secs(6)
    } else {
        Duration::from_secs(30)
    };
    let runtime = tamp_e2e::rt();
    tamp_e2e::ensure_built();
    let (_steady_dir, steady_config) = setup("bench-serve-steady");
    let steady = runtime.block_on(run(&steady_config, duration, false));
    let (_reload_dir, reload_config) = setup("bench-serve-reload");
    let reloading = runtime.block_on(run(&reload_config, duration, true));
    let (latencies, never) = reload_latencies(&reloading);

    let rate = |r: &RunResult| r.ok as f64 / r.elapsed.as_secs_f64();
    println!(
        "tamp serve under load: {CLIENTS} loopback clients, {:.0} s per run, a 38-message \
         corpus conversation per request (custom-strategy stage acting), debounce 200 ms",
        duration.as_secs_f64()
    );
    println!(
        "{:<34} {:>10} {:>8} {:>12}",
        "run", "requests", "failed", "req/s"
    );
    for (name, r) in [
        ("steady (no reloads)", &steady),
        ("config rewritten every 2 s", &reloading),
    ] {
        println!(
            "{:<34} {:>10} {:>8} {:>12.1}",
            name,
            r.ok + r.failed,
            r.failed,
            rate(r)
        );
    }
    println!(
        "throughput with reloads / without: {:.3}",
        rate(&reloading) / rate(&steady)
    );
    println!(
        "reloads: {} written, {} applied; latency write -> first answer from the new chain: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms{}",
        reloading.writes.len(),
        reloading.applied,
        percentile(&latencies, 50.0).as_secs_f64() * 1e3,
        percentile(&latencies, 99.0).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        if never > 0 {
            format!(" ({never} write(s) never answered by their chain)")
        } else {
            String::new()
        }
    );
    let build = &reloading.build_ms;
    let build_pct = |p: f64| {
        let rank = ((p / 100.0) * build.len() as f64).ceil() as usize;
        build
            .get(rank.clamp(1, build.len().max(1)) - 1)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "of which: debounce 200 ms; building the new chain p50 {:.1} ms, p99 {:.1} ms; the rest \
         is the first request on it",
        build_pct(50.0),
        build_pct(99.0)
    );
    let failed = steady.failed + reloading.failed;
    let p99 = percentile(&latencies, 99.0);
    println!(
        "targets: failed requests 0: {}; reload p99 < 250 ms: {}",
        if failed == 0 { "met" } else { "MISSED" },
        if p99 < Duration::from_millis(250) && never == 0 {
            "met"
        } else {
            "MISSED"
        }
    );
}
