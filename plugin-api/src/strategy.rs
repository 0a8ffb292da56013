//! The strategy a plugin implements, and its adapter to the ABI.
//!
//! A plugin author implements [`Strategy`] with ordinary Rust types and an `async fn`; the
//! [`export_plugin!`](crate::export_plugin) macro wraps it in [`StrategyFfi`], the
//! ABI-stable trait object the host calls, catching every panic on the plugin's side of the
//! boundary (a panic that unwound into the host would end the process).

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::RResult;
use async_ffi::{FfiFuture, FutureExt as _};
use futures_util::FutureExt as _;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::budget::Budget;
use crate::conversation::Conversation;
use crate::error::{ErrorKind, PluginError};
use crate::host::Host;
use crate::Shared;
use crate::{CompactOutcome, CompactRequest, StrategyBox, StrategyFfi, StrategyFfi_TO};

/// A compaction strategy, as a plugin author writes it: a config type, a constructor, and an
/// `async fn compact` that reads the conversation and returns the [`Edit`](crate::Edit)s to
/// make (the host checks, archives and applies them).
///
/// ```
/// use tamp_plugin_api::prelude::*;
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
/// #[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
/// #[schemars(crate = "tamp_plugin_api::schemars")]
/// pub struct MyConfig {
///     /// Old units left as they are before the one archived.
///     pub skip_units: usize,
/// }
///
/// pub struct MyStrategy {
///     config: MyConfig,
/// }
///
/// impl Strategy for MyStrategy {
///     type Config = MyConfig;
///     const NAME: &'static str = "my-strategy";
///     const DESCRIPTION: &'static str = "Archives one old unit behind a short note.";
///
///     fn new(config: MyConfig) -> Result<Self, PluginError> {
///         Ok(MyStrategy { config })
///     }
///
///     async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
///         let messages = &input.conversation.messages;
///         let range = sdk::compactable_range(messages, input.budget.keep_recent as usize);
///         // A whole unit (a message, or a tool call with its results) no stage must leave.
///         let Some(unit) = sdk::units(messages)
///             .into_iter()
///             .filter(|u| !u.is_pinned())
///             .filter(|u| range.start <= u.range.start && u.range.end <= range.end)
///             .nth(self.config.skip_units)
///         else {
///             return Ok(CompactOutcome::unchanged("nothing old enough"));
///         };
///         let note = format!("{} message(s) archived", unit.range.len());
///         if !input.host.summary_is_smaller(&note, &messages[unit.range.clone()]) {
///             return Ok(CompactOutcome::unchanged("the note would not be smaller"));
///         }
///         let report = StageReport::acted("archived one unit");
///         Ok(CompactOutcome::with_edits([Edit::summarize(unit.range, note)], report))
///     }
/// }
///
/// tamp_plugin_api::export_plugin!(MyStrategy);
/// ```
pub trait Strategy: Sized + Send + Sync + 'static {
    /// The stage config. Its JSON Schema (from `schemars`) is what the host validates a
    /// chain file's `[stage.config]` against; `Default` is the default config. Use
    /// `#[serde(deny_unknown_fields)]` so a misspelt key is an error.
    type Config: Serialize + DeserializeOwned + JsonSchema + Default;

    /// The plugin's name, e.g. `buffered-tool-call`.
    const NAME: &'static str;

    /// One sentence on what the strategy does.
    const DESCRIPTION: &'static str;

    /// Builds an instance from a config that already passed deserialization; reject
    /// combinations the schema cannot express here (e.g. `low >= high`).
    fn new(config: Self::Config) -> Result<Self, PluginError>;

    /// Compacts one conversation. Called concurrently from many tasks on one instance.
    fn compact(
        &self,
        input: Compaction,
    ) -> impl Future<Output = Result<CompactOutcome, PluginError>> + Send;
}

/// A [`Strategy`]'s input: the conversation (shared with the host: read it, return
/// [`Edit`](crate::Edit)s), the budget and the host.
pub struct Compaction {
    pub conversation: Shared<Conversation>,
    pub budget: Budget,
    pub host: Host,
    pub stage: String,
}

impl Compaction {
    /// The messages this stage may change: after the leading system messages and the task,
    /// before the protected tail of `budget.keep_recent` messages, never splitting a tool
    /// exchange ([`compactable_range`](crate::rules::protect::compactable_range)). A
    /// WebAssembly guest is given the same range as its request's `compactable`.
    pub fn compactable(&self) -> std::ops::Range<usize> {
        crate::rules::protect::compactable_range(
            &self.conversation.messages,
            self.budget.keep_recent as usize,
        )
    }
}

/// Adapts a [`Strategy`] to [`StrategyFfi`].
pub struct StrategyAdapter<S: Strategy>(Arc<S>);

impl<S: Strategy> StrategyAdapter<S> {
    pub fn new(strategy: S) -> Self {
        StrategyAdapter(Arc::new(strategy))
    }

    /// Boxes the adapter as the ABI trait object.
    pub fn into_box(self) -> StrategyBox {
        StrategyFfi_TO::from_value(self, TD_Opaque)
    }
}

/// Turns a panic payload into the message it carried.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// The error a caught panic becomes: its message, and where it happened when this library's
/// hook saw it ([`crate::panics`]).
fn panicked(payload: Box<dyn std::any::Any + Send>) -> PluginError {
    let message = panic_message(&*payload);
    let message = match crate::panics::take_place() {
        Some(place) => format!("{message} (at {place})"),
        None => message,
    };
    PluginError::new(ErrorKind::Panicked, message)
}

impl<S: Strategy> StrategyFfi for StrategyAdapter<S> {
    fn compact(&self, request: CompactRequest) -> FfiFuture<RResult<CompactOutcome, PluginError>> {
        let strategy = Arc::clone(&self.0);
        let input = Compaction {
            conversation: request.conversation,
            budget: request.budget,
            host: Host::new(request.host, S::NAME),
            stage: request.stage.into(),
        };
        async move {
            // Both building the future and polling it run user code; either may panic.
            let run = AssertUnwindSafe(async move { strategy.compact(input).await });
            let outcome = match run.catch_unwind().await {
                Ok(result) => result,
                Err(payload) => Err(panicked(payload)),
            };
            RResult::from(outcome)
        }
        .into_ffi()
    }
}

/// Deserializes a stage config from JSON, naming the path of a bad field.
pub fn parse_config<C: DeserializeOwned>(config_json: &str) -> Result<C, PluginError> {
    let text = if config_json.trim().is_empty() {
        "{}"
    } else {
        config_json
    };
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            PluginError::invalid_config(e.inner().to_string())
        } else {
            PluginError::invalid_config(format!("{path}: {}", e.inner()))
        }
    })
}

/// Builds a strategy from config JSON, catching panics in the author's constructor.
pub fn new_strategy<S: Strategy>(config_json: &str) -> Result<StrategyBox, PluginError> {
    catch_unwind(AssertUnwindSafe(|| {
        let config: S::Config = parse_config(config_json)?;
        S::new(config).map(|s| StrategyAdapter::new(s).into_box())
    }))
    .unwrap_or_else(|payload| Err(panicked(payload)))
}
