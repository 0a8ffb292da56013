//! Host services: what a plugin may ask of the host while it compacts, as the ABI trait the
//! host implements. Plugins use it through `tamp-plugin-api`'s `Host` handle, with plain Rust
//! signatures.

// `#[sabi_trait]` expands to impls and names these lints object to; nothing to fix here.
#![allow(non_local_definitions, non_camel_case_types)]

use abi_stable::sabi_trait;
use abi_stable::std_types::{RArc, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::StableAbi;
use async_ffi::{FfiFuture, FutureExt as _};
use serde::{Deserialize, Serialize};

use crate::conversation::Message;
use crate::deferred::{DeferredRequest, DeferredState};
use crate::error::{ErrorKind, HostError};
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
/// a host thread. abi_stable's load-time layout check refuses a plugin whose copy of this
/// trait differs from the host's, so a method is added only with a new ABI version; a new
/// capability that older plugins need not know of is announced by [`Self::capabilities`]
/// instead (see [`crate::capability`]).
#[sabi_trait]
pub trait HostServices: Clone + Send + Sync + 'static {
    /// What this host offers beyond the methods every host has: names from
    /// [`crate::capability`] (a plugin ignores names it does not know, and treats a name it
    /// knows but does not see as "not offered"). The defaults of the methods below are what
    /// a host without that service answers, for hosts written for tests.
    fn capabilities(&self) -> RVec<RString> {
        RVec::new()
    }

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
    fn progress(&self, event: ProgressEvent);

    /// The summary cache: the longest leading run of `messages` this strategy, with this
    /// config, already summarized in this thread (or, without a thread id, anywhere), and that
    /// summary. The host computes the key (thread, strategy, config hash, the messages' content
    /// hashes) while the call is made, so the messages need not outlive it. A host without a
    /// cache answers "nothing cached".
    fn cached_summary(&self, _messages: RSlice<'_, Message>) -> FfiFuture<ROption<CachedSummary>> {
        async { ROption::RNone }.into_ffi()
    }

    /// Records `summary` as the summary of exactly `messages` (see [`Self::cached_summary`]).
    /// Best effort: a store failure is logged by the host, never returned.
    fn cache_summary(&self, _messages: RSlice<'_, Message>, _summary: RString) -> FfiFuture<()> {
        async {}.into_ffi()
    }

    /// Queues each request to be answered later, through a batch, as the summary of its
    /// page (see [`crate::deferred`]), all in one store write. Idempotent per page and
    /// strategy: deferring a page again leaves the first request in place. Returns once the
    /// requests are stored. A host without the service (no
    /// [`crate::capability::DEFERRED_SUMMARIES`]) refuses, and the plugin must then summarize
    /// some other way.
    fn defer_summaries(
        &self,
        _requests: RVec<DeferredRequest>,
    ) -> FfiFuture<RResult<(), HostError>> {
        async {
            RResult::RErr(HostError::new(
                ErrorKind::Host,
                "this host has no deferred-summary service",
            ))
        }
        .into_ffi()
    }

    /// The states of the deferred requests of `page_ids` (this strategy's), in the order
    /// asked. A host without the service answers `Unknown` for each.
    #[sabi(last_prefix_field)]
    fn deferred_results(&self, page_ids: RVec<RString>) -> FfiFuture<RVec<DeferredState>> {
        let states: RVec<DeferredState> =
            page_ids.into_iter().map(DeferredState::unknown).collect();
        async move { states }.into_ffi()
    }
}

/// A summary the host had cached for a leading run of the messages asked about.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedSummary {
    /// How many of the messages asked about (from the first) the summary covers.
    pub messages_covered: u32,
    pub text: RString,
}

/// The host services trait object as it crosses the boundary.
pub type HostServicesBox = HostServices_TO<RArc<()>>;
