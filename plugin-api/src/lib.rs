//! `tamp-plugin-api`: the one crate a tamp compaction-strategy plugin depends on, the SDK on
//! top of the ABI crate `tamp-plugin-abi`.
//!
//! - [`conversation`]: the conversation model that crosses the boundary.
//! - [`Strategy`]: what a plugin implements; [`export_plugin!`] exports it.
//! - [`Host`]: LLM calls, token counting, pages and progress, as the host offers them.
//! - [`sdk`]: tool-exchange grouping, protected ranges, summary messages, prompt rendering.
//!
//! Every type that crosses the boundary lives in `tamp-plugin-abi`, whose version is the one
//! the loader checks; this crate re-exports them, so an SDK-only release leaves built plugins
//! loadable. A plugin author never names `abi_stable` or `async-ffi`, nor the wrapper types
//! (re-exported here as [`FfiString`], [`FfiVec`], [`FfiOption`] for hosts and adapters): the
//! SDK builds and reads the boundary's values from plain Rust ones ([`sdk::report`],
//! [`sdk::structured`], [`sdk::prompt::Template`], the constructors on [`Message`] and
//! [`ContentBlock`]).

pub use tamp_plugin_abi::{
    budget, capability, conversation, edit, error, llm, page, report, services,
};

pub mod deferred;
pub mod host;
pub mod logging;
pub mod module;
mod panics;
pub mod sdk;
/// The rules a compaction keeps, versioned with the ABI (the SDK re-exports each module).
pub use tamp_plugin_abi::rules;
pub mod strategy;

pub use budget::Budget;
pub use conversation::{
    ContentBlock, Conversation, Message, Role, SummaryInfo, SummaryStatus, ToolResultPart,
};
pub use deferred::{DeferredRequest, DeferredState, DeferredStatus};
pub use error::{ErrorKind, HostError, PluginError};
pub use host::{CallFinished, Host};
pub use llm::{LlmRequest, LlmResponse, Usage};
pub use logging::{LogLevel, LogSink};
pub use page::{Page, PageDraft};
pub use report::StageReport;
pub use services::{CachedSummary, HostServices, HostServicesBox, HostServices_TO, ProgressEvent};
pub use strategy::{new_strategy, parse_config, Compaction, Strategy, StrategyAdapter};
pub use tamp_plugin_abi::edit::{Edit, EditFfi, Span};
pub use tamp_plugin_abi::{
    CompactOutcome, CompactRequest, PluginInfo, PluginModule, PluginModuleRef, StrategyBox,
    StrategyFfi, StrategyFfi_TO, ABI_VERSION,
};

/// The ABI version this SDK builds plugins against (the ABI crate's, [`ABI_VERSION`]).
pub const PLUGIN_API_VERSION: &str = ABI_VERSION;

/// A value shared across the boundary without copying (the conversation a stage reads);
/// it dereferences to the value.
pub type Shared<T> = abi_stable::std_types::RArc<T>;

pub use tamp_plugin_abi::{
    FfiFuture, FfiOption, FfiResult, FfiSlice, FfiStr, FfiString, FfiVec, IntoFfiFuture, TD_Opaque,
};

#[doc(hidden)]
pub use module::__private;

/// Everything a strategy implementation usually needs, in one `use`.
pub mod prelude {
    pub use crate::sdk::{
        self, ReportExt, SchemaRequest, StructuredAnswer, Template, Unit, UnitKind,
    };
    pub use crate::{
        export_plugin, Budget, CompactOutcome, Compaction, ContentBlock, Conversation, Edit,
        ErrorKind, Host, HostError, LlmRequest, LlmResponse, Message, PluginError, Role,
        StageReport, Strategy, SummaryStatus, ToolResultPart,
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
