//! What one guest instance may use, and how its failures read: the store's state (the memory
//! cap, the call's deadline, the call's host services), and the classification of what
//! stopped a call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tamp_plugin_api::{Conversation, ErrorKind, HostServicesBox, PluginError, Shared};
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

/// A table element's size in the cap (wasmtime keeps a pointer per element).
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// The store's data: everything a guest's imports reach, and its limits.
pub struct GuestState {
    /// The plugin's name: its pages' strategy and its log events' tag.
    pub plugin: Arc<str>,
    pub(super) memory: MemoryCap,
    /// The call in progress: what the `host` imports serve. `None` outside `compact`.
    pub(super) call: Option<CallContext>,
    /// When the call in progress must have returned.
    deadline: Option<(Instant, Duration)>,
}

/// What the host services of one `compact` call reach.
pub(super) struct CallContext {
    pub host: HostServicesBox,
    pub input: Shared<Conversation>,
}

impl GuestState {
    /// A store for one instance of a component, its memory capped at `memory_bytes` and
    /// counted in `in_use` (the component's gauge: every live instance's bytes).
    pub fn store(
        engine: &wasmtime::Engine,
        plugin: Arc<str>,
        memory_bytes: usize,
        in_use: Arc<AtomicUsize>,
    ) -> Store<Self> {
        let mut store = Store::new(
            engine,
            GuestState {
                plugin,
                memory: MemoryCap {
                    cap: memory_bytes,
                    held: 0,
                    in_use,
                },
                call: None,
                deadline: None,
            },
        );
        store.limiter(|state| &mut state.memory);
        // Every tick the guest yields to the executor, so a caller's own timer can fire and
        // drop the call; past its deadline it traps.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|ctx| match ctx.data().deadline {
            Some((at, after)) if Instant::now() >= at => {
                Err(wasmtime::Error::new(DeadlineExceeded { after }))
            }
            _ => Ok(UpdateDeadline::Yield(1)),
        });
        store
    }

    /// Bytes of linear memory and tables this instance holds.
    pub fn memory_held(&self) -> usize {
        self.memory.held
    }

    /// Sets the deadline of the next call: `after` from now.
    pub fn start_call(&mut self, after: Duration) {
        self.deadline = Some((Instant::now() + after, after));
    }
}

/// The linear memory (and tables) cap of one instance, and its component's gauge.
pub(super) struct MemoryCap {
    cap: usize,
    held: usize,
    in_use: Arc<AtomicUsize>,
}

impl MemoryCap {
    fn grow(&mut self, current: usize, desired: usize) -> wasmtime::Result<bool> {
        let added = desired.saturating_sub(current);
        let wanted = self.held.saturating_add(added);
        if wanted > self.cap {
            return Err(wasmtime::Error::new(MemoryCapExceeded {
                cap: self.cap,
                wanted,
            }));
        }
        self.held = wanted;
        self.in_use.fetch_add(added, Ordering::Relaxed);
        Ok(true)
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(current, desired)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }
}

impl Drop for MemoryCap {
    fn drop(&mut self) {
        self.in_use.fetch_sub(self.held, Ordering::Relaxed);
    }
}

/// A guest asked for more memory than its cap.
#[derive(Debug)]
struct MemoryCapExceeded {
    cap: usize,
    wanted: usize,
}

impl std::fmt::Display for MemoryCapExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "out of memory: the guest asked for {} MiB of linear memory, over its cap of {} MiB \
             (memory_mib)",
            self.wanted.div_ceil(1 << 20),
            self.cap >> 20
        )
    }
}

impl std::error::Error for MemoryCapExceeded {}

/// A guest still running at its deadline.
#[derive(Debug)]
struct DeadlineExceeded {
    after: Duration,
}

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stopped by epoch interruption: still running at its deadline, {:.1}s after the \
             call began",
            self.after.as_secs_f64()
        )
    }
}

impl std::error::Error for DeadlineExceeded {}

/// What a call that did not return stands for, as the chain reports it: a trap, the
/// memory cap or the deadline is the guest's panic (`ErrorKind::Panicked`), and the instance
/// it happened in is dropped.
pub(super) fn failure(e: &wasmtime::Error) -> PluginError {
    let message = if let Some(cap) = e.downcast_ref::<MemoryCapExceeded>() {
        cap.to_string()
    } else if let Some(deadline) = e.downcast_ref::<DeadlineExceeded>() {
        deadline.to_string()
    } else if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        format!("the guest trapped: {trap}{}", backtrace(e))
    } else {
        format!("the guest stopped: {e}{}", backtrace(e))
    };
    PluginError::new(ErrorKind::Panicked, message)
}

/// The guest's frames, when wasmtime recorded them (the first few: enough to find the
/// function).
fn backtrace(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<wasmtime::WasmBacktrace>() {
        Some(trace) => {
            let text = trace.to_string();
            let lines: Vec<&str> = text.lines().take(8).collect();
            format!("\n{}", lines.join("\n"))
        }
        None => String::new(),
    }
}
