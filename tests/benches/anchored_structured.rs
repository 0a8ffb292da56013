//! anchored-structured benchmark (issue 6): fact retention across successive compactions.
//!
//! A generated agent session grows by one part per round; each part plants four file paths
//! (written through a `write_file` tool exchange and named in the assistant's reply), one
//! decision with its reason and one next step, among filler turns. After each part is appended
//! the conversation (with the previous round's anchored summary in it) is compacted again, five
//! times. After the fifth, the bench counts how many planted facts the anchored summary's JSON
//! (read back from its page) still holds, and prints the rendered summary's size against the
//! size of the span it replaced, round by round.
//!
//! Sizes: tokens with the chain's tokenizer (o200k_base) for everything the span holds, tool
//! calls included; `span chars` counts only the text blocks of the page's messages, so the
//! character ratio is less favourable to the summary than the token columns.
//!
//! Providers:
//! - **scripted**: a script of structured answers, one per part, each listing the facts of
//!   that part as a model reading it would (the answer is chosen by the part's marker in the
//!   prompt's material; the prior is carried forward by the plugin's merge, not by the script);
//! - **extractive**: the offline provider's structured fill (an honest figure: it only copies);
//! - **extractive, prose only** (`structured = false`): the same facts counted in the Markdown
//!   text, for comparison with a prose summary.
//!
//! Run: `cargo bench -p tamp-e2e --bench anchored_structured`.

use std::sync::Arc;

use serde_json::{json, Value};
use tamp_e2e::StageChain;
use tamp_host::chain::{Chain, CompactOptions};
use tamp_host::providers::{ExtractiveSummarizer, Provider, ScriptedProvider, ScriptedResponse};
use tamp_plugin_api::{Conversation, Message, Role};

const ROUNDS: usize = 5;
const PATHS_PER_PART: usize = 4;
const KEEP_RECENT: u32 = 4;
const NAME: &str = "anchored-structured";

fn marker(part: usize) -> String {
    format!("[part {part} of the session]")
}

fn path(part: usize, i: usize) -> String {
    format!("services/report_{part}/src/handler_{i}.rs")
}

fn decision_key(part: usize) -> String {
    format!("cache strategy C{part}")
}

fn next_step_key(part: usize) -> String {
    format!("ledger_{part} migration")
}

/// Filler turns in the style of an agent session, without paths or decisions.
fn filler(part: usize, n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            Message::text(
                role,
                format!(
                    "Round {part}.{i}: the reporting service still answers slowly under load. \
                     The profiler shows most of the time spent serializing rows, and the \
                     latency graphs look the same as yesterday for the nightly batch. Nothing \
                     conclusive yet; keep watching the dashboards while the work goes on."
                ),
            )
        })
        .collect()
}

/// One part: its marker, the planted facts (early, so the part's compaction covers them),
/// then filler (the protected tail of the round is filler).
fn part(part: usize) -> Vec<Message> {
    let mut messages = vec![Message::text(
        Role::User,
        format!(
            "{} Please continue with the reporting service, part {part}.",
            marker(part)
        ),
    )];
    for i in 0..PATHS_PER_PART {
        messages.extend(tamp_e2e::tool_round_trip(
            &format!("write_{part}_{i}"),
            "write_file",
            &json!({"path": path(part, i), "content": "fn handle() {}"}).to_string(),
            "written",
        ));
    }
    let paths: Vec<String> = (0..PATHS_PER_PART).map(|i| path(part, i)).collect();
    messages.push(Message::text(
        Role::Assistant,
        format!(
            "I updated {}. We decided to use {} because the report queries repeat within a \
             minute. Next I will run the {}.",
            paths.join(", "),
            decision_key(part),
            next_step_key(part)
        ),
    ));
    messages.extend(filler(part, 8));
    messages
}

/// The answer a model gives for a part's material: that part's facts (the prior summary's
/// lists are merged by the plugin, as the prompt tells the model).
fn scripted_answer(part: usize) -> ScriptedResponse {
    ScriptedResponse::structured(json!({
        "session_intent": "Speed up the reporting service and keep its reports correct.",
        "files_modified": (0..PATHS_PER_PART).map(|i| path(part, i)).collect::<Vec<_>>(),
        "decisions_made": [format!(
            "Decision: use {} — Reason: the report queries repeat within a minute",
            decision_key(part)
        )],
        "open_questions": [],
        "next_steps": [format!("Run the {}.", next_step_key(part))],
    }))
    .matching(marker(part))
}

fn chain(provider: Arc<dyn Provider>, config: Value) -> Chain {
    StageChain::new("tamp_anchored_structured", config, provider)
        .keep_recent(KEEP_RECENT)
        .build()
}

struct Retention {
    paths: usize,
    decisions: usize,
    next_steps: usize,
}

/// Runs the five rounds; prints each round's sizes; returns what the last summary holds,
/// counted in its JSON (`in_json`) or in its Markdown text.
fn rounds(label: &str, chain: &Chain, in_json: bool) -> Retention {
    let rt = tamp_e2e::rt();
    let mut messages = vec![Message::text(Role::System, "You are a coding agent.")];
    let mut haystack = String::new();
    println!("{label}");
    println!(
        "  {:>5} {:>9} {:>11} {:>11} {:>13} {:>13} {:>7}  path",
        "round", "messages", "span tok", "summary tok", "span chars", "summary chars", "ratio"
    );
    for round in 1..=ROUNDS {
        messages.extend(part(round));
        let span_chars_of =
            |ms: &[Message]| -> usize { ms.iter().map(|m| m.joined_text().chars().count()).sum() };
        let out = rt
            .block_on(chain.compact(
                Conversation::new(messages.clone()),
                &CompactOptions::default(),
            ))
            .unwrap();
        let run = &out.report.stages[0];
        assert!(run.error.is_none(), "{run:?}");
        let summary = out
            .conversation
            .messages
            .iter()
            .find(|m| {
                m.summary_info()
                    .is_some_and(|s| s.strategy.as_str() == NAME)
            })
            .expect("an anchored summary");
        let page_ref = summary.summary_info().unwrap().page_ref.to_string();
        let page = rt.block_on(chain.store().get_page(&page_ref)).unwrap();
        let span_chars = span_chars_of(&page.page.messages);
        let summary_chars = summary.joined_text().chars().count();
        println!(
            "  {round:>5} {:>9} {:>11} {:>11} {span_chars:>13} {summary_chars:>13} {:>7.3}  {}",
            run.messages_removed,
            run.details["span_tokens"].as_u64().unwrap_or(0),
            run.details["summary_tokens"].as_u64().unwrap_or(0),
            summary_chars as f64 / span_chars.max(1) as f64,
            run.details["path"].as_str().unwrap_or("?"),
        );
        haystack = if in_json {
            let metadata: Value = serde_json::from_str(page.page.metadata_json.as_str()).unwrap();
            metadata["anchored_summary"].to_string()
        } else {
            summary.joined_text()
        };
        messages = out.conversation.messages.into();
    }
    let count = |key: &dyn Fn(usize) -> String| {
        (1..=ROUNDS).filter(|&p| haystack.contains(&key(p))).count()
    };
    Retention {
        paths: (1..=ROUNDS)
            .flat_map(|p| (0..PATHS_PER_PART).map(move |i| path(p, i)))
            .filter(|p| haystack.contains(p.as_str()))
            .count(),
        decisions: count(&decision_key),
        next_steps: count(&next_step_key),
    }
}

fn report(label: &str, r: &Retention) {
    let paths = ROUNDS * PATHS_PER_PART;
    println!(
        "  kept after {ROUNDS} compactions ({label}): file paths {}/{paths} ({:.0} %), decisions \
         {}/{ROUNDS}, next steps {}/{ROUNDS}\n",
        r.paths,
        100.0 * r.paths as f64 / paths as f64,
        r.decisions,
        r.next_steps
    );
}

fn main() {
    let script = ScriptedProvider::matching((1..=ROUNDS).rev().map(scripted_answer));
    let scripted = rounds(
        "scripted provider, structured answers (facts counted in the page's JSON)",
        &chain(Arc::new(script), json!({})),
        true,
    );
    report("scripted", &scripted);
    assert_eq!(
        scripted.paths,
        ROUNDS * PATHS_PER_PART,
        "every planted path must survive with structured answers"
    );

    let extractive = rounds(
        "extractive provider, structured fill (facts counted in the page's JSON)",
        &chain(Arc::new(ExtractiveSummarizer::default()), json!({})),
        true,
    );
    report("extractive", &extractive);

    let prose = rounds(
        "extractive provider, prose only (structured = false; facts counted in the text)",
        &chain(
            Arc::new(ExtractiveSummarizer::default()),
            json!({"structured": false}),
        ),
        false,
    );
    report("extractive prose", &prose);
}
