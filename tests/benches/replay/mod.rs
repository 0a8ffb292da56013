//! The growing-thread replay shared by the thread-economy and tool-result-clearing benches: a
//! long agent session of real corpus text, replayed request by request through the real chain
//! (the built plugin `.so` files, an SQLite store with the summary cache and thread states),
//! compacted before every model call, with a counting fake LLM as the summarizer. See
//! `thread_economy.rs` for what is measured and why.
//!
//! Each bench uses a part of it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tamp_e2e::{corpus_conversation, corpus_names, plugin, workspace_root};
use tamp_host::budget::BudgetConfig;
use tamp_host::chain::{Chain, ChainBuilder, CompactOptions, StageStatus};
use tamp_host::config::{LoadedChainFile, Trigger};
use tamp_host::deferred::render::PageSource;
use tamp_host::loader::load_plugin;
use tamp_host::providers::{ExtractiveSummarizer, Provider, ProviderError};
use tamp_host::store::queue::{Billing, Expect, Transition};
use tamp_host::store::threads::{common_prefix, ThreadsConfig};
use tamp_host::store::{DeferredQueue, PageStore, SqliteStore, SummaryCache, ThreadStore};
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::WireFormat;
use tamp_plugin_api::sdk::{self, UnitKind};
use tamp_plugin_api::{
    ContentBlock, Conversation, FfiOption, LlmRequest, LlmResponse, Message, Role, Usage,
};

pub const TURNS: usize = 500;
pub const QUICK_TURNS: usize = 100;
pub const MAX_TOKENS: u64 = 8_000;
pub const KEEP_RECENT: u32 = 16;
/// Every this many turns the agent also says something and the user answers.
pub const TEXT_EVERY: usize = 10;
/// Tool exchanges larger than this are left out of the session, which puts the 500-turn session
/// at about 165k tokens (with every exchange up to 2,000 tokens it would be 218k).
pub const MAX_EXCHANGE_TOKENS: u64 = 800;
/// The planted constraint, in the first user message; looked for (case-insensitively) in the
/// last answer.
pub const CONSTRAINT: &str = "do not touch the billing module";
pub const THREAD_ID: &str = "thread-economy";
pub use tamp_host::eval::main_model::CachePrices;
/// Anthropic prompt caching, as multiples of the base input price (5-minute cache): the
/// default of `tamp eval`'s main-model cost.
pub const PRICES: CachePrices = CachePrices::ANTHROPIC;
/// The base input price used to turn the estimate into dollars (Claude Sonnet, $/Mtok).
pub const INPUT_USD_PER_MTOK: f64 = 3.0;

/// The fake LLM's free-text answer: the same length every time.
pub const ANSWER: &str = "Summary of the earlier work: the agent listed the repository, read the \
    modules named in the failing test, ran the test suite to reproduce the failure, traced the \
    wrong total to the rounding step in the report aggregation, patched the aggregation code, \
    and re-ran the affected tests, which now pass. Files read: the report aggregation module, \
    its tests, the configuration loader. Open: confirm the fix against the nightly job's data \
    and add a regression test for the rounding case.";
/// Every string the fake LLM puts in a structured answer.
pub const STRUCTURED_TEXT: &str = "The agent read the failing module, reproduced the failure with \
    the test suite and patched the aggregation step; the tests pass.";

// ---------------------------------------------------------------------------------------------
// The session

pub struct Session {
    /// The wire format the messages are shaped for (and the pairing rules the chain checks).
    pub format: WireFormat,
    pub messages: Vec<Message>,
    /// Message counts at which the client calls the model: after every user-role message.
    pub requests: Vec<usize>,
    pub turns: usize,
    pub tokens: u64,
    /// Distinct tool exchanges used; the corpus's tool exchanges under the size cut, and all.
    pub exchanges: (usize, usize, usize),
    /// Tokens of each request's raw history (the uncompacted baseline).
    pub raw_tokens: Vec<u64>,
}

/// Tool exchanges (a call and the message answering it, nothing else) and plain texts of the
/// Anthropic corpus, in corpus order.
pub struct Pool {
    pub exchanges: Vec<Vec<Message>>,
    /// Tool exchanges in the corpus, before the size cut.
    pub corpus_exchanges: usize,
    pub assistant_texts: Vec<Message>,
    pub user_texts: Vec<Message>,
}

pub fn is_plain_text(m: &Message) -> bool {
    !m.is_summary()
        && !m.content.is_empty()
        && m.content
            .iter()
            .all(|b| matches!(b, ContentBlock::Text { text, .. } if !text.trim().is_empty()))
}

pub fn corpus_pool(tokens: &TokenCounter) -> Pool {
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

pub fn with_unique_ids(mut messages: Vec<Message>, turn: usize) -> Vec<Message> {
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

/// What Claude Code 2.1.328 sent as a mid-conversation system message every few tool calls
/// (tests/fixtures/agents/claude-code.session.json).
pub const CLAUDE_CODE_NUDGE: &str = "The user hasn't heard from you in a while. As you \
     continue, keep them updated when there's something to tell — a finding, a change of plan.";

/// `TAMP_BENCH_SYSTEM_EVERY=N`: a system message ([`CLAUDE_CODE_NUDGE`]) after every `N`th
/// turn's tool result, as Claude Code sends them; none unset.
fn system_every() -> Option<usize> {
    std::env::var("TAMP_BENCH_SYSTEM_EVERY").ok().map(|v| {
        v.parse()
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or_else(|| panic!("TAMP_BENCH_SYSTEM_EVERY: not a number of turns: {v}"))
    })
}

pub fn session(turns: usize, tokens: &TokenCounter) -> Session {
    let pool = corpus_pool(tokens);
    let system_every = system_every();
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
        if system_every.is_some_and(|n| (turn + 1) % n == 0) {
            messages.push(Message::text(Role::System, CLAUDE_CODE_NUDGE));
        }
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
    let raw_tokens = raw_tokens(&messages, &requests, tokens);
    Session {
        format: WireFormat::Anthropic,
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

/// Tokens of each request's raw history.
fn raw_tokens(messages: &[Message], requests: &[usize], tokens: &TokenCounter) -> Vec<u64> {
    let mut raw = Vec::with_capacity(requests.len());
    let mut total = 0;
    let mut counted = 0;
    for &cut in requests {
        total += tokens.count_messages(&messages[counted..cut]);
        counted = cut;
        raw.push(total);
    }
    raw
}

/// The same session as a client of `format` sends it: each request's new messages written
/// in that format and read back (an Anthropic user message of tool results becomes OpenAI
/// `tool` messages; an assistant message's text and calls become a Responses message item and
/// function calls), so the chain gets what that client's requests give it.
pub fn in_format(session: &Session, format: WireFormat, tokens: &TokenCounter) -> Session {
    let mut messages = Vec::with_capacity(session.messages.len());
    let mut requests = Vec::with_capacity(session.requests.len());
    let mut counted = 0;
    for &cut in &session.requests {
        let part = Conversation::new(session.messages[counted..cut].to_vec());
        let text = tamp_host::wire::to_string(&part, format);
        let (read, _) =
            tamp_host::wire::parse_str(&text, Some(format)).expect("the session reads back");
        messages.extend(read.messages.into_vec());
        requests.push(messages.len());
        counted = cut;
    }
    tamp_host::wire::check_tool_pairing(&messages, format)
        .expect("the session's tool calls pair up");
    Session {
        format,
        tokens: tokens.count_messages(&messages),
        raw_tokens: raw_tokens(&messages, &requests, tokens),
        messages,
        requests,
        turns: session.turns,
        exchanges: session.exchanges,
    }
}

// ---------------------------------------------------------------------------------------------
// The counting fake LLM

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Llm {
    /// A fixed-length answer (free text, or a fixed object for a JSON schema).
    Fixed,
    /// The offline extractive summarizer (the default provider).
    Extractive,
}

impl Llm {
    pub fn label(self) -> &'static str {
        match self {
            Llm::Fixed => "fixed-length fake LLM",
            Llm::Extractive => "extractive (offline default)",
        }
    }
}

/// Answers every request (see [`Llm`]) and counts the calls and the tokens sent (system +
/// prompt, o200k_base).
pub struct Counting {
    llm: Llm,
    extractive: ExtractiveSummarizer,
    tokens: Arc<TokenCounter>,
    calls: AtomicU64,
    input_tokens: AtomicU64,
}

impl Counting {
    pub fn new(llm: Llm, tokens: Arc<TokenCounter>) -> Self {
        Counting {
            llm,
            extractive: ExtractiveSummarizer::default(),
            tokens,
            calls: AtomicU64::new(0),
            input_tokens: AtomicU64::new(0),
        }
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub fn input_tokens(&self) -> u64 {
        self.input_tokens.load(Ordering::Relaxed)
    }

    pub fn answer(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
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
pub fn fill_schema(schema: &Value, root: &Value) -> Value {
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

pub struct StageSpec {
    pub name: String,
    pub lib: String,
    pub config: Value,
    pub trigger: Trigger,
}

pub struct Row {
    pub name: &'static str,
    pub stages: Vec<StageSpec>,
    /// The stage defers its summaries to the batch worker (simulated between requests).
    pub deferred: bool,
}

pub fn single(name: &'static str, lib: &str, trigger: Trigger) -> Row {
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
pub fn shipped_chain() -> Row {
    example_chain("shipped chain", "shipped.toml")
}

/// The stages of `examples/chains/<file>`, as that file sets them (its budget is the
/// replay's).
pub fn example_chain(name: &'static str, file: &str) -> Row {
    let path = workspace_root().join("examples/chains").join(file);
    let chain = LoadedChainFile::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let stages = chain
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
        name,
        stages,
        deferred: false,
    }
}

/// The budget's `max_tokens`: [`MAX_TOKENS`], or `TAMP_BENCH_MAX_TOKENS=N`, to see how a
/// cost measured at the benches' small budget scales to a real model's.
pub fn max_tokens() -> u64 {
    std::env::var("TAMP_BENCH_MAX_TOKENS").map_or(MAX_TOKENS, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("TAMP_BENCH_MAX_TOKENS: not a number of tokens: {v}"))
    })
}

/// The budget of every row ([`max_tokens`]). `TAMP_BENCH_KEEP_RECENT_TOKENS=N` sets `[budget]
/// keep_recent_tokens` (0: no token bound on the protected tail), to see what the tail costs
/// the hysteresis; unset, the chain file's default applies.
pub fn budget() -> BudgetConfig {
    BudgetConfig {
        max_tokens: max_tokens(),
        keep_recent: KEEP_RECENT,
        keep_recent_tokens: std::env::var("TAMP_BENCH_KEEP_RECENT_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok()),
        ledgers_outside: std::env::var_os("TAMP_BENCH_LEDGERS_OUTSIDE").is_some(),
        ..Default::default()
    }
}

/// The plugins that append a ledger to their summaries (`sdk::ledger`).
/// `TAMP_BENCH_NO_LEDGER=1` turns it off in their stages (`ledger = { enabled = false }`),
/// to measure what it costs; `TAMP_BENCH_LEDGER_SHARE=0.1` sets its cap
/// (`ledger = { max_share = 0.1 }`), to weigh a cap against that cost.
pub const LEDGER_PLUGINS: [&str; 3] = [
    "tamp_map_reduce_adaptive",
    "tamp_anchored_structured",
    "tamp_batch_deferred",
];

pub fn build_chain(row: &Row, provider: Arc<dyn Provider>, store: &Arc<SqliteStore>) -> Chain {
    let mut builder = ChainBuilder::new(budget())
        .provider(provider)
        .store(Arc::clone(store) as Arc<dyn PageStore>)
        .cache(Some(Arc::clone(store) as Arc<dyn SummaryCache>))
        .queue(Some(Arc::clone(store) as Arc<dyn DeferredQueue>))
        .threads(
            Arc::clone(store) as Arc<dyn ThreadStore>,
            ThreadsConfig::default(),
        )
        .tokens(Arc::new(
            TokenCounter::new(Encoding::O200kBase).expect("tokenizer"),
        ))
        .llm_concurrency(16);
    let no_ledger = std::env::var_os("TAMP_BENCH_NO_LEDGER").is_some();
    let ledger_share = std::env::var("TAMP_BENCH_LEDGER_SHARE").ok().map(|v| {
        v.parse::<f64>()
            .unwrap_or_else(|_| panic!("TAMP_BENCH_LEDGER_SHARE: not a number: {v}"))
    });
    for stage in &row.stages {
        let mut config = stage.config.clone();
        if LEDGER_PLUGINS.contains(&stage.lib.as_str()) {
            if no_ledger {
                config["ledger"] = json!({"enabled": false});
            } else if let Some(share) = ledger_share {
                config["ledger"] = json!({"max_share": share});
            }
        }
        builder = builder
            .stage(
                &stage.name,
                load_plugin(&plugin(&stage.lib)).expect("plugin loads"),
                config,
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
pub enum Mode {
    Raw,
    KeepsOutput,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Raw => "raw",
            Mode::KeepsOutput => "keeps output",
        }
    }
}

pub struct Replay {
    pub requests: usize,
    pub llm_calls: u64,
    /// Requests during which the summarizer was called (for batch-deferred: that queued
    /// summaries, each answered by the simulated worker with one call).
    pub compactions_with_llm: u64,
    pub summarizer_tokens: u64,
    /// Mean over requests after the first of (common message prefix with the previous answer,
    /// in tokens) ÷ (this answer's tokens).
    pub prefix_reuse: f64,
    /// Main-model input cost with prompt caching, in base-input-token equivalents.
    pub cost: f64,
    pub own_ms: Vec<f64>,
    pub constraint_kept: bool,
    pub max_context: u64,
    pub final_context: u64,
    pub rolled_back: u32,
    pub warnings: u32,
    /// The first few distinct warnings and rollback reasons (numbers blanked), for the notes.
    pub notes: Vec<String>,
    pub seconds: f64,
    /// Requests that continued the thread from its last answer (raw mode).
    pub continued: usize,
    /// Per stage: requests in which it acted.
    pub acted: Vec<(String, usize)>,
    /// Requests after the first in which some stage acted, and the others: prefix reuse
    /// summed over each, and the answers' tokens summed over the first.
    pub anatomy: Anatomy,
    /// A hash of every answer in turn, to compare the two clients' answers.
    pub digest: u64,
}

#[derive(Default)]
pub struct Anatomy {
    pub acted: usize,
    pub acted_reuse: f64,
    pub acted_tokens: u64,
    pub others: usize,
    pub others_reuse: f64,
    /// The main-model cost (`cost`) split three ways: the cache reads of every request, and
    /// the cache writes of the requests in which a stage acted and of the others. What a
    /// change costs shows here: a larger context in the reads, a prefix broken more often or
    /// further up in the writes when acting.
    pub reads: f64,
    pub acted_writes: f64,
    pub other_writes: f64,
    /// Tokens of every answer, summed (÷ requests: the mean context sent).
    pub context_tokens: u64,
    /// An estimate, to weigh a layout not built: what the cache writes would cost less if every
    /// summary's ledger entries sat in place ahead of the narratives, so that entries an
    /// answer repeats, in order, from the previous answer's were cache reads (a fold or a
    /// rewritten anchor then writes only the entries after the first one that changed).
    pub ledger_in_place_saving: f64,
}

/// The ledger entries (`- ` lines of the ledger sections) of `messages`' summaries, in order.
fn ledger_lines(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.is_summary())
        .flat_map(|m| {
            let text = m.joined_text();
            let narrative = tamp_plugin_api::sdk::ledger::narrative(&text).len();
            text[narrative..]
                .lines()
                .filter(|l| l.starts_with("- "))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The leading entries of `now` that `before` has in the same order: what a ledger kept in
/// place would still have cached.
fn cached_in_place<'a>(before: &[String], now: &'a [String]) -> &'a [String] {
    let same = before.iter().zip(now).take_while(|(a, b)| a == b).count();
    &now[..same]
}

impl Replay {
    pub fn no_llm_share(&self) -> f64 {
        1.0 - self.compactions_with_llm as f64 / self.requests as f64
    }

    pub fn own_ms_mean(&self) -> f64 {
        self.own_ms.iter().sum::<f64>() / self.own_ms.len().max(1) as f64
    }

    pub fn own_ms_p99(&self) -> f64 {
        let mut v = self.own_ms.clone();
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0)
    }
}

pub fn contains_constraint(messages: &[Message]) -> bool {
    messages.iter().any(|m| {
        serde_json::to_string(m)
            .map(|s| s.to_lowercase().contains(CONSTRAINT))
            .unwrap_or(false)
    })
}

/// Answers every queued deferred summary with `provider`, as the batch worker would once the
/// batch comes back; returns how many.
pub async fn work_queue(
    queue: &dyn DeferredQueue,
    pages: &PageSource,
    provider: &Counting,
) -> usize {
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

pub fn replay(
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
    let queue = Arc::clone(&store) as Arc<dyn DeferredQueue>;
    let pages = PageSource::default();
    pages.set(Arc::clone(&store) as Arc<dyn PageStore>);
    let options = CompactOptions {
        format: Some(session.format),
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
        // Without the summaries' MACs: each replay has a store of its own, whose key seals
        // its summaries, so two clients' answers differ by their MACs alone when they agree.
        let mut unsealed = answer.clone();
        tamp_host::summary_mac::strip(&mut unsealed);
        std::hash::Hash::hash(
            &serde_json::to_string(&unsealed).unwrap_or_default(),
            &mut digest,
        );
        let (reads, writes) = (
            PRICES.read * kept_tokens as f64,
            PRICES.write * answer_tokens.saturating_sub(kept_tokens) as f64,
        );
        out.cost += reads + writes;
        if let Some(previous) = &previous {
            let (kept_ledger, ledger) = (ledger_lines(&answer[..kept]), ledger_lines(&answer));
            let cached = cached_in_place(&ledger_lines(previous), &ledger);
            let count =
                |lines: &[String]| -> u64 { lines.iter().map(|l| tokens.count_text(l)).sum() };
            out.anatomy.ledger_in_place_saving += (PRICES.write - PRICES.read)
                * count(cached).saturating_sub(count(&kept_ledger)) as f64;
        }
        let a = &mut out.anatomy;
        a.reads += reads;
        if acted {
            a.acted_writes += writes;
        } else {
            a.other_writes += writes;
        }
        a.context_tokens += answer_tokens;
        if mode == Mode::KeepsOutput {
            held = answer.clone();
        }
        if acted && std::env::var_os("TAMP_BENCH_DUMP").is_some() {
            let summaries: Vec<(u64, u64)> = answer
                .iter()
                .filter(|m| m.is_summary())
                .map(|m| {
                    let t = m.joined_text();
                    let n = tamp_plugin_api::sdk::ledger::narrative(&t);
                    (
                        tokens.count_text(n),
                        tokens.count_text(&t) - tokens.count_text(n),
                    )
                })
                .collect();
            eprintln!("DUMP {tag} req {i}: context {answer_tokens}, summaries (narrative, ledger) {summaries:?}");
        }
        if i + 1 == session.requests.len() {
            if std::env::var_os("TAMP_BENCH_DUMP").is_some() {
                for m in answer.iter().filter(|m| m.is_summary()) {
                    eprintln!("DUMPTEXT {tag}:\n{}\n----", m.joined_text());
                }
            }
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
pub fn baseline_cost(session: &Session) -> f64 {
    let mut previous = 0;
    let mut cost = 0.0;
    for &raw in &session.raw_tokens {
        cost += PRICES.request_cost(previous, raw);
        previous = raw;
    }
    cost
}
