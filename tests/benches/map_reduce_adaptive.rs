//! map-reduce-adaptive benchmark (issue 5). On a ~100,000-token conversation made of real
//! corpus messages (`tamp_e2e::corpus_mix`), with the scripted provider answering every call
//! after 200 ms, it prints side by side, from one run:
//!
//! - LLM calls (map / collapse / synthesis) and tokens sent, against the tokens summarized;
//! - wall time against the sequential sum (calls × 200 ms) and against the critical path
//!   (one 200 ms wait per round of `max_concurrency` calls), for several `max_concurrency`
//!   and `chunk_size` settings;
//! - prefix stability: after the conversation grows by about 10 %, how many of the new run's
//!   map requests are byte-identical to the first run's (what a cache keyed by the exact
//!   request would answer);
//! - the offline extractive provider on the same conversation (real output, no waiting).
//!
//! Run: `cargo bench -p tamp-e2e --bench map_reduce_adaptive` (add `-- quick` to skip the
//! slow `max_concurrency = 1` row).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tamp_e2e::{corpus_mix, StageChain};
use tamp_host::chain::{Chain, CompactOptions, Compacted};
use tamp_host::providers::{ExtractiveSummarizer, Provider, ScriptedProvider};
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_plugin_api::{Conversation, LlmRequest};

const DELAY: Duration = Duration::from_millis(200);
const TARGET_TOKENS: u64 = 100_000;
const KEEP_RECENT: u32 = 10;

/// A scripted answer of about 200 tokens (what a 2,048-token chunk is asked for), real prose
/// so the token counts are realistic.
const ANSWER: &str = "Summary {n}: the user asked the assistant to find why the test suite fails \
    on the configuration loader. The assistant read src/config/loader.py and tests/test_loader.py, \
    ran the failing test with pytest -x, and found that the loader raises KeyError when the \
    optional [store] table is missing, because the default is applied after validation instead of \
    before. The user prefers minimal patches and asked not to change the public API. The assistant \
    proposed moving the defaults into the schema, applied the change, re-ran the suite (212 passed, \
    3 skipped), and noted two follow-ups: document the default store path in docs/configuration.md \
    and add a regression test for a config file without a [store] table. Open question: whether the \
    deprecated ini format should get the same fix; the user will decide after the release.";

/// The smallest `corpus_mix` conversation of at least `TARGET_TOKENS` tokens.
fn conversation(tokens: &TokenCounter) -> Conversation {
    let (mut lo, mut hi) = (10, 4_000);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if tokens.count_messages(&corpus_mix(mid).messages) >= TARGET_TOKENS {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    corpus_mix(lo)
}

fn chain(provider: Arc<dyn Provider>, config: Value) -> Chain {
    StageChain::new("tamp_map_reduce_adaptive", config, provider)
        .keep_recent(KEEP_RECENT)
        // The stage's own `max_concurrency` is what is measured, not the host's limit.
        .llm_concurrency(100_000)
        .timeout(Duration::from_secs(600))
        .build()
}

fn scripted() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::always(ANSWER).with_delay(DELAY))
}

fn run(
    rt: &tokio::runtime::Runtime,
    chain: &Chain,
    conversation: &Conversation,
) -> (Compacted, Duration) {
    let started = Instant::now();
    let out = rt
        .block_on(chain.compact(conversation.clone(), &CompactOptions::default()))
        .unwrap();
    let elapsed = started.elapsed();
    let stage = &out.report.stages[0];
    assert!(stage.error.is_none(), "{stage:?}");
    (out, elapsed)
}

/// The material of a prompt: inside its last `<content>` pair.
fn material(prompt: &str) -> &str {
    let close = prompt.rfind("\n</content>").unwrap_or(prompt.len());
    let open = prompt[..close]
        .rfind("<content>\n")
        .map_or(0, |i| i + "<content>\n".len());
    &prompt[open..close]
}

fn count_kind(requests: &[LlmRequest], prefix: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.label.starts_with(prefix))
        .count()
}

struct Row {
    label: String,
    calls: usize,
    maps: usize,
    collapses: usize,
    depth: u64,
    /// Mean tokens of a map request's chunk (overlap included).
    mean_chunk: u64,
    sent: u64,
    input: u64,
    wall: Duration,
    /// Rounds of at most `max_concurrency` calls: the least waiting possible.
    rounds: usize,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    tokens: &TokenCounter,
    conversation: &Conversation,
    label: &str,
    config: Value,
) -> Row {
    let concurrency = config["max_concurrency"].as_u64().unwrap_or(5) as usize;
    let provider = scripted();
    let chain = chain(provider.clone(), config);
    let (out, wall) = run(rt, &chain, conversation);
    let requests = provider.requests();
    let details = &out.report.stages[0].details;
    let maps = count_kind(&requests, "map ");
    let collapses = count_kind(&requests, "collapse ");
    let depth = details["depth"].as_u64().unwrap();
    // One round per batch of `concurrency` calls: the map batch, each collapse round (by its
    // label `collapse <round>.<group>`), and the synthesis.
    let mut rounds = maps.div_ceil(concurrency) + count_kind(&requests, "synthesis");
    for round in 1..=depth {
        let in_round = count_kind(&requests, &format!("collapse {round}."));
        rounds += in_round.div_ceil(concurrency);
    }
    let chunk_tokens: u64 = requests
        .iter()
        .filter(|r| r.label.starts_with("map "))
        .map(|r| tokens.count_text(material(&r.prompt)))
        .sum();
    Row {
        label: label.to_string(),
        calls: requests.len(),
        maps,
        collapses,
        depth,
        mean_chunk: chunk_tokens / maps.max(1) as u64,
        sent: requests
            .iter()
            .map(|r| tokens.count_text(&r.system) + tokens.count_text(&r.prompt))
            .sum(),
        input: details["input_tokens"].as_u64().unwrap(),
        wall,
        rounds,
    }
}

fn print_rows(rows: &[Row]) {
    println!(
        "  {:<34} {:>5} {:>15} {:>5} {:>10} {:>11} {:>9} {:>9} {:>13} {:>13} {:>11}",
        "setting",
        "calls",
        "map/coll/synth",
        "depth",
        "mean chunk",
        "tokens sent",
        "sent/in",
        "wall ms",
        "sequential ms",
        "wall/sequent.",
        "wall/rounds"
    );
    for r in rows {
        let sequential = DELAY * r.calls as u32;
        let critical = DELAY * r.rounds as u32;
        println!(
            "  {:<34} {:>5} {:>15} {:>5} {:>10} {:>11} {:>8.2}x {:>9.0} {:>13.0} {:>12.3}x {:>10.2}x",
            r.label,
            r.calls,
            format!("{}/{}/{}", r.maps, r.collapses, r.calls - r.maps - r.collapses),
            r.depth,
            r.mean_chunk,
            r.sent,
            r.sent as f64 / r.input as f64,
            r.wall.as_secs_f64() * 1e3,
            sequential.as_secs_f64() * 1e3,
            r.wall.as_secs_f64() / sequential.as_secs_f64(),
            r.wall.as_secs_f64() / critical.as_secs_f64(),
        );
    }
}

/// Runs the conversation, then the conversation grown by about 10 % (as a sidecar client that
/// resends the whole history would), and compares their map requests.
fn prefix_stability(rt: &tokio::runtime::Runtime, tokens: &TokenCounter, base: &Conversation) {
    let grown = corpus_mix(base.messages.len() * 11 / 10);
    assert_eq!(grown.messages[..base.messages.len()], base.messages[..]);
    let provider = Arc::new(ScriptedProvider::always(ANSWER));
    let chain = chain(provider.clone(), json!({}));
    run(rt, &chain, base);
    let first: Vec<LlmRequest> = provider.requests();
    let (out, _) = run(rt, &chain, &grown);
    let second: Vec<LlmRequest> = provider.requests()[first.len()..].to_vec();
    let sent = |rs: &[LlmRequest]| -> u64 {
        rs.iter()
            .map(|r| tokens.count_text(&r.system) + tokens.count_text(&r.prompt))
            .sum()
    };
    let first_maps: Vec<&LlmRequest> = first
        .iter()
        .filter(|r| r.label.starts_with("map "))
        .collect();
    let second_maps: Vec<&LlmRequest> = second
        .iter()
        .filter(|r| r.label.starts_with("map "))
        .collect();
    let repeated: Vec<&&LlmRequest> = second_maps
        .iter()
        .filter(|r| first_maps.contains(r))
        .collect();
    let size = |rs: &[&&LlmRequest]| -> u64 {
        rs.iter()
            .map(|r| tokens.count_text(&r.system) + tokens.count_text(&r.prompt))
            .sum()
    };
    let all: Vec<&&LlmRequest> = second_maps.iter().collect();
    println!(
        "prefix stability: the conversation grown from {} to {} messages ({} → {} tokens):",
        base.messages.len(),
        grown.messages.len(),
        tokens.count_messages(&base.messages),
        tokens.count_messages(&grown.messages)
    );
    println!(
        "  map requests identical to the first run's: {} of {} ({:.0} %; the first run had {}), \
         {} of {} map tokens ({:.0} %) a request-keyed cache would not send again",
        repeated.len(),
        second_maps.len(),
        100.0 * repeated.len() as f64 / second_maps.len() as f64,
        first_maps.len(),
        size(&repeated),
        size(&all),
        100.0 * size(&repeated) as f64 / size(&all) as f64
    );
    println!(
        "  the second run: {} calls and {} tokens sent, against {} and {} for the first; the \
         summary cache covered its first {} messages, so only what follows was mapped",
        second.len(),
        sent(&second),
        first.len(),
        sent(&first),
        out.report.stages[0].details["reused_messages"]
    );
}

fn extractive(rt: &tokio::runtime::Runtime, conversation: &Conversation) {
    let chain = chain(Arc::new(ExtractiveSummarizer::default()), json!({}));
    let (out, wall) = run(rt, &chain, conversation);
    let stage = &out.report.stages[0];
    println!(
        "extractive provider (offline, no delay): {} → {} tokens in the conversation, summary of \
         {} tokens for {} (ratio {}), {} calls, depth {}, {:.0} ms",
        out.report.tokens_before,
        out.report.tokens_after,
        stage.details["output_tokens"],
        stage.details["input_tokens"],
        stage.details["compression_ratio"],
        stage.details["calls"],
        stage.details["depth"],
        wall.as_secs_f64() * 1e3
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let rt = tamp_e2e::rt();
    let tokens = TokenCounter::new(Encoding::O200kBase).unwrap();
    let conversation = conversation(&tokens);
    println!(
        "map-reduce-adaptive: {} messages, {} tokens (o200k_base), keep_recent {KEEP_RECENT}; \
         scripted answers of {} tokens after {} ms each",
        conversation.messages.len(),
        tokens.count_messages(&conversation.messages),
        tokens.count_text(ANSWER),
        DELAY.as_millis()
    );

    let mut settings: Vec<(String, Value)> = Vec::new();
    if !quick {
        settings.push(("max_concurrency 1".into(), json!({"max_concurrency": 1})));
    }
    for concurrency in [5, 16, 64] {
        let label = if concurrency == 5 {
            "max_concurrency 5 (default)".to_string()
        } else {
            format!("max_concurrency {concurrency}")
        };
        settings.push((label, json!({ "max_concurrency": concurrency })));
    }
    for chunk_size in [1_024, 2_048, 4_096] {
        settings.push((
            format!("chunk_size {chunk_size}, overlap {}", chunk_size / 10),
            json!({"chunk_size": chunk_size, "chunk_overlap": chunk_size / 10}),
        ));
    }
    let rows: Vec<Row> = settings
        .into_iter()
        .map(|(label, config)| measure(&rt, &tokens, &conversation, &label, config))
        .collect();
    println!(
        "  (input: {} tokens summarized; tokens sent: system + prompt of every call; sequential: \
         calls × 200 ms; rounds: 200 ms per batch of max_concurrency calls)",
        rows[0].input
    );
    print_rows(&rows);
    prefix_stability(&rt, &tokens, &conversation);
    extractive(&rt, &conversation);
}
