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
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::chain::FileOverrides;
use crate::http::server::{
    auth_token, run_until_shutdown, start_batch_worker, warn_if_over_file_limit, ConnectionLimits,
    Running,
};
use crate::http::{access, limits, metrics, reload};

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
    let auth_token = match &args.auth_token_env {
        None => None,
        Some(name) => Some(auth_token(name, std::env::var(name).ok())?),
    };
    warn_if_over_file_limit(args.max_connections);
    // See `loader::load_from_private_copies` for why every plugin is loaded from a copy.
    crate::loader::load_from_private_copies();
    crate::loader::remove_stale_private_copies();
    let overrides = FileOverrides {
        store_path: args.store.clone(),
        progress: None,
        require_pins: args.require_pins,
        check_only: false,
    };
    let config = args.config.clone();
    let first = {
        let overrides = overrides.clone();
        tokio::task::spawn_blocking(move || ActiveChain::build(&config, overrides)).await?
    }
    .map_err(|problem| anyhow::anyhow!("{problem}"))?;
    let summary = first.summary();

    let metrics = Arc::new(metrics::Metrics::default());
    let slot = Arc::new(reload::ChainSlot::new(
        first,
        args.config.clone(),
        overrides,
        Arc::clone(&metrics),
    ));
    let watcher = reload::spawn_watcher(Arc::clone(&slot), Duration::from_millis(args.debounce_ms))
        .with_context(|| format!("cannot watch {} for changes", args.config.display()))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let worker = start_batch_worker(&slot, stop_rx.clone())?;
    let in_flight = Arc::new(limits::InFlight::default());
    let access = access::Access::new(
        args.listen.ip(),
        auth_token,
        access::serve_guards,
        Arc::clone(&slot),
    );
    let state = Arc::new(api::AppState {
        slot,
        metrics,
        access,
        in_flight: Arc::clone(&in_flight),
        batch_metrics: worker.as_ref().map(|w| w.shared_metrics()),
        gate: limits::Gate::new(
            args.max_body,
            crate::bounded::saturating_seconds(args.body_timeout_secs),
            args.max_concurrent as usize,
            stop_rx.clone(),
        ),
    });
    let app = api::router(state);

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // Tools (and the tests) wait for this line to learn the port of `--listen 127.0.0.1:0`.
    eprintln!("tamp serve: listening on http://{addr}");
    eprintln!("tamp serve: serving {summary}");

    run_until_shutdown(
        "tamp serve",
        listener,
        app,
        Running {
            limits: ConnectionLimits::of(args.max_connections, args.header_timeout_secs),
            stop: (stop_tx, stop_rx),
            in_flight,
            grace_secs: args.shutdown_grace_secs,
            worker,
            watcher,
        },
    )
    .await
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
