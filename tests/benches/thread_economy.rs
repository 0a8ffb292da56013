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
//! for each shipped strategy with its defaults and for the shipped chain (`examples/chains/
//! shipped.toml`'s stages), at budget 8,000 tokens, `keep_recent` 16, the default watermarks.
//! The summarizer is a counting fake LLM whose answer has a fixed length (free text, or a
//! fixed object filling the request's JSON schema); each row runs again on the offline
//! extractive provider (the default), to see whether the constraint survives there too.
//! Printed side by side, from one run: summarizer calls, tokens sent to it ÷ the session's
//! tokens, prefix reuse, the share of requests that made no LLM call, own time per request,
//! the main model's estimated input cost with Anthropic prompt caching against the same
//! session sent uncompacted, and each target met or missed; then an anatomy of the prefix
//! reuse (requests that compacted against the others) and a check that both clients got the
//! same answers, request by request.
//!
//! Run: `cargo bench -p tamp-e2e --bench thread_economy` (`TAMP_BENCH_QUICK=1` or `-- quick`
//! for 100 turns; the per-500-turn targets are scaled). Progress goes to stderr.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tamp_e2e::{corpus_conversation, corpus_names, plugin, workspace_root};
use tamp_host::chain::{load_plugin, Chain, ChainBuilder, CompactOptions, StageStatus};
use tamp_host::config::{BudgetConfig, LoadedChainFile, Trigger};
use tamp_host::deferred::render::PageSource;
use tamp_host::providers::{ExtractiveSummarizer, Provider, ProviderError};
use tamp_host::store::queue::{Billing, Expect, Transition};
use tamp_host::store::{DeferredQueue, PageStore, SqliteStore, SummaryCache, ThreadStore};
use tamp_host::threads::{common_prefix, ThreadsConfig};
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::WireFormat;
use tamp_plugin_api::sdk::{self, UnitKind};
use tamp_plugin_api::{
    ContentBlock, Conversation, FfiOption, LlmRequest, LlmResponse, Message, Role, Usage,
};

const TURNS: usize = 500;
const QUICK_TURNS: usize = 100;
const MAX_TOKENS: u64 = 8_000;
const KEEP_RECENT: u32 = 16;
/// Every this many turns the agent also says something and the user answers.
const TEXT_EVERY: usize = 10;
/// Tool exchanges larger than this are left out of the session, which puts the 500-turn session
/// at about 165k tokens (with every exchange up to 2,000 tokens it would be 218k).
const MAX_EXCHANGE_TOKENS: u64 = 800;
/// The planted constraint, in the first user message; looked for (case-insensitively) in the
/// last answer.
const CONSTRAINT: &str = "do not touch the billing module";
const THREAD_ID: &str = "thread-economy";
/// Anthropic prompt caching, as multiples of the base input price (5-minute cache).
const CACHE_READ: f64 = 0.1;
const CACHE_WRITE: f64 = 1.25;
/// The base input price used to turn the estimate into dollars (Claude Sonnet, $/Mtok).
const INPUT_USD_PER_MTOK: f64 = 3.0;

/// The fake LLM's free-text answer: the same length every time.
const ANSWER: &str = "Summary of the earlier work: the agent listed the repository, read the \
    modules named in the failing test, ran the test suite to reproduce the failure, traced the \
    wrong total to the rounding step in the report aggregation, patched the aggregation code, \
    and re-ran the affected tests, which now pass. Files read: the report aggregation module, \
    its tests, the configuration loader. Open: confirm the fix against the nightly job's data \
    and add a regression test for the rounding case.";
/// Every string the fake LLM puts in a structured answer.
const STRUCTURED_TEXT: &str = "The agent read the failing module, reproduced the failure with \
    the test suite and patched the aggregation step; the tests pass.";

/// Peer figures quoted in issue 16 (tokens sent to the summarizer, summarizer calls).
const PEERS: [(&str, u64, u64); 2] = [
    ("LangMem running summary", 110_777, 21),
    ("LangChain SummarizationMiddleware", 83_972, 27),
];

// ---------------------------------------------------------------------------------------------
// The session

struct Session {
    messages: Vec<Message>,
    /// Message counts at which the client calls the model: after every user-role message.
    requests: Vec<usize>,
    turns: usize,
    tokens: u64,
    /// Distinct tool exchanges used; the corpus's tool exchanges under the size cut, and all.
    exchanges: (usize, usize, usize),
    /// Tokens of each request's raw history (the uncompacted baseline).
    raw_tokens: Vec<u64>,
}

/// Tool exchanges (a call and the message answering it, nothing else) and plain texts of the
/// Anthropic corpus, in corpus order.
struct Pool {
    exchanges: Vec<Vec<Message>>,
    /// Tool exchanges in the corpus, before the size cut.
    corpus_exchanges: usize,
    assistant_texts: Vec<Message>,
    user_texts: Vec<Message>,
}

fn is_plain_text(m: &Message) -> bool {
    !m.is_summary()
        && !m.content.is_empty()
        && m.content
            .iter()
            .all(|b| matches!(b, ContentBlock::Text { text, .. } if !text.trim().is_empty()))
}

fn corpus_pool(tokens: &TokenCounter) -> Pool {
    let mut pool = Pool {
        exchanges: Vec::new(),
        corpus_exchanges: 0,
        assistant_texts: Vec::new(),
        user_texts: Vec::new(),
    };
    for name in corpus_names() {
        let conversation = corpus_conversation("anthropic", &name);
        let messages = &conversation.messages;
        let first_user = messages.iter().position(|m| m.role == Role::User);
        for unit in sdk::units(messages) {
            let span = &messages[unit.range.clone()];
            match unit.kind {
                UnitKind::ToolExchange => {
                    let only_calls_and_answers = span
                        .iter()
                        .all(|m| m.role == Role::Assistant || m.tool_result_ids().next().is_some());
                    if !only_calls_and_answers {
                        continue;
                    }
                    pool.corpus_exchanges += 1;
                    if tokens.count_messages(span) <= MAX_EXCHANGE_TOKENS {
                        pool.exchanges.push(span.to_vec());
                    }
                }
                _ => {
                    for (i, m) in span.iter().enumerate() {
                        // The corpus tasks are other sessions' first messages: left out.
                        if !is_plain_text(m) || Some(unit.range.start + i) == first_user {
                            continue;
                        }
                        if tokens.count_message(m) > 400 {
                            continue;
                        }
                        match m.role {
                            Role::Assistant => pool.assistant_texts.push(m.clone()),
                            Role::User => pool.user_texts.push(m.clone()),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    assert!(
        !pool.exchanges.is_empty()
            && !pool.assistant_texts.is_empty()
            && !pool.user_texts.is_empty(),
        "the corpus has tool exchanges and plain texts"
    );
    pool
}

fn with_unique_ids(mut messages: Vec<Message>, turn: usize) -> Vec<Message> {
    for message in &mut messages {
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
    messages
}

fn session(turns: usize, tokens: &TokenCounter) -> Session {
    let pool = corpus_pool(tokens);
    let mut messages = vec![
        Message::text(
            Role::System,
            "You are a software engineering agent working in a checked-out repository. Use the \
             tools to read and change files and to run commands, and say what you did.",
        ),
        Message::text(
            Role::User,
            "The nightly report job fails: test_report_totals in tests/test_reports.py gets the \
             wrong total. Find the cause and fix it. Constraint: do not touch the billing module \
             (src/billing/): its behaviour is contractual, so work around it in the reporting \
             code if you must.",
        ),
    ];
    let mut requests = vec![messages.len()];
    for turn in 0..turns {
        messages.extend(with_unique_ids(
            pool.exchanges[turn % pool.exchanges.len()].clone(),
            turn,
        ));
        requests.push(messages.len());
        if (turn + 1) % TEXT_EVERY == 0 {
            let k = turn / TEXT_EVERY;
            messages.push(pool.assistant_texts[k % pool.assistant_texts.len()].clone());
            messages.push(pool.user_texts[k % pool.user_texts.len()].clone());
            requests.push(messages.len());
        }
    }
    tamp_host::wire::check_tool_pairing(&messages, WireFormat::Anthropic)
        .expect("the session's tool calls pair up");
    let mut raw_tokens = Vec::with_capacity(requests.len());
    let mut total = 0;
    let mut counted = 0;
    for &cut in &requests {
        total += tokens.count_messages(&messages[counted..cut]);
        counted = cut;
        raw_tokens.push(total);
    }
    Session {
        tokens: tokens.count_messages(&messages),
        messages,
        requests,
        turns,
        raw_tokens,
        exchanges: (
            pool.exchanges.len().min(turns),
            pool.exchanges.len(),
            pool.corpus_exchanges,
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// The counting fake LLM

#[derive(Clone, Copy, PartialEq, Eq)]
enum Llm {
    /// A fixed-length answer (free text, or a fixed object for a JSON schema).
    Fixed,
    /// The offline extractive summarizer (the default provider).
    Extractive,
}

impl Llm {
    fn label(self) -> &'static str {
        match self {
            Llm::Fixed => "fixed-length fake LLM",
            Llm::Extractive => "extractive (offline default)",
        }
    }
}

/// Answers every request (see [`Llm`]) and counts the calls and the tokens sent (system +
/// prompt, o200k_base).
struct Counting {
    llm: Llm,
    extractive: ExtractiveSummarizer,
    tokens: Arc<TokenCounter>,
    calls: AtomicU64,
    input_tokens: AtomicU64,
}

impl Counting {
    fn new(llm: Llm, tokens: Arc<TokenCounter>) -> Self {
        Counting {
            llm,
            extractive: ExtractiveSummarizer::default(),
            tokens,
            calls: AtomicU64::new(0),
            input_tokens: AtomicU64::new(0),
        }
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn input_tokens(&self) -> u64 {
        self.input_tokens.load(Ordering::Relaxed)
    }

    fn answer(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let input =
            self.tokens.count_text(&request.system) + self.tokens.count_text(&request.prompt);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.input_tokens.fetch_add(input, Ordering::Relaxed);
        if self.llm == Llm::Extractive {
            return self.extractive.answer(request);
        }
        let (text, structured) = match &request.response_schema_json {
            FfiOption::RSome(schema) => {
                let schema: Value = serde_json::from_str(schema).unwrap_or(Value::Null);
                let json = fill_schema(&schema, &schema).to_string();
                (json.clone(), FfiOption::RSome(json.into()))
            }
            FfiOption::RNone => (ANSWER.to_string(), FfiOption::RNone),
        };
        Ok(LlmResponse {
            usage: Usage {
                input_tokens: input,
                output_tokens: self.tokens.count_text(&text),
                ..Usage::default()
            },
            text: text.into(),
            structured_json: structured,
            model: "counting".into(),
            stop_reason: "end_turn".into(),
        })
    }
}

impl Provider for Counting {
    fn name(&self) -> &str {
        match self.llm {
            Llm::Fixed => "counting",
            Llm::Extractive => "extractive",
        }
    }

    fn cacheable(&self) -> bool {
        self.llm == Llm::Fixed
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(async move { self.answer(request) })
    }
}

/// A fixed value satisfying `schema`: every string [`STRUCTURED_TEXT`] (cut to `maxLength`),
/// every list one entry (or `minItems`), every object all its properties.
fn fill_schema(schema: &Value, root: &Value) -> Value {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .unwrap_or(&Value::Null),
        None => schema,
    };
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    let number = |key: &str| schema.get(key).and_then(Value::as_u64);
    match kind {
        "object" => Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|props| {
                    props
                        .iter()
                        .map(|(k, v)| (k.clone(), fill_schema(v, root)))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        "array" => {
            let n = number("minItems").unwrap_or(1).max(1);
            let n = number("maxItems").map_or(n, |max| n.min(max));
            let items = schema.get("items").unwrap_or(&Value::Null);
            Value::Array((0..n).map(|_| fill_schema(items, root)).collect())
        }
        "integer" => json!(number("minimum").unwrap_or(1)),
        "number" => json!(1.0),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => {
            let max = number("maxLength").map_or(usize::MAX, |m| m as usize);
            Value::String(STRUCTURED_TEXT.chars().take(max).collect())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rows

struct StageSpec {
    name: String,
    lib: String,
    config: Value,
    trigger: Trigger,
}

struct Row {
    name: &'static str,
    stages: Vec<StageSpec>,
    /// The stage defers its summaries to the batch worker (simulated between requests).
    deferred: bool,
}

fn single(name: &'static str, lib: &str, trigger: Trigger) -> Row {
    Row {
        name,
        stages: vec![StageSpec {
            name: name.to_string(),
            lib: lib.to_string(),
            config: json!({}),
            trigger,
        }],
        deferred: lib == "tamp_batch_deferred",
    }
}

/// The shipped chain: the stages of `examples/chains/shipped.toml`, as that file sets them.
fn shipped_chain() -> Row {
    let path = workspace_root().join("examples/chains/shipped.toml");
    let file = LoadedChainFile::read(&path).expect("shipped.toml reads");
    let stages = file
        .file
        .stages
        .iter()
        .map(|s| {
            let s = s.get_ref();
            StageSpec {
                name: s.name.clone(),
                lib: s.plugin.clone(),
                config: s.config_json(),
                trigger: s.trigger,
            }
        })
        .collect();
    Row {
        name: "shipped chain",
        stages,
        deferred: false,
    }
}

fn rows() -> Vec<Row> {
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
    ]
}

/// The budget of every row. `TAMP_BENCH_KEEP_RECENT_TOKENS=N` sets `[budget]
/// keep_recent_tokens` (0: no token bound on the protected tail), to see what the tail costs
/// the hysteresis; unset, the chain file's default applies.
fn budget() -> BudgetConfig {
    BudgetConfig {
        max_tokens: MAX_TOKENS,
        keep_recent: KEEP_RECENT,
        keep_recent_tokens: std::env::var("TAMP_BENCH_KEEP_RECENT_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok()),
        ..Default::default()
    }
}

fn build_chain(row: &Row, provider: Arc<dyn Provider>, store: &Arc<SqliteStore>) -> Chain {
    let mut builder = ChainBuilder::new(budget())
        .provider(provider)
        .store(Arc::clone(store) as Arc<dyn PageStore>)
        .cache(Some(Arc::clone(store) as Arc<dyn SummaryCache>))
        .threads(
            Arc::clone(store) as Arc<dyn ThreadStore>,
            ThreadsConfig::default(),
        )
        .tokens(Arc::new(
            TokenCounter::new(Encoding::O200kBase).expect("tokenizer"),
        ))
        .llm_concurrency(16);
    for stage in &row.stages {
        builder = builder
            .stage(
                &stage.name,
                load_plugin(&plugin(&stage.lib)).expect("plugin loads"),
                stage.config.clone(),
                stage.trigger,
                Duration::from_secs(120),
            )
            .unwrap_or_else(|e| panic!("{}: stage {}: {e}", row.name, stage.name));
    }
    builder.build().expect("chain builds")
}

// ---------------------------------------------------------------------------------------------
// One replay

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Raw,
    KeepsOutput,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Raw => "raw",
            Mode::KeepsOutput => "keeps output",
        }
    }
}

struct Replay {
    requests: usize,
    llm_calls: u64,
    /// Requests during which the summarizer was called (for batch-deferred: that queued
    /// summaries, each answered by the simulated worker with one call).
    compactions_with_llm: u64,
    summarizer_tokens: u64,
    /// Mean over requests after the first of (common message prefix with the previous answer,
    /// in tokens) ÷ (this answer's tokens).
    prefix_reuse: f64,
    /// Main-model input cost with prompt caching, in base-input-token equivalents.
    cost: f64,
    own_ms: Vec<f64>,
    constraint_kept: bool,
    max_context: u64,
    final_context: u64,
    rolled_back: u32,
    warnings: u32,
    /// The first few distinct warnings and rollback reasons (numbers blanked), for the notes.
    notes: Vec<String>,
    seconds: f64,
    /// Requests that continued the thread from its last answer (raw mode).
    continued: usize,
    /// Per stage: requests in which it acted.
    acted: Vec<(String, usize)>,
    /// Requests after the first in which some stage acted, and the others: prefix reuse
    /// summed over each, and the answers' tokens summed over the first.
    anatomy: Anatomy,
    /// A hash of every answer in turn, to compare the two clients' answers.
    digest: u64,
}

#[derive(Default)]
struct Anatomy {
    acted: usize,
    acted_reuse: f64,
    acted_tokens: u64,
    others: usize,
    others_reuse: f64,
}

impl Replay {
    fn no_llm_share(&self) -> f64 {
        1.0 - self.compactions_with_llm as f64 / self.requests as f64
    }

    fn own_ms_mean(&self) -> f64 {
        self.own_ms.iter().sum::<f64>() / self.own_ms.len().max(1) as f64
    }

    fn own_ms_p99(&self) -> f64 {
        let mut v = self.own_ms.clone();
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0)
    }
}

fn contains_constraint(messages: &[Message]) -> bool {
    messages.iter().any(|m| {
        serde_json::to_string(m)
            .map(|s| s.to_lowercase().contains(CONSTRAINT))
            .unwrap_or(false)
    })
}

/// Answers every queued deferred summary with `provider`, as the batch worker would once the
/// batch comes back; returns how many.
async fn work_queue(queue: &dyn DeferredQueue, pages: &PageSource, provider: &Counting) -> usize {
    let items = queue.queued(100_000).await.expect("queue reads");
    for item in &items {
        let request = pages.render(&item.request).await.expect("prompt renders");
        let answer = provider.answer(&request).expect("fake LLM answers");
        let done = queue
            .transition(
                item.id,
                Expect::of(item),
                Transition::Done {
                    text: answer.text.into_string(),
                    usage: answer.usage,
                    billing: Billing::Batch,
                },
            )
            .await
            .expect("queue writes");
        assert!(done, "item {} moved under us", item.id);
    }
    items.len()
}

fn replay(
    rt: &tokio::runtime::Runtime,
    row: &Row,
    mode: Mode,
    llm: Llm,
    session: &Session,
) -> Replay {
    let tokens = Arc::new(TokenCounter::new(Encoding::O200kBase).expect("tokenizer"));
    let provider = Arc::new(Counting::new(llm, Arc::clone(&tokens)));
    let store = Arc::new(SqliteStore::in_memory().expect("store"));
    let chain = build_chain(row, Arc::clone(&provider) as Arc<dyn Provider>, &store);
    let queue = store.deferred_queue().expect("the store has a queue");
    let pages = PageSource::default();
    pages.set(Arc::clone(&store) as Arc<dyn PageStore>);
    let options = CompactOptions {
        format: Some(WireFormat::Anthropic),
        thread_continuity: mode == Mode::Raw,
        ..Default::default()
    };

    let mut out = Replay {
        requests: session.requests.len(),
        llm_calls: 0,
        compactions_with_llm: 0,
        summarizer_tokens: 0,
        prefix_reuse: 0.0,
        cost: 0.0,
        own_ms: Vec::with_capacity(session.requests.len()),
        constraint_kept: false,
        max_context: 0,
        final_context: 0,
        rolled_back: 0,
        warnings: 0,
        notes: Vec::new(),
        seconds: 0.0,
        continued: 0,
        acted: row.stages.iter().map(|s| (s.name.clone(), 0)).collect(),
        anatomy: Anatomy::default(),
        digest: 0,
    };
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    let mut held: Vec<Message> = Vec::new();
    let mut sent = 0;
    let mut previous: Option<Vec<Message>> = None;
    let mut reuse_sum = 0.0;
    let tag = format!("{} / {} / {}", row.name, mode.label(), llm.label());
    let replay_started = Instant::now();
    for (i, &cut) in session.requests.iter().enumerate() {
        let conversation = match mode {
            Mode::Raw => {
                let mut c = Conversation::new(session.messages[..cut].to_vec());
                c.thread_id = FfiOption::RSome(THREAD_ID.into());
                c
            }
            Mode::KeepsOutput => {
                held.extend_from_slice(&session.messages[sent..cut]);
                Conversation::new(held.clone())
            }
        };
        sent = cut;
        let calls_before = provider.calls();
        let started = Instant::now();
        let compacted = rt
            .block_on(chain.compact(conversation, &options))
            .unwrap_or_else(|e| panic!("{tag}: request {i}: {e}"));
        out.own_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let report = &compacted.report;
        out.rolled_back += report
            .stages
            .iter()
            .filter(|s| s.status == StageStatus::RolledBack)
            .count() as u32;
        out.continued += usize::from(report.thread.as_ref().is_some_and(|t| t.continued));
        for (stage, (_, acted)) in report.stages.iter().zip(out.acted.iter_mut()) {
            *acted += usize::from(stage.status == StageStatus::Acted);
        }
        for stage in &report.stages {
            out.warnings += stage.warnings.len() as u32;
            let rolled = (stage.status == StageStatus::RolledBack).then_some(&stage.reason);
            for note in stage.warnings.iter().chain(rolled) {
                let note: String = note
                    .chars()
                    .map(|c| if c.is_ascii_digit() { '#' } else { c })
                    .take(160)
                    .collect();
                let note = format!("{}: {note}", stage.stage);
                if out.notes.len() < 3 && !out.notes.contains(&note) {
                    out.notes.push(note);
                }
            }
        }
        let mut called = provider.calls() > calls_before;
        if row.deferred {
            // The worker's calls are not the request's: they come after it has its answer.
            called |= rt.block_on(work_queue(&*queue, &pages, &provider)) > 0;
        }
        out.compactions_with_llm += u64::from(called);

        let answer = compacted.conversation.messages.to_vec();
        let answer_tokens = tokens.count_messages(&answer);
        out.max_context = out.max_context.max(answer_tokens);
        let kept = previous.as_ref().map_or(0, |p| common_prefix(p, &answer));
        let kept_tokens = tokens.count_messages(&answer[..kept]);
        let acted = report.stages.iter().any(|s| s.status == StageStatus::Acted);
        if previous.is_some() {
            let reuse = kept_tokens as f64 / answer_tokens.max(1) as f64;
            reuse_sum += reuse;
            let a = &mut out.anatomy;
            if acted {
                a.acted += 1;
                a.acted_reuse += reuse;
                a.acted_tokens += answer_tokens;
            } else {
                a.others += 1;
                a.others_reuse += reuse;
            }
        }
        std::hash::Hash::hash(
            &serde_json::to_string(&answer).unwrap_or_default(),
            &mut digest,
        );
        out.cost += CACHE_READ * kept_tokens as f64
            + CACHE_WRITE * answer_tokens.saturating_sub(kept_tokens) as f64;
        if mode == Mode::KeepsOutput {
            held = answer.clone();
        }
        if i + 1 == session.requests.len() {
            out.constraint_kept = contains_constraint(&answer);
            out.final_context = answer_tokens;
        }
        previous = Some(answer);
        if (i + 1) % 50 == 0 || i + 1 == session.requests.len() {
            eprint!(
                "\r  {tag}: {}/{} requests, {} summarizer calls, {:.1} s   ",
                i + 1,
                session.requests.len(),
                provider.calls(),
                replay_started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!();
    out.prefix_reuse = reuse_sum / (session.requests.len().saturating_sub(1)).max(1) as f64;
    out.llm_calls = provider.calls();
    out.summarizer_tokens = provider.input_tokens();
    out.seconds = replay_started.elapsed().as_secs_f64();
    out.digest = std::hash::Hasher::finish(&digest);
    out
}

/// The uncompacted session's main-model input cost: each request's raw history, the previous
/// request's history a cache read and the rest a cache write.
fn baseline_cost(session: &Session) -> f64 {
    let mut previous = 0;
    let mut cost = 0.0;
    for &raw in &session.raw_tokens {
        cost += CACHE_READ * previous as f64 + CACHE_WRITE * (raw - previous) as f64;
        previous = raw;
    }
    cost
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
         is called after every user-role message); budget {MAX_TOKENS}, watermarks 0.75/0.5, \
         keep_recent {KEEP_RECENT}, protected tail at most {} tokens; compacted before every \
         request; planted constraint \"{CONSTRAINT}\" in the first user message",
        session.turns,
        session.messages.len(),
        session.tokens,
        session.requests.len(),
        budget()
            .tail_token_limit()
            .map_or("unbounded".to_string(), |t| t.to_string())
    );
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
         caching (reads {CACHE_READ}x, writes {CACHE_WRITE}x, 5-minute cache) {:.0} \
         base-token equivalents = ${:.2} at ${INPUT_USD_PER_MTOK}/Mtok",
        session.raw_tokens.iter().sum::<u64>(),
        baseline,
        baseline * INPUT_USD_PER_MTOK / 1e6
    );

    // Built (cargo) before the clock starts.
    tamp_e2e::ensure_built();
    let started = Instant::now();
    let mut results = Vec::new();
    for row in rows() {
        for mode in [Mode::Raw, Mode::KeepsOutput] {
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
                    "{:<34} {:<12} {:>5} {:>6} {:>10} {:>7} (as quoted in issue 16, on its own session)",
                    peer, "-", calls, "-", tokens, "-"
                );
            }
        }
    }
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
