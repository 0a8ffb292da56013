//! `tamp serve`: the HTTP API over a chain that hot-reloads from its config file.
//!
//! - [`api`]: the routes, their request bodies and handlers.
//!
//! The server pieces it shares with `tamp proxy` (the accept loop and shutdown, the limits,
//! the error answer, the Host check and token, the reloadable chain slot and its watcher, the
//! active chain, the metrics) are `crate::http`'s. See `docs/serve.md`.

use std::sync::Arc;

use crate::console::{Console, Recorder};
use crate::http::access;
use crate::http::listener::{ServerOptions, Startup};

pub mod api;

pub use crate::http::active::{ActiveChain, ConfigProblem};

/// How `tamp serve` runs: the CLI's flags, parsed (`tamp serve --help` says what each does).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The flags `tamp proxy` has too.
    pub server: ServerOptions,
    /// Requests answered at once (503 beyond).
    pub max_concurrent: u32,
    /// Refuse a stage without a `sha256` pin.
    pub require_pins: bool,
}

/// Runs `tamp serve` until SIGTERM or Ctrl-C.
pub async fn run(args: ServeOptions) -> anyhow::Result<()> {
    let started = Startup::new("tamp serve", access::serve_guards, args.server)
        .require_pins(args.require_pins)
        .start()
        .await?;
    let options = started.options().clone();
    let recorder = Arc::new(Recorder::start(Arc::clone(&started.slot)));
    // Closed once the server has stopped, so that the store is let go before the exit.
    let recorder_of_run = Arc::clone(&recorder);
    let mut state = api::AppState {
        slot: Arc::clone(&started.slot),
        metrics: Arc::clone(&started.metrics),
        access: Arc::clone(&started.access),
        in_flight: Arc::clone(&started.in_flight),
        batch_metrics: started.worker.as_ref().map(|w| w.shared_metrics()),
        gate: started.gate(args.max_concurrent as usize),
        recorder: Arc::clone(&recorder),
        console: None,
    };
    let mut more = Vec::new();
    if crate::console::enabled(options.console, options.listen.ip()) {
        more.push(format!(
            "console on http://{}{}",
            crate::http::listener::LISTEN_ADDR,
            crate::console::PATH
        ));
        let exposition = api::Exposition::of(&state);
        state.console = Some(Arc::new(Console {
            slot: Arc::clone(&started.slot),
            recorder,
            exposition: Box::new(move || exposition.text()),
            server: "tamp serve",
        }));
    }
    let served = started.serve(api::router(Arc::new(state)), &more).await;
    recorder_of_run.close().await;
    served
}
