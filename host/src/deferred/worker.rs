//! The worker: sends queued requests as Message Batches, polls them, and applies results.
//!
//! One pass is [`Worker::submit_pass`] then [`Worker::poll_pass`]; `tamp batch run-once`
//! makes one, [`Worker::spawn`] makes them forever (each on its own interval). Every
//! decision is written to the queue before the next step, so a worker killed at any point is
//! resumed by the next one: queued items are submitted, submitted ones polled. The one
//! window not covered is between the API creating a batch and the store recording it: a
//! crash there sends those requests again (paid twice, applied once).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde::Serialize;

use super::config::BatchConfig;
use super::metrics::{DeferredMetrics, MetricsSnapshot};
use super::render::{PageSource, RenderError};
use crate::config_error::FieldError;
use crate::providers::batches::{
    error_type_is_retryable, BatchOutcome, BatchesClient, ProcessingStatus,
};
use crate::providers::{
    self, ApiKey, ClientSettings, Provider, ProviderConfig, ProviderErrorKind, RetryPolicy,
};
use crate::store::queue::{
    Billing, DeferredQueue, Expect, Lease, QueueItem, RequeueKind, Transition, CUSTOM_ID_PREFIX,
};
use crate::store::{PageStore, StoreError};

/// The request bytes sent in one batch at most: the API's 256 MB, less a margin.
const MAX_BATCH_BYTES: usize = 200 * 1024 * 1024;

/// Why a pass stopped early.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PassReport {
    pub batches_created: u64,
    pub submitted: u64,
    pub batches_polled: u64,
    pub batches_running: u64,
    pub batches_canceled: u64,
    pub done: u64,
    pub requeued: u64,
    pub failed: u64,
    pub fallbacks: u64,
    /// API errors met on the way (the pass went on without the batch concerned).
    pub errors: Vec<String>,
}

impl PassReport {
    fn add(&mut self, other: PassReport) {
        self.batches_created += other.batches_created;
        self.submitted += other.submitted;
        self.batches_polled += other.batches_polled;
        self.batches_running += other.batches_running;
        self.batches_canceled += other.batches_canceled;
        self.done += other.done;
        self.requeued += other.requeued;
        self.failed += other.failed;
        self.fallbacks += other.fallbacks;
        self.errors.extend(other.errors);
    }

    /// Whether every API call of the pass went through (no entry in `errors`).
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The one-line summary of the pass (its `errors` are not in it: print them apart, e.g.
/// `tamp batch run-once` sends them to stderr).
impl std::fmt::Display for PassReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "submitted {} request(s) in {} new batch(es); polled {} batch(es), {} still running, \
             {} canceled for age; {} done, {} re-queued, {} failed, {} by sync fallback",
            self.submitted,
            self.batches_created,
            self.batches_polled,
            self.batches_running,
            self.batches_canceled,
            self.done,
            self.requeued,
            self.failed,
            self.fallbacks
        )
    }
}

/// Which of the two passes a running worker makes (see [`Worker::spawn_observed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// [`Worker::submit_pass`].
    Submit,
    /// [`Worker::poll_pass`].
    Poll,
}

impl Pass {
    pub fn as_str(self) -> &'static str {
        match self {
            Pass::Submit => "submit",
            Pass::Poll => "poll",
        }
    }
}

impl std::fmt::Display for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Worker::spawn`] does with each pass: the API errors met (and requests that failed
/// for good) as warnings, what else the pass did at info level, a pass the store stopped as
/// a warning.
pub fn log_pass(pass: Pass, result: &Result<PassReport, WorkerError>) {
    match result {
        Ok(report) => {
            for e in &report.errors {
                tracing::warn!(target: "tamp::batch", "deferred worker: {pass} pass: {e}");
            }
            if report.failed > 0 {
                tracing::warn!(target: "tamp::batch", "deferred worker: {pass} pass: {} request(s) failed for good", report.failed);
            }
            if *report != PassReport::default() {
                tracing::info!(target: "tamp::batch", "{pass} pass: {report}");
            }
        }
        Err(e) => tracing::warn!(target: "tamp::batch", "deferred worker: {pass} pass: {e}"),
    }
}

/// The deferred worker. Cheap to clone.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Arc<dyn DeferredQueue>,
    client: BatchesClient,
    fallback: Option<(Arc<dyn Provider>, Duration)>,
    config: BatchConfig,
    metrics: Arc<DeferredMetrics>,
    /// This worker's claims on queued items and open batches (see `store::queue`).
    lease: Lease,
    /// Where page-transcript prompts are filled in from (`render`).
    pages: PageSource,
}

/// A running worker task (see [`Worker::spawn`]).
pub struct WorkerHandle {
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<DeferredMetrics>,
}

impl WorkerHandle {
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// The live counters (for a `/metrics` endpoint that renders them on every request).
    pub fn shared_metrics(&self) -> Arc<DeferredMetrics> {
        Arc::clone(&self.metrics)
    }

    /// Waits for the task to end (after its shutdown future resolved and the pass in hand
    /// finished).
    pub async fn join(self) {
        let _ = self.task.await;
    }
}

/// The Message Batches client `[batch]` (and `[provider]`) describe: model, base URL and key
/// come from `[batch]`, else from `[provider]` when it is `anthropic`; the key is read from its
/// environment variable now. The chain file's assembler builds the worker around it
/// (`LoadedChainFile::batch_worker`), with the chain's provider as the sync fallback.
pub fn batches_client(
    batch: &BatchConfig,
    provider: &ProviderConfig,
) -> Result<BatchesClient, FieldError> {
    let anthropic = provider.kind == providers::ProviderKind::Anthropic;
    let error = |key, message: String| FieldError::new("batch", key, message);
    let inherited = |own: &Option<String>, theirs: &Option<String>| {
        own.clone().or_else(|| theirs.clone().filter(|_| anthropic))
    };
    let model = inherited(&batch.model, &provider.model).ok_or_else(|| {
        error(
            "model",
            "required unless provider.kind = \"anthropic\" (whose model is used)".into(),
        )
    })?;
    let key_env = inherited(&batch.api_key_env, &provider.api_key_env).ok_or_else(|| {
        error(
            "api_key_env",
            "required unless provider.kind = \"anthropic\" (whose key is used)".into(),
        )
    })?;
    let key = ApiKey::from_env(&key_env).map_err(|m| error("api_key_env", m))?;
    let base_url = inherited(&batch.base_url, &provider.base_url)
        .unwrap_or_else(|| providers::anthropic::DEFAULT_BASE_URL.to_string());
    BatchesClient::new(
        ClientSettings {
            model,
            base_url,
            key: Some(key),
            structured: providers::StructuredMode::parse(&provider.structured_output)
                .unwrap_or(providers::StructuredMode::Auto),
            timeout: crate::bounded::saturating_seconds(provider.timeout_secs),
        },
        RetryPolicy::from_config(provider),
    )
    .map_err(|m| error("model", m))
}

impl Worker {
    /// A worker over `queue`, sending through `client`; `fallback` is the provider (and its
    /// overall timeout) that answers a request the batches could not, when
    /// `config.sync_fallback`.
    pub fn new(
        queue: Arc<dyn DeferredQueue>,
        client: BatchesClient,
        fallback: Option<(Arc<dyn Provider>, Duration)>,
        config: BatchConfig,
    ) -> Self {
        let pages = PageSource::default();
        Worker {
            inner: Arc::new(Inner {
                queue,
                client,
                fallback: fallback
                    .filter(|_| config.sync_fallback)
                    .map(|(provider, timeout)| (pages.filling(provider), timeout)),
                lease: Lease {
                    owner: worker_id(),
                    duration: crate::bounded::saturating_seconds(config.lease_secs),
                },
                config,
                metrics: Arc::default(),
                pages,
            }),
        }
    }

    /// Reads pages from `pages` (the store the queue is in), to fill in the page-transcript
    /// prompts plugins queue (`deferred::render`). Without it, such a request fails; requests
    /// with ordinary prompts need no store. Set once: a later call is ignored.
    pub fn with_pages(self, pages: Arc<dyn PageStore>) -> Self {
        self.inner.pages.set(pages);
        self
    }

    /// The counters, shared with the running task.
    pub fn metrics(&self) -> Arc<DeferredMetrics> {
        Arc::clone(&self.inner.metrics)
    }

    /// Starts the worker on the current tokio runtime: a submit pass every
    /// `submit_interval_secs` and a poll pass every `poll_interval_secs`, the first of each at
    /// once (which resumes whatever a previous worker left), until `shutdown` resolves. Each
    /// pass is logged ([`log_pass`]).
    pub fn spawn<S>(self, shutdown: S) -> WorkerHandle
    where
        S: std::future::Future<Output = ()> + Send + 'static,
    {
        self.spawn_observed(shutdown, log_pass)
    }

    /// [`Worker::spawn`], handing each pass's outcome to `observe` (on the worker's task, as
    /// the pass ends) instead of logging it: `tamp batch work` prints them.
    pub fn spawn_observed<S, F>(self, shutdown: S, mut observe: F) -> WorkerHandle
    where
        S: std::future::Future<Output = ()> + Send + 'static,
        F: FnMut(Pass, &Result<PassReport, WorkerError>) + Send + 'static,
    {
        let metrics = self.metrics();
        let task = tokio::spawn(async move {
            let cfg = &self.inner.config;
            let mut submit =
                tokio::time::interval(crate::bounded::saturating_seconds(cfg.submit_interval_secs));
            let mut poll =
                tokio::time::interval(crate::bounded::saturating_seconds(cfg.poll_interval_secs));
            submit.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::pin!(shutdown);
            loop {
                let (pass, result) = tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    _ = submit.tick() => (Pass::Submit, self.submit_pass().await),
                    _ = poll.tick() => (Pass::Poll, self.poll_pass().await),
                };
                observe(pass, &result);
            }
            // Handing the claims back lets another host's worker go on at once rather than
            // after the lease (a worker that dies without this is covered by the expiry).
            match self.release().await {
                Ok(released) if released > 0 => {
                    tracing::info!(target: "tamp::batch", released, "deferred worker released its claims")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "tamp::batch", "deferred worker: releasing its claims: {e}")
                }
            }
        });
        WorkerHandle { task, metrics }
    }

    /// One submit pass then one poll pass (`tamp batch run-once`).
    pub async fn run_once(&self) -> Result<PassReport, WorkerError> {
        let mut report = self.submit_pass().await?;
        report.add(self.poll_pass().await?);
        // The next run is another worker: it must not wait for this one's leases.
        self.release().await?;
        Ok(report)
    }

    /// Hands back every claim this worker holds (see [`Worker::spawn`], which does it when
    /// it stops); how many items were released.
    pub async fn release(&self) -> Result<usize, WorkerError> {
        Ok(self
            .inner
            .queue
            .release(self.inner.lease.owner.clone())
            .await?)
    }

    /// Sends every queued item, `max_batch_requests` per batch. A failed submission (after
    /// the client's own retries) counts an attempt against each of its items.
    pub async fn submit_pass(&self) -> Result<PassReport, WorkerError> {
        let inner = &self.inner;
        let mut report = PassReport::default();
        loop {
            // Claimed, not just read: another host's worker skips these while the lease
            // lives, so no item goes out in two batches at once.
            let mut items = inner
                .queue
                .claim_queued(inner.lease.clone(), inner.config.max_batch_requests)
                .await?;
            if items.is_empty() {
                break;
            }
            let full = items.len() == inner.config.max_batch_requests;
            // Page-transcript prompts are filled in from their pages now; one that never can
            // be fails, and the batch goes without it.
            let mut requests: Vec<(String, tamp_plugin_api::LlmRequest)> = Vec::new();
            let mut sendable = Vec::with_capacity(items.len());
            for item in items {
                match inner.pages.render(&item.request).await {
                    Ok(request) => {
                        requests.push((item.custom_id(), request.into_owned()));
                        sendable.push(item);
                    }
                    Err(RenderError::Store(e)) => return Err(e.into()),
                    Err(e @ RenderError::Unfillable(_)) => {
                        self.attempt_failed(&item, e.to_string(), false, &mut report)
                            .await?
                    }
                }
            }
            items = sendable;
            if items.is_empty() {
                if full {
                    continue;
                }
                break;
            }
            // The API takes at most 256 MB per batch: stop short of it (JSON escaping and
            // the per-request envelope are covered by the margin).
            let mut bytes = 0;
            let fits = requests
                .iter()
                .take_while(|(_, request)| {
                    bytes += request.prompt.len() + request.system.len() + 1_024;
                    bytes <= MAX_BATCH_BYTES
                })
                .count()
                .max(1);
            let cut = fits < items.len();
            items.truncate(fits);
            requests.truncate(fits);
            match inner.client.create(&requests).await {
                Ok(batch) => {
                    let ids = items.iter().map(|i| i.id).collect();
                    // Only items still leased to this worker are marked; the lease goes on
                    // to cover polling the batch.
                    let marked = inner
                        .queue
                        .mark_submitted_leased(ids, batch.id.clone(), inner.lease.clone())
                        .await?;
                    inner.metrics.batch_created(marked as u64);
                    report.batches_created += 1;
                    report.submitted += marked as u64;
                    tracing::info!(target: "tamp::batch", batch = %batch.id, requests = marked, "batch created");
                }
                Err(e) => {
                    report
                        .errors
                        .push(format!("creating a batch of {}: {e}", items.len()));
                    let retryable = e.kind != ProviderErrorKind::Authentication;
                    for item in &items {
                        let reason = format!("submission failed: {}", e.message);
                        self.attempt_failed(item, reason, retryable, &mut report)
                            .await?;
                    }
                    // The items re-queued wait for the next pass.
                    break;
                }
            }
            if !full && !cut {
                break;
            }
        }
        Ok(report)
    }

    /// Polls every open batch; applies the results of those that ended; cancels those
    /// running longer than `batch_timeout_secs`.
    pub async fn poll_pass(&self) -> Result<PassReport, WorkerError> {
        let inner = &self.inner;
        let mut report = PassReport::default();
        // Batches another live worker polls are left to it; those of a worker that died
        // come to this one once its lease has expired.
        let open = inner.queue.claim_open_batches(inner.lease.clone()).await?;
        for open_batch in open {
            report.batches_polled += 1;
            let id = open_batch.batch_id.clone();
            let batch = match inner.client.retrieve(&id).await {
                Ok(batch) => batch,
                Err(e) if e.kind == ProviderErrorKind::InvalidRequest => {
                    // The API no longer knows the batch (404): its requests never finished.
                    report.errors.push(format!("batch {id}: {e}"));
                    self.expire_rest(&id, "the batch is unknown to the API", &mut report)
                        .await?;
                    continue;
                }
                Err(e) => {
                    report.errors.push(format!("polling batch {id}: {e}"));
                    continue;
                }
            };
            if batch.processing_status != ProcessingStatus::Ended {
                report.batches_running += 1;
                let age_ms = now_ms().saturating_sub(open_batch.submitted_ms);
                let timeout_ms = (inner.config.batch_timeout_secs * 1000.0) as u64;
                if batch.processing_status == ProcessingStatus::InProgress && age_ms > timeout_ms {
                    match inner.client.cancel(&id).await {
                        Ok(_) => report.batches_canceled += 1,
                        Err(e) => report.errors.push(format!("canceling batch {id}: {e}")),
                    }
                }
                continue;
            }
            self.apply_results(&batch, &mut report).await?;
        }
        Ok(report)
    }

    async fn apply_results(
        &self,
        batch: &crate::providers::batches::MessageBatch,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        let inner = &self.inner;
        let mut waiting: HashMap<String, QueueItem> = inner
            .queue
            .in_batch(batch.id.clone())
            .await?
            .into_iter()
            .map(|item| (item.custom_id(), item))
            .collect();
        let mut results = match inner.client.results(batch).await {
            Ok(stream) => stream,
            Err(e) if e.kind == ProviderErrorKind::InvalidRequest => {
                // Results are kept 29 days; past that (404) they are gone for good.
                report
                    .errors
                    .push(format!("results of batch {}: {e}", batch.id));
                return self
                    .expire_rest(
                        &batch.id,
                        "the batch's results are no longer available",
                        report,
                    )
                    .await;
            }
            Err(e) => {
                report
                    .errors
                    .push(format!("results of batch {}: {e}", batch.id));
                return Ok(());
            }
        };
        while let Some(line) = results.next().await {
            let result = match line {
                Ok(result) => result,
                Err(e) if e.kind == ProviderErrorKind::Malformed => {
                    report.errors.push(e.to_string());
                    continue;
                }
                Err(e) => {
                    // The download broke off: what was applied stays applied; the rest is
                    // read again on the next poll.
                    report
                        .errors
                        .push(format!("results of batch {}: {e}", batch.id));
                    return Ok(());
                }
            };
            // An id that is not waiting here was applied already (or is not ours).
            let Some(item) = waiting.remove(&result.custom_id) else {
                if !result.custom_id.starts_with(CUSTOM_ID_PREFIX) {
                    report.errors.push(format!(
                        "batch {}: unknown custom_id {}",
                        batch.id, result.custom_id
                    ));
                }
                continue;
            };
            match result.outcome {
                BatchOutcome::Succeeded(message) => {
                    match inner.client.parse_message(&item.request, &message) {
                        Ok(answer) => {
                            let to = Transition::Done {
                                text: answer.text.to_string(),
                                usage: answer.usage,
                                billing: Billing::Batch,
                            };
                            if inner
                                .queue
                                .transition(item.id, Expect::of(&item), to)
                                .await?
                            {
                                inner.metrics.succeeded(&answer.usage);
                                report.done += 1;
                            }
                        }
                        Err(e) => {
                            self.attempt_failed(&item, e.to_string(), false, report)
                                .await?
                        }
                    }
                }
                BatchOutcome::Errored {
                    error_type,
                    message,
                } => {
                    let reason = format!("{error_type}: {message}");
                    let retryable = error_type_is_retryable(&error_type);
                    self.attempt_failed(&item, reason, retryable, report)
                        .await?;
                }
                BatchOutcome::Canceled => {
                    self.not_processed(&item, "the batch request was canceled", report)
                        .await?
                }
                BatchOutcome::Expired => {
                    self.not_processed(&item, "the batch request expired", report)
                        .await?
                }
            }
        }
        // Requests the results do not mention never finished: as if expired.
        for item in waiting.into_values() {
            self.not_processed(&item, "no result for the request", report)
                .await?;
        }
        Ok(())
    }

    /// Every item still submitted in `batch_id`, handled as expired.
    async fn expire_rest(
        &self,
        batch_id: &str,
        why: &str,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        for item in self.inner.queue.in_batch(batch_id.to_string()).await? {
            self.not_processed(&item, why, report).await?;
        }
        Ok(())
    }

    /// A failed attempt: another one in a later batch while `max_attempts` allows and the
    /// error is worth it; else the sync fallback (transient errors only), else failed.
    async fn attempt_failed(
        &self,
        item: &QueueItem,
        reason: String,
        retryable: bool,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        let inner = &self.inner;
        if retryable && item.attempts + 1 < inner.config.max_attempts {
            return self
                .requeue(item, reason, RequeueKind::Attempt, report)
                .await;
        }
        if retryable && inner.fallback.is_some() {
            return self.fall_back(item, reason, report).await;
        }
        self.fail(item, reason, report).await
    }

    /// A canceled or expired request: re-queued once, then the sync fallback, else failed.
    async fn not_processed(
        &self,
        item: &QueueItem,
        why: &str,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        let inner = &self.inner;
        if item.requeues == 0 {
            return self
                .requeue(item, why.to_string(), RequeueKind::Requeue, report)
                .await;
        }
        if inner.fallback.is_some() {
            return self.fall_back(item, why.to_string(), report).await;
        }
        self.fail(item, format!("{why} (again)"), report).await
    }

    /// Back to `queued` for a later batch (counted only if this worker made the change).
    async fn requeue(
        &self,
        item: &QueueItem,
        reason: String,
        kind: RequeueKind,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        let to = Transition::Requeue { reason, kind };
        if self
            .inner
            .queue
            .transition(item.id, Expect::of(item), to)
            .await?
        {
            self.inner.metrics.requeued();
            report.requeued += 1;
        }
        Ok(())
    }

    async fn fall_back(
        &self,
        item: &QueueItem,
        why: String,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        let inner = &self.inner;
        let Some((provider, timeout)) = &inner.fallback else {
            return self.fail(item, why, report).await;
        };
        let answer = tokio::time::timeout(*timeout, provider.complete(&item.request)).await;
        match answer {
            Ok(Ok(answer)) => {
                let to = Transition::Done {
                    text: answer.text.to_string(),
                    usage: answer.usage,
                    billing: Billing::Sync,
                };
                if inner
                    .queue
                    .transition(item.id, Expect::of(item), to)
                    .await?
                {
                    inner.metrics.fallback();
                    report.fallbacks += 1;
                    report.done += 1;
                }
                Ok(())
            }
            Ok(Err(e)) => {
                self.fail(item, format!("{why}; sync fallback failed: {e}"), report)
                    .await
            }
            Err(_) => {
                self.fail(
                    item,
                    format!("{why}; sync fallback timed out after {timeout:?}"),
                    report,
                )
                .await
            }
        }
    }

    async fn fail(
        &self,
        item: &QueueItem,
        reason: String,
        report: &mut PassReport,
    ) -> Result<(), WorkerError> {
        let to = Transition::Failed { reason };
        if self
            .inner
            .queue
            .transition(item.id, Expect::of(item), to)
            .await?
        {
            self.inner.metrics.failed();
            report.failed += 1;
        }
        Ok(())
    }
}

/// A name for this worker's claims, unique across hosts and restarts: host, process, start.
fn worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{host}/{}/{started:x}/{n}", std::process::id())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_leaves_the_errors_out() {
        let report = PassReport {
            requeued: 1,
            errors: vec!["creating a batch of 1: connection refused".into()],
            ..PassReport::default()
        };
        assert!(!report.is_clean());
        let line = report.to_string();
        assert!(
            line.contains("1 re-queued") && !line.contains("refused"),
            "{line}"
        );
        assert_eq!(Pass::Submit.to_string(), "submit");
        assert_eq!(serde_json::to_value(Pass::Poll).unwrap(), "poll");
    }
}
