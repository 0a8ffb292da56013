//! `tamp batch`: the deferred worker from the command line.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Subcommand};

use tamp_host::config::LoadedChainFile;
use tamp_host::store::queue::QueueStatus;
use tamp_host::store::Store;

/// `tamp batch ...`
#[derive(Debug, Subcommand)]
pub enum BatchCommand {
    /// Send every queued deferred request as Message Batches, poll the open batches once and
    /// apply the results of those that ended, then exit (for cron).
    ///
    /// Example: tamp batch run-once --config chain.toml
    RunOnce(RunArgs),
    /// Run the worker until interrupted (Ctrl-C or SIGTERM): submit every
    /// batch.submit_interval_secs, poll every batch.poll_interval_secs.
    Work(RunArgs),
    /// Show the queue: counts by state, the oldest unfinished item, open batches, tokens
    /// billed through batches.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The chain file: its [batch] and [provider] sections and its store.
    #[arg(short, long)]
    pub config: PathBuf,
    /// Use this store file instead of the chain file's.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Print the pass report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Take the store location (and prices) from this chain file.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// The store file (default: the chain file's store, else .tamp/store.sqlite3).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The store `file` names (`[store]`: a SQLite file or a PostgreSQL database),
/// or of the `--store` file.
fn open_store(file: Option<&LoadedChainFile>, store: Option<&Path>) -> Result<Store> {
    Ok(tamp_host::store::open(&tamp_host::config::store_spec(
        file, store,
    )?)?)
}

/// Runs a `tamp batch` command.
pub async fn run(command: BatchCommand) -> Result<()> {
    match command {
        BatchCommand::RunOnce(args) => {
            let file = LoadedChainFile::read(&args.config)?;
            let store = open_store(Some(&file), args.store.as_deref())?;
            let worker = file.batch_worker(store.queue)?.with_pages(store.pages);
            let report = worker.run_once().await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{report}");
            }
            Ok(())
        }
        BatchCommand::Work(args) => {
            let file = LoadedChainFile::read(&args.config)?;
            let store = open_store(Some(&file), args.store.as_deref())?;
            let worker = file.batch_worker(store.queue)?.with_pages(store.pages);
            let metrics = worker.metrics();
            let handle = worker.spawn(tamp_host::signals::shutdown());
            eprintln!("tamp batch: worker running; Ctrl-C or SIGTERM stops it");
            handle.join().await;
            let snap = metrics.snapshot();
            eprintln!(
                "tamp batch: stopped; {} submitted, {} succeeded, {} failed, {} fallbacks",
                snap.submitted, snap.succeeded, snap.failed, snap.fallbacks
            );
            Ok(())
        }
        BatchCommand::Status(args) => {
            let file = match &args.config {
                Some(path) => Some(LoadedChainFile::read(path)?),
                None => None,
            };
            // Read only: a status never changes the store (nor migrates it).
            let spec = tamp_host::config::store_spec(file.as_ref(), args.store.as_deref())?;
            let queue = tamp_host::store::open_read_only(&spec)?.queue;
            let status = queue.status().await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                let price = file.as_ref().and_then(|f| f.file.provider.price);
                print!("{}", render_status(&status, price.as_ref()));
            }
            Ok(())
        }
    }
}

fn ago(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let secs = now.saturating_sub(ms) / 1000;
    match secs {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s => format!("{}h ago", s / 3600),
    }
}

/// The text `tamp batch status` prints.
pub fn render_status(
    status: &QueueStatus,
    price: Option<&tamp_host::providers::PriceConfig>,
) -> String {
    let mut out = format!(
        "queue: {} queued, {} submitted, {} done, {} failed\n",
        status.queued, status.submitted, status.done, status.failed
    );
    match &status.oldest_unfinished {
        Some((id, at, state)) => out.push_str(&format!(
            "oldest unfinished: {id} ({}, queued {})\n",
            state.as_str(),
            ago(*at)
        )),
        None => out.push_str("oldest unfinished: none\n"),
    }
    if status.open_batches.is_empty() {
        out.push_str("open batches: none\n");
    } else {
        out.push_str(&format!("open batches: {}\n", status.open_batches.len()));
        for b in &status.open_batches {
            out.push_str(&format!(
                "  {} ({} request(s), submitted {})\n",
                b.batch_id,
                b.items,
                ago(b.submitted_ms)
            ));
        }
    }
    let usage = |u: &tamp_host::plugin_api::Usage| {
        format!(
            "{} input + {} output tokens",
            u.input_tokens, u.output_tokens
        )
    };
    out.push_str(&format!(
        "billed through batches: {}\nbilled through the sync fallback: {}\n",
        usage(&status.batch_usage),
        usage(&status.sync_usage)
    ));
    if let Some(price) = price {
        out.push_str(&format!(
            "estimated cost: ${:.4} through batches (${:.4} at the synchronous price), ${:.4} sync fallback\n",
            price.batch_cost_of(&status.batch_usage),
            price.cost_of(&status.batch_usage),
            price.cost_of(&status.sync_usage)
        ));
    }
    out
}
