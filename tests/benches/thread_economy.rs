//! Thread economy (issue 16): what a long agent session costs when tamp compacts before every
//! model call. A 500-turn session of real corpus text (a turn: one assistant tool call and its
//! result, now and then an assistant text and a user message), whose first user message plants
//! a constraint ("do not touch the billing module"), is replayed request by request through
//! the real chain (the built plugin `.so` files, an SQLite store with the summary cache and
//! thread states), in two client modes:
//!
//! - **raw**: the client posts its whole raw history on every call, with a thread id (thread
//!   continuity on);
//! - **keeps output**: the client keeps tamp's last answer and appends its new messages to it
//!   (continuity off: the client already holds the continuation).
//!
//! for each shipped strategy with its defaults and for the shipped and hybrid chains
//! (`examples/chains/shipped.toml`'s and `hybrid.toml`'s stages), at budget 8,000 tokens,
//! `keep_recent` 16, the default watermarks.
//! The summarizer is a counting fake LLM whose answer has a fixed length (free text, or a
//! fixed object filling the request's JSON schema); each row runs again on the offline
//! extractive provider (the default), to see whether the constraint survives there too.
//! Printed side by side, from one run: summarizer calls, tokens sent to it ÷ the session's
//! tokens, prefix reuse, the share of requests that made no LLM call, own time per request,
//! the main model's estimated input cost with Anthropic prompt caching against the same
//! session sent uncompacted, and each target met or missed; then an anatomy of the prefix
//! reuse (requests that compacted against the others) and a check that both clients got the
//! same answers, request by request; and where each row's cost goes (cache reads, and cache
//! writes in the requests that compacted and in the others), with an estimate of the cost if
//! the summaries' ledger entries stayed in place as a cached prefix (a layout not built: it
//! weighs whether building it would pay).
//!
//! The same session and rows then run once more in each OpenAI format, Chat Completions and
//! the Responses API (each request's messages written in that format and read back, so the
//! chain gets what that client sends), with the fixed-length fake LLM, their figures side by
//! side (issue 31: they should be the same).
//!
//! Run: `cargo bench -p tamp-e2e --bench thread_economy` (`TAMP_BENCH_QUICK=1` or `-- quick`
//! for 100 turns; the per-500-turn targets are scaled; `TAMP_BENCH_NO_LEDGER=1` turns the
//! summaries' ledger off, to compare; `TAMP_BENCH_LEDGERS_OUTSIDE=1` sets `[budget]
//! ledgers_outside`; `TAMP_BENCH_MAX_TOKENS=N` sets the budget, 8,000 unset;
//! `TAMP_BENCH_SYSTEM_EVERY=N` adds a system message after every `N`th turn, as Claude Code
//! sends them; `TAMP_BENCH_DUMP=1` prints, at every compaction, each summary's narrative and ledger
//! tokens, and the last answer's summaries in full; `TAMP_BENCH_NO_FORMATS=1` skips the wire
//! formats' section; `-- [formats] [row...] [raw]`: the format comparison alone, only the
//! rows whose name holds a word given, the raw client alone). Progress goes to stderr.

#[path = "replay/mod.rs"]
mod replay;

use std::time::Instant;

use replay::*;
use tamp_host::config::Trigger;
use tamp_host::tokens::{Encoding, TokenCounter};

/// Peer figures quoted in issue 16 (tokens sent to the summarizer, summarizer calls).
const PEERS: [(&str, u64, u64); 2] = [
    ("LangMem running summary", 110_777, 21),
    ("LangChain SummarizationMiddleware", 83_972, 27),
];

/// The words after `--` that pick what runs (`quick` and `formats` aside): the rows whose
/// name holds one of them (every row when none does), and `raw` for the raw client alone.
fn selected_words() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--") && a != "quick" && a != "formats")
        .collect()
}

/// The rows to run: all, or those the command line names (`-- map-reduce shipped`).
fn rows() -> Vec<Row> {
    let names: Vec<String> = selected_words()
        .into_iter()
        .filter(|w| w != "raw")
        .collect();
    all_rows()
        .into_iter()
        .filter(|row| names.is_empty() || names.iter().any(|n| row.name.contains(n.as_str())))
        .collect()
}

/// Both clients, or the raw one alone with `-- raw` (half the time).
fn modes() -> &'static [Mode] {
    if selected_words().iter().any(|w| w == "raw") {
        &[Mode::Raw]
    } else {
        &[Mode::Raw, Mode::KeepsOutput]
    }
}

/// Requests in which a stage acted against the others, and whether both clients got the
/// same answers: `results` holds each row's raw replay, then its keeps-output one.
fn anatomy(results: &[(&str, Mode, Replay, Replay)]) {
    println!(
        "\nanatomy (fixed-length fake LLM, raw client): requests in which a stage acted, their \
         mean prefix reuse and mean tokens after; the other requests' mean prefix reuse; whether \
         the keeps-output client got the same answers, request by request"
    );
    println!(
        "{:<22} {:>6} {:>12} {:>12} {:>13} {:>18}",
        "row", "acted", "reuse acted", "tokens after", "reuse others", "keeps output"
    );
    for pair in results.chunks(2) {
        let [(name, _, raw, _), (_, _, kept, _)] = pair else {
            continue;
        };
        let a = &raw.anatomy;
        println!(
            "{:<22} {:>6} {:>12.3} {:>12.0} {:>13.3} {:>18}",
            name,
            a.acted,
            a.acted_reuse / a.acted.max(1) as f64,
            a.acted_tokens as f64 / a.acted.max(1) as f64,
            a.others_reuse / a.others.max(1) as f64,
            if raw.digest == kept.digest {
                "same answers"
            } else {
                "DIFFERENT answers"
            }
        );
    }
}

/// Where each raw-client row's main-model cost goes: cache reads, and cache writes in the
/// requests in which a stage acted and in the others, each ÷ the uncompacted session's cost;
/// and the mean context sent. A larger context shows in the reads; a prefix broken more often
/// or further up (a summary rewritten in place, a fold) in the writes when acting.
fn cost_split(results: &[(&str, Mode, Replay, Replay)], baseline: f64, requests: usize) {
    println!(
        "\ncost split (raw client): the main-model cost ÷ the uncompacted session's, as cache \
         reads, cache writes in the requests in which a stage acted and in the others; the mean \
         context sent, in tokens; and an estimate for a layout not built, the cost if every \
         summary's ledger entries stayed in place (cached) ahead of the narratives"
    );
    println!(
        "{:<22} {:<34} {:>7} {:>7} {:>13} {:>13} {:>8} {:>16}",
        "row",
        "summarizer",
        "cost",
        "reads",
        "writes acted",
        "writes others",
        "context",
        "ledger in place"
    );
    for (name, mode, fixed, offline) in results {
        if *mode != Mode::Raw {
            continue;
        }
        for (llm, r) in [(Llm::Fixed, fixed), (Llm::Extractive, offline)] {
            let a = &r.anatomy;
            println!(
                "{:<22} {:<34} {:>6.3}x {:>6.3}x {:>12.3}x {:>12.3}x {:>8.0} {:>15.3}x",
                name,
                llm.label(),
                r.cost / baseline,
                a.reads / baseline,
                a.acted_writes / baseline,
                a.other_writes / baseline,
                a.context_tokens as f64 / requests.max(1) as f64,
                (r.cost - a.ledger_in_place_saving) / baseline
            );
        }
    }
}

fn all_rows() -> Vec<Row> {
    vec![
        single(
            "map-reduce-adaptive",
            "tamp_map_reduce_adaptive",
            Trigger::OverBudget,
        ),
        single(
            "buffered-tool-call",
            "tamp_buffered_tool_call",
            Trigger::OverBudget,
        ),
        single(
            "anchored-structured",
            "tamp_anchored_structured",
            Trigger::OverBudget,
        ),
        // Its docs ask for `trigger = "always"`, so that finished summaries are swapped in on
        // every call; its own `compact_when = "over_budget"` (the default) decides when to defer.
        single("batch-deferred", "tamp_batch_deferred", Trigger::Always),
        shipped_chain(),
        example_chain("hybrid chain", "hybrid.toml"),
    ]
}

/// The same session and rows in Chat Completions and in the Responses API, side by side.
fn formats(rt: &tokio::runtime::Runtime, session: &Session, counter: &TokenCounter) {
    use tamp_host::wire::WireFormat;
    let chat = in_format(session, WireFormat::OpenAi, counter);
    let responses = in_format(session, WireFormat::Responses, counter);
    println!(
        "\nwire formats (fixed-length fake LLM): the same session as a Chat Completions client \
         sends it ({} messages, {} tokens) and as a Responses client ({} messages, {} tokens)",
        chat.messages.len(),
        chat.tokens,
        responses.messages.len(),
        responses.tokens
    );
    println!(
        "{:<22} {:<12} {:<10} {:>5} {:>10} {:>6} {:>7} {:>7} {:>7} {:>10}",
        "row",
        "client",
        "format",
        "calls",
        "tok sent",
        "reuse",
        "no-LLM",
        "cost",
        "max",
        "constraint"
    );
    for row in rows() {
        for &mode in modes() {
            let mut figures = Vec::new();
            for (label, s) in [("chat", &chat), ("responses", &responses)] {
                let r = replay(rt, &row, mode, Llm::Fixed, s);
                let baseline = baseline_cost(s);
                println!(
                    "{:<22} {:<12} {:<10} {:>5} {:>10} {:>6.3} {:>6.1}% {:>6.3}x {:>7} {:>10}",
                    row.name,
                    mode.label(),
                    label,
                    r.llm_calls,
                    r.summarizer_tokens,
                    r.prefix_reuse,
                    100.0 * r.no_llm_share(),
                    r.cost / baseline,
                    r.max_context,
                    if r.constraint_kept { "kept" } else { "LOST" }
                );
                figures.push((
                    r.llm_calls,
                    r.compactions_with_llm,
                    r.summarizer_tokens,
                    r.constraint_kept,
                ));
            }
            if figures[0] != figures[1] {
                println!(
                    "{:<22} {:<12} the two formats differ in calls, compactions or tokens sent",
                    "", ""
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Printing

struct Targets {
    max_compactions: u64,
    max_calls: u64,
}

fn mark(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn main() {
    let quick = std::env::var("TAMP_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
        || std::env::args().any(|a| a == "quick");
    let turns = if quick { QUICK_TURNS } else { TURNS };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let counter = TokenCounter::new(Encoding::O200kBase).expect("tokenizer");
    let session = session(turns, &counter);
    let baseline = baseline_cost(&session);
    let targets = Targets {
        max_compactions: (40 * turns as u64).div_ceil(TURNS as u64),
        max_calls: (60 * turns as u64).div_ceil(TURNS as u64),
    };
    println!(
        "thread economy: {} turns, {} messages, {} tokens (o200k_base), {} requests (the model \
         is called after every user-role message); budget {}, watermarks 0.75/0.5, \
         keep_recent {KEEP_RECENT}, protected tail at most {} tokens; compacted before every \
         request; planted constraint \"{CONSTRAINT}\" in the first user message",
        session.turns,
        session.messages.len(),
        session.tokens,
        session.requests.len(),
        max_tokens(),
        budget()
            .tail_token_limit()
            .map_or("unbounded".to_string(), |t| t.to_string())
    );
    let nudges = session
        .messages
        .iter()
        .filter(|m| m.role == tamp_plugin_api::Role::System)
        .count()
        - 1;
    if nudges > 0 {
        println!(
            "with {nudges} mid-conversation system messages, as Claude Code sends them \
             (TAMP_BENCH_SYSTEM_EVERY)"
        );
    }
    println!(
        "session: a turn is one tool exchange of the Anthropic corpus, in corpus order ({} \
         distinct: {} of the corpus's {} tool exchanges are at most {MAX_EXCHANGE_TOKENS} \
         tokens), and every {TEXT_EVERY}th turn adds a corpus assistant text and user message",
        session.exchanges.0, session.exchanges.1, session.exchanges.2
    );
    println!(
        "fake LLM: every free-text answer is the same {} tokens; a structured request gets the \
         same object filling its schema",
        counter.count_text(ANSWER)
    );
    println!(
        "uncompacted baseline: {} tokens sent to the main model over the session; with prompt \
         caching (reads {}x, writes {}x, 5-minute cache) {:.0} \
         base-token equivalents = ${:.2} at ${INPUT_USD_PER_MTOK}/Mtok",
        session.raw_tokens.iter().sum::<u64>(),
        PRICES.read,
        PRICES.write,
        baseline,
        baseline * INPUT_USD_PER_MTOK / 1e6
    );

    // Built (cargo) before the clock starts.
    tamp_e2e::ensure_built();
    if std::env::args().any(|a| a == "formats") {
        formats(&rt, &session, &counter);
        return;
    }
    let started = Instant::now();
    let mut results = Vec::new();
    for row in rows() {
        for &mode in modes() {
            let fixed = replay(&rt, &row, mode, Llm::Fixed, &session);
            let offline = replay(&rt, &row, mode, Llm::Extractive, &session);
            results.push((row.name, mode, fixed, offline));
        }
    }
    println!(
        "\n{} replays in {:.1} s (each: {})",
        results.len() * 2,
        started.elapsed().as_secs_f64(),
        results
            .iter()
            .flat_map(|(_, _, a, b)| [a.seconds, b.seconds])
            .map(|s| format!("{s:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    );

    let continued: Vec<String> = results
        .iter()
        .filter(|(_, mode, _, _)| *mode == Mode::Raw)
        .map(|(name, _, fixed, _)| format!("{name} {}", fixed.continued))
        .collect();
    println!(
        "raw client: requests of {} continued from the thread's last answer (fixed-length fake \
         LLM): {}",
        session.requests.len(),
        continued.join(", ")
    );

    for llm in [Llm::Fixed, Llm::Extractive] {
        println!("\nsummarizer: {}", llm.label());
        println!(
            "{:<34} {:<12} {:>5} {:>6} {:>10} {:>7} {:>6} {:>7} {:>8} {:>8} {:>7} {:>7} {:>10}",
            "row",
            "client",
            "calls",
            "w/ LLM",
            "tok sent",
            "÷sess",
            "reuse",
            "no-LLM",
            "own ms",
            "p99 ms",
            "cost",
            "max",
            "constraint"
        );
        for (name, mode, fixed, offline) in &results {
            let r = if llm == Llm::Fixed { fixed } else { offline };
            println!(
                "{:<34} {:<12} {:>5} {:>6} {:>10} {:>7.3} {:>6.3} {:>6.1}% {:>8.2} {:>8.2} {:>6.3}x {:>7} {:>10}",
                name,
                mode.label(),
                r.llm_calls,
                r.compactions_with_llm,
                r.summarizer_tokens,
                r.summarizer_tokens as f64 / session.tokens as f64,
                r.prefix_reuse,
                100.0 * r.no_llm_share(),
                r.own_ms_mean(),
                r.own_ms_p99(),
                r.cost / baseline,
                r.max_context,
                if r.constraint_kept { "kept" } else { "LOST" }
            );
            if r.acted.len() > 1 {
                let acted: Vec<String> = r.acted.iter().map(|(s, n)| format!("{s} {n}")).collect();
                println!(
                    "{:<47} requests in which each stage acted: {}",
                    "",
                    acted.join(", ")
                );
            }
            if r.rolled_back > 0 || r.warnings > 0 {
                println!(
                    "{:<34} {:<12} {} stage run(s) rolled back, {} warning(s), e.g.:",
                    "", "", r.rolled_back, r.warnings
                );
                for note in &r.notes {
                    println!("{:<47} {note}", "");
                }
            }
        }
        if llm == Llm::Fixed {
            for (peer, tokens, calls) in PEERS {
                println!(
                    "{:<34} {:<12} {:>5} {:>6} {:>10} {:>7} (a figure quoted for it, on its own session: not comparable)",
                    peer, "-", calls, "-", tokens, "-"
                );
            }
        }
    }
    if modes().len() == 2 {
        anatomy(&results);
    }
    cost_split(&results, baseline, session.requests.len());

    if std::env::var_os("TAMP_BENCH_NO_FORMATS").is_none() {
        formats(&rt, &session, &counter);
    }

    println!(
        "\ncolumns: calls = summarizer calls; w/ LLM = requests during which the summarizer was \
         called (batch-deferred: that queued summaries, answered by the simulated worker before \
         the next request); tok sent = tokens sent to the summarizer (system + prompt); ÷sess = \
         that ÷ the session's {} tokens; reuse = mean share of each answer that is an unchanged \
         message prefix of the previous answer; no-LLM = requests with no summarizer call; own \
         ms = wall time of the compaction (the fake LLM answers at once); cost = main-model input \
         cost with prompt caching ÷ the uncompacted session's; max = largest context sent, in \
         tokens; constraint = \"{CONSTRAINT}\" in the last answer",
        session.tokens
    );

    println!(
        "\ntargets (fixed-length fake LLM; constraint on both providers): tokens to the \
         summarizer <= 0.5x the session; <= {} compactions that call the LLM and <= {} LLM \
         calls per {} turns; prefix reuse >= 0.9; >= 90% of requests with no LLM call; \
         constraint kept",
        targets.max_compactions, targets.max_calls, session.turns
    );
    println!(
        "{:<22} {:<12} {:>9} {:>11} {:>9} {:>8} {:>8} {:>10}  all",
        "row", "client", "tok<=0.5", "compact<=N", "calls<=N", "reuse", "no-LLM", "constraint"
    );
    for (name, mode, fixed, offline) in &results {
        let checks = [
            fixed.summarizer_tokens as f64 <= 0.5 * session.tokens as f64,
            fixed.compactions_with_llm <= targets.max_compactions,
            fixed.llm_calls <= targets.max_calls,
            fixed.prefix_reuse >= 0.9,
            fixed.no_llm_share() >= 0.9,
            fixed.constraint_kept && offline.constraint_kept,
        ];
        println!(
            "{:<22} {:<12} {:>9} {:>11} {:>9} {:>8} {:>8} {:>10}  {}",
            name,
            mode.label(),
            mark(checks[0]),
            mark(checks[1]),
            mark(checks[2]),
            mark(checks[3]),
            mark(checks[4]),
            mark(checks[5]),
            if checks.iter().all(|c| *c) {
                "all met"
            } else {
                "missed"
            }
        );
    }
}
