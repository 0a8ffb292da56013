//! The process's one wasmtime engine, and the ticker that drives its epoch.

use std::sync::OnceLock;
use std::time::Duration;

use wasmtime::{Config, Engine};

/// How often the engine's epoch advances: each running guest yields to the executor this
/// often, and a guest past its deadline is stopped within one tick of it.
pub const TICK: Duration = Duration::from_millis(10);

/// The engine every component is compiled for and run on (created on first use, with the
/// thread that ticks its epoch).
pub fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut config = Config::new();
            // Guests yield at every epoch tick (and await async host services: LLM calls,
            // pages), so calls run as futures on the host's executor.
            config.epoch_interruption(true);
            config.wasm_component_model(true);
            let engine = Engine::new(&config).map_err(|e| format!("wasmtime: {e}"))?;
            // The engine lives as long as the process (a static), and so does its ticker.
            let ticking = engine.clone();
            std::thread::Builder::new()
                .name("tamp-wasm-epoch".into())
                .spawn(move || loop {
                    std::thread::sleep(TICK);
                    ticking.increment_epoch();
                })
                .map_err(|e| format!("cannot start the epoch ticker: {e}"))?;
            Ok(engine)
        })
        .as_ref()
        .map_err(Clone::clone)
}
