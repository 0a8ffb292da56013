//! Benchmarks of the buffered-tool-call plugin (issue 4), loaded from its `.so` and run through
//! the real chain. Both print ratios measured side by side in one run.
//!
//! - LLM calls on a 500-turn agent trace (one tool exchange per turn, compacted after every
//!   turn, each output fed back as the next input): buffered configurations against
//!   summarizing each exchange as soon as it becomes eligible.
//! - Latency: 32 groups summarized with every LLM call answered after 200 ms.
//!
//! Run: `cargo bench -p tamp-e2e --bench buffered_tool_call` (add `-- quick` for fewer
//! latency iterations).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tamp_e2e::stats::median;

use serde_json::{json, Value};
use tamp_e2e::{corpus_conversation, corpus_names, StageChain};
use tamp_host::chain::{Chain, CompactOptions, StageStatus};
use tamp_host::providers::ScriptedProvider;
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::WireFormat;
use tamp_plugin_api::sdk::{self, UnitKind};
use tamp_plugin_api::{ContentBlock, Conversation, Message, Role};

const KEEP_RECENT: u32 = 10;
const ANSWER: &str = "The agent ran the tool and learned what it needed; see the page for details.";

/// Every tool exchange of the Anthropic corpus conversations (a call and the user message
/// answering it, nothing else inside), in corpus order: real tool inputs and outputs.
fn corpus_exchanges() -> Vec<Vec<Message>> {
    let mut exchanges = Vec::new();
    for name in corpus_names() {
        let conversation = corpus_conversation("anthropic", &name);
        let messages = &conversation.messages;
        for unit in sdk::units(messages) {
            let span = &messages[unit.range.clone()];
            let only_calls_and_answers = span
                .iter()
                .all(|m| m.role == Role::Assistant || m.tool_result_ids().next().is_some());
            if unit.kind == UnitKind::ToolExchange && only_calls_and_answers {
                exchanges.push(span.to_vec());
            }
        }
    }
    exchanges
}

/// Exchange `turn` of the generated trace: the corpus exchanges in turn, with tool-call ids
/// made unique per turn.
fn turn_exchange(pool: &[Vec<Message>], turn: usize) -> Vec<Message> {
    let mut exchange = pool[turn % pool.len()].clone();
    for message in &mut exchange {
        for block in message.content.iter_mut() {
            match block {
                ContentBlock::ToolUse { id, .. } => *id = format!("{id}_t{turn}").into(),
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    *tool_use_id = format!("{tool_use_id}_t{turn}").into()
                }
                _ => {}
            }
        }
    }
    exchange
}

fn start_of_trace() -> Vec<Message> {
    vec![
        Message::text(Role::System, "You are a software engineering agent."),
        Message::text(
            Role::User,
            "Fix the failing test in this repository, then explain the cause.",
        ),
    ]
}

/// The plugin as the only stage of a chain, run on every compaction (`always`), so that its own
/// triggers decide; every LLM call answered by `provider`.
fn chain(config: Value, provider: ScriptedProvider, llm_concurrency: usize) -> Chain {
    StageChain::new(
        "tamp_buffered_tool_call",
        config,
        Arc::new(provider.without_request_log()),
    )
    .max_tokens(128_000)
    .keep_recent(KEEP_RECENT)
    .llm_concurrency(llm_concurrency)
    .build()
}

struct TraceRun {
    calls: u32,
    triggers: u32,
    /// Exchanges no longer in the conversation (each is in a page behind a summary).
    exchanges_summarized: usize,
}

/// Grows the trace one exchange per turn for `turns` turns, compacting after each turn and
/// feeding the output back in.
fn run_trace(
    rt: &tokio::runtime::Runtime,
    pool: &[Vec<Message>],
    turns: usize,
    config: Value,
) -> TraceRun {
    let chain = chain(config, ScriptedProvider::always(ANSWER), 64);
    let options = CompactOptions {
        format: Some(WireFormat::Anthropic),
        ..Default::default()
    };
    let mut conversation = Conversation::new(start_of_trace());
    let (mut calls, mut triggers) = (0, 0);
    for turn in 0..turns {
        conversation.messages.extend(turn_exchange(pool, turn));
        let out = rt.block_on(chain.compact(conversation, &options)).unwrap();
        let run = &out.report.stages[0];
        // A clean comparison: no stage rolled back, no group left out.
        assert!(
            run.status != StageStatus::RolledBack && run.warnings.is_empty(),
            "turn {turn}: {run:?}"
        );
        calls += run.llm_calls;
        if run.status == StageStatus::Acted {
            triggers += 1;
        }
        conversation = out.conversation;
    }
    let exchanges_left = sdk::units(&conversation.messages)
        .iter()
        .filter(|u| u.kind == UnitKind::ToolExchange)
        .count();
    TraceRun {
        calls,
        triggers,
        exchanges_summarized: turns - exchanges_left,
    }
}

fn calls_on_a_growing_trace(rt: &tokio::runtime::Runtime, turns: usize) {
    let pool = corpus_exchanges();
    let baseline = json!({"min_tool_calls_to_summarize": 1, "group_size": 1});
    let counter = TokenCounter::new(Encoding::O200kBase).unwrap();
    let small = (0..turns)
        .filter(|&turn| counter.count_messages(&pool[turn % pool.len()]) < 100)
        .count();
    println!(
        "LLM calls on a {turns}-turn agent trace (one tool exchange per turn, cycling through the \
         {} tool exchanges of the corpus, {small} of the {turns} under 100 tokens; compacted \
         after every turn, output fed back; messages_old_threshold 20, keep_recent \
         {KEEP_RECENT}, min_exchange_tokens 100):",
        pool.len()
    );
    let base = run_trace(rt, &pool, turns, baseline);
    println!(
        "  baseline, summarize each exchange as soon as it is eligible (this plugin with \
         min_tool_calls_to_summarize = 1, group_size = 1):"
    );
    println!(
        "    {} calls, {} compactions that summarized, {} exchanges summarized",
        base.calls, base.triggers, base.exchanges_summarized
    );
    for group_size in [1, 3, 5, 10] {
        let config = json!({
            "min_tool_calls_to_summarize": 10,
            "max_tool_call_distance": 40,
            "group_size": group_size,
        });
        let run = run_trace(rt, &pool, turns, config);
        let ratio = run.calls as f64 / base.calls as f64;
        // The buffered runs end with a partly filled buffer, so they summarize a few exchanges
        // fewer; per exchange summarized is the stricter comparison.
        let per_exchange = (run.calls as f64 / run.exchanges_summarized as f64)
            / (base.calls as f64 / base.exchanges_summarized as f64);
        println!(
            "  buffered (min_tool_calls_to_summarize 10, max_tool_call_distance 40, group_size \
             {group_size}): {} calls, {} compactions that summarized, {} exchanges summarized",
            run.calls, run.triggers, run.exchanges_summarized
        );
        println!(
            "    ratio calls buffered/baseline {ratio:.3}x = {:.1}% fewer calls (target >= 60% \
             fewer); per exchange summarized {per_exchange:.3}x = {:.1}% fewer",
            (1.0 - ratio) * 100.0,
            (1.0 - per_exchange) * 100.0
        );
    }
}

/// A conversation with `groups` big tool exchanges, all eligible under the default threshold
/// (20 chat messages follow them), so that one compaction summarizes `groups` groups.
fn eligible_exchanges(groups: usize) -> Conversation {
    let counter = TokenCounter::new(Encoding::O200kBase).unwrap();
    let big: Vec<Vec<Message>> = corpus_exchanges()
        .into_iter()
        .filter(|e| counter.count_messages(e) >= 200)
        .collect();
    let mut messages = start_of_trace();
    for turn in 0..groups {
        messages.extend(turn_exchange(&big, turn));
    }
    for i in 0..20 {
        let role = if i % 2 == 0 {
            Role::Assistant
        } else {
            Role::User
        };
        messages.push(Message::text(role, format!("Status update {i}.")));
    }
    Conversation::new(messages)
}

/// Wall time of compacting a conversation holding `groups` eligible groups, every call
/// answered after `delay`; median of `iterations`.
fn time_groups(
    rt: &tokio::runtime::Runtime,
    groups: usize,
    max_concurrency: usize,
    delay: Duration,
    iterations: usize,
) -> f64 {
    let conversation = eligible_exchanges(groups);
    let chain = chain(
        json!({"max_concurrency": max_concurrency}),
        ScriptedProvider::always(ANSWER).with_delay(delay),
        1_000,
    );
    let options = CompactOptions {
        format: Some(WireFormat::Anthropic),
        ..Default::default()
    };
    let mut times = Vec::new();
    // One run first warms the token memo and the page store.
    for i in 0..=iterations {
        let started = Instant::now();
        let out = rt
            .block_on(chain.compact(conversation.clone(), &options))
            .unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        let run = &out.report.stages[0];
        assert_eq!(run.summaries_added as usize, groups, "{run:?}");
        assert_eq!(run.llm_calls as usize, groups);
        if i > 0 {
            times.push(elapsed);
        }
    }
    median(times)
}

fn latency(rt: &tokio::runtime::Runtime, iterations: usize) {
    let delay = Duration::from_millis(200);
    let groups = 32;
    println!(
        "latency: one compaction summarizing {groups} groups (group_size 1), every LLM call \
         answered after {} ms by the scripted provider (median of {iterations}):",
        delay.as_millis()
    );
    let no_wait = time_groups(rt, groups, groups, Duration::ZERO, iterations);
    for max_concurrency in [groups, 8] {
        let t = time_groups(rt, groups, max_concurrency, delay, iterations);
        let note = if max_concurrency == groups {
            "(target <= 1.3x)"
        } else {
            "(the default max_concurrency: 4 waves of 8)"
        };
        println!(
            "  max_concurrency {max_concurrency:>2}: total {:.0} ms   ratio total/200ms {:.2}x {note}",
            t * 1e3,
            t / delay.as_secs_f64()
        );
    }
    println!(
        "  the same compaction with answers at once: {:.1} ms (the plugin's and host's own work)",
        no_wait * 1e3
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let rt = tamp_e2e::rt();
    calls_on_a_growing_trace(&rt, 500);
    latency(&rt, if quick { 3 } else { 9 });
}
