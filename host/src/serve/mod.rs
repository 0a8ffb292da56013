//! `tamp serve`: the HTTP API over a chain that hot-reloads from its config file, and
//! `tamp check-config`, which builds a chain the way a reload does without serving.
//!
//! - [`api`]: the routes, their request bodies and handlers.
//!
//! The server pieces it shares with `tamp proxy` (the accept loop and shutdown, the limits,
//! the error answer, the Host check and token, the reloadable chain slot and its watcher, the
//! active chain, the metrics) are `crate::http`'s. See `docs/serve.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::chain::FileOverrides;
use crate::http::access;
use crate::http::limits::Gate;
use crate::http::server::Startup;

pub mod api;

pub use crate::http::active::{ActiveChain, ConfigProblem};

/// How `tamp serve` runs: the CLI's flags, parsed (`tamp serve --help` says what each does).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The chain file, served and watched.
    pub config: PathBuf,
    pub listen: SocketAddr,
    /// Bytes; a larger body is answered 413.
    pub max_body: usize,
    /// The environment variable holding the bearer token every route but /healthz requires.
    pub auth_token_env: Option<String>,
    /// Quiet time after a change of the chain file before it is reloaded.
    pub debounce_ms: u64,
    /// A page store file instead of the chain file's.
    pub store: Option<PathBuf>,
    /// How long a shutdown waits for requests in flight.
    pub shutdown_grace_secs: f64,
    /// Limit on a request head's arrival and on an idle connection.
    pub header_timeout_secs: f64,
    /// Limit on a request body's arrival (408 after it).
    pub body_timeout_secs: f64,
    /// Requests answered at once (503 beyond).
    pub max_concurrent: u32,
    /// Connections open at once (more wait to be accepted).
    pub max_connections: u32,
    /// Refuse a stage without a `sha256` pin.
    pub require_pins: bool,
}

/// Runs `tamp serve` until SIGTERM or Ctrl-C.
pub async fn run(args: ServeOptions) -> anyhow::Result<()> {
    let started = Startup {
        name: "tamp serve",
        config: args.config,
        overrides: FileOverrides {
            store_path: args.store,
            progress: None,
            require_pins: args.require_pins,
            check_only: false,
        },
        listen: args.listen,
        auth_token_env: args.auth_token_env,
        guards: access::serve_guards,
        debounce_ms: args.debounce_ms,
        max_connections: args.max_connections,
        header_timeout_secs: args.header_timeout_secs,
        shutdown_grace_secs: args.shutdown_grace_secs,
    }
    .start()
    .await?;
    let state = Arc::new(api::AppState {
        slot: Arc::clone(&started.slot),
        metrics: Arc::clone(&started.metrics),
        access: Arc::clone(&started.access),
        in_flight: Arc::clone(&started.in_flight),
        batch_metrics: started.worker.as_ref().map(|w| w.shared_metrics()),
        gate: Gate::new(
            args.max_body,
            crate::bounded::saturating_seconds(args.body_timeout_secs),
            args.max_concurrent as usize,
            started.stopping.clone(),
        ),
    });
    started.serve(api::router(state), &[]).await
}

/// Validates a chain file the way a reload would, without serving: parses it, loads every
/// plugin, validates every stage config against its plugin's schema and instantiates it.
/// Returns the line that describes the chain (with the config hash the server would show).
pub fn check_config(config: &Path, overrides: FileOverrides) -> anyhow::Result<String> {
    // Loaded as the server loads them, so the config hash printed is the one it would show.
    crate::loader::load_from_private_copies();
    let built = ActiveChain::build(config, overrides);
    crate::loader::remove_private_copies();
    Ok(built.map_err(|p| anyhow::anyhow!("{p}"))?.summary())
}
