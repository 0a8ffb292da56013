//! A component as a strategy the chain calls: the host-side adapter that makes a guest look
//! like any other plugin (`StrategyFfi`) to the chain and the conformance kit.
//!
//! An instance of a component runs one call at a time (its store is the guest's memory), so a
//! stage keeps a small pool of instances, each built with the stage's config: a call takes an
//! idle one or starts a new one, up to `max_instances` at once, and gives it back when the
//! guest returned. An instance in which the guest trapped, ran out of memory, overran its
//! deadline or was dropped by its caller's timeout is dropped with its memory.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tamp_plugin_api::rules::protect::compactable_range;
use tamp_plugin_api::{
    CompactOutcome, CompactRequest, FfiFuture, FfiResult, IntoFfiFuture as _, PluginError,
    StrategyBox, StrategyFfi, StrategyFfi_TO, TD_Opaque,
};
use tokio::sync::Semaphore;
use wasmtime::Store;

use super::bindings::exports::tamp::strategy::strategy as wit;
use super::bindings::Plugin;
use super::engine::TICK;
use super::plugin::WasmComponent;
use super::sandbox::{failure, CallContext, GuestState};
use super::{convert, WasmLimits};

/// An instance grown past this many times its size after `new-strategy` (and past 16 MiB
/// more) is dropped after its call rather than kept: a WebAssembly memory never shrinks, and
/// one 5 MB conversation should not hold its peak for good.
const KEEP_GROWTH: usize = 2;

/// One instance of the component, built with the stage's config.
struct Guest {
    store: Store<GuestState>,
    plugin: Plugin,
    /// Its memory once built: what a call may grow it to before it is not kept.
    baseline: usize,
}

struct Stage {
    component: Arc<WasmComponent>,
    config_json: String,
    memory_bytes: usize,
    /// How long a call may run before the guest is stopped: the stage's timeout and two
    /// ticks, so that a caller timing the call itself (the chain does) sees its own timeout
    /// first, and the deadline only stops a guest whose caller has none.
    deadline: Duration,
    idle: Mutex<Vec<Guest>>,
    instances: Semaphore,
}

/// The adapter the chain holds as a `StrategyBox`.
struct WasmStrategy(Arc<Stage>);

impl WasmComponent {
    /// A strategy for a stage: `config` (already validated against the schema) is given to
    /// the component's `new-strategy`, in a first instance built now so a refused config
    /// fails the chain's build, not its first compaction. `timeout` is the stage's.
    pub fn instantiate(
        self: &Arc<Self>,
        config: &serde_json::Value,
        limits: &WasmLimits,
        timeout: Duration,
    ) -> Result<StrategyBox, PluginError> {
        let stage = Stage {
            component: Arc::clone(self),
            config_json: config.to_string(),
            memory_bytes: usize::try_from(limits.memory_mib() << 20).unwrap_or(usize::MAX),
            deadline: timeout.saturating_add(TICK * 2),
            idle: Mutex::new(Vec::new()),
            instances: Semaphore::new(limits.max_instances() as usize),
        };
        let first = futures::executor::block_on(stage.new_guest())?;
        stage.give_back(first);
        Ok(StrategyFfi_TO::from_value(
            WasmStrategy(Arc::new(stage)),
            TD_Opaque,
        ))
    }
}

impl Stage {
    /// A new instance, its strategy built with the stage's config.
    async fn new_guest(&self) -> Result<Guest, PluginError> {
        let (mut store, plugin) = self
            .component
            .instance(self.memory_bytes, self.deadline)
            .await?;
        plugin
            .tamp_strategy_strategy()
            .call_new_strategy(&mut store, &self.config_json)
            .await
            .map_err(|e| failure(&e))?
            .map_err(convert::error_back)?;
        let baseline = store.data().memory_held();
        Ok(Guest {
            store,
            plugin,
            baseline,
        })
    }

    fn give_back(&self, guest: Guest) {
        let held = guest.store.data().memory_held();
        if held <= guest.baseline.saturating_mul(KEEP_GROWTH) + (16 << 20) {
            self.idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(guest);
        }
    }

    async fn compact(&self, request: CompactRequest) -> Result<CompactOutcome, PluginError> {
        let _instance = self
            .instances
            .acquire()
            .await
            .map_err(|_| PluginError::internal("the stage's instances are closed"))?;
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        let mut guest = match idle {
            Some(guest) => guest,
            None => self.new_guest().await?,
        };
        let messages = &request.conversation.messages;
        let compactable = compactable_range(messages, request.budget.keep_recent as usize);
        let input = wit::CompactRequest {
            thread_id: request.conversation.thread_id().map(str::to_string),
            message_count: u32::try_from(messages.len()).unwrap_or(u32::MAX),
            budget: convert::budget(&request.budget),
            stage: request.stage.to_string(),
            compactable: super::bindings::tamp::strategy::types::Span {
                start: compactable.start as u32,
                end: compactable.end as u32,
            },
        };
        let state = guest.store.data_mut();
        state.call = Some(CallContext {
            host: request.host,
            input: request.conversation,
        });
        state.start_call(self.deadline);
        let answer = guest
            .plugin
            .tamp_strategy_strategy()
            .call_compact(&mut guest.store, &input)
            .await;
        guest.store.data_mut().call = None;
        match answer {
            Ok(returned) => {
                self.give_back(guest);
                returned
                    .map(convert::outcome_back)
                    .map_err(convert::error_back)
            }
            // The instance goes with its memory.
            Err(e) => Err(failure(&e)),
        }
    }
}

impl StrategyFfi for WasmStrategy {
    fn compact(
        &self,
        request: CompactRequest,
    ) -> FfiFuture<FfiResult<CompactOutcome, PluginError>> {
        let stage = Arc::clone(&self.0);
        async move { FfiResult::from(stage.compact(request).await) }.into_ffi()
    }
}
