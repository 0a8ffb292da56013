//! `tamp batch`: the deferred worker from the command line.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Subcommand};

use tamp_host::config::LoadedChainFile;
use tamp_host::deferred::{Pass, PassReport, Worker, WorkerError};
use tamp_host::store::queue::QueueStatus;
use tamp_host::store::Store;

/// `tamp batch ...`
#[derive(Debug, Subcommand)]
pub enum BatchCommand {
    /// Send every queued deferred request as Message Batches, poll the open batches once and
    /// apply the results of those that ended, then exit (for cron).
    ///
    /// Prints one summary line (or, with --json, the pass report) on stdout; each API error
    /// of the pass goes to stderr.
    ///
    /// Exit status: 0 when the pass went well: every batch it had to create was created,
    /// every open batch polled, every ended batch's results read (requests whose result was
    /// an error are counted in the summary, and do not change the status). 1 when any of
    /// those API calls failed (the requests concerned stay queued or submitted for the next
    /// run), or when the chain file or store cannot be used; 2 on a usage error.
    ///
    /// Example: tamp batch run-once --config chain.toml
    RunOnce(RunArgs),
    /// Run the worker until interrupted (Ctrl-C or SIGTERM): submit every
    /// batch.submit_interval_secs, poll every batch.poll_interval_secs.
    ///
    /// Each pass's API errors, and its requests that failed for good, are printed on stderr
    /// as warnings; -v adds what every pass did. With --json, one JSON report per pass goes
    /// to stdout (JSON Lines).
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
    /// Print the pass report as JSON on stdout (the API errors are in its "errors"; on
    /// stderr too). `run-once`: the one report; `work`: one report per pass, a line each
    /// (JSON Lines), with "pass" ("submit" or "poll") added (a pass the store stopped has
    /// its error in "errors").
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

/// The chain file at `path` and the worker it describes, over its store (or `store`). The
/// chain file's worker settings are checked before the store is opened: a chain that cannot
/// run a worker creates no store file.
fn worker(path: &Path, store: Option<&Path>) -> Result<Worker> {
    let file = LoadedChainFile::read(path)?;
    file.check_batch_worker()?;
    let store = open_store(Some(&file), store)?;
    Ok(file.batch_worker(store.queue)?.with_pages(store.pages))
}

/// Writes `line` to stdout; a closed stdout is ignored (the worker goes on).
fn print_line(line: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

/// One line of `tamp batch work --json`: the pass, then the report's fields.
fn pass_json(pass: Pass, report: &PassReport) -> String {
    let mut line = serde_json::Map::new();
    line.insert("pass".into(), pass.as_str().into());
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(report) {
        line.extend(fields);
    }
    serde_json::Value::Object(line).to_string()
}

/// What `tamp batch work` does with each pass: its errors as warnings on stderr, and with
/// `json`, its report on stdout.
fn report_pass(pass: Pass, result: &Result<PassReport, WorkerError>, json: bool) {
    let stopped;
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            stopped = PassReport {
                errors: vec![format!("the pass stopped: {e}")],
                ..PassReport::default()
            };
            &stopped
        }
    };
    for e in &report.errors {
        eprintln!("tamp batch: warning: {pass} pass: {e}");
    }
    if report.failed > 0 {
        eprintln!(
            "tamp batch: warning: {pass} pass: {} request(s) failed for good",
            report.failed
        );
    }
    if *report != PassReport::default() {
        tracing::info!(target: "tamp::batch", "{pass} pass: {report}");
    }
    if json {
        print_line(&pass_json(pass, report));
    }
}

/// Runs a `tamp batch` command.
pub async fn run(command: BatchCommand) -> Result<()> {
    match command {
        BatchCommand::RunOnce(args) => {
            let worker = worker(&args.config, args.store.as_deref())?;
            let report = worker.run_once().await?;
            if args.json {
                print_line(&serde_json::to_string_pretty(&report)?);
            } else {
                print_line(&report.to_string());
            }
            for e in &report.errors {
                eprintln!("error: {e}");
            }
            if !report.is_clean() {
                anyhow::bail!(
                    "{} API call(s) of the pass failed; the requests concerned wait for the next run",
                    report.errors.len()
                );
            }
            Ok(())
        }
        BatchCommand::Work(args) => {
            let worker = worker(&args.config, args.store.as_deref())?;
            let metrics = worker.metrics();
            let json = args.json;
            let handle = worker
                .spawn_observed(tamp_host::signals::shutdown(), move |pass, result| {
                    report_pass(pass, result, json)
                });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_as_a_json_line_is_the_report_with_its_pass() {
        let report = PassReport {
            failed: 1,
            errors: vec!["creating a batch of 1: refused".into()],
            ..PassReport::default()
        };
        let line = pass_json(Pass::Submit, &report);
        assert!(!line.contains('\n'), "{line}");
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["pass"], "submit");
        let mut fields = value.as_object().unwrap().clone();
        fields.remove("pass");
        assert_eq!(
            serde_json::Value::Object(fields),
            serde_json::to_value(&report).unwrap()
        );
    }
}
