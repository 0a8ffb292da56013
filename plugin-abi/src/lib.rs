//! `tamp-plugin-abi`: everything that crosses tamp's plugin boundary, and the rules both sides read.
//!
//! - [`conversation`], [`budget`], [`llm`], [`page`], [`deferred`], [`report`], [`error`],
//!   [`logging`]: the `#[repr(C)]`, layout-checked types both sides exchange.
//! - [`HostServices`]: what the host offers a plugin; [`capability`]: the names of what it
//!   offers beyond every host's methods.
//! - [`StrategyFfi`]: a strategy instance as the host calls it: it reads the conversation
//!   shared and returns [`Edit`]s.
//! - [`PluginModule`]: the root module a plugin exports.
//! - [`rules`]: what a compaction keeps (pinned messages, clearings, units, the protected
//!   head and tail), which both sides read.
//!
//! Its version ([`ABI_VERSION`]) is the one the loader checks, so a release of the SDK
//! (`tamp-plugin-api`) that changes none of this leaves every built plugin loadable. Plugin
//! authors depend on `tamp-plugin-api`, which re-exports what they need with builders and
//! conversions; a host depends on this crate (directly or through the SDK).

pub mod budget;
pub mod capability;
mod code;
pub mod conversation;
pub mod deferred;
pub mod edit;
pub mod error;
pub mod llm;
pub mod logging;
pub mod module;
pub mod page;
pub mod report;
pub mod rules;
pub mod services;
pub mod strategy;

pub use budget::Budget;
pub use conversation::{
    ContentBlock, Conversation, Message, Role, SummaryInfo, SummaryStatus, ToolResultPart,
};
pub use deferred::{DeferredRequest, DeferredState, DeferredStatus};
pub use edit::{Edit, EditFfi, Span};
pub use error::{ErrorKind, HostError, PluginError};
pub use llm::{LlmRequest, LlmResponse, Usage};
pub use logging::{LogLevel, LogSink};
pub use module::{PluginInfo, PluginModule, PluginModuleRef, ABI_VERSION};
pub use page::{Page, PageDraft};
pub use report::StageReport;
pub use services::{CachedSummary, HostServices, HostServicesBox, HostServices_TO, ProgressEvent};
pub use strategy::{CompactOutcome, CompactRequest, StrategyBox, StrategyFfi, StrategyFfi_TO};

/// The erasure marker host implementations use with `HostServices_TO::from_value`.
pub use abi_stable::sabi_trait::TD_Opaque;
/// ABI string, vector, option and result types, under tamp's names.
pub use abi_stable::std_types::{
    ROption as FfiOption, RResult as FfiResult, RSlice as FfiSlice, RStr as FfiStr,
    RString as FfiString, RVec as FfiVec,
};
/// The future type that crosses the boundary, and the conversion into it.
pub use async_ffi::{FfiFuture, FutureExt as IntoFfiFuture};
