//! `tamp-plugin-api`: the one crate a tamp compaction-strategy plugin depends on.
//!
//! - [`conversation`]: the conversation model that crosses the boundary.
//! - [`Strategy`]: what a plugin implements; [`export_plugin!`] exports it.
//! - [`Host`]: LLM calls, token counting, pages and progress, as the host offers them.
//! - [`sdk`]: tool-exchange grouping, protected ranges, summary messages, prompt rendering.
//!
//! The ABI is built on `abi_stable` and `async-ffi`, but a plugin author never names either:
//! the wrapper types they need are re-exported here under tamp's own names ([`FfiString`],
//! [`FfiVec`], [`FfiOption`]), so the ABI crate can be replaced in one place.

pub mod budget;
pub mod conversation;
pub mod deferred;
pub mod error;
pub mod host;
pub mod llm;
pub mod logging;
pub mod module;
pub mod page;
pub mod report;
pub mod sdk;
pub mod strategy;

pub use budget::Budget;
pub use conversation::{
    ContentBlock, Conversation, Message, Role, SummaryInfo, SummaryStatus, ToolResultPart,
};
pub use deferred::{DeferredRequest, DeferredState, DeferredStatus};
pub use error::{ErrorKind, HostError, PluginError};
pub use host::{
    CachedSummary, CallFinished, Host, HostServices, HostServicesBox, HostServices_TO,
    ProgressEvent,
};
pub use llm::{LlmRequest, LlmResponse, Usage};
pub use logging::{LogLevel, LogSink};
pub use module::{PluginInfo, PluginModule, PluginModuleRef, PLUGIN_API_VERSION};
pub use page::{Page, PageDraft};
pub use report::StageReport;
pub use strategy::{
    new_strategy, parse_config, CompactOutcome, CompactRequest, Compaction, Strategy,
    StrategyAdapter, StrategyBox, StrategyFfi, StrategyFfi_TO,
};

/// The erasure marker host implementations use with `HostServices_TO::from_value`.
pub use abi_stable::sabi_trait::TD_Opaque;
/// ABI string, vector, option and result types, under tamp's names.
pub use abi_stable::std_types::{
    ROption as FfiOption, RResult as FfiResult, RSlice as FfiSlice, RStr as FfiStr,
    RString as FfiString, RVec as FfiVec,
};
/// The future type that crosses the boundary, and the conversion into it.
pub use async_ffi::{FfiFuture, FutureExt as IntoFfiFuture};

/// Re-exports for the code plugins generate with [`export_plugin!`]; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::module::plugin_module;
    pub use abi_stable::library::{
        __call_root_module_loader as call_root_module_loader, CheckTypeLayout, LibHeader,
        RootModuleResult,
    };
}

/// Everything a strategy implementation usually needs, in one `use`.
pub mod prelude {
    pub use crate::sdk::{self, Replacement, Unit, UnitKind};
    pub use crate::{
        export_plugin, Budget, CompactOutcome, Compaction, ContentBlock, Conversation, ErrorKind,
        FfiString, FfiVec, Host, LlmRequest, Message, PluginError, Role, StageReport, Strategy,
        SummaryStatus, ToolResultPart,
    };
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
}

/// Re-exported so plugin configs derive `JsonSchema`/`Serialize` with the versions plugin-api
/// was built with.
pub use schemars;
pub use serde;
pub use serde_json;
pub use tracing;
