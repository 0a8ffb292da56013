//! Foundation benchmarks (issue 2). Each prints figures measured side by side in one run, as
//! ratios: the machine is shared and noisy, so only comparisons mean anything.
//!
//! - FFI tax: the template strategy linked statically vs loaded as a plugin (1,000 messages).
//! - Concurrency: 10,000 compactions at once, each awaiting LLM calls answered after 200 ms.
//! - Host overhead: a two-stage chain on 1,000 messages vs merely parsing and re-serializing.
//!
//! Run: `cargo bench -p tamp-e2e --bench foundation` (add `-- quick` for fewer iterations;
//! `-- only=waiting [built]` runs the waiting-only concurrency run alone, for profiling;
//! `-- only=floor` the same copies held with no host; `-- small-pages` turns transparent huge
//! pages off, for steadier figures).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tamp_e2e::stats::median;

/// The `tamp` binary's allocator (cli/src/main.rs), so the host is measured as it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tamp_custom_strategy::ArchiveOldToolCalls;
use tamp_e2e::{corpus_mix, plugin, scratch_dir, write_chain, StageChain};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides};
use tamp_host::loader::LoadedPlugin;
use tamp_host::providers::ScriptedProvider;
use tamp_host::services::{HostContext, StageIdentity, StageServices};
use tamp_host::store::SqliteStore;
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{Budget, CompactRequest, Compaction, Conversation, Host, Shared, Strategy};
use tokio::sync::Semaphore;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// CPU time the process has used so far, user and system, in ms (from /proc/self/stat, in
/// clock ticks of 10 ms).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) * 10.0,
        _ => f64::NAN,
    }
}

/// Resets the kernel's peak-RSS mark, so a later reading covers only what follows.
/// Runs `work` to completion on `rt`: its output, the wall time it took and the process's
/// CPU time meanwhile, in ms.
fn timed<T>(
    rt: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T>,
) -> (T, Duration, f64) {
    let cpu_before = cpu_ms();
    let started = Instant::now();
    let out = rt.block_on(work);
    (out, started.elapsed(), cpu_ms() - cpu_before)
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn budget(keep_recent: u32, current: u64) -> Budget {
    Budget {
        max_tokens: 1_000,
        high_watermark: 750,
        low_watermark: 500,
        keep_recent,
        current_tokens: current,
    }
}

fn ffi_tax(rt: &tokio::runtime::Runtime, iterations: usize) {
    let conversation = corpus_mix(1_000);
    let config = serde_json::json!({"keep_exchanges": 3, "summarize": false});
    let bench_identity = || StageIdentity {
        stage: "bench".into(),
        strategy: "custom-strategy".into(),
        config_hash: String::new(),
    };
    let ctx = Arc::new(HostContext {
        provider: Arc::new(ScriptedProvider::always("unused")),
        store: Arc::new(SqliteStore::in_memory().unwrap()),
        cache: None,
        queue: None,
        tokens: Arc::new(TokenCounter::new(Encoding::O200kBase).unwrap()),
        llm_permits: Arc::new(Semaphore::new(16)),
        llm_timeout: Duration::from_secs(10),
        progress: None,
    });
    let statically =
        ArchiveOldToolCalls::new(serde_json::from_value(config.clone()).unwrap()).unwrap();
    let loaded = LoadedPlugin::load(&plugin("tamp_custom_strategy")).unwrap();
    let dynamically = loaded.instantiate(&config).unwrap();

    let run_static = |conv: Conversation| {
        let services = StageServices::new(Arc::clone(&ctx), bench_identity(), None, None);
        let input = Compaction {
            conversation: Shared::new(conv),
            budget: budget(10, 0),
            host: Host::new(services.to_ffi(), "custom-strategy"),
            stage: "bench".into(),
        };
        rt.block_on(async {
            let t = Instant::now();
            let out = statically.compact(input).await.unwrap();
            (t.elapsed(), out.edits.len())
        })
    };
    let run_plugin = |conv: Conversation| {
        let services = StageServices::new(Arc::clone(&ctx), bench_identity(), None, None);
        let request = CompactRequest {
            conversation: Shared::new(conv),
            budget: budget(10, 0),
            host: services.to_ffi(),
            stage: "bench".into(),
        };
        rt.block_on(async {
            let t = Instant::now();
            let out = dynamically.compact(request).await.into_result().unwrap();
            (t.elapsed(), out.edits.len())
        })
    };
    // Warm up both (page store, token memo, caches), then alternate so noise hits both alike.
    let (_, a) = run_static(conversation.clone());
    let (_, b) = run_plugin(conversation.clone());
    assert_eq!(a, b, "both paths must do the same work");
    let (mut st, mut dy) = (Vec::new(), Vec::new());
    for i in 0..iterations {
        let (first, second) = (conversation.clone(), conversation.clone());
        if i % 2 == 0 {
            st.push(run_static(first).0.as_secs_f64());
            dy.push(run_plugin(second).0.as_secs_f64());
        } else {
            dy.push(run_plugin(first).0.as_secs_f64());
            st.push(run_static(second).0.as_secs_f64());
        }
    }
    let (s, d) = (median(st), median(dy));
    println!(
        "ffi tax (template strategy, {} messages → {a} edit(s), median of {iterations} alternating runs):",
        conversation.messages.len()
    );
    println!(
        "  static {:.3} ms   plugin {:.3} ms   ratio plugin/static {:.3}x (target <= 1.02x)",
        s * 1e3,
        d * 1e3,
        d / s
    );
}

/// Where the concurrency benchmark's 10,000 input conversations are built.
#[derive(Clone, Copy, PartialEq)]
enum Inputs {
    /// One copy per compaction, made as its task is spawned, inside the timed region: the
    /// copies (32 KB each, fresh memory) are timed with the host.
    CopiedAtSpawn,
    /// All copies made before the clock starts, as a server holds requests it has already
    /// parsed: only the host's work is timed (parsing is the host-overhead benchmark's).
    BuiltBefore,
}

/// `compactions` compactions of a 50-message real conversation at once through a chain with
/// one stage of `plugin` (`config`), every LLM call answered after 200 ms. Prints total time,
/// its ratio to 200 ms, the process's CPU time, the peak RSS of the run and the size of a
/// compaction's future.
fn concurrency_run(
    rt: &tokio::runtime::Runtime,
    compactions: usize,
    label: &str,
    plugin_lib: &'static str,
    config: serde_json::Value,
    inputs: Inputs,
) {
    let delay = Duration::from_millis(200);
    // 50 messages of a real customer-service conversation (tool runs between user turns).
    let conversation = tamp_e2e::fifty_message_conversation();
    let dir = scratch_dir("bench-concurrency");
    let provider = ScriptedProvider::always("A short summary of the tool calls.")
        .with_delay(delay)
        .without_request_log();
    let chain = StageChain::new(plugin_lib, config, Arc::new(provider))
        .max_tokens(1_000)
        .keep_recent(4)
        .store(Arc::new(
            SqliteStore::open(&dir.join("pages.sqlite3")).unwrap(),
        ))
        .llm_concurrency(1_000_000)
        .build();
    let chain = Arc::new(chain);
    let options = CompactOptions {
        force: true,
        ..Default::default()
    };
    // One run first: checks the stage makes its calls, and warms the token memo and store.
    let probe = rt
        .block_on(chain.compact(conversation.clone(), &options))
        .unwrap();
    let calls = probe.report.llm_calls;
    assert!(
        calls > 0 && probe.report.stages[0].error.is_none(),
        "{:?}",
        probe.report.stages[0]
    );

    // What each waiting compaction's task carries inline (its stage's plugin future and the
    // LLM calls' futures are allocations of their own).
    let future_bytes = std::mem::size_of_val(&chain.compact(conversation.clone(), &options));
    reset_peak_rss();
    let prepared: Vec<Conversation> = if inputs == Inputs::BuiltBefore {
        (0..compactions).map(|_| conversation.clone()).collect()
    } else {
        Vec::new()
    };
    let mut prepared = prepared.into_iter();
    let (total_calls, elapsed, cpu) = timed(rt, async {
        let tasks: Vec<_> = (0..compactions)
            .map(|_| {
                let chain = Arc::clone(&chain);
                let conv = prepared.next().unwrap_or_else(|| conversation.clone());
                let options = options.clone();
                tokio::spawn(async move {
                    chain
                        .compact(conv, &options)
                        .await
                        .map(|c| c.report.llm_calls)
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap().unwrap();
        }
        total
    });
    println!(
        "concurrency, {label}: {compactions} compactions of {} messages at once, {calls} LLM call(s) each ({total_calls} in all) answered after {} ms:",
        conversation.messages.len(),
        delay.as_millis()
    );
    println!(
        "  total {:.0} ms   ratio total/200ms {:.2}x (target <= 2x)   {:.1} us per compaction beyond the wait   CPU {cpu:.0} ms ({:.1} us per compaction)   peak RSS {:.0} MiB   compaction future {future_bytes} bytes",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() / delay.as_secs_f64(),
        (elapsed.saturating_sub(delay)).as_secs_f64() * 1e6 / compactions as f64,
        cpu * 1e3 / compactions as f64,
        peak_rss_mib()
    );
}

/// The floor of the copied-inputs concurrency run: the same `compactions` copies of the
/// 50-message conversation, each made as its task is spawned and held for the 200 ms an LLM
/// answer takes, with no host at all. What a run with copied inputs spends above this is the
/// host's; this much is the copies' own cost (fresh memory, faulted in and zeroed).
fn client_floor_run(rt: &tokio::runtime::Runtime, compactions: usize) {
    let delay = Duration::from_millis(200);
    let conversation = tamp_e2e::fifty_message_conversation();
    reset_peak_rss();
    let (held, elapsed, cpu) = timed(rt, async {
        let tasks: Vec<_> = (0..compactions)
            .map(|_| {
                let conv = conversation.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    conv.messages.len()
                })
            })
            .collect();
        let mut held = 0;
        for t in tasks {
            held += t.await.unwrap();
        }
        held
    });
    assert_eq!(held, compactions * conversation.messages.len());
    println!(
        "concurrency floor, no host: {compactions} copies of {} messages made at spawn, each held {} ms:",
        conversation.messages.len(),
        delay.as_millis()
    );
    println!(
        "  total {:.0} ms   ratio total/200ms {:.2}x   CPU {cpu:.0} ms ({:.1} us per copy)   peak RSS {:.0} MiB",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() / delay.as_secs_f64(),
        cpu * 1e3 / compactions as f64,
        peak_rss_mib()
    );
}

/// Where one compaction's CPU time goes, on the concurrency benchmark's 50-message
/// conversation, one compaction at a time (no waiting: the provider answers at once).
fn breakdown(rt: &tokio::runtime::Runtime, iterations: usize) {
    let conversation = tamp_e2e::fifty_message_conversation();
    let tokens = TokenCounter::new(Encoding::O200kBase).unwrap();
    let time = |f: &mut dyn FnMut()| {
        f();
        let t = Instant::now();
        for _ in 0..iterations {
            f();
        }
        t.elapsed().as_secs_f64() * 1e6 / iterations as f64
    };
    let clone = time(&mut || drop(std::hint::black_box(conversation.clone())));
    let count = time(&mut || {
        std::hint::black_box(tokens.count_messages(&conversation.messages));
    });
    let pairing = time(&mut || {
        wire::check_tool_pairing(&conversation.messages, WireFormat::Anthropic).unwrap()
    });
    let chain_for = |lib: &'static str, config: serde_json::Value| {
        let provider = ScriptedProvider::always("A short summary.").without_request_log();
        StageChain::new(lib, config, Arc::new(provider))
            .max_tokens(1_000)
            .keep_recent(4)
            .timeout(Duration::from_secs(60))
            .build()
    };
    let options = CompactOptions {
        force: true,
        ..Default::default()
    };
    let waiting = chain_for(
        "tamp_test_misbehaving",
        serde_json::json!({"mode": "await_llm"}),
    );
    let wait_only = time(&mut || {
        rt.block_on(waiting.compact(conversation.clone(), &options))
            .unwrap();
    });
    let full = chain_for(
        "tamp_custom_strategy",
        serde_json::json!({"keep_exchanges": 0, "summarize": true}),
    );
    let full_work = time(&mut || {
        rt.block_on(full.compact(conversation.clone(), &options))
            .unwrap();
    });
    println!(
        "breakdown, one compaction of {} messages at a time (us each, mean of {iterations}):",
        conversation.messages.len()
    );
    println!(
        "  clone {clone:.1}   count tokens (memoized) {count:.1}   pairing check {pairing:.1}   \
         chain, waiting-only plugin {wait_only:.1}   chain, template plugin {full_work:.1}"
    );
}

fn concurrency(rt: &tokio::runtime::Runtime, compactions: usize) {
    client_floor_run(rt, compactions);
    concurrency_run(
        rt,
        compactions,
        "waiting only (plugin awaits 3 parallel host LLM calls)",
        "tamp_test_misbehaving",
        serde_json::json!({"mode": "await_llm"}),
        Inputs::CopiedAtSpawn,
    );
    concurrency_run(
        rt,
        compactions,
        "waiting only, inputs built before the clock",
        "tamp_test_misbehaving",
        serde_json::json!({"mode": "await_llm"}),
        Inputs::BuiltBefore,
    );
    concurrency_run(
        rt,
        compactions,
        "full work (template plugin: pages, summaries, invariant checks)",
        "tamp_custom_strategy",
        serde_json::json!({"keep_exchanges": 0, "summarize": true, "max_concurrency": 8}),
        Inputs::CopiedAtSpawn,
    );
}

fn host_overhead(rt: &tokio::runtime::Runtime, iterations: usize) {
    let conversation = corpus_mix(1_000);
    let json = wire::to_string_pretty(&conversation, WireFormat::Anthropic);
    let dir = scratch_dir("bench-overhead");
    let toml = format!(
        "[budget]\nmax_tokens = 20000\nkeep_recent = 10\n[store]\npath = \"pages.sqlite3\"\n\
         [[stage]]\nname = \"archive\"\nplugin = \"{}\"\n[stage.config]\nkeep_exchanges = 3\nsummarize = false\n\
         [[stage]]\nname = \"oldest\"\nplugin = \"{}\"\ntrigger = \"always\"\n[stage.config]\nmode = \"ok\"\n",
        plugin("tamp_custom_strategy").display(),
        plugin("tamp_test_misbehaving").display()
    );
    let chain = Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).unwrap();
    let options = CompactOptions {
        format: Some(WireFormat::Anthropic),
        force: true,
        ..Default::default()
    };

    let parse_only = || {
        let t = Instant::now();
        let (conv, fmt) = wire::parse_str(&json, None).unwrap();
        let out = wire::to_string_pretty(&conv, fmt);
        (t.elapsed(), out.len())
    };
    let with_chain = || {
        let t = Instant::now();
        let (conv, fmt) = wire::parse_str(&json, None).unwrap();
        let compacted = rt.block_on(chain.compact(conv, &options)).unwrap();
        let out = wire::to_string_pretty(&compacted.conversation, fmt);
        (t.elapsed(), out.len(), compacted.report)
    };
    let (_, _, report) = with_chain();
    assert_eq!(report.llm_calls, 0);
    assert!(
        report.stages.iter().all(|s| s.error.is_none()),
        "{report:?}"
    );
    let (mut p, mut c) = (Vec::new(), Vec::new());
    for i in 0..iterations {
        if i % 2 == 0 {
            p.push(parse_only().0.as_secs_f64());
            c.push(with_chain().0.as_secs_f64());
        } else {
            c.push(with_chain().0.as_secs_f64());
            p.push(parse_only().0.as_secs_f64());
        }
    }
    let (p, c) = (median(p), median(c));
    println!(
        "host overhead (two-stage chain, {} messages, {} KiB JSON, no LLM calls, median of {iterations}):",
        conversation.messages.len(),
        json.len() / 1024
    );
    println!(
        "  parse+serialize {:.2} ms   parse+chain+serialize {:.2} ms   ratio {:.2}x   chain alone {:.2} ms",
        p * 1e3,
        c * 1e3,
        c / p,
        (c - p) * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "quick");
    // `only=NAME` runs one benchmark (for profiling).
    let only = args
        .iter()
        .find_map(|a| a.strip_prefix("only="))
        .map(str::to_string);
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    // The concurrency runs' memory is mostly fresh pages the kernel zeroes on first touch.
    // Whether it can hand out 2 MiB pages (transparent huge pages) varies from run to run and
    // halves or doubles what faulting in costs; with them off, runs compare steadily.
    if args.iter().any(|a| a == "small-pages") {
        // SAFETY: prctl with PR_SET_THP_DISABLE reads only its integer arguments.
        let refused = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0;
        assert!(!refused, "prctl(PR_SET_THP_DISABLE) failed");
        println!("transparent huge pages off for this process (small-pages)");
    }
    let rt = tamp_e2e::rt();
    if wanted("ffi") {
        ffi_tax(&rt, if quick { 20 } else { 200 });
    }
    if wanted("overhead") {
        host_overhead(&rt, if quick { 10 } else { 60 });
    }
    if wanted("concurrency") {
        concurrency(&rt, if quick { 1_000 } else { 10_000 });
    }
    if only.as_deref() == Some("floor") {
        client_floor_run(&rt, if quick { 1_000 } else { 10_000 });
    }
    if wanted("breakdown") {
        breakdown(&rt, if quick { 200 } else { 2_000 });
    }
    if wanted("waiting") {
        // The waiting-only half of the concurrency benchmark, alone (for profiling). Run
        // after the others, memory is already mapped: the difference from the first
        // waiting-only figure is the cost of faulting in fresh memory.
        // `built`: with the inputs built before the clock (see `Inputs`).
        let inputs = if args.iter().any(|a| a == "built") {
            Inputs::BuiltBefore
        } else {
            Inputs::CopiedAtSpawn
        };
        let label = match (only.is_some(), inputs) {
            (true, Inputs::CopiedAtSpawn) => "waiting only",
            (true, Inputs::BuiltBefore) => "waiting only, inputs built before the clock",
            (false, _) => "waiting only, again (memory already mapped)",
        };
        concurrency_run(
            &rt,
            if quick { 1_000 } else { 10_000 },
            label,
            "tamp_test_misbehaving",
            serde_json::json!({"mode": "await_llm"}),
            inputs,
        );
    }
}
