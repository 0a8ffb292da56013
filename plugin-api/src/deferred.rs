//! Deferred work: summaries the host finishes later (through a batch API) while the
//! compaction that asked for them returns at once.
//!
//! A strategy archives a page, calls [`crate::Host::defer_summary`] with the request that
//! would summarize it, and puts a [`crate::SummaryStatus::Pending`] summary in the page's
//! place. On a later compaction it asks [`crate::Host::deferred_results`] about its pending
//! page refs and swaps each finished one for the final text.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

use crate::llm::LlmRequest;

/// Where a deferred request stands.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferredStatus {
    /// Waiting for the next batch.
    Queued,
    /// Sent in a batch that has not ended yet.
    Submitted,
    /// Finished: `text` holds the answer.
    Done,
    /// Given up: `reason` says why.
    Failed,
    /// The host knows no request for this page (never deferred, or a host without the
    /// deferred service).
    Unknown,
}

impl DeferredStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeferredStatus::Queued => "queued",
            DeferredStatus::Submitted => "submitted",
            DeferredStatus::Done => "done",
            DeferredStatus::Failed => "failed",
            DeferredStatus::Unknown => "unknown",
        }
    }
}

/// A summary request to defer, for one page.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeferredRequest {
    /// The page the answer will summarize (its id, as in the pending summary's page ref).
    pub page_id: RString,
    pub request: LlmRequest,
}

/// The state of the deferred request of one page.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredState {
    pub page_id: RString,
    pub status: DeferredStatus,
    /// The answer when `status` is `Done`, else empty.
    pub text: RString,
    /// Why it failed when `status` is `Failed`, else empty.
    pub reason: RString,
}

impl DeferredState {
    /// The state of a page the host knows nothing about.
    pub fn unknown(page_id: impl Into<RString>) -> Self {
        DeferredState {
            page_id: page_id.into(),
            status: DeferredStatus::Unknown,
            text: RString::new(),
            reason: RString::new(),
        }
    }
}
