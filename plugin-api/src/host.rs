//! Host services: what a plugin may ask of the host while it compacts.
//!
//! [`HostServices`] is the ABI trait the host implements; [`Host`] is the handle a plugin
//! uses, with plain Rust signatures, which also counts the LLM calls and tokens it makes so the
//! stage report does not depend on each plugin keeping score.

// `#[sabi_trait]` expands to impls and names these lints object to; nothing to fix here.
#![allow(non_local_definitions, non_camel_case_types)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use abi_stable::sabi_trait;
use abi_stable::std_types::{RArc, RResult, RSlice, RStr, RString, RVec};
use abi_stable::StableAbi;
use async_ffi::FfiFuture;
use serde::{Deserialize, Serialize};

use crate::conversation::Message;
use crate::error::HostError;
use crate::llm::{LlmRequest, LlmResponse};
use crate::page::{Page, PageDraft};

/// A progress event: `done` of `total` units of work finished.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressEvent {
    pub done: u32,
    pub total: u32,
    pub message: RString,
}

/// The services the host offers a plugin, as an ABI-stable trait object.
///
/// Methods that may wait (LLM calls, the page store) return futures, so a plugin never blocks
/// a host thread. New methods are only ever added after the last one, which keeps plugins
/// built against an older `plugin-api` 0.x loadable.
#[sabi_trait]
pub trait HostServices: Clone + Send + Sync + 'static {
    /// One LLM call, with the host's retries, timeout and cache.
    fn complete(&self, request: LlmRequest) -> FfiFuture<RResult<LlmResponse, HostError>>;

    /// Many LLM calls, at most `max_concurrency` at once (0: the host's limit); the answers
    /// come back in request order, and the host emits a progress event as each one finishes.
    fn complete_all(
        &self,
        requests: RVec<LlmRequest>,
        max_concurrency: u32,
    ) -> FfiFuture<RVec<RResult<LlmResponse, HostError>>>;

    /// Tokens in `text`, with the chain's one tokenizer.
    fn count_tokens(&self, text: RStr<'_>) -> u64;

    /// Tokens of messages as the host counts them against the budget (content + overhead).
    fn count_message_tokens(&self, messages: RSlice<'_, Message>) -> u64;

    /// Archives original messages; returns the page id to put in the summary's page ref.
    fn archive_page(&self, page: PageDraft) -> FfiFuture<RResult<RString, HostError>>;

    /// Loads an archived page.
    fn load_page(&self, id: RString) -> FfiFuture<RResult<Page, HostError>>;

    /// Reports progress of long work (shown by the CLI, counted by `tamp serve`).
    #[sabi(last_prefix_field)]
    fn progress(&self, event: ProgressEvent);
}

/// The host services trait object as it crosses the boundary.
pub type HostServicesBox = HostServices_TO<RArc<()>>;

#[derive(Default, Debug)]
struct CallStats {
    calls: AtomicU32,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
}

/// A plugin's handle on the host for one compaction.
#[derive(Clone)]
pub struct Host {
    services: HostServicesBox,
    strategy: Arc<str>,
    stats: Arc<CallStats>,
}

impl Host {
    /// Wraps the host's services; `strategy` names the plugin in the pages it archives.
    pub fn new(services: HostServicesBox, strategy: &str) -> Self {
        Host {
            services,
            strategy: Arc::from(strategy),
            stats: Arc::default(),
        }
    }

    fn record(&self, response: &Result<LlmResponse, HostError>) {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        if let Ok(r) = response {
            self.stats
                .input_tokens
                .fetch_add(r.usage.input_tokens, Ordering::Relaxed);
            self.stats
                .output_tokens
                .fetch_add(r.usage.output_tokens, Ordering::Relaxed);
        }
    }

    pub async fn complete(&self, request: LlmRequest) -> Result<LlmResponse, HostError> {
        let response = self.services.complete(request).await.into_result();
        self.record(&response);
        response
    }

    /// Runs `requests` concurrently (at most `max_concurrency` at once); answers in order.
    pub async fn complete_all(
        &self,
        requests: Vec<LlmRequest>,
        max_concurrency: usize,
    ) -> Vec<Result<LlmResponse, HostError>> {
        let limit = u32::try_from(max_concurrency).unwrap_or(u32::MAX);
        let answers = self.services.complete_all(requests.into(), limit).await;
        answers
            .into_iter()
            .map(|a| {
                let a = a.into_result();
                self.record(&a);
                a
            })
            .collect()
    }

    pub fn count_tokens(&self, text: &str) -> u64 {
        self.services.count_tokens(text.into())
    }

    pub fn count_message_tokens(&self, messages: &[Message]) -> u64 {
        self.services.count_message_tokens(messages.into())
    }

    /// Archives `messages` (with optional plugin metadata) and returns the page id.
    pub async fn archive_page(
        &self,
        messages: Vec<Message>,
        metadata: Option<&serde_json::Value>,
    ) -> Result<String, HostError> {
        let draft = PageDraft {
            messages: messages.into(),
            strategy: RString::from(&*self.strategy),
            metadata_json: metadata.map(|m| m.to_string()).unwrap_or_default().into(),
        };
        self.services
            .archive_page(draft)
            .await
            .into_result()
            .map(String::from)
    }

    pub async fn load_page(&self, id: &str) -> Result<Page, HostError> {
        self.services.load_page(id.into()).await.into_result()
    }

    pub fn progress(&self, done: usize, total: usize, message: impl Into<String>) {
        self.services.progress(ProgressEvent {
            done: u32::try_from(done).unwrap_or(u32::MAX),
            total: u32::try_from(total).unwrap_or(u32::MAX),
            message: RString::from(message.into()),
        });
    }

    /// The strategy name pages and summaries are attributed to.
    pub fn strategy_name(&self) -> &str {
        &self.strategy
    }

    /// LLM calls made through this handle so far, and their input and output tokens.
    pub fn llm_stats(&self) -> (u32, u64, u64) {
        (
            self.stats.calls.load(Ordering::Relaxed),
            self.stats.input_tokens.load(Ordering::Relaxed),
            self.stats.output_tokens.load(Ordering::Relaxed),
        )
    }

    /// The raw ABI object (for adapters and tests).
    pub fn services(&self) -> &HostServicesBox {
        &self.services
    }
}
