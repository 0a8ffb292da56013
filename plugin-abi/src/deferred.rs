//! Deferred work: summaries the host finishes later (through a batch API) while the
//! compaction that asked for them returns at once. The types the host and a plugin exchange;
//! the page-transcript prompt encoding is in `tamp-plugin-api`'s `deferred` module.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

use crate::llm::LlmRequest;

crate::code::extensible_code! {
    /// Where a deferred request stands; states may be added (see `code.rs`), so a `match`
    /// needs a `_` arm.
    pub struct DeferredStatus, "deferred status" {
        /// Waiting for the next batch.
        Queued = 0, "queued";
        /// Sent in a batch that has not ended yet.
        Submitted = 1, "submitted";
        /// Finished: `text` holds the answer.
        Done = 2, "done";
        /// Given up: `reason` says why.
        Failed = 3, "failed";
        /// The host knows no request for this page (never deferred, or a host without the
        /// deferred service).
        Unknown = 4, "unknown";
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
    /// The answer, when the status is `Done` (else empty).
    pub fn answer(&self) -> &str {
        &self.text
    }

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
