//! Tool-result clearing (issue 18), side by side in one run with map-reduce-adaptive and the
//! hybrid chain (`examples/chains/hybrid.toml`: clearing first, map-reduce only when the
//! conversation is still above the low watermark), each with its defaults:
//!
//! 1. **The growing-thread replay** of the thread-economy bench (`replay/`): a 500-turn session
//!    of real corpus tool exchanges, compacted before every model call, in both client modes,
//!    with the counting fake LLM. Summarizer calls and tokens sent, prefix reuse, own time per
//!    request, the largest and the last context.
//! 2. **The corpus**, one shot: each of the ten real conversations compacted once at the same
//!    budget: tokens after, LLM calls, tokens sent.
//! 3. **Own time on 1,000 messages**: the loaded plugin's `compact` alone (the host's checking
//!    and archiving left out) on a 1,000-message corpus conversation, the first time (every old
//!    output is cleared) and in the steady state (the cleared conversation again, nothing new
//!    to clear), against parsing and re-serializing the same conversation as a yardstick.
//!
//! Targets: the clearing stage alone keeps >= 0.9 prefix reuse on the replay; its own time on
//! 1,000 messages <= 2 ms; the hybrid chain sends >= 50% fewer tokens to the summarizer than
//! map-reduce alone on the same replay.
//!
//! Run: `cargo bench -p tamp-e2e --bench tool_result_clearing` (`-- quick` or
//! `TAMP_BENCH_QUICK=1` for a 100-turn replay and fewer timing runs).

#[path = "replay/mod.rs"]
mod replay;

use std::sync::Arc;
use std::time::Instant;
use tamp_e2e::stats::median;

use replay::*;
use tamp_e2e::{corpus_conversation, corpus_mix, corpus_names, plugin};
use tamp_host::chain::{CompactOptions, StageStatus};
use tamp_host::config::Trigger;
use tamp_host::loader::LoadedPlugin;
use tamp_host::store::SqliteStore;
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{Budget, Conversation, Edit, Shared};

fn rows() -> Vec<Row> {
    vec![
        single(
            "tool-result-clearing",
            "tamp_tool_result_clearing",
            Trigger::OverBudget,
        ),
        single(
            "map-reduce-adaptive",
            "tamp_map_reduce_adaptive",
            Trigger::OverBudget,
        ),
        example_chain("hybrid chain", "hybrid.toml"),
    ]
}

fn mark(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The corpus, one shot

fn corpus(rt: &tokio::runtime::Runtime, rows: &[Row]) {
    println!(
        "\ncorpus, one shot (Anthropic format; budget {MAX_TOKENS}, keep_recent {KEEP_RECENT}; \
         fixed-length fake LLM): tokens after / LLM calls / tokens sent to the summarizer"
    );
    print!("{:<40} {:>6} {:>8}", "conversation", "msgs", "before");
    for row in rows {
        print!(" {:>24}", row.name);
    }
    println!();
    let mut totals = vec![(0u64, 0u64, 0u64); rows.len()];
    let mut before_all = 0;
    for name in corpus_names() {
        let conversation = corpus_conversation("anthropic", &name);
        let tokens = Arc::new(TokenCounter::new(Encoding::O200kBase).expect("tokenizer"));
        let before = tokens.count_messages(&conversation.messages);
        before_all += before;
        print!(
            "{:<40} {:>6} {:>8}",
            name,
            conversation.messages.len(),
            before
        );
        for (row, total) in rows.iter().zip(totals.iter_mut()) {
            let provider = Arc::new(Counting::new(Llm::Fixed, Arc::clone(&tokens)));
            let store = Arc::new(SqliteStore::in_memory().expect("store"));
            let chain = build_chain(row, Arc::clone(&provider) as _, &store);
            let options = CompactOptions {
                format: Some(WireFormat::Anthropic),
                ..Default::default()
            };
            let out = rt
                .block_on(chain.compact(conversation.clone(), &options))
                .expect("compacts");
            let rolled = out
                .report
                .stages
                .iter()
                .any(|s| s.status == StageStatus::RolledBack);
            assert!(!rolled, "{name}: {}: a stage was rolled back", row.name);
            let after = out.report.tokens_after;
            print!(
                " {:>24}",
                format!(
                    "{after} / {} / {}",
                    provider.calls(),
                    provider.input_tokens()
                )
            );
            total.0 += after;
            total.1 += provider.calls();
            total.2 += provider.input_tokens();
        }
        println!();
    }
    print!("{:<40} {:>6} {:>8}", "all ten", "", before_all);
    for t in &totals {
        print!(" {:>24}", format!("{} / {} / {}", t.0, t.1, t.2));
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// 3. Own time on 1,000 messages

/// The loaded plugin's own `compact` on `conversation` (keep_recent 16, over budget): the
/// median wall time of `runs` calls, and the edits of one.
fn plugin_time(
    rt: &tokio::runtime::Runtime,
    conversation: &Conversation,
    runs: usize,
) -> (f64, Vec<Edit>) {
    let tokens = Arc::new(TokenCounter::new(Encoding::O200kBase).expect("tokenizer"));
    let current = tokens.count_messages(&conversation.messages);
    let ctx = tamp_e2e::offline_host_context(tokens);
    let loaded = LoadedPlugin::load(&plugin("tamp_tool_result_clearing")).expect("loads");
    let strategy = loaded
        .instantiate(&serde_json::json!({}))
        .expect("defaults");
    let shared = Shared::new(conversation.clone());
    let mut times = Vec::new();
    let mut edits = Vec::new();
    for _ in 0..runs {
        let budget = Budget {
            max_tokens: MAX_TOKENS,
            high_watermark: MAX_TOKENS * 3 / 4,
            low_watermark: MAX_TOKENS / 2,
            keep_recent: KEEP_RECENT,
            current_tokens: current,
        };
        let (ms, out) =
            tamp_e2e::direct_call(rt, &ctx, "tool-result-clearing", &strategy, &shared, budget);
        times.push(ms);
        edits = out;
    }
    (median(times), edits)
}

/// Parsing and re-serializing `conversation` in the Anthropic format: the yardstick.
fn round_trip_time(conversation: &Conversation, runs: usize) -> f64 {
    let text = wire::to_string(conversation, WireFormat::Anthropic);
    let times = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let (c, _) = wire::parse_str(&text, Some(WireFormat::Anthropic)).expect("parses");
            std::hint::black_box(wire::to_string(&c, WireFormat::Anthropic));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(times)
}

fn own_time(rt: &tokio::runtime::Runtime, runs: usize) -> (f64, f64) {
    let raw = corpus_mix(1_000);
    let n = raw.messages.len();
    // The first compaction: every old output is cleared (warm the token memo first, as the
    // chain's budget count does before any stage runs).
    let (first_ms, edits) = plugin_time(rt, &raw, runs);
    // The steady state: the cleared conversation compacted again (nothing new has aged), what
    // a thread pays on the calls between two clearings.
    let mut cleared = raw.messages.to_vec();
    for edit in &edits {
        if let Edit::Clear { index, message } = edit {
            cleared[*index as usize] = message.clone();
        }
    }
    let steady = raw.with_messages(cleared);
    let (steady_ms, steady_edits) = plugin_time(rt, &steady, runs);
    let yardstick = round_trip_time(&raw, runs);
    println!(
        "\nown time of the clearing stage's compact (loaded plugin; the host's checks and archiving \
         excluded), {n} corpus messages, median of {runs}:"
    );
    println!(
        "  first compaction  {first_ms:>7.3} ms ({} clearing edits)   steady state {steady_ms:>7.3} \
         ms ({} edits)   parse + serialize the same conversation {yardstick:>7.3} ms",
        edits.len(),
        steady_edits.len()
    );
    println!(
        "  ratios to parse + serialize: first {:.2}x, steady {:.2}x   target: <= 2 ms: first {}, \
         steady {}",
        first_ms / yardstick,
        steady_ms / yardstick,
        mark(first_ms <= 2.0),
        mark(steady_ms <= 2.0)
    );
    (first_ms, steady_ms)
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let quick = tamp_e2e::bench_quick();
    let turns = if quick { QUICK_TURNS } else { TURNS };
    let runs = if quick { 5 } else { 21 };
    let rt = tamp_e2e::two_worker_rt();
    tamp_e2e::ensure_built();
    let counter = TokenCounter::new(Encoding::O200kBase).expect("tokenizer");
    let session = session(turns, &counter);
    let rows = rows();

    // 1. The replay.
    println!(
        "growing-thread replay: {} turns, {} messages, {} tokens, {} requests, compacted before \
         every request; budget {MAX_TOKENS}, keep_recent {KEEP_RECENT}; fixed-length fake LLM",
        session.turns,
        session.messages.len(),
        session.tokens,
        session.requests.len()
    );
    let mut results = Vec::new();
    for row in &rows {
        for mode in [Mode::Raw, Mode::KeepsOutput] {
            let r = replay(&rt, row, mode, Llm::Fixed, &session);
            results.push((row.name, mode, r));
        }
    }
    println!(
        "\n{:<22} {:<12} {:>5} {:>10} {:>7} {:>6} {:>8} {:>8} {:>7} {:>7} {:>10}",
        "row",
        "client",
        "calls",
        "tok sent",
        "÷sess",
        "reuse",
        "own ms",
        "p99 ms",
        "max",
        "last",
        "constraint"
    );
    for (name, mode, r) in &results {
        println!(
            "{:<22} {:<12} {:>5} {:>10} {:>7.3} {:>6.3} {:>8.2} {:>8.2} {:>7} {:>7} {:>10}",
            name,
            mode.label(),
            r.llm_calls,
            r.summarizer_tokens,
            r.summarizer_tokens as f64 / session.tokens as f64,
            r.prefix_reuse,
            r.own_ms_mean(),
            r.own_ms_p99(),
            r.max_context,
            r.final_context,
            if r.constraint_kept { "kept" } else { "LOST" }
        );
        if r.acted.len() > 1 {
            let acted: Vec<String> = r.acted.iter().map(|(s, n)| format!("{s} {n}")).collect();
            println!(
                "{:<35} requests in which each stage acted: {}",
                "",
                acted.join(", ")
            );
        }
        if r.rolled_back > 0 {
            println!(
                "{:<35} {} stage run(s) rolled back: {:?}",
                "", r.rolled_back, r.notes
            );
        }
    }

    // 2. The corpus; 3. own time.
    corpus(&rt, &rows);
    let (first_ms, steady_ms) = own_time(&rt, runs);

    println!("\ntargets");
    let find = |name: &str, mode: Mode| {
        results
            .iter()
            .find(|(n, m, _)| *n == name && *m == mode)
            .map(|(_, _, r)| r)
            .expect("row ran")
    };
    for mode in [Mode::Raw, Mode::KeepsOutput] {
        let clearing = find("tool-result-clearing", mode);
        let mr = find("map-reduce-adaptive", mode);
        let hybrid = find("hybrid chain", mode);
        let fewer = 1.0 - hybrid.summarizer_tokens as f64 / mr.summarizer_tokens.max(1) as f64;
        println!(
            "  {:<12} clearing alone: prefix reuse {:.3} >= 0.9 {}, {} LLM calls; hybrid sends \
             {:.1}% fewer tokens to the summarizer than map-reduce alone ({} vs {}) >= 50% {}",
            mode.label(),
            clearing.prefix_reuse,
            mark(clearing.prefix_reuse >= 0.9),
            clearing.llm_calls,
            100.0 * fewer,
            hybrid.summarizer_tokens,
            mr.summarizer_tokens,
            mark(fewer >= 0.5)
        );
    }
    println!(
        "  own time on 1,000 messages: first {first_ms:.3} ms, steady {steady_ms:.3} ms <= 2 ms {}",
        mark(first_ms <= 2.0 && steady_ms <= 2.0)
    );
}
