//! The buffered-tool-call plugin, built as a `.so` and loaded by the real loader, run through
//! the real chain: the issue's trigger scenarios, concurrency and order, failures, both wire
//! formats and real corpus conversations.
//!
//! Scenario conversations are a system prompt and a user task, then tool exchanges, then
//! chat. Distances are the number of messages after an exchange. Unless a test says otherwise
//! the stage runs with `messages_old_threshold = 8`, `min_tool_calls_to_summarize = 10`,
//! `max_tool_call_distance = 40`, `keep_recent = 4`: with the default threshold of 20, twelve
//! two-message exchanges could not all be eligible while the oldest is only 30 back.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::chain_run::stage;
use tamp_e2e::rt;
use tamp_e2e::{assert_wire_round_trip, corpus, plugin, scratch_dir, write_chain};
use tamp_host::budget::BudgetConfig;
use tamp_host::chain::{
    Chain, ChainBuilder, CompactOptions, Compacted, FileOverrides, StageStatus,
};
use tamp_host::config::Trigger;
use tamp_host::loader::load_plugin;
use tamp_host::providers::{Provider, ProviderErrorKind, ScriptedProvider, ScriptedResponse};
use tamp_host::store::{NewPage, PageStore, PageSummary, SqliteStore, StoreError, StoredPage};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{
    ContentBlock, Conversation, Message, ProgressEvent, Role, SummaryStatus, ToolResultPart,
};

const TOOLS: [&str; 3] = ["bash", "read_file", "grep"];

/// The marker that identifies exchange `n` in its input, its result and any prompt about it.
fn marker(n: usize) -> String {
    format!("probe-{n:03}")
}

/// Tool exchange `n` in the Anthropic shape: a call and a user message answering it, with a
/// result bulky enough (like real tool output) that a short summary is much smaller.
fn exchange(n: usize, is_error: bool) -> [Message; 2] {
    let id = format!("toolu_{n:03}");
    let tool = TOOLS[n % TOOLS.len()];
    let probe = marker(n);
    let output: String = (0..12)
        .map(|line| format!("{probe} line {line}: src/module_{n}/file_{line}.rs matched 3 times\n"))
        .collect();
    [
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.as_str().into(),
                name: tool.into(),
                input_json: json!({"probe": probe, "path": format!("src/module_{n}")})
                    .to_string()
                    .into(),
                extra_json: Default::default(),
            }],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: id.as_str().into(),
                content: vec![ToolResultPart::Text {
                    text: output.into(),
                }]
                .into(),
                is_error,
                extra_json: Default::default(),
            }],
        ),
    ]
}

/// Builds a scenario conversation piece by piece; exchanges are numbered in order.
#[derive(Default)]
struct Trace {
    messages: Vec<Message>,
    exchanges: usize,
    failing: HashSet<usize>,
}

impl Trace {
    /// A system prompt and a user task.
    fn new() -> Self {
        Trace {
            messages: vec![
                Message::text(Role::System, "You are a coding agent."),
                Message::text(Role::User, "Find where the parser drops trailing commas."),
            ],
            ..Default::default()
        }
    }

    /// Makes exchange `n` (counted from 0) report an error result.
    fn failing(mut self, n: usize) -> Self {
        self.failing.insert(n);
        self
    }

    fn exchanges(mut self, count: usize) -> Self {
        for _ in 0..count {
            let n = self.exchanges;
            self.messages.extend(exchange(n, self.failing.contains(&n)));
            self.exchanges += 1;
        }
        self
    }

    /// `count` chat messages, assistant and user in turn.
    fn chat(mut self, count: usize) -> Self {
        for i in 0..count {
            let role = if i % 2 == 0 {
                Role::Assistant
            } else {
                Role::User
            };
            self.messages.push(Message::text(
                role,
                format!("chat turn {i} about the parser"),
            ));
        }
        self
    }

    fn conversation(self) -> Conversation {
        Conversation::new(self.messages)
    }
}

/// What a test observed of progress events: each with the time it arrived.
type Progress = Arc<Mutex<Vec<(Instant, ProgressEvent)>>>;

struct Harness {
    chain: Chain,
    provider: Arc<ScriptedProvider>,
    progress: Progress,
}

/// The plugin from its `.so`, as the only stage (`always`, so the chain's token budget does
/// not decide; the plugin's own triggers do), over `provider`.
fn harness(config: Value, provider: ScriptedProvider, keep_recent: u32) -> Harness {
    harness_with_store(
        config,
        provider,
        keep_recent,
        Arc::new(SqliteStore::in_memory().unwrap()),
    )
}

fn harness_with_store(
    config: Value,
    provider: ScriptedProvider,
    keep_recent: u32,
    store: Arc<dyn PageStore>,
) -> Harness {
    let provider = Arc::new(provider);
    let progress: Progress = Arc::default();
    let seen = Arc::clone(&progress);
    let chain = ChainBuilder::new(BudgetConfig {
        max_tokens: 1_000,
        keep_recent,
        // The tail in messages alone: these tests count it, where the default token bound
        // (an eighth of max_tokens) would protect the newest exchange only.
        keep_recent_tokens: Some(0),
        ..Default::default()
    })
    .provider(Arc::clone(&provider) as Arc<dyn Provider>)
    .store(store)
    .llm_concurrency(64)
    .progress(Arc::new(move |_stage: &str, event: &ProgressEvent| {
        seen.lock().unwrap().push((Instant::now(), event.clone()));
    }))
    .stage(
        "buffered",
        load_plugin(&plugin("tamp_buffered_tool_call")).expect("the plugin loads"),
        config,
        Trigger::Always,
        Duration::from_secs(60),
    )
    .expect("the config is valid")
    .build()
    .unwrap();
    Harness {
        chain,
        provider,
        progress,
    }
}

/// The scenario config, with `extra` keys on top.
fn scenario_config(extra: Value) -> Value {
    let mut config = json!({
        "messages_old_threshold": 8,
        "min_tool_calls_to_summarize": 10,
        "max_tool_call_distance": 40,
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

fn short_answers() -> ScriptedProvider {
    ScriptedProvider::always("The agent searched the parser sources; nothing decisive.")
}

impl Harness {
    fn compact(&self, conversation: &Conversation) -> Compacted {
        rt().block_on(
            self.chain
                .compact(conversation.clone(), &CompactOptions::default()),
        )
        .expect("the conversation is valid")
    }

    fn progress_messages(&self) -> Vec<String> {
        let events = self.progress.lock().unwrap();
        events.iter().map(|(_, e)| e.message.to_string()).collect()
    }
}

/// Checks that `output` is `input` with exactly the message ranges `replaced` (in order) each
/// swapped for one final summary of this plugin, whose page holds exactly those messages, and
/// every other message kept in order. Returns the summaries' texts.
fn assert_replaced_exactly(
    harness: &Harness,
    input: &Conversation,
    output: &Conversation,
    replaced: &[std::ops::Range<usize>],
) -> Vec<String> {
    let mut expected_kept = Vec::new();
    let mut next = 0;
    for r in replaced {
        expected_kept.push((next..r.start, Some(r.clone())));
        next = r.end;
    }
    expected_kept.push((next..input.messages.len(), None));

    let mut texts = Vec::new();
    let mut out = output.messages.iter();
    for (kept, summary_of) in expected_kept {
        for i in kept {
            assert_eq!(
                out.next(),
                Some(&input.messages[i]),
                "input message {i} kept in place"
            );
        }
        let Some(range) = summary_of else { continue };
        let summary = out.next().expect("a summary where the group was");
        let info = summary
            .summary_info()
            .unwrap_or_else(|| panic!("messages {range:?} should be a summary: {summary:?}"));
        assert_eq!(info.strategy.as_str(), "buffered-tool-call");
        assert_eq!(info.status, SummaryStatus::Final);
        let page = rt()
            .block_on(harness.chain.store().get_page(&info.page_ref))
            .expect("the summary's page exists");
        assert_eq!(
            page.page.messages.as_slice(),
            &input.messages[range.clone()],
            "the page of {range:?} holds exactly the replaced messages"
        );
        texts.push(summary.joined_text());
    }
    assert_eq!(out.next(), None, "nothing after the last kept message");
    texts
}

/// Message ranges of exchanges `first..first + count` in a [`Trace`] (after system + task),
/// `per_group` exchanges to a range.
fn exchange_ranges(first: usize, count: usize, per_group: usize) -> Vec<std::ops::Range<usize>> {
    (0..count)
        .step_by(per_group)
        .map(|k| {
            let start = 2 + 2 * (first + k);
            start..start + 2 * per_group.min(count - k)
        })
        .collect()
}

#[test]
fn twelve_eligible_with_the_oldest_thirty_back_trigger_on_size() {
    // 12 exchanges then 8 chat messages: the oldest exchange has 22 + 8 = 30 messages after
    // it, the newest 8, so all 12 are eligible; 12 >= 10, and 30 < 40.
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let h = harness(scenario_config(json!({})), short_answers(), 4);
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert!(
        run.reason
            .contains("size trigger: 12 tool exchange(s) eligible, 10 needed"),
        "{}",
        run.reason
    );
    assert_eq!(run.details["trigger"], "size");
    assert_eq!(run.details["oldest_eligible_distance"], 30);
    assert_eq!((run.summaries_added, run.messages_removed), (12, 24));
    assert_eq!(run.llm_calls, 12);
    assert_eq!(run.pages.len(), 12);
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);

    let texts = assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(0, 12, 1));
    for (n, text) in texts.iter().enumerate() {
        assert!(
            text.starts_with(&format!(
                "Summary of 1 tool exchange(s) ({}; no call failed):",
                TOOLS[n % 3]
            )),
            "{text}"
        );
        assert_contains(text, "nothing decisive");
    }

    // Each request names the tool, its input and its result, inside the material.
    let requests = h.provider.requests();
    assert_eq!(requests.len(), 12);
    for request in &requests {
        let prompt = request.prompt.as_str();
        let n: usize = prompt.split("probe-").nth(1).unwrap()[..3].parse().unwrap();
        assert_contains(prompt, &format!("called {}(", TOOLS[n % 3]));
        assert_contains(prompt, &format!("\"path\":\"src/module_{n}\""));
        assert!(prompt.contains(&format!("{} returned: probe-{n:03} line 0", TOOLS[n % 3])));
        assert!(prompt.contains("<content>"));
        assert!(request.label.starts_with("tool exchanges at messages "));
        // Asked for half the exchange's tokens (under the default cap of 400): a summary as
        // long as what it replaces would save nothing.
        let exchange_tokens = h
            .chain
            .tokens()
            .count_messages(&input.messages[2 + 2 * n..4 + 2 * n]);
        assert_eq!(u64::from(request.max_output_tokens), exchange_tokens / 2);
        assert!(request.max_output_tokens < 400);
    }

    // One progress event per group, counting up to 12.
    let shown = h.progress_messages();
    let expected: Vec<String> = (1..=12)
        .map(|k| format!("{k}/12 groups summarized"))
        .collect();
    assert_eq!(shown, expected);
}

#[test]
fn six_eligible_with_the_oldest_fifty_back_trigger_on_age() {
    // 6 exchanges, 36 chat messages, then 2 young exchanges (2 and 0 messages after them,
    // under the threshold of 8): the oldest has 10 + 36 + 4 = 50 messages after it.
    let input = Trace::new()
        .exchanges(6)
        .chat(36)
        .exchanges(2)
        .conversation();
    let h = harness(scenario_config(json!({})), short_answers(), 4);
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert!(
        run.reason.contains(
            "age trigger: the oldest eligible exchange is 50 message(s) from the end, 40 needed"
        ),
        "{}",
        run.reason
    );
    assert_eq!(run.details["trigger"], "age");
    assert_eq!(run.details["eligible_exchanges"], 6);
    assert_eq!(run.llm_calls, 6);
    // The chat (user turns included) and the young exchanges are untouched.
    assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(0, 6, 1));
}

#[test]
fn five_eligible_with_the_oldest_thirty_back_do_nothing_and_say_by_how_much() {
    // 5 exchanges then 22 chat messages: the oldest is 8 + 22 = 30 back.
    let input = Trace::new().exchanges(5).chat(22).conversation();
    let h = harness(scenario_config(json!({})), short_answers(), 4);
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Skipped, "{run:?}");
    assert_eq!(out.conversation, input);
    assert_eq!(
        run.reason,
        "waiting: size trigger missed by 5: 5 tool exchange(s) eligible, 10 needed; age trigger \
         missed by 10: the oldest eligible exchange is 30 message(s) from the end, 40 needed"
    );
    assert_eq!(run.llm_calls, 0);
    assert!(h.provider.requests().is_empty());
    assert!(h.progress_messages().is_empty());
}

#[test]
fn groups_finishing_out_of_order_keep_their_places() {
    // 12 exchanges in groups of 2: group k (0-based) answers after (6 - k) × 100 ms, so the
    // last group finishes first and the first group last.
    let responses = (0..6).map(|k| {
        ScriptedResponse::text(format!("summary of group {k}"))
            .matching(marker(2 * k))
            .with_delay(Duration::from_millis(100 * (6 - k as u64)))
    });
    let h = harness(
        scenario_config(json!({"group_size": 2, "max_concurrency": 6})),
        ScriptedProvider::matching(responses),
        4,
    );
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let started = Instant::now();
    let out = h.compact(&input);
    let elapsed = started.elapsed();
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.llm_calls, 6);

    let texts = assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(0, 12, 2));
    for (k, text) in texts.iter().enumerate() {
        assert!(text.starts_with("Summary of 2 tool exchange(s)"), "{text}");
        assert!(text.ends_with(&format!("summary of group {k}")), "{text}");
    }

    // All six ran at once: the whole took about the slowest delay (600 ms), not their sum
    // (2.1 s). The first progress event came when the fastest group (100 ms) finished, long
    // before the first group could have: completion order was not group order.
    assert!(elapsed < Duration::from_millis(1_500), "{elapsed:?}");
    let events = h.progress.lock().unwrap().clone();
    let counts: Vec<(u32, u32)> = events.iter().map(|(_, e)| (e.done, e.total)).collect();
    assert_eq!(counts, (1..=6).map(|k| (k, 6)).collect::<Vec<_>>());
    let first_progress = events[0].0.duration_since(started);
    assert!(
        first_progress < Duration::from_millis(450),
        "{first_progress:?}"
    );
}

fn failing_group_provider(failing: &[usize]) -> ScriptedProvider {
    ScriptedProvider::matching(failing.iter().map(|&n| {
        // Not retryable, so the failure reaches the plugin however the host retries.
        ScriptedResponse::error(ProviderErrorKind::InvalidRequest, format!("boom on {n}"))
            .matching(marker(n))
    }))
    .with_default(ScriptedResponse::text("A short summary."))
}

#[test]
fn a_failing_group_is_left_as_it_was_and_listed() {
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let h = harness(scenario_config(json!({})), failing_group_provider(&[4]), 4);
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.failed_llm_calls, 1);
    assert_eq!(run.summaries_added, 11);
    assert!(
        run.reason.contains("in 11 of 12 group(s)") && run.reason.contains("1 group(s) left"),
        "{}",
        run.reason
    );
    assert_eq!(run.warnings.len(), 1, "{:?}", run.warnings);
    let warning = &run.warnings[0];
    assert!(
        warning.starts_with("group 5/12 (messages 10..12: read_file): LLM call failed:")
            && warning.contains("boom on 4")
            && warning.ends_with("left as it was"),
        "{warning}"
    );
    assert_eq!(run.details["groups_failed"], 1);
    // Exchange 4 (messages 10..12) is still there, the other eleven are summaries.
    let mut replaced = exchange_ranges(0, 12, 1);
    replaced.remove(4);
    assert_replaced_exactly(&h, &input, &out.conversation, &replaced);
    // Progress says which group failed.
    assert!(
        h.progress_messages()
            .iter()
            .any(|m| m.ends_with("groups finished; group 5 failed")),
        "{:?}",
        h.progress_messages()
    );
}

#[test]
fn with_all_or_nothing_a_failing_group_leaves_everything_and_each_failure_is_listed() {
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let h = harness(
        scenario_config(json!({"all_or_nothing": true})),
        failing_group_provider(&[1, 9]),
        4,
    );
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Skipped, "{run:?}");
    assert_eq!(out.conversation, input);
    assert!(
        run.reason
            .starts_with("all_or_nothing: 2 of 12 group(s) failed, so nothing was replaced"),
        "{}",
        run.reason
    );
    assert_eq!(run.warnings.len(), 2, "{:?}", run.warnings);
    assert!(run.warnings[0].contains("group 2/12") && run.warnings[0].contains("boom on 1"));
    assert!(run.warnings[1].contains("group 10/12") && run.warnings[1].contains("boom on 9"));
    assert!(run.pages.is_empty());
    // Every group was still asked; the report counts the calls.
    assert_eq!((run.llm_calls, run.failed_llm_calls), (12, 2));
}

/// A page store that refuses to write pages holding `refuse` and keeps the rest in SQLite.
struct RefusingStore {
    inner: SqliteStore,
    refuse: String,
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

impl PageStore for RefusingStore {
    fn put_page(&self, page: NewPage) -> StoreFuture<'_, String> {
        let refused = serde_json::to_string(&page.messages)
            .unwrap()
            .contains(&self.refuse);
        if refused {
            return Box::pin(async {
                Err(StoreError::Backend {
                    location: "test".into(),
                    operation: "write page".into(),
                    detail: "disk full".into(),
                })
            });
        }
        self.inner.put_page(page)
    }

    fn get_page(&self, id: &str) -> StoreFuture<'_, StoredPage> {
        self.inner.get_page(id)
    }

    fn list_pages(&self, limit: usize) -> StoreFuture<'_, Vec<PageSummary>> {
        self.inner.list_pages(limit)
    }

    fn describe(&self) -> String {
        "refusing test store".into()
    }
}

/// The host archives the pages of a stage's edits; one it cannot write rolls the whole stage
/// back (the edits are all or nothing), the conversation unchanged and the error named.
#[test]
fn a_page_that_cannot_be_written_rolls_the_stage_back() {
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let refusing = || {
        Arc::new(RefusingStore {
            inner: SqliteStore::in_memory().unwrap(),
            refuse: marker(7),
        })
    };
    let h = harness_with_store(scenario_config(json!({})), short_answers(), 4, refusing());
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::RolledBack, "{run:?}");
    assert_eq!(out.conversation, input);
    let error = run.error.as_ref().expect("the failure");
    assert!(
        error.message.contains("could not be archived") && error.message.contains("disk full"),
        "{error:?}"
    );
}

#[test]
fn errored_calls_are_named_in_the_summary() {
    let input = Trace::new()
        .failing(3)
        .failing(4)
        .exchanges(12)
        .chat(8)
        .conversation();
    let h = harness(
        scenario_config(json!({"group_size": 4})),
        short_answers(),
        4,
    );
    let out = h.compact(&input);
    let texts = assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(0, 12, 4));
    // Group 0 holds exchanges 0..4 (bash, read_file, grep, bash), exchange 3 failed.
    assert!(
        texts[0].starts_with(
            "Summary of 4 tool exchange(s) (bash ×2, read_file, grep; 1 of 4 call(s) failed: bash):"
        ),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("1 of 4 call(s) failed: read_file"),
        "{}",
        texts[1]
    );
    assert!(texts[2].contains("no call failed"), "{}", texts[2]);
    // And the LLM saw which call failed.
    let asked = h.provider.requests();
    assert!(asked
        .iter()
        .any(|r| r.prompt.contains("bash failed: probe-003 line 0")));
}

#[test]
fn a_conversation_of_only_tool_exchanges() {
    // No system prompt, no user turn: 20 exchanges. The last 4 messages are protected; with
    // a threshold of 8, exchanges 0..16 are eligible (38 down to 8 messages after them).
    let messages: Vec<Message> = (0..20).flat_map(|n| exchange(n, false)).collect();
    let input = Conversation::new(messages);
    let h = harness(
        scenario_config(json!({"group_size": 3})),
        short_answers(),
        4,
    );
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.details["eligible_exchanges"], 16);
    // Groups of 3 counted from the start: 3, 3, 3, 3, 3, 1.
    let replaced: Vec<_> = (0..16)
        .step_by(3)
        .map(|k| 2 * k..2 * (k + 3).min(16))
        .collect();
    assert_eq!(replaced.len(), 6);
    assert_replaced_exactly(&h, &input, &out.conversation, &replaced);
    assert_eq!(out.conversation.messages.len(), 6 + 8);

    // Valid on the wire and readable back.
    let json = wire::to_string_pretty(&out.conversation, WireFormat::Anthropic);
    let (back, format) = wire::parse_str(&json, None).unwrap();
    assert_eq!(format, WireFormat::Anthropic);
    assert_eq!(back, out.conversation);
}

/// An OpenAI Chat Completions request with a parallel call (two `tool_calls` answered by two
/// `tool` messages) and 11 single calls, then chat.
fn openai_request() -> String {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Why does the build fail?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "grep", "arguments": "{\"pattern\":\"probe-100\"}"}},
            {"id": "call_b", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"Cargo.toml\"}"}}
        ]}),
        json!({"role": "tool", "tool_call_id": "call_b", "content": "[package]\nname = \"demo\"\n".repeat(20)}),
        json!({"role": "tool", "tool_call_id": "call_a", "content": "src/lib.rs:12: probe-100\n".repeat(20)}),
    ];
    for n in 0..11 {
        messages.push(json!({"role": "assistant", "content": format!("Checking step {n}."), "tool_calls": [
            {"id": format!("call_{n}"), "type": "function",
             "function": {"name": "bash", "arguments": format!("{{\"cmd\":\"cargo build -p m{n}\"}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{n}"),
            "content": format!("error[E0425]: cannot find value `x{n}` in this scope\n").repeat(15)}));
    }
    for i in 0..8 {
        let role = if i % 2 == 0 { "assistant" } else { "user" };
        messages.push(json!({"role": role, "content": format!("chat turn {i}")}));
    }
    json!({"model": "gpt-4o", "messages": messages}).to_string()
}

#[test]
fn openai_input_with_parallel_calls_comes_back_valid_openai() {
    let (input, format) = wire::parse_str(&openai_request(), None).unwrap();
    assert_eq!(format, WireFormat::OpenAi);
    let h = harness(scenario_config(json!({})), short_answers(), 4);
    let out = rt()
        .block_on(h.chain.compact(
            input.clone(),
            &CompactOptions {
                format: Some(format),
                ..Default::default()
            },
        ))
        .unwrap();
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    // 12 exchanges: the parallel call (3 messages, one unit) and 11 single calls.
    assert_eq!(run.summaries_added, 12);
    let replaced: Vec<_> = std::iter::once(2..5)
        .chain((0..11).map(|n| 5 + 2 * n..7 + 2 * n))
        .collect();
    let texts = assert_replaced_exactly(&h, &input, &out.conversation, &replaced);
    assert!(
        texts[0].starts_with("Summary of 1 tool exchange(s) (grep, read_file; no call failed):"),
        "{}",
        texts[0]
    );
    // The parallel call's prompt holds both calls and both results, named by call id.
    let first = &h.provider.requests()[0].prompt;
    assert_contains(first, "called grep({\"pattern\":\"probe-100\"})");
    assert_contains(first, "read_file returned: [package]");
    assert_contains(first, "grep returned: src/lib.rs:12");

    assert_wire_round_trip(&out.conversation, WireFormat::OpenAi, "openai output");
}

#[test]
fn the_system_prompt_and_the_protected_tail_are_never_touched() {
    // Every exchange is old enough (threshold 0) and one is enough (min 1), but the last 10
    // messages, exchanges 7..12, are protected.
    let input = Trace::new().exchanges(12).conversation();
    let h = harness(
        json!({"messages_old_threshold": 0, "min_tool_calls_to_summarize": 1}),
        short_answers(),
        10,
    );
    let out = h.compact(&input);
    assert_eq!(stage(&out).summaries_added, 7);
    assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(0, 7, 1));

    // With everything protected, it waits and says so.
    let h = harness(
        json!({"messages_old_threshold": 0, "min_tool_calls_to_summarize": 1}),
        short_answers(),
        100,
    );
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Skipped);
    assert!(
        run.reason.contains("protected last 100 message(s)"),
        "{}",
        run.reason
    );
}

#[test]
fn tiny_exchanges_are_not_buffered() {
    // Exchanges 0..5 answer with a word: their summary could hardly be smaller. They do not
    // count toward the size trigger and are never sent to the LLM.
    let mut input = Trace::new().exchanges(12).chat(8).conversation();
    for n in 0..5 {
        let answer = &mut input.messages[3 + 2 * n];
        answer.content = vec![ContentBlock::ToolResult {
            tool_use_id: format!("toolu_{n:03}").into(),
            content: vec![ToolResultPart::Text { text: "ok".into() }].into(),
            is_error: false,
            extra_json: Default::default(),
        }]
        .into();
    }
    let h = harness(scenario_config(json!({})), short_answers(), 4);
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Skipped, "{run:?}");
    assert!(
        run.reason
            .contains("size trigger missed by 3: 7 tool exchange(s) eligible")
            && run
                .reason
                .ends_with("5 tool exchange(s) under min_exchange_tokens (100) are not buffered"),
        "{}",
        run.reason
    );
    // Counted, they are summarized like any other.
    let h = harness(
        scenario_config(json!({"min_exchange_tokens": 0})),
        short_answers(),
        4,
    );
    assert_eq!(stage(&h.compact(&input)).llm_calls, 12);
}

#[test]
fn long_answers_are_cut_to_max_summary_chars() {
    let h = harness(
        scenario_config(json!({"max_summary_chars": 100})),
        ScriptedProvider::always("z".repeat(5_000)),
        4,
    );
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let out = h.compact(&input);
    let texts = assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(0, 12, 1));
    for text in texts {
        let answer = text.lines().last().unwrap();
        assert_eq!(answer.chars().count(), 100, "{answer}");
        assert!(answer.ends_with('…'));
    }
}

#[test]
fn unusable_answers_leave_their_groups() {
    // An empty answer is a failure; an answer bigger than the group it replaces would grow
    // the conversation, so that group is kept too. Neither rolls the stage back.
    let provider = ScriptedProvider::matching([
        ScriptedResponse::text("   ").matching(marker(0)),
        ScriptedResponse::text("padding ".repeat(400)).matching(marker(1)),
    ])
    .with_default(ScriptedResponse::text("Short."));
    let h = harness(
        scenario_config(json!({"max_summary_chars": 10000})),
        provider,
        4,
    );
    let input = Trace::new().exchanges(12).chat(8).conversation();
    let out = h.compact(&input);
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.warnings.len(), 2, "{:?}", run.warnings);
    assert!(run.warnings[0].contains("group 1/12") && run.warnings[0].contains("empty summary"));
    assert!(
        run.warnings[1].contains("group 2/12") && run.warnings[1].contains("is not smaller"),
        "{}",
        run.warnings[1]
    );
    assert_eq!(run.details["groups_failed"], 1);
    assert_eq!(run.details["groups_not_smaller"], 1);
    assert_replaced_exactly(&h, &input, &out.conversation, &exchange_ranges(2, 10, 1));
}

#[test]
fn growing_one_turn_at_a_time_never_resummarizes_a_summary() {
    // Compacted after every new exchange, each output fed back: the buffer fills, fires,
    // empties, fills again. Every page holds original exchanges only.
    let h = harness(
        scenario_config(json!({"group_size": 5})),
        short_answers(),
        4,
    );
    let mut conversation = Trace::new().conversation();
    let mut all_exchanges = Vec::new();
    let mut fired = 0;
    for n in 0..60 {
        let turn = exchange(n, false);
        all_exchanges.extend(turn.iter().cloned());
        conversation.messages.extend(turn);
        let out = h.compact(&conversation);
        let run = stage(&out);
        assert_ne!(run.status, StageStatus::RolledBack, "turn {n}: {run:?}");
        if run.status == StageStatus::Acted {
            fired += 1;
            assert_eq!(run.details["trigger"], "size", "turn {n}");
            assert_eq!(
                run.summaries_added, 2,
                "10 exchanges in groups of 5: turn {n}"
            );
        }
        conversation = out.conversation;
    }
    // The first 10 are eligible after 14 turns (8 messages after the 10th), then every 10.
    assert_eq!(fired, 5);
    for request in h.provider.requests() {
        assert!(!request.prompt.contains("summary of earlier messages"));
        assert!(!request.prompt.contains("nothing decisive"));
    }
    // Every original exchange is either still in the conversation or in exactly one page.
    let mut archived = Vec::new();
    for m in &conversation.messages {
        match m.summary_info() {
            Some(info) => {
                let page = rt()
                    .block_on(h.chain.store().get_page(&info.page_ref))
                    .unwrap();
                assert!(page.page.messages.iter().all(|m| !m.is_summary()));
                archived.extend(page.page.messages.iter().cloned());
            }
            None => archived.push(m.clone()),
        }
    }
    assert_eq!(archived[2..], all_exchanges[..]);
}

#[test]
fn requests_for_an_unchanged_older_part_repeat_exactly() {
    // Prefix stability: the same conversation grown at its end asks the same questions about
    // its older part (groups are counted from the start of each run, not from the end).
    let config = scenario_config(json!({"group_size": 3}));
    let short = Trace::new().exchanges(12).chat(8).conversation();
    let long = Trace::new()
        .exchanges(12)
        .chat(8)
        .exchanges(7)
        .chat(9)
        .conversation();
    let a = harness(config.clone(), short_answers(), 4);
    let b = harness(config, short_answers(), 4);
    a.compact(&short);
    b.compact(&long);
    let asked_short: Vec<_> = a.provider.requests();
    let asked_long: Vec<_> = b.provider.requests();
    assert_eq!(asked_short.len(), 4);
    assert_eq!(asked_long.len(), 4 + 3);
    assert_eq!(asked_long[..4], asked_short[..]);
}

#[test]
fn bad_configs_are_refused_when_the_chain_is_built_naming_field_and_line() {
    let dir = scratch_dir("btc-config");
    for (bad, expect) in [
        (
            "prompt_template = \"Summarize {tool}: {calls}\"",
            "unknown placeholder {tool}",
        ),
        (
            "prompt_template = \"Summarize {tools}\"",
            "must contain {calls}",
        ),
        ("group_size = 0", "group_size"),
        ("group_sise = 2", "group_sise"),
    ] {
        let toml = format!(
            "[[stage]]\nname = \"tools\"\nplugin = \"{}\"\n[stage.config]\nall_or_nothing = false\n{bad}\n",
            plugin("tamp_buffered_tool_call").display()
        );
        let err = Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(expect), "{bad}: {err}");
        assert!(err.contains("stage \"tools\""), "{bad}: {err}");
        assert!(err.contains("chain.toml:"), "{bad}: {err}");
    }
}

/// The docs' example chain, on a real conversation from the corpus in both wire formats, with
/// the default offline (extractive) summarizer.
#[test]
fn a_real_corpus_conversation_in_both_formats() {
    let dir = scratch_dir("btc-corpus");
    let toml = format!(
        r#"
[budget]
max_tokens = 128000
keep_recent = 10

[store]
path = "pages.sqlite3"

[[stage]]
name = "old-tool-calls"
plugin = "{}"
trigger = "always"
[stage.config]
messages_old_threshold = 20
min_tool_calls_to_summarize = 10
max_tool_call_distance = 40
group_size = 2
max_concurrency = 8
"#,
        plugin("tamp_buffered_tool_call").display()
    );
    let chain = Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).unwrap();
    for format_name in ["anthropic", "openai"] {
        let (input, format) =
            wire::parse_str(&corpus(format_name, "msa_deepseek_django-14752"), None).unwrap();
        let out = rt()
            .block_on(chain.compact(
                input.clone(),
                &CompactOptions {
                    format: Some(format),
                    ..Default::default()
                },
            ))
            .unwrap();
        let run = stage(&out);
        let ctx = format!("{format_name}: {run:?}");
        assert_eq!(run.status, StageStatus::Acted, "{ctx}");
        assert!(run.summaries_added >= 5, "{ctx}");
        assert!(
            run.warnings.iter().all(|w| w.contains("is not smaller")),
            "no call failed: {ctx}"
        );
        assert!(out.report.tokens_after < out.report.tokens_before, "{ctx}");

        // Replaced runs are tool exchanges only; every other message is kept, in order; each
        // page holds exactly what its summary replaced.
        let input_msgs = &input.messages;
        let mut i = 0;
        for m in out.conversation.messages.iter() {
            match m.summary_info() {
                Some(info) if info.strategy.as_str() == "buffered-tool-call" => {
                    let page = rt()
                        .block_on(chain.store().get_page(&info.page_ref))
                        .unwrap();
                    let replaced = page.page.messages.as_slice();
                    assert_eq!(
                        &input_msgs[i..i + replaced.len()],
                        replaced,
                        "{format_name}"
                    );
                    for r in replaced {
                        let answers_tool = r.tool_result_ids().next().is_some();
                        assert!(
                            r.role == Role::Assistant || r.role == Role::Tool || answers_tool,
                            "{format_name}: a non-tool message was summarized: {r:?}"
                        );
                    }
                    i += replaced.len();
                }
                _ => {
                    assert_eq!(m, &input_msgs[i], "{format_name}: message {i} kept");
                    i += 1;
                }
            }
        }
        assert_eq!(i, input_msgs.len());
        // The system prompt and the last 10 messages are as they were.
        assert_eq!(out.conversation.messages[0], input_msgs[0]);
        let n = out.conversation.messages.len();
        assert_eq!(
            out.conversation.messages[n - 10..],
            input_msgs[input_msgs.len() - 10..]
        );

        // Valid in its own wire format.
        let json = wire::to_string_pretty(&out.conversation, format);
        let (back, _) = wire::parse_str(&json, None).unwrap();
        wire::check_tool_pairing(&back.messages, format).unwrap();
    }
}
