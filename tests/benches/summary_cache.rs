//! Summary-cache benchmark (issue 3). A 1,000-turn session (a turn: one message or one whole
//! tool exchange of real corpus text, `tamp_e2e::corpus_mix`) whose client resends its whole
//! history and is compacted after every 10 turns by map-reduce-adaptive, with the scripted
//! provider. Printed side by side, from one run:
//!
//! - tokens sent to the LLM over the whole session: without the cache, with the request
//!   cache only (`reuse = "off"`), and with range reuse (`merge`, `append`); the ratio of each
//!   to the uncached run (target: at least 5× fewer);
//! - the host's overhead per call on a cache hit: the same compactions answered from the store
//!   file against answered by a zero-delay provider with the cache off.
//!
//! Run: `cargo bench -p tamp-e2e --bench summary_cache` (add `-- quick` for 300 turns).

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tamp_e2e::{corpus_mix, scratch_dir, StageChain};
use tamp_host::chain::{Chain, CompactOptions};
use tamp_host::providers::ScriptedProvider;
use tamp_host::store::{CacheScope, PageStore, SqliteStore, SummaryCache};
use tamp_plugin_api::{
    sdk, Conversation, FfiOption, LlmRequest, LlmResponse, Message, Role, Usage,
};

const TURNS_PER_COMPACTION: usize = 10;
const KEEP_RECENT: u32 = 10;
const ANSWER: &str = "Summary {n}: the assistant read the failing module, ran the tests, found \
    the missing default applied after validation, patched it, and re-ran the suite; the user \
    prefers minimal patches; open: document the default and add a regression test.";

/// The session's message counts after each batch of turns, and the whole session.
fn session(turns: usize) -> (Vec<usize>, Vec<Message>) {
    let all = corpus_mix(turns * 4);
    let system = all
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let units = sdk::units(&all.messages[system..]);
    assert!(units.len() >= turns, "corpus_mix gave too few turns");
    let cuts: Vec<usize> = (1..=turns / TURNS_PER_COMPACTION)
        .map(|k| system + units[k * TURNS_PER_COMPACTION - 1].range.end)
        .collect();
    let end = *cuts.last().unwrap();
    (cuts, all.messages[..end].to_vec())
}

struct Run {
    label: &'static str,
    input_tokens: u64,
    calls: u64,
    hits: u64,
    seconds: f64,
}

fn chain(reuse: &str, cache: bool, store: Option<Arc<SqliteStore>>) -> Chain {
    let provider = Arc::new(ScriptedProvider::always(ANSWER).without_request_log());
    let mut chain = StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({ "reuse": reuse }),
        provider,
    )
    .keep_recent(KEEP_RECENT);
    if let Some(store) = store {
        chain = chain
            .store(Arc::clone(&store) as Arc<dyn PageStore>)
            .cache_in(store as Arc<dyn SummaryCache>);
    }
    if !cache {
        chain = chain.without_cache();
    }
    chain.build()
}

/// Compacts every prefix in `cuts`, as a client resending its history would ask.
fn session_run(
    rt: &tokio::runtime::Runtime,
    label: &'static str,
    chain: &Chain,
    cuts: &[usize],
    messages: &[Message],
) -> Run {
    let mut run = Run {
        label,
        input_tokens: 0,
        calls: 0,
        hits: 0,
        seconds: 0.0,
    };
    let started = Instant::now();
    for (i, &cut) in cuts.iter().enumerate() {
        let mut conversation = Conversation::new(messages[..cut].to_vec());
        conversation.thread_id = FfiOption::RSome("session-1".into());
        let out = rt
            .block_on(chain.compact(conversation, &CompactOptions::default()))
            .expect("compacts");
        run.input_tokens += out.report.usage.input_tokens;
        run.calls += u64::from(out.report.llm_calls);
        run.hits += u64::from(out.report.cache_hits);
        if (i + 1) % 10 == 0 {
            eprint!("\r  {label}: {}/{} compactions", i + 1, cuts.len());
        }
    }
    eprintln!();
    run.seconds = started.elapsed().as_secs_f64();
    run
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let turns = if quick { 300 } else { 1_000 };
    let rt = tamp_e2e::rt();
    let (cuts, messages) = session(turns);
    println!(
        "summary cache: {turns} turns ({} messages), compacted after every {TURNS_PER_COMPACTION} \
         turns ({} compactions), whole history resent each time, keep_recent {KEEP_RECENT}",
        messages.len(),
        cuts.len()
    );

    let runs = [
        session_run(
            &rt,
            "no cache",
            &chain("off", false, None),
            &cuts,
            &messages,
        ),
        session_run(
            &rt,
            "request cache only",
            &chain("off", true, None),
            &cuts,
            &messages,
        ),
        session_run(
            &rt,
            "cache, merge",
            &chain("merge", true, None),
            &cuts,
            &messages,
        ),
        session_run(
            &rt,
            "cache, append",
            &chain("append", true, None),
            &cuts,
            &messages,
        ),
    ];
    let base = runs[0].input_tokens as f64;
    println!(
        "\n{:<20} {:>14} {:>10} {:>10} {:>12} {:>9}",
        "run", "tokens sent", "LLM calls", "hits", "× fewer", "seconds"
    );
    for r in &runs {
        println!(
            "{:<20} {:>14} {:>10} {:>10} {:>11.1}× {:>9.2}",
            r.label,
            r.input_tokens,
            r.calls,
            r.hits,
            base / r.input_tokens.max(1) as f64,
            r.seconds
        );
    }

    // Overhead per call on a hit: the last compaction repeated, all answers from the store
    // file (request cache; range reuse off so every call is asked), against the same
    // compaction with the cache off and a provider that answers at once.
    let dir = scratch_dir("bench-summary-cache");
    let store = Arc::new(SqliteStore::open(&dir.join("store.sqlite3")).unwrap());
    let cached = chain("off", true, Some(Arc::clone(&store)));
    let uncached = chain("off", false, None);
    let last = &messages[..];
    let conversation = || {
        let mut c = Conversation::new(last.to_vec());
        c.thread_id = FfiOption::RSome("hit-bench".into());
        c
    };
    let warm = rt
        .block_on(cached.compact(conversation(), &CompactOptions::default()))
        .unwrap();
    // Requests per compaction: calls made plus those already answered within the warm-up
    // (the corpus repeats, so some chunks recur).
    let calls = u64::from(warm.report.llm_calls + warm.report.cache_hits);
    let repeats = if quick { 3 } else { 10 };
    let (mut hit_s, mut call_s) = (0.0, 0.0);
    let mut hits = 0;
    for _ in 0..repeats {
        // Interleaved, so both see the same machine load.
        let t = Instant::now();
        let out = rt
            .block_on(cached.compact(conversation(), &CompactOptions::default()))
            .unwrap();
        hit_s += t.elapsed().as_secs_f64();
        hits += u64::from(out.report.cache_hits);
        assert_eq!(out.report.llm_calls, 0, "every call is a hit");
        let t = Instant::now();
        rt.block_on(uncached.compact(conversation(), &CompactOptions::default()))
            .unwrap();
        call_s += t.elapsed().as_secs_f64();
    }
    let per_hit_ms = hit_s / repeats as f64 * 1e3;
    let per_call_ms = call_s / repeats as f64 * 1e3;
    println!(
        "\nhost overhead on a hit ({} messages, {calls} LLM requests per compaction, {} hits \
         per repeat, store file on disk, {repeats} repeats interleaved):",
        last.len(),
        hits / repeats
    );
    println!(
        "  compaction, every call a cache hit:        {per_hit_ms:>9.2} ms  ({:.3} ms per call)",
        per_hit_ms / calls.max(1) as f64
    );
    println!(
        "  compaction, zero-delay provider, no cache: {per_call_ms:>9.2} ms  ({:.3} ms per call)",
        per_call_ms / calls.max(1) as f64
    );
    println!(
        "  difference per call: {:+.3} ms (hit − zero-cost call); ratio {:.2}×",
        (per_hit_ms - per_call_ms) / calls.max(1) as f64,
        per_hit_ms / per_call_ms
    );

    // The lookup itself, on the same store file: a hit's key hashing and read.
    let scope = CacheScope::new(Some("lookup"), "bench", "config");
    let request = LlmRequest::new("system", "x".repeat(8_000), 500);
    let key = scope.request_key("scripted", &request);
    let answer = LlmResponse {
        text: ANSWER.into(),
        structured_json: FfiOption::RNone,
        usage: Usage::default(),
        model: "scripted".into(),
        stop_reason: "end_turn".into(),
    };
    rt.block_on(store.put_answer(key, answer)).unwrap();
    let lookups = 2_000;
    let t = Instant::now();
    for _ in 0..lookups {
        let key = scope.request_key("scripted", &request);
        assert!(rt.block_on(store.get_answer(key)).unwrap().is_some());
    }
    println!(
        "  one hit alone (8,000-char prompt hashed, read from the file): {:.1} µs",
        t.elapsed().as_secs_f64() / lookups as f64 * 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}
