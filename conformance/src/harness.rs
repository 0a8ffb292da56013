//! Running a loaded plugin's strategy once, the way the chain runs a stage, but keeping what
//! the plugin returned: the chain rolls bad output back, the kit has to see it to report it.
//!
//! The plugin gets the host's real services ([`StageServices`] over an in-memory SQLite page
//! store and the real token counter); only the LLM is the kit's [`KitProvider`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt as _;
use tamp_plugin_api::{
    Budget, CompactOutcome, CompactRequest, Conversation, ErrorKind, FfiOption, LlmRequest,
    LlmResponse, Message, PluginError, StageReport, StrategyBox, Usage,
};
use tokio::sync::Semaphore;

use super::generate::Case;
use tamp_host::invariants::{stage_violations, Violation};
use tamp_host::loader::{LoadedPlugin, PluginMeta};
use tamp_host::providers::{ExtractiveSummarizer, Provider, ProviderError, ProviderErrorKind};
use tamp_host::services::{HostContext, StageIdentity, StageServices};
use tamp_host::stage_guard::{call_stage, GuardedFailure};
use tamp_host::store::{DeferredQueue, NewPage, PageStore, SqliteStore};
use tamp_host::tokens::TokenCounter;

/// What the kit's LLM answers.
#[derive(Debug, Clone)]
pub enum Answers {
    /// A short fixed text for free-text requests; structured requests are filled by the
    /// offline extractive summarizer (which fills any object schema of strings).
    Canned,
    /// The extractive summarizer for everything (deterministic, reads the material).
    Extractive,
    /// Every call fails with a server error.
    Failing,
    /// Text that is no summary at all; structured requests get JSON that does not parse.
    Garbage,
    /// Free text of this many characters (structured requests as `Canned`).
    Huge(usize),
}

/// What `Huge` answers are made of, repeated.
pub const HUGE_PATTERN: &str = "lorem ipsum dolor sit amet ";

/// The free text `Canned` answers.
pub const CANNED: &str =
    "The user and the assistant worked on the build; the parser error was fixed.";

/// The kit's LLM: scripted answers, an optional delay, and a clock of the time spent inside
/// calls (so the plugin's own time can be told apart from the LLM's).
pub struct KitProvider {
    answers: Answers,
    delay: Duration,
    extractive: ExtractiveSummarizer,
    busy_nanos: AtomicU64,
    requests: Mutex<Vec<LlmRequest>>,
}

impl KitProvider {
    pub fn new(answers: Answers) -> Arc<Self> {
        Self::with_delay(answers, Duration::ZERO)
    }

    pub fn with_delay(answers: Answers, delay: Duration) -> Arc<Self> {
        Arc::new(KitProvider {
            answers,
            delay,
            extractive: ExtractiveSummarizer::default(),
            busy_nanos: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// Time spent inside calls so far (summed over concurrent calls).
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_nanos.load(Ordering::Relaxed))
    }

    /// The requests so far, in call order.
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn text(&self, request: &LlmRequest, text: String) -> LlmResponse {
        LlmResponse {
            usage: Usage {
                input_tokens: (request.prompt.len() / 4) as u64,
                output_tokens: (text.len() / 4) as u64,
                ..Usage::default()
            },
            text: text.into(),
            structured_json: FfiOption::RNone,
            model: "conformance".into(),
            stop_reason: "end_turn".into(),
        }
    }

    async fn answer(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let structured = request.response_schema_json.is_some();
        match &self.answers {
            Answers::Failing => Err(ProviderError::new(
                "conformance",
                ProviderErrorKind::Server,
                "injected failure (the kit's LLM fails every call)",
            )),
            Answers::Garbage => {
                let mut r = self.text(request, "}{ ]] <<garbage>> \u{0} not a summary".into());
                if structured {
                    r.structured_json = FfiOption::RSome("{\"summary\": \"unterminated".into());
                }
                Ok(r)
            }
            Answers::Extractive => self.extractive.complete(request).await,
            _ if structured => self.extractive.complete(request).await,
            Answers::Canned => Ok(self.text(request, CANNED.to_string())),
            Answers::Huge(n) => {
                let text: String = HUGE_PATTERN.chars().cycle().take(*n).collect();
                Ok(self.text(request, text))
            }
        }
    }
}

impl Provider for KitProvider {
    fn name(&self) -> &str {
        "conformance"
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.clone());
        async move {
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let started = Instant::now();
            let answer = self.answer(request).await;
            self.busy_nanos
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            answer
        }
        .boxed()
    }
}

/// Why a run produced no output.
#[derive(Debug, Clone, PartialEq)]
pub enum RunFailure {
    Error(PluginError),
    Panicked(String),
    Timeout(Duration),
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunFailure::Error(e) => write!(f, "returned an error: {e}"),
            RunFailure::Panicked(m) => write!(f, "panicked: {m}"),
            RunFailure::Timeout(d) => write!(f, "returned nothing within {:.1}s", d.as_secs_f64()),
        }
    }
}

/// What a plugin returned, its edits applied (as the chain would, without a store).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The case's conversation after the edits (unchanged when there were none, or when they
    /// broke a rule).
    pub conversation: Conversation,
    pub report: StageReport,
    /// The rule the edits break, found before any is applied.
    pub broken: Option<Violation>,
    /// One line per edit the plugin returned, in its order.
    pub edits: Vec<String>,
}

/// One compaction and everything the kit needs to judge it.
pub struct Run {
    pub case: Case,
    pub budget: Budget,
    pub outcome: Result<Outcome, RunFailure>,
    /// Pages archived in this run and pages the case's earlier summaries refer to.
    pub pages: HashMap<String, Vec<Message>>,
    pub requests: Vec<LlmRequest>,
    pub failed_llm_calls: u32,
    pub elapsed: Duration,
    pub llm_time: Duration,
    pub tokens_before: u64,
}

impl Run {
    /// The output messages, when the plugin returned some that differ from its input.
    pub fn changed_output(&self) -> Option<&[Message]> {
        match &self.outcome {
            Ok(o) if o.conversation.messages[..] != self.case.messages[..] => {
                Some(&o.conversation.messages)
            }
            _ => None,
        }
    }

    pub fn panicked(&self) -> Option<&str> {
        match &self.outcome {
            Err(RunFailure::Panicked(m)) => Some(m),
            Err(RunFailure::Error(e)) if e.kind == ErrorKind::Panicked => Some(e.message.as_str()),
            _ => None,
        }
    }
}

/// The plugin under test.
#[derive(Clone)]
pub enum Plugin {
    /// A library or WebAssembly component, through the host's checked loader.
    Loaded(Arc<LoadedPlugin>),
    /// A strategy compiled into this process: the fake plugins of the kit's own tests, which
    /// exercise the checks without building a library.
    #[cfg(test)]
    InProcess(Arc<InProcess>),
}

/// A [`Plugin::InProcess`]: what a library's entry points would give.
#[cfg(test)]
pub struct InProcess {
    pub meta: PluginMeta,
    pub new: fn(&str) -> Result<StrategyBox, PluginError>,
}

impl Plugin {
    /// The strategy `S` as a plugin, as `export_plugin!(S)` would export it.
    #[cfg(test)]
    pub fn in_process<S: tamp_plugin_api::Strategy>() -> Plugin {
        let info = tamp_plugin_api::module::plugin_info::<S>("0.1.0").expect("the fake's info");
        let json = |s: &str| serde_json::from_str(s).expect("the fake's info is JSON");
        Plugin::InProcess(Arc::new(InProcess {
            meta: PluginMeta {
                name: info.name.into(),
                version: info.version.into(),
                description: info.description.into(),
                plugin_api_version: info.plugin_api_version.into(),
                config_schema: json(&info.config_schema_json),
                default_config: json(&info.default_config_json),
            },
            new: tamp_plugin_api::new_strategy::<S>,
        }))
    }

    pub fn meta(&self) -> &PluginMeta {
        match self {
            Plugin::Loaded(p) => p.meta(),
            #[cfg(test)]
            Plugin::InProcess(p) => &p.meta,
        }
    }

    /// A strategy instance from `config` (a panic in the constructor comes back as an error).
    pub fn instantiate(&self, config: &serde_json::Value) -> Result<StrategyBox, PluginError> {
        match self {
            Plugin::Loaded(p) => p.instantiate(config),
            #[cfg(test)]
            Plugin::InProcess(p) => (p.new)(&config.to_string()),
        }
    }

    /// The loaded library, which a real chain's stage needs; `None` for an in-process fake.
    pub fn loaded(&self) -> Option<&Arc<LoadedPlugin>> {
        match self {
            Plugin::Loaded(p) => Some(p),
            #[cfg(test)]
            Plugin::InProcess(_) => None,
        }
    }
}

/// A loaded plugin, its config, and the host parts every run shares.
pub struct Harness {
    pub plugin: Plugin,
    pub config: serde_json::Value,
    pub tokens: Arc<TokenCounter>,
    /// Per compaction.
    pub timeout: Duration,
}

impl Harness {
    /// A new strategy instance from the config under test.
    pub fn instance(&self) -> Result<Arc<StrategyBox>, PluginError> {
        self.plugin.instantiate(&self.config).map(Arc::new)
    }

    /// The budget that makes a stage act: the case is above the high watermark and far above
    /// the low one.
    pub fn forcing_budget(&self, case: &Case, tokens: u64) -> Budget {
        let max_tokens = (tokens / 2).max(1);
        Budget {
            max_tokens,
            high_watermark: max_tokens * 3 / 4,
            low_watermark: max_tokens / 2,
            keep_recent: case.keep_recent,
            current_tokens: tokens,
        }
    }

    /// Runs `strategy` on `case` with `provider` answering, on a fresh page store holding the
    /// case's earlier pages.
    pub async fn run(
        &self,
        strategy: &StrategyBox,
        case: &Case,
        provider: Arc<KitProvider>,
    ) -> Run {
        let sqlite = Arc::new(SqliteStore::in_memory().expect("an in-memory SQLite store opens"));
        // The store's own queue: a plugin that defers summaries is checked as a host with a
        // store would run it.
        let queue: Arc<dyn DeferredQueue> = Arc::clone(&sqlite) as Arc<dyn DeferredQueue>;
        let store: Arc<dyn PageStore> = sqlite;
        let mut pages = HashMap::new();
        for page in &case.prior_pages {
            let id = store
                .put_page(NewPage {
                    thread_id: None,
                    strategy: "earlier-stage".into(),
                    messages: page.clone(),
                    metadata_json: String::new(),
                    source_format: Some(case.format.to_string()),
                })
                .await
                .expect("the in-memory store takes a page");
            pages.insert(id, page.clone());
        }
        let requests_before = provider.requests().len();
        let busy_before = provider.busy();
        let ctx = Arc::new(HostContext {
            provider: provider.clone(),
            store: Arc::clone(&store),
            cache: None,
            queue: Some(queue),
            tokens: Arc::clone(&self.tokens),
            llm_permits: Arc::new(Semaphore::new(64)),
            llm_timeout: self.timeout,
            progress: None,
        });
        let services = StageServices::new(
            ctx,
            StageIdentity {
                stage: "conformance".into(),
                strategy: self.plugin.meta().name.clone(),
                ..StageIdentity::default()
            },
            None,
            Some(case.format),
        );
        let tokens_before = self.tokens.count_messages(&case.messages);
        let budget = self.forcing_budget(case, tokens_before);
        let input = Conversation::new(case.messages.clone());
        let request = CompactRequest {
            conversation: tamp_plugin_api::Shared::new(input.clone()),
            budget,
            host: services.to_ffi(),
            stage: "conformance".into(),
        };
        let started = Instant::now();
        // Under the chain's own guard: a panic caught, a stage past its time cut off.
        let deadline = tokio::time::Instant::now() + self.timeout;
        let outcome = call_stage(strategy.compact(request), deadline)
            .await
            .map_err(|failure| match failure {
                GuardedFailure::Timeout => RunFailure::Timeout(self.timeout),
                GuardedFailure::Unwound(message) => RunFailure::Panicked(message),
                GuardedFailure::Error(e) if e.kind == ErrorKind::Panicked => {
                    RunFailure::Panicked(e.message.to_string())
                }
                GuardedFailure::Error(e) => RunFailure::Error(e),
            });
        let elapsed = started.elapsed();
        // Pages the stage archived itself (for a `Replace` edit), read back from the store.
        for id in services.archived_ids() {
            if let Ok(stored) = store.get_page(&id).await {
                pages.insert(id, stored.page.messages.into());
            }
        }
        let strategy = self.plugin.meta().name.as_str();
        let outcome = outcome.map(|CompactOutcome { edits, report }| {
            let described = edits.iter().map(tamp_host::edits::describe).collect();
            match tamp_host::edits::preview(&input, edits, case.keep_recent as usize, strategy) {
                Ok((conversation, archived)) => {
                    pages.extend(archived);
                    Outcome {
                        conversation,
                        report,
                        broken: None,
                        edits: described,
                    }
                }
                Err(v) => Outcome {
                    conversation: input.clone(),
                    report,
                    broken: Some(v),
                    edits: described,
                },
            }
        });
        Run {
            case: case.clone(),
            budget,
            outcome,
            pages,
            requests: provider.requests()[requests_before..].to_vec(),
            failed_llm_calls: services.usage().failed_llm_calls,
            elapsed,
            llm_time: provider.busy().saturating_sub(busy_before),
            tokens_before,
        }
    }

    /// Every invariant the run's output breaks (none when it returned no changed output).
    pub fn violations(&self, run: &Run) -> Vec<Violation> {
        if let Ok(Outcome {
            broken: Some(v), ..
        }) = &run.outcome
        {
            return vec![v.clone()];
        }
        let Some(output) = run.changed_output() else {
            return Vec::new();
        };
        let after = self.tokens.count_messages(output);
        stage_violations(
            &run.case.messages,
            output,
            run.case.keep_recent as usize,
            run.case.format,
            &run.pages,
            Some((run.tokens_before, after)),
        )
    }
}

/// A short description of `messages` around index `at`, for a report: one line per message.
pub fn describe_messages(messages: &[Message], around: Option<usize>) -> String {
    const WINDOW: usize = 6;
    let (lo, hi) = match around {
        Some(i) if messages.len() > 2 * WINDOW => (
            i.saturating_sub(WINDOW),
            (i + WINDOW + 1).min(messages.len()),
        ),
        _ => (0, messages.len().min(2 * WINDOW + 1)),
    };
    let mut out = String::new();
    if lo > 0 {
        out.push_str(&format!("  … {lo} message(s) before\n"));
    }
    for (i, m) in messages.iter().enumerate().take(hi).skip(lo) {
        out.push_str(&format!("  [{i}] {}\n", describe_message(m)));
    }
    if hi < messages.len() {
        out.push_str(&format!("  … {} message(s) after\n", messages.len() - hi));
    }
    out
}

/// One line: role, summary ref, blocks, and the start of the text.
pub fn describe_message(m: &Message) -> String {
    let mut parts = vec![m.role.as_str().to_string()];
    if let Some(s) = m.summary_info() {
        parts.push(format!("summary(page {})", s.page_ref));
    }
    let calls: Vec<&str> = m.tool_use_ids().collect();
    if !calls.is_empty() {
        parts.push(format!("tool_use({})", calls.join(",")));
    }
    let results: Vec<&str> = m.tool_result_ids().collect();
    if !results.is_empty() {
        parts.push(format!("tool_result({})", results.join(",")));
    }
    let text = m.joined_text();
    if !text.is_empty() {
        let chars = text.chars().count();
        let shown: String = text.chars().take(60).collect();
        let shown = shown.replace('\n', " ");
        if chars > 60 {
            parts.push(format!("{shown:?}… ({chars} chars)"));
        } else {
            parts.push(format!("{shown:?}"));
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(structured: bool) -> LlmRequest {
        let mut r = LlmRequest::new(
            "",
            "Summarize.\n<content>\nThe build failed on line 3.</content>",
            50,
        );
        if structured {
            r.response_schema_json = FfiOption::RSome(
                r#"{"type":"object","properties":{"summary":{"type":"string"}}}"#.into(),
            );
        }
        r
    }

    #[tokio::test]
    async fn the_kits_llm_answers_as_asked_and_keeps_the_requests() {
        let canned = KitProvider::new(Answers::Canned);
        assert_eq!(
            canned
                .complete(&request(false))
                .await
                .unwrap()
                .text
                .as_str(),
            CANNED
        );
        let filled = canned.complete(&request(true)).await.unwrap();
        let json: serde_json::Value =
            serde_json::from_str(filled.structured_json.as_ref().unwrap().as_str()).unwrap();
        assert!(json["summary"].is_string(), "{json}");
        assert_eq!(canned.requests().len(), 2);

        let failing = KitProvider::new(Answers::Failing);
        assert!(failing.complete(&request(false)).await.is_err());
        let garbage = KitProvider::new(Answers::Garbage);
        let answer = garbage.complete(&request(true)).await.unwrap();
        let broken = answer.structured_json.as_ref().unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(broken.as_str()).is_err());
        let huge = KitProvider::new(Answers::Huge(1000));
        let text = huge.complete(&request(false)).await.unwrap().text;
        assert_eq!(text.len(), 1000);
        assert!(text.starts_with(HUGE_PATTERN));
    }

    #[test]
    fn messages_are_described_around_the_fault() {
        let messages: Vec<Message> = (0..30)
            .map(|i| Message::text(tamp_plugin_api::Role::User, format!("m{i}")))
            .collect();
        let text = describe_messages(&messages, Some(20));
        assert!(text.contains("[20] user \"m20\""), "{text}");
        assert!(text.contains("14 message(s) before"), "{text}");
        assert!(!text.contains("[5]"), "{text}");
    }
}
