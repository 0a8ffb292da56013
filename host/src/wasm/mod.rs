//! Strategies as WebAssembly components: the second plugin kind, sandboxed.
//!
//! A chain stage whose `plugin` is a `.wasm` file runs a component built against tamp's WIT
//! package (`plugin-abi/wit/tamp-strategy.wit`, `tamp:strategy@<ABI version>`) under
//! wasmtime. The loader hands such a file here instead of to the dynamic linker, and gets back
//! a plugin that looks like any other to the chain and the conformance kit: its metadata, and
//! `instantiate(config)` returning a `StrategyBox` (a host-side adapter, [`strategy`], that
//! runs the guest).
//!
//! The sandbox ([`engine`], [`sandbox`]):
//! - A guest imports `tamp:strategy/host` and nothing else: a component importing anything
//!   more (WASI's filesystem, sockets, environment, clocks) is refused at load. It reads what
//!   the host passes it and asks the host's services through its imports.
//! - Each instance's linear memory (and tables) is capped ([`WasmLimits`]); growing past the
//!   cap traps.
//! - Each call has a deadline, enforced by epoch interruption: a ticker advances the engine's
//!   epoch every [`engine::TICK`], a guest yields to the executor at every tick (so the
//!   chain's own stage timeout can drop it, which a native plugin's blocked thread does not
//!   allow), and a guest still running past its deadline traps.
//! - A trap, the memory cap or the deadline fails that call only: the instance is dropped
//!   (its memory returned), the stage rolled back, and the host goes on.
//!
//! The runtime (wasmtime, Cranelift) is the `wasm` cargo feature, off by default: it costs
//! minutes of build. Without it a `.wasm` stage is refused naming the feature; the limits
//! ([`WasmLimits`]) are parsed either way.

mod limits;

pub use limits::{WasmLimits, DEFAULT_MAX_INSTANCES, DEFAULT_MEMORY_MIB};

#[cfg(feature = "wasm")]
mod bindings;
#[cfg(feature = "wasm")]
mod cache;
#[cfg(feature = "wasm")]
mod convert;
#[cfg(feature = "wasm")]
pub mod engine;
#[cfg(feature = "wasm")]
mod imports;
#[cfg(feature = "wasm")]
mod plugin;
#[cfg(feature = "wasm")]
pub mod sandbox;
#[cfg(feature = "wasm")]
mod strategy;

#[cfg(feature = "wasm")]
pub use plugin::WasmComponent;

use std::path::Path;

/// The WIT package's version: the ABI version, which the component's exported interface
/// (`tamp:strategy/strategy@<version>`) must match (0.x: the same minor).
pub const WORLD_VERSION: &str = tamp_plugin_api::ABI_VERSION;

/// Whether a chain file's `plugin` names a WebAssembly component (a `.wasm` file).
pub fn is_component_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm")
}

/// Why this build cannot load a component (it lacks the `wasm` feature), or `None`.
pub fn unsupported() -> Option<&'static str> {
    if cfg!(feature = "wasm") {
        None
    } else {
        Some(
            "a WebAssembly component, and this tamp was built without WebAssembly support (the \
             `wasm` cargo feature: cargo build --release --workspace --features tamp-cli/wasm)",
        )
    }
}
