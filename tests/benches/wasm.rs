//! WebAssembly strategies, side by side in one run with their native counterparts,
//! on the same 1,000-message conversation of real corpus text:
//!
//! 1. **The boundary**: a stage that returns no edits, native (the `misbehaving` test plugin's
//!    `nothing` mode, through the FFI path) against a WebAssembly guest that returns no edits
//!    (the Python `misbehaving` fixture, unconfigured): the stage's call alone, and a whole
//!    compaction through a one-stage chain (what a caller waits for). Target: the boundary
//!    at most 2x native.
//! 2. **The templates**: the Rust example strategy (`examples/custom-strategy`) against its
//!    Python and JavaScript ports, the stage's own time: the first compaction (every old tool
//!    run archived, each with a summary from the offline summarizer) and the steady state (the
//!    compacted conversation again, nothing new to archive).
//!
//! The guests are built from source the way the tests build them (`tamp_e2e::guests`: pinned
//! componentize-py and componentize-js, cached in `target/tools/`), and compiled once (cached
//! on disk) before anything is timed.
//!
//! Run: `cargo bench -p tamp-e2e --bench wasm` (`-- quick` for fewer runs).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tamp_e2e::stats::median;

use tamp_e2e::guests::{component, Guest};
use tamp_e2e::{corpus_mix, plugin};
use tamp_host::budget::BudgetConfig;
use tamp_host::chain::{ChainBuilder, CompactOptions};
use tamp_host::config::Trigger;
use tamp_host::loader::{load_plugin, LoadedPlugin};
use tamp_host::providers::ScriptedProvider;
use tamp_host::services::HostContext;
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_plugin_api::sdk::summary_message;
use tamp_plugin_api::{Budget, Conversation, Edit, Message, Shared, StrategyBox};

fn mark(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// What every timed call shares: one tokenizer (its per-message memo warm, as the chain's
/// budget count leaves it before any stage runs) and an in-memory store.
struct Bench {
    rt: tokio::runtime::Runtime,
    ctx: Arc<HostContext>,
    conversation: Conversation,
    runs: usize,
}

impl Bench {
    fn budget(&self, conversation: &Conversation) -> Budget {
        let current = self.ctx.tokens.count_messages(&conversation.messages);
        Budget {
            max_tokens: 20_000,
            high_watermark: 15_000,
            low_watermark: 10_000,
            keep_recent: 16,
            current_tokens: current,
        }
    }

    /// One call of `strategy` on `conversation`: its wall time in ms, and its edits.
    fn call(
        &self,
        strategy: &StrategyBox,
        conversation: &Shared<Conversation>,
    ) -> (f64, Vec<Edit>) {
        tamp_e2e::direct_call(
            &self.rt,
            &self.ctx,
            "bench",
            strategy,
            conversation,
            self.budget(conversation),
        )
    }

    /// The median stage time of each of `strategies` on `conversation`, run in turn so noise
    /// hits them alike; and the edits each made.
    fn side_by_side(
        &self,
        strategies: &[(&str, StrategyBox)],
        conversation: &Conversation,
    ) -> Vec<(f64, Vec<Edit>)> {
        let shared = Shared::new(conversation.clone());
        // Warm: instances built, memos filled, pages written once.
        let warm: Vec<Vec<Edit>> = strategies
            .iter()
            .map(|(_, s)| self.call(s, &shared).1)
            .collect();
        let mut times = vec![Vec::new(); strategies.len()];
        for run in 0..self.runs {
            for k in 0..strategies.len() {
                let k = (k + run) % strategies.len();
                times[k].push(self.call(&strategies[k].1, &shared).0);
            }
        }
        times.into_iter().map(median).zip(warm).collect()
    }
}

/// A whole compaction through a one-stage chain (over budget, so the stage runs): the median
/// wall time in ms.
fn chain_time(bench: &Bench, plugin: Arc<LoadedPlugin>, config: serde_json::Value) -> f64 {
    let chain = ChainBuilder::new(BudgetConfig {
        max_tokens: 20_000,
        keep_recent: 16,
        ..BudgetConfig::default()
    })
    .provider(Arc::new(ScriptedProvider::always("unused")))
    .tokens(Arc::clone(&bench.ctx.tokens))
    .stage(
        "bench",
        plugin,
        config,
        Trigger::Always,
        Duration::from_secs(60),
    )
    .expect("the stage builds")
    .build()
    .expect("the chain builds");
    let options = CompactOptions {
        force: true,
        ..Default::default()
    };
    let mut times = Vec::new();
    for _ in 0..=bench.runs {
        let input = bench.conversation.clone();
        let started = Instant::now();
        let out = bench
            .rt
            .block_on(chain.compact(input, &options))
            .expect("compacts");
        times.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(
            out.report.stages[0].status,
            tamp_host::chain::StageStatus::Skipped
        );
    }
    times.remove(0);
    median(times)
}

fn main() {
    let quick = tamp_e2e::bench_quick();
    let rt = tamp_e2e::two_worker_rt();
    tamp_e2e::ensure_built();
    let conversation = corpus_mix(1_000);
    let tokens = Arc::new(TokenCounter::new(Encoding::O200kBase).expect("tokenizer"));
    tokens.count_messages(&conversation.messages);
    let bench = Bench {
        rt,
        ctx: tamp_e2e::offline_host_context(tokens),
        conversation,
        runs: if quick { 7 } else { 31 },
    };
    let n = bench.conversation.messages.len();
    let load = |p: std::path::PathBuf| load_plugin(&p).expect("loads");

    // 1. The boundary.
    let native_nothing = load(plugin("tamp_test_misbehaving"));
    let wasm_nothing = load(component(Guest::Misbehaving));
    let nothing = serde_json::json!({"mode": "nothing"});
    let strategies = [
        ("native", native_nothing.instantiate(&nothing).unwrap()),
        (
            "wasm",
            wasm_nothing.instantiate(&serde_json::json!({})).unwrap(),
        ),
    ];
    let times = bench.side_by_side(&strategies, &bench.conversation);
    assert!(times.iter().all(|(_, edits)| edits.is_empty()));
    let (native_ms, wasm_ms) = (times[0].0, times[1].0);
    let native_chain = chain_time(&bench, Arc::clone(&native_nothing), nothing.clone());
    let wasm_chain = chain_time(&bench, Arc::clone(&wasm_nothing), serde_json::json!({}));
    println!(
        "boundary: a stage that returns no edits, {n} corpus messages, median of {} \
         alternating runs",
        bench.runs
    );
    println!(
        "  the stage's call        native (FFI) {native_ms:>8.3} ms   wasm (Python guest) \
         {wasm_ms:>8.3} ms   ratio {:.2}x   (wasm - native: {:.3} ms per call)",
        wasm_ms / native_ms,
        wasm_ms - native_ms
    );
    println!(
        "  a whole compaction      native (FFI) {native_chain:>8.3} ms   wasm (Python guest) \
         {wasm_chain:>8.3} ms   ratio {:.2}x   target <= 2x: {}",
        wasm_chain / native_chain,
        mark(wasm_chain <= 2.0 * native_chain)
    );

    // 2. The templates.
    let native = load(plugin("tamp_custom_strategy"));
    let python = load(component(Guest::PythonTemplate));
    let js = load(component(Guest::JsTemplate));
    let defaults = serde_json::json!({});
    let strategies = [
        ("native", native.instantiate(&defaults).unwrap()),
        ("python", python.instantiate(&defaults).unwrap()),
        ("javascript", js.instantiate(&defaults).unwrap()),
    ];
    let first = bench.side_by_side(&strategies, &bench.conversation);
    for (name, (_, edits)) in strategies.iter().map(|(n, _)| n).zip(&first) {
        assert_eq!(edits, &first[0].1, "{name} archives what native archives");
    }
    let steady_input = bench
        .conversation
        .with_messages(summarized(&bench.conversation, &first[0].1));
    let steady = bench.side_by_side(&strategies, &steady_input);
    assert!(steady[0].1.is_empty(), "nothing is left to archive");
    println!(
        "\ntemplates: the example strategy's own time (tool runs archived, each with an LLM \
         summary from the offline summarizer), {n} corpus messages, median of {} runs ({} \
         summarize edits, the same from all three)",
        bench.runs,
        first[0].1.len()
    );
    for (k, (name, _)) in strategies.iter().enumerate() {
        println!(
            "  {name:<11} first compaction {:>9.3} ms ({:>6.1}x native)   steady state {:>9.3} \
             ms ({:>6.1}x native)",
            first[k].0,
            first[k].0 / first[0].0,
            steady[k].0,
            steady[k].0 / steady[0].0
        );
    }
}

/// `conversation` with each span of `edits` (summarize edits, oldest first) replaced by its
/// summary message, as the host applies them: the steady state's input.
fn summarized(conversation: &Conversation, edits: &[Edit]) -> Vec<Message> {
    let mut messages = conversation.messages.to_vec();
    for edit in edits.iter().rev() {
        let Edit::Summarize {
            span, text, status, ..
        } = edit
        else {
            panic!("the example only summarizes: {edit:?}");
        };
        let summary = summary_message(text, "pg_bench", "custom-strategy", *status);
        messages.splice(span.start as usize..span.end as usize, [summary]);
    }
    messages
}
