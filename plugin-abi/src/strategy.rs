//! A strategy instance as the host calls it: the ABI trait, its request and its outcome.
//! Plugin authors implement `tamp-plugin-api`'s `Strategy`, which the export macro wraps in
//! [`StrategyFfi`].

// `#[sabi_trait]` expands to impls and names these lints object to; nothing to fix here.
#![allow(non_local_definitions, non_camel_case_types)]

use abi_stable::sabi_trait;
use abi_stable::std_types::{RArc, RBox, RResult, RString, RVec};
use abi_stable::StableAbi;
use async_ffi::FfiFuture;

use crate::budget::Budget;
use crate::conversation::Conversation;
use crate::edit::{Edit, EditFfi};
use crate::error::PluginError;
use crate::report::StageReport;
use crate::services::HostServicesBox;

/// What the host hands a stage: the conversation (shared: no stage copies it), the budget,
/// and host services.
#[repr(C)]
#[derive(StableAbi)]
pub struct CompactRequest {
    pub conversation: RArc<Conversation>,
    pub budget: Budget,
    pub host: HostServicesBox,
    /// The stage's name in the chain file (for logs).
    pub stage: RString,
}

/// What a stage returns: the edits to make (none: the stage did nothing) and its report.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct CompactOutcome {
    pub edits: RVec<EditFfi>,
    pub report: StageReport,
}

impl CompactOutcome {
    /// The stage did nothing, for `reason`.
    pub fn unchanged(reason: impl Into<String>) -> Self {
        CompactOutcome {
            edits: RVec::new(),
            report: StageReport::skipped(reason),
        }
    }

    /// The stage asks for `edits`, reported by `report`.
    pub fn with_edits(edits: impl IntoIterator<Item = Edit>, report: StageReport) -> Self {
        CompactOutcome {
            edits: edits.into_iter().map(Edit::into_ffi).collect(),
            report,
        }
    }
}

/// The ABI form of a strategy instance.
#[sabi_trait]
pub trait StrategyFfi: Send + Sync + 'static {
    #[sabi(last_prefix_field)]
    fn compact(&self, request: CompactRequest) -> FfiFuture<RResult<CompactOutcome, PluginError>>;
}

/// A strategy instance as it crosses the boundary.
pub type StrategyBox = StrategyFfi_TO<RBox<()>>;
