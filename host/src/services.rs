//! The host services a plugin calls back during one stage run.
//!
//! [`HostContext`] holds what the whole chain shares (provider, store, tokenizer, limits);
//! [`StageServices`] is created per stage run and records what the stage did through it
//! (pages archived, LLM usage), so the chain can check the stage's output and report on it
//! without trusting the plugin's own account.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use tamp_plugin_api::capability;
use tamp_plugin_api::deferred::{is_page_transcript_prompt, PageTranscriptPrompt};
use tamp_plugin_api::{
    CachedSummary, DeferredRequest, DeferredState, DeferredStatus, ErrorKind, FfiFuture, FfiOption,
    FfiResult, FfiSlice, FfiStr, FfiString, FfiVec, HostError, HostServices, HostServicesBox,
    HostServices_TO, IntoFfiFuture as _, LlmRequest, LlmResponse, Message, Page, PageDraft,
    PluginError, ProgressEvent, Usage,
};
use tokio::sync::Semaphore;

use crate::digest::CacheKey;
use crate::providers::{schema, Provider, ProviderError};
use crate::store::{
    CacheScope, DeferredQueue, NewDeferred, NewPage, PageStore, QueueState, StoreError,
    SummaryCache, Written,
};
use crate::tokens::TokenCounter;
use crate::wire::WireFormat;

/// Called for every progress event: `(stage name, event)`.
pub type ProgressFn = Arc<dyn Fn(&str, &ProgressEvent) + Send + Sync>;

/// What every stage run of a chain shares.
pub struct HostContext {
    pub provider: Arc<dyn Provider>,
    pub store: Arc<dyn PageStore>,
    /// The summary cache; `None` when `[cache] enabled = false`.
    pub cache: Option<Arc<dyn SummaryCache>>,
    /// Where deferred summaries are queued; `None`: the host offers no deferred summaries
    /// (plugins see no `deferred-summaries` capability and `defer_summaries` is refused).
    pub queue: Option<Arc<dyn DeferredQueue>>,
    pub tokens: Arc<TokenCounter>,
    /// The provider's concurrency limit, shared by every compaction using this chain.
    pub llm_permits: Arc<Semaphore>,
    pub llm_timeout: Duration,
    pub progress: Option<ProgressFn>,
}

/// The services handed to one stage run.
#[derive(Clone)]
pub struct StageServices(Arc<StageState>);

struct StageState {
    ctx: Arc<HostContext>,
    stage: String,
    /// The plugin's name: deferred requests belong to it.
    strategy: String,
    thread_id: Option<String>,
    source_format: Option<WireFormat>,
    /// The hash of the stage's config: with the thread and strategy, where its cache entries
    /// live.
    config_hash: String,
    /// Computed on the first cache use (a SHA-256 most stage runs never need).
    scope: OnceLock<CacheScope>,
    /// Ids of the pages archived through these services in this run.
    archived: Mutex<Vec<String>>,
    /// The archived pages' receipts: staged, not necessarily written yet (see
    /// [`StageServices::pages_written`]).
    staged: Mutex<Vec<Written>>,
    usage: Mutex<Usage>,
    /// When the stage's own time limit ends the run (and every call still in flight).
    deadline: Option<tokio::time::Instant>,
    calls: AtomicU32,
    failed_calls: AtomicU32,
    cache_hits: AtomicU32,
    errors: Mutex<Vec<String>>,
}

/// What a stage run did through its services.
#[derive(Debug, Clone, Default)]
pub struct StageUsage {
    /// Calls made to the provider (cache hits not included).
    pub llm_calls: u32,
    pub failed_llm_calls: u32,
    /// Requests answered from the summary cache.
    pub cache_hits: u32,
    pub usage: Usage,
    /// The failed calls' errors, in the order they failed.
    pub errors: Vec<String>,
}

/// Who a stage run is, for the cache and the pages it writes.
#[derive(Debug, Clone, Default)]
pub struct StageIdentity {
    /// The stage's name in the chain (reports, logs, progress).
    pub stage: String,
    /// The plugin's name: the strategy cache entries belong to.
    pub strategy: String,
    /// The hash of the stage's config (`digest::config_hash`).
    pub config_hash: String,
}

impl StageServices {
    pub fn new(
        ctx: Arc<HostContext>,
        identity: StageIdentity,
        thread_id: Option<String>,
        source_format: Option<WireFormat>,
    ) -> Self {
        StageServices(Arc::new(StageState {
            ctx,
            stage: identity.stage,
            strategy: identity.strategy,
            thread_id,
            source_format,
            config_hash: identity.config_hash,
            scope: OnceLock::new(),
            archived: Mutex::new(Vec::new()),
            staged: Mutex::new(Vec::new()),
            usage: Mutex::new(Usage::default()),
            deadline: None,
            calls: AtomicU32::new(0),
            failed_calls: AtomicU32::new(0),
            cache_hits: AtomicU32::new(0),
            errors: Mutex::new(Vec::new()),
        }))
    }

    /// Services for a run that ends at `deadline` (the chain's stage timeout): an LLM call
    /// whose own timeout would end later needs no timer of its own. Call before handing the
    /// services out.
    pub fn until(mut self, deadline: tokio::time::Instant) -> Self {
        if let Some(state) = Arc::get_mut(&mut self.0) {
            state.deadline = Some(deadline);
        }
        self
    }

    /// The ABI object to hand the plugin.
    pub fn to_ffi(&self) -> HostServicesBox {
        HostServices_TO::from_ptr(
            abi_stable::std_types::RArc::new(self.clone()),
            tamp_plugin_api::TD_Opaque,
        )
    }

    /// Ids of the pages archived through these services in this run, in order.
    pub fn archived_ids(&self) -> Vec<String> {
        lock(&self.0.archived).clone()
    }

    /// Whether page `id` was archived through these services in this run.
    pub fn has_archived(&self, id: &str) -> bool {
        lock(&self.0.archived).iter().any(|a| a == id)
    }

    /// Waits until every page archived through these services is durable. Pages are staged
    /// (`PageStore::stage_page`) so a store can write them with the stage's deferred
    /// requests in one commit; the chain calls this before it accepts the stage's output.
    pub async fn pages_written(&self) -> Result<(), StoreError> {
        let staged = std::mem::take(&mut *lock(&self.0.staged));
        futures::future::try_join_all(staged).await.map(drop)
    }

    pub fn usage(&self) -> StageUsage {
        StageUsage {
            llm_calls: self.0.calls.load(Ordering::Relaxed),
            failed_llm_calls: self.0.failed_calls.load(Ordering::Relaxed),
            cache_hits: self.0.cache_hits.load(Ordering::Relaxed),
            usage: *lock(&self.0.usage),
            errors: lock(&self.0.errors).clone(),
        }
    }

    /// Where this stage's cache entries live: its thread, strategy and config.
    fn scope(&self) -> &CacheScope {
        let state = &self.0;
        state.scope.get_or_init(|| {
            CacheScope::new(
                state.thread_id.as_deref(),
                &state.strategy,
                &state.config_hash,
            )
        })
    }

    /// The cache, when enabled and worth using for this provider.
    fn cache(&self) -> Option<&Arc<dyn SummaryCache>> {
        self.0
            .ctx
            .cache
            .as_ref()
            .filter(|_| self.0.ctx.provider.cacheable())
    }

    /// The cache and the key of `request` in it, when the cache is in use.
    fn answer_key(&self, request: &LlmRequest) -> Option<(&Arc<dyn SummaryCache>, CacheKey)> {
        let cache = self.cache()?;
        let key = self
            .scope()
            .request_key(self.0.ctx.provider.name(), request);
        Some((cache, key))
    }

    /// The cached answer under `key`, if any. A cache that fails is logged and skipped: the
    /// call is then made, so a broken cache costs money, never a compaction.
    async fn cached_answer(&self, cache: &dyn SummaryCache, key: CacheKey) -> Option<LlmResponse> {
        match cache.get_answer(key).await {
            Ok(Some(mut answer)) => {
                self.0.cache_hits.fetch_add(1, Ordering::Relaxed);
                // Nothing was paid for this answer this time.
                answer.usage = Usage::default();
                Some(answer)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(stage = %self.0.stage, "summary cache unavailable: {e}");
                None
            }
        }
    }

    /// The range-cache keys of every leading run of `messages`; none without a cache.
    fn range_keys(&self, messages: &[Message]) -> Vec<CacheKey> {
        if self.0.ctx.cache.is_none() {
            return Vec::new();
        }
        std::panic::catch_unwind(AssertUnwindSafe(|| self.scope().range_keys(messages)))
            .unwrap_or_default()
    }

    async fn remember_answer(&self, cache: &dyn SummaryCache, key: CacheKey, answer: &LlmResponse) {
        if let Err(e) = cache.put_answer(key, answer.clone()).await {
            tracing::warn!(stage = %self.0.stage, "cannot write the summary cache: {e}");
        }
    }

    /// One LLM call: the cached answer, or the provider's, checked and recorded. The request
    /// is borrowed: an `async fn` keeps an owned argument twice in its state.
    async fn complete_one(&self, request: &LlmRequest) -> Result<LlmResponse, HostError> {
        // The key hashes the whole prompt: computed once, for the lookup and the write.
        let cached = self.answer_key(request);
        if let Some((cache, key)) = cached {
            // Boxed, as are the timer and the cache write: paths not every call takes stay
            // out of the state that each of thousands of in-flight calls carries.
            if let Some(answer) = Box::pin(self.cached_answer(cache.as_ref(), key)).await {
                return Ok(answer);
            }
        }
        // A host shutting down is not the call's failure: returned as it is, unrecorded.
        let answered = self.call_provider(request).await?;
        let result = self.judge_answer(request, answered);
        if let (Ok(answer), Some((cache, key))) = (&result, cached) {
            Box::pin(self.remember_answer(cache.as_ref(), key, answer)).await;
        }
        result
    }

    /// Calls the provider under the host's concurrency limit and the call's timeout.
    async fn call_provider(&self, request: &LlmRequest) -> Result<Answered, HostError> {
        let state = &self.0;
        let _permit = state
            .ctx
            .llm_permits
            .acquire()
            .await
            .map_err(|_| PluginError::new(ErrorKind::Host, "the host is shutting down"))?;
        state.calls.fetch_add(1, Ordering::Relaxed);
        let call = state.ctx.provider.complete(request);
        let timeout = state.ctx.llm_timeout;
        // A timer per call is a measurable share of a compaction's fixed cost with thousands
        // in flight; when the stage's deadline comes first, the call could never time out.
        let outlived = state
            .deadline
            .is_some_and(|d| tokio::time::Instant::now() + timeout >= d);
        Ok(if outlived {
            Ok(call.await)
        } else {
            Box::pin(tokio::time::timeout(timeout, call)).await
        })
    }

    /// The provider's answer as the plugin gets it: checked against the request's schema,
    /// its usage counted, a failure recorded for the stage's report.
    fn judge_answer(
        &self,
        request: &LlmRequest,
        answered: Answered,
    ) -> Result<LlmResponse, HostError> {
        let state = &self.0;
        let result = match answered {
            Ok(Ok(response)) => match &request.response_schema_json {
                FfiOption::RSome(schema) => schema::check_answer(schema.as_str(), &response)
                    .map(|()| response)
                    .map_err(|reason| {
                        PluginError::new(
                            ErrorKind::Llm,
                            format!("{}: {reason}", state.ctx.provider.name()),
                        )
                    }),
                FfiOption::RNone => Ok(response),
            },
            Ok(Err(e)) => Err(PluginError::new(ErrorKind::Llm, e.to_string())),
            Err(_) => Err(PluginError::new(
                ErrorKind::Llm,
                format!(
                    "{}: no answer within {:.1}s",
                    state.ctx.provider.name(),
                    state.ctx.llm_timeout.as_secs_f64()
                ),
            )),
        };
        match &result {
            Ok(r) => lock(&state.usage).add(&r.usage),
            Err(e) => {
                state.failed_calls.fetch_add(1, Ordering::Relaxed);
                lock(&state.errors).push(e.message.to_string());
                tracing::warn!(stage = %state.stage, label = %request.label, "LLM call failed: {e}");
            }
        }
        result
    }

    /// The states of the deferred requests of `ids` (this strategy's), in order.
    async fn queue_states(&self, ids: Vec<String>) -> Vec<DeferredState> {
        let unknown = |ids: &[String]| {
            ids.iter()
                .map(|id| DeferredState::unknown(id.as_str()))
                .collect()
        };
        let Some(queue) = self.0.ctx.queue.clone() else {
            return unknown(&ids);
        };
        let found = AssertUnwindSafe(queue.lookup(self.0.strategy.clone(), ids.clone()))
            .catch_unwind()
            .await;
        match found {
            Ok(Ok(items)) => ids
                .iter()
                .zip(items)
                .map(|(id, item)| match item {
                    None => DeferredState::unknown(id.as_str()),
                    Some(item) => DeferredState {
                        page_id: id.as_str().into(),
                        status: match item.state {
                            QueueState::Queued => DeferredStatus::Queued,
                            QueueState::Submitted => DeferredStatus::Submitted,
                            QueueState::Done => DeferredStatus::Done,
                            QueueState::Failed => DeferredStatus::Failed,
                        },
                        text: item
                            .text
                            .filter(|_| item.state == QueueState::Done)
                            .unwrap_or_default()
                            .into(),
                        reason: item
                            .reason
                            .filter(|_| item.state == QueueState::Failed)
                            .unwrap_or_default()
                            .into(),
                    },
                })
                .collect(),
            // An unreadable queue is "nothing known yet": the summaries stay pending
            // and the next compaction asks again.
            Ok(Err(e)) => {
                tracing::warn!(stage = %self.0.stage, "deferred queue unavailable: {e}");
                unknown(&ids)
            }
            Err(_) => unknown(&ids),
        }
    }

    fn emit_progress(&self, event: &ProgressEvent) {
        if let Some(progress) = &self.0.ctx.progress {
            progress(&self.0.stage, event);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A provider's answer, or the call's timeout running out first.
type Answered = Result<Result<LlmResponse, ProviderError>, tokio::time::error::Elapsed>;

/// Runs `f` and turns a host-side panic into an error, so it never unwinds into a plugin.
///
/// A function returning a combinator, not an `async fn`: an `async fn` keeps its argument `f`
/// beside the future it awaits, doubling the in-flight state of every LLM call, and thousands
/// of calls wait at once.
fn contained<T, F>(what: &'static str, f: F) -> impl Future<Output = Result<T, HostError>>
where
    F: Future<Output = Result<T, HostError>>,
{
    AssertUnwindSafe(f).catch_unwind().map(move |caught| {
        caught.unwrap_or_else(|p| {
            Err(PluginError::new(
                ErrorKind::Host,
                format!(
                    "host {what} panicked: {}",
                    tamp_plugin_api::strategy::panic_message(&*p)
                ),
            ))
        })
    })
}

impl HostServices for StageServices {
    fn capabilities(&self) -> FfiVec<FfiString> {
        let ctx = &self.0.ctx;
        let mut offered = Vec::new();
        if ctx.queue.is_some() {
            // The worker fills page-transcript prompts in (`deferred::render`).
            offered.push(capability::DEFERRED_SUMMARIES);
            offered.push(capability::PAGE_TRANSCRIPT_PROMPTS_V1);
        }
        if ctx.cache.is_some() {
            offered.push(capability::SUMMARY_CACHE);
        }
        offered.into_iter().map(FfiString::from).collect()
    }

    fn complete(&self, request: LlmRequest) -> FfiFuture<FfiResult<LlmResponse, HostError>> {
        let this = self.clone();
        async move {
            contained("LLM call", this.complete_one(&request))
                .await
                .into()
        }
        .into_ffi()
    }

    fn complete_all(
        &self,
        requests: FfiVec<LlmRequest>,
        max_concurrency: u32,
    ) -> FfiFuture<FfiVec<FfiResult<LlmResponse, HostError>>> {
        let this = self.clone();
        async move {
            let total = requests.len();
            let limit = match max_concurrency {
                0 => total.max(1),
                n => n as usize,
            };
            let done = AtomicU32::new(0);
            let answer = |request: LlmRequest| {
                let (this, done) = (&this, &done);
                async move {
                    let answer = contained("LLM call", this.complete_one(&request)).await;
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if this.0.ctx.progress.is_some() {
                        this.emit_progress(&ProgressEvent {
                            done: n,
                            total: total as u32,
                            message: format!("{n}/{total} LLM calls finished ({})", request.label)
                                .into(),
                        });
                    }
                    FfiResult::from(answer)
                }
            };
            // All at once when the limit allows it: `join_all` on a few futures polls them in
            // place, where a buffered stream allocates a task for each.
            let answers: Vec<FfiResult<LlmResponse, HostError>> = if limit >= total {
                futures::future::join_all(requests.into_iter().map(answer)).await
            } else {
                futures::stream::iter(requests)
                    .map(answer)
                    .buffered(limit)
                    .collect()
                    .await
            };
            answers.into()
        }
        .into_ffi()
    }

    fn count_tokens(&self, text: FfiStr<'_>) -> u64 {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.0.ctx.tokens.count_text(text.as_str())
        }))
        .unwrap_or(0)
    }

    fn count_message_tokens(&self, messages: FfiSlice<'_, Message>) -> u64 {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.0.ctx.tokens.count_messages(messages.as_slice())
        }))
        .unwrap_or(0)
    }

    fn archive_page(&self, page: PageDraft) -> FfiFuture<FfiResult<FfiString, HostError>> {
        let this = self.clone();
        async move {
            contained("page store", async {
                let new_page = NewPage {
                    thread_id: this.0.thread_id.clone(),
                    strategy: page.strategy.into(),
                    messages: page.messages.into(),
                    metadata_json: page.metadata_json.into(),
                    source_format: this.0.source_format.map(|f| f.to_string()),
                };
                let (id, written) = this
                    .0
                    .ctx
                    .store
                    .stage_page(new_page)
                    .await
                    .map_err(|e| PluginError::new(ErrorKind::Host, e.to_string()))?;
                lock(&this.0.staged).push(written);
                lock(&this.0.archived).push(id.clone());
                Ok(FfiString::from(id))
            })
            .await
            .into()
        }
        .into_ffi()
    }

    fn load_page(&self, id: FfiString) -> FfiFuture<FfiResult<Page, HostError>> {
        let this = self.clone();
        async move {
            contained("page store", async {
                this.0
                    .ctx
                    .store
                    .get_page(id.as_str())
                    .await
                    .map(|stored| stored.page)
                    .map_err(|e| PluginError::new(ErrorKind::Host, e.to_string()))
            })
            .await
            .into()
        }
        .into_ffi()
    }

    fn progress(&self, event: ProgressEvent) {
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| self.emit_progress(&event)));
    }

    fn cached_summary(
        &self,
        messages: FfiSlice<'_, Message>,
    ) -> FfiFuture<FfiOption<CachedSummary>> {
        // Keys are computed now, while the plugin's messages are borrowed; the lookup waits.
        let keys = self.range_keys(messages.as_slice());
        let this = self.clone();
        async move {
            let Some(cache) = this.0.ctx.cache.as_ref().filter(|_| !keys.is_empty()) else {
                return FfiOption::RNone;
            };
            match cache.longest_range(keys).await {
                Ok(Some((covered, text))) => {
                    this.0.cache_hits.fetch_add(1, Ordering::Relaxed);
                    FfiOption::RSome(CachedSummary {
                        messages_covered: u32::try_from(covered).unwrap_or(u32::MAX),
                        text: text.into(),
                    })
                }
                Ok(None) => FfiOption::RNone,
                Err(e) => {
                    tracing::warn!(stage = %this.0.stage, "summary cache unavailable: {e}");
                    FfiOption::RNone
                }
            }
        }
        .into_ffi()
    }

    fn cache_summary(&self, messages: FfiSlice<'_, Message>, summary: FfiString) -> FfiFuture<()> {
        let key = self.range_keys(messages.as_slice()).pop();
        let len = messages.len();
        let this = self.clone();
        async move {
            let (Some(cache), Some(key)) = (this.0.ctx.cache.as_ref(), key) else {
                return;
            };
            if let Err(e) = cache.put_range(key, len, summary.into()).await {
                tracing::warn!(stage = %this.0.stage, "cannot write the summary cache: {e}");
            }
        }
        .into_ffi()
    }

    fn defer_summaries(
        &self,
        requests: FfiVec<DeferredRequest>,
    ) -> FfiFuture<FfiResult<(), HostError>> {
        let this = self.clone();
        async move {
            contained("deferred queue", async {
                let host_error = |m: String| PluginError::new(ErrorKind::Host, m);
                let queue = this.0.ctx.queue.clone().ok_or_else(|| {
                    host_error(format!(
                        "the page store {} keeps no deferred queue",
                        this.0.ctx.store.describe()
                    ))
                })?;
                // A page-transcript prompt is filled in by the worker; a malformed one is
                // refused now, to the plugin, rather than failing in a batch later.
                for r in requests.iter() {
                    if !is_page_transcript_prompt(&r.request.prompt) {
                        continue;
                    }
                    let prompt = PageTranscriptPrompt::parse(&r.request.prompt).map_err(|e| {
                        host_error(format!("the request of {}: {}", r.page_id, e.message))
                    })?;
                    if prompt.page_id() != r.page_id.as_str() {
                        return Err(host_error(format!(
                            "the request of {} is a page-transcript prompt of page {}",
                            r.page_id,
                            prompt.page_id()
                        )));
                    }
                }
                let items = requests
                    .into_iter()
                    .map(|r| NewDeferred {
                        page_id: r.page_id.into(),
                        strategy: this.0.strategy.clone(),
                        thread_id: this.0.thread_id.clone(),
                        request: r.request,
                    })
                    .collect();
                queue
                    .enqueue(items)
                    .await
                    .map(|_| ())
                    .map_err(|e| host_error(e.to_string()))
            })
            .await
            .into()
        }
        .into_ffi()
    }

    fn deferred_results(&self, page_ids: FfiVec<FfiString>) -> FfiFuture<FfiVec<DeferredState>> {
        let this = self.clone();
        async move {
            let ids: Vec<String> = page_ids.into_iter().map(String::from).collect();
            this.queue_states(ids).await.into()
        }
        .into_ffi()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Services whose provider answers after `answer_after`, with a host LLM timeout of
    /// `llm_timeout`.
    fn slow_services(answer_after: Duration, llm_timeout: Duration) -> StageServices {
        let provider = crate::providers::ScriptedProvider::always("late").with_delay(answer_after);
        let ctx = Arc::new(HostContext {
            provider: Arc::new(provider),
            store: Arc::new(crate::store::SqliteStore::in_memory().unwrap()),
            cache: None,
            queue: None,
            tokens: Arc::new(TokenCounter::new(crate::tokens::Encoding::O200kBase).unwrap()),
            llm_permits: Arc::new(Semaphore::new(4)),
            llm_timeout,
            progress: None,
        });
        StageServices::new(ctx, StageIdentity::default(), None, None)
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn an_llm_call_times_out_before_a_later_stage_deadline() {
        let (slow, timeout) = (Duration::from_millis(400), Duration::from_millis(100));
        let request = || LlmRequest::new("", "hi", 8);
        // No deadline, and one after the call's own timeout: the call's timer fires.
        let unbounded = slow_services(slow, timeout);
        let e = run(unbounded.complete_one(&request())).unwrap_err();
        assert!(e.message.contains("no answer within 0.1s"), "{}", e.message);
        let later = run(async {
            let services = slow_services(slow, timeout)
                .until(tokio::time::Instant::now() + Duration::from_secs(30));
            services.complete_one(&request()).await
        });
        assert!(later.unwrap_err().message.contains("no answer within"));
    }

    #[test]
    fn a_call_the_stage_deadline_ends_first_is_not_timed_on_its_own() {
        // The stage's deadline comes before the call's timeout: the chain's stage timer ends
        // the call, so the call runs untimed here (no chain around it to cut it off).
        let answered = run(async {
            let services = slow_services(Duration::from_millis(150), Duration::from_millis(100))
                .until(tokio::time::Instant::now() + Duration::from_millis(20));
            services.complete_one(&LlmRequest::new("", "hi", 8)).await
        });
        assert_eq!(answered.unwrap().text.as_str(), "late");
    }

    #[test]
    fn an_llm_call_in_flight_carries_little_state() {
        // Thousands of calls wait at once, each in fresh memory the kernel must zero: what a
        // call carries while it waits is the host's memory per call. Bounds with headroom
        // over today's sizes (256 bytes, and the catch's few words around it); before, a call
        // carried 840 bytes, and `contained` held its future twice.
        let services = slow_services(Duration::ZERO, Duration::from_secs(1));
        let request = LlmRequest::new("", "hi", 8);
        let call = services.complete_one(&request);
        let call_size = std::mem::size_of_val(&call);
        assert!(call_size <= 320, "an LLM call carries {call_size} bytes");
        let guarded = contained("LLM call", call);
        let guarded_size = std::mem::size_of_val(&guarded);
        assert!(
            guarded_size <= call_size + 64,
            "contained: {guarded_size} bytes around a {call_size}-byte call"
        );
    }
}
