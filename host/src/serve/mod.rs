//! `tamp serve`: the HTTP API over a chain that hot-reloads from its config file, and
//! `tamp check-config`, which builds a chain the way a reload does without serving.
//!
//! - [`api`]: routes, request and error bodies, auth.
//! - [`reload`]: the active chain's slot, the directory watcher, debounce and swap.
//! - [`active`]: building a chain from its file, and the hash that identifies it.
//! - [`metrics`]: Prometheus counters and histograms.
//!
//! See `docs/serve.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::chain::FileOverrides;

pub mod active;
pub mod api;
pub mod metrics;
pub mod reload;

pub use active::{ActiveChain, ConfigProblem};

/// `tamp serve` arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  tamp serve --config chain.toml --listen 127.0.0.1:7474\n  \
    curl -s localhost:7474/v1/compact -d '{\"conversation\": {\"messages\": [...]}}'\n\n\
    Routes: POST /v1/compact, GET /v1/pages/{id}, GET /v1/chain, GET /healthz, GET /metrics.\n\
    Edit the chain file while it runs: the new chain is built aside and swapped in; an \
    invalid one is refused (see GET /v1/chain's last_reload_error) and the old chain stays."
)]
pub struct ServeArgs {
    /// The chain file to serve and watch.
    #[arg(short, long)]
    pub config: PathBuf,
    /// Address to listen on. Loopback by default: put a proxy or --auth-token-env in front
    /// before exposing it.
    #[arg(long, default_value = "127.0.0.1:7474", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Largest request body accepted (bytes, or with a KiB/MiB/GiB suffix); larger ones are
    /// answered 413.
    #[arg(long, default_value = "8MiB", value_parser = parse_size, value_name = "SIZE")]
    pub max_body: usize,
    /// Require `Authorization: Bearer <token>` on every route but /healthz, the token read
    /// from this environment variable (never from the command line, so it stays out of `ps`).
    #[arg(long, value_name = "NAME")]
    pub auth_token_env: Option<String>,
    /// Reload once the config has been quiet this long after a change (milliseconds).
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub debounce_ms: u64,
    /// Use this page store file instead of the chain file's.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// On SIGTERM or Ctrl-C, wait at most this long for requests in flight (seconds).
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub shutdown_grace_secs: f64,
}

/// `8MiB`, `512KiB`, `1GiB`, `1048576`.
fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: usize = digits
        .parse()
        .map_err(|_| format!("\"{text}\": expected a size like 8MiB, 512KiB or 1048576"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "\"{text}\": unknown unit \"{other}\" (KiB, MiB, GiB)"
            ))
        }
    };
    n.checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("\"{text}\": must be a positive size"))
}

/// Runs `tamp serve` until SIGTERM or Ctrl-C.
pub fn run_cli(args: ServeArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let auth_token = match &args.auth_token_env {
        None => None,
        Some(name) => match std::env::var(name) {
            Ok(token) if !token.is_empty() => Some(token),
            _ => bail!(
                "--auth-token-env {name}: the environment variable {name} is not set or empty"
            ),
        },
    };
    // See `loader::load_from_private_copies` for why every plugin is loaded from a copy.
    crate::loader::load_from_private_copies();
    crate::loader::remove_stale_private_copies();
    let overrides = FileOverrides {
        store_path: args.store.clone(),
        progress: None,
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
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker = start_batch_worker(&slot, stop_rx.clone())?;
    let in_flight = Arc::new(api::InFlight::default());
    let state = Arc::new(api::AppState {
        slot,
        metrics,
        auth_token,
        in_flight: Arc::clone(&in_flight),
        batch_metrics: worker.as_ref().map(|w| w.shared_metrics()),
    });
    let app = api::router(state, args.max_body);

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // Tools (and the tests) wait for this line to learn the port of `--listen 127.0.0.1:0`.
    eprintln!("tamp serve: listening on http://{addr}");
    eprintln!("tamp serve: serving {summary}");

    let server = axum::serve(listener, app).with_graceful_shutdown({
        let mut stop = stop_rx.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    });
    let signal = tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("tamp serve: shutting down: no new connections; finishing requests in flight");
        let _ = stop_tx.send(true);
    });

    let grace = Duration::from_secs_f64(args.shutdown_grace_secs.max(0.0));
    let mut stop = stop_rx;
    let drained = async {
        server.await?;
        // Compactions whose client hung up still run on their own tasks: let them finish
        // (their pages are written as they go).
        in_flight.wait_idle().await;
        Ok::<_, std::io::Error>(())
    };
    tokio::select! {
        result = drained => result.context("the HTTP server failed")?,
        _ = async {
            let _ = stop.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => {
            eprintln!(
                "tamp serve: {} request(s) still running after {:.0}s; stopping anyway",
                in_flight.count(),
                grace.as_secs_f64()
            );
        }
    }
    signal.abort();
    if let Some(worker) = worker {
        // Its pass in hand finishes; whatever it leaves is resumed by the next worker.
        worker.join().await;
    }
    watcher.abort();
    let _ = watcher.await;
    // The chains (and with them the page stores, whose writes have all been committed by
    // now) are dropped here: the SQLite connections close and checkpoint their WAL.
    crate::loader::remove_private_copies();
    eprintln!("tamp serve: stopped");
    Ok(())
}

/// Starts the deferred-summary worker when the chain has a `batch-deferred` stage: its
/// queue is the chain's store, its settings `[batch]` (read at start; a reload does not
/// restart it). It stops when `stop` turns true.
fn start_batch_worker(
    slot: &reload::ChainSlot,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<crate::deferred::WorkerHandle>> {
    let active = slot.current();
    let defers = active
        .chain
        .stages()
        .iter()
        .any(|s| s.plugin.meta().name == crate::deferred::PLUGIN_NAME);
    if !defers {
        return Ok(None);
    }
    let Some(queue) = active.chain.store().deferred_queue() else {
        bail!("the chain has a batch-deferred stage but its store keeps no deferred queue");
    };
    let file = crate::config::LoadedChainFile::read(&active.config_path)?;
    let worker = crate::deferred::Worker::from_chain_file(&file, queue)?
        .with_pages(Arc::clone(active.chain.store()));
    eprintln!("tamp serve: deferred-summary worker started");
    let mut stop = stop;
    Ok(Some(worker.spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
    })))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `tamp check-config` arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:\n  tamp check-config chain.toml && echo ok\n\n\
    Exits 1 with the same file:line: field: message a reload of `tamp serve` would log.")]
pub struct CheckConfigArgs {
    /// The chain file to validate.
    pub config: PathBuf,
    /// Use this page store file instead of the chain file's (the store is opened, as a
    /// reload would).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
}

/// Validates a chain file the way a reload would, without serving: parses it, loads every
/// plugin, validates every stage config against its plugin's schema and instantiates it.
pub fn check_config_cli(args: CheckConfigArgs) -> anyhow::Result<()> {
    let overrides = FileOverrides {
        store_path: args.store,
        progress: None,
    };
    // Loaded as the server loads them, so the config hash printed is the one it would show.
    crate::loader::load_from_private_copies();
    let built = ActiveChain::build(&args.config, overrides);
    crate::loader::remove_private_copies();
    println!(
        "ok: {}",
        built.map_err(|p| anyhow::anyhow!("{p}"))?.summary()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert!(parse_size("8 parsecs").unwrap_err().contains("parsecs"));
        assert!(parse_size("0").is_err());
        assert!(parse_size("MiB").is_err());
    }
}
