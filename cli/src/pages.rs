//! `tamp pages`: read archived pages back, list them and verify the store.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use tamp_host::config::{self, LoadedChainFile};
use tamp_host::store::{self, PageStore, StoreSpec};
use tamp_host::wire::{self};

use crate::{check_store_flag, spelling, write_stdout};

#[derive(Subcommand)]
pub(crate) enum PagesCommand {
    /// Print the original messages of a page.
    #[command(
        after_help = "Example (from the repository root; the compaction archives pages):\n  \
        tamp compact examples/conversations/ponyc-4588.anthropic.json \\\n    \
        --config examples/chains/default.toml > /dev/null\n  \
        id=$(tamp pages list --config examples/chains/default.toml --limit 1 | awk 'NR == 2 {print $1}')\n  \
        tamp pages show \"$id\" --config examples/chains/default.toml"
    )]
    Show {
        /// The page id, as in a summary's page ref (pg_ and 32 hex digits), or its short ref as
        /// a ledger names it (pg_ and the first 12).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Output format: the page's source wire format by default.
        #[arg(long, value_parser = ["anthropic", "openai", "responses", "internal"])]
        output_format: Option<String>,
        /// `--output-format`'s old spelling.
        #[arg(long = "format", hide = true,
              value_parser = ["anthropic", "openai", "responses", "internal"])]
        format_old: Option<String>,
    },
    /// List the newest pages: a table, or one JSON object a line.
    #[command(
        after_help = "Example (from the repository root; the compaction archives pages):\n  \
        tamp compact examples/conversations/ponyc-4588.anthropic.json \\\n    \
        --config examples/chains/default.toml > /dev/null\n  \
        tamp pages list --config examples/chains/default.toml --limit 5"
    )]
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// List at most this many pages, the newest first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One JSON object a line (`created_at` in seconds since the Unix epoch) instead of
        /// the table.
        #[arg(long)]
        json: bool,
    },
    /// Read the whole store back and check it: every page (its messages still hash to its
    /// id, the rest matches its seal), thread state and summary-cache entry (each matches its
    /// seal), and deferred-queue item (it reads back), and run the database's own integrity
    /// check (SQLite's integrity_check; on PostgreSQL, amcheck's where installed). Prints each
    /// problem and exits 1 if there is any.
    #[command(
        after_help = "Example (from the repository root; the compaction archives pages):\n  \
        tamp compact examples/conversations/ponyc-4588.anthropic.json \\\n    \
        --config examples/chains/default.toml > /dev/null\n  \
        tamp pages verify --config examples/chains/default.toml"
    )]
    Verify {
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Args)]
pub(crate) struct StoreArgs {
    /// The page store file (default: the chain file's store, else .tamp/store.sqlite3).
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Take the store from this chain file's `[store]` (a SQLite file or a PostgreSQL
    /// database).
    #[arg(short, long)]
    config: Option<PathBuf>,
}

/// The page store `args` name: a `--store` file, else the chain file's `[store]` (SQLite or
/// PostgreSQL), else the default file, opened for reading only. A SQLite file must exist:
/// reading pages never creates an empty store, and never needs to write its directory. An
/// error names what gave the store: the `--store` flag, or the chain file's line.
fn open_store(args: &StoreArgs) -> Result<Arc<dyn PageStore>> {
    open_whole_store(args).map(|s| s.pages)
}

/// The store [`StoreArgs`] name, opened read-only, all four of its faces.
fn open_whole_store(args: &StoreArgs) -> Result<store::Store> {
    let file = args
        .config
        .as_deref()
        .map(LoadedChainFile::read)
        .transpose()?;
    if let Some(path) = &args.store {
        check_store_flag(path, false)?;
    }
    let spec = config::store_spec(file.as_ref(), args.store.as_deref())?;
    let blame = |message: String| -> anyhow::Error {
        match (&args.store, &file) {
            (Some(path), _) => anyhow::anyhow!("--store {}: {message}", path.display()),
            (None, Some(file)) => file.store_error(message).into(),
            (None, None) => anyhow::anyhow!(message),
        }
    };
    if let StoreSpec::Sqlite { path } = &spec {
        if std::fs::metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            let hint = if args.store.is_none() && args.config.is_none() {
                " (pass --store or --config to read another store)"
            } else {
                ""
            };
            return Err(blame(format!(
                "page store {} has not been created yet: no compaction has written to it{hint}",
                path.display()
            )));
        }
    }
    store::open_read_only(&spec).map_err(|e| blame(e.to_string()))
}

pub(crate) fn pages(rt: &tokio::runtime::Runtime, cmd: PagesCommand) -> Result<()> {
    match cmd {
        PagesCommand::Show {
            id,
            store,
            output_format,
            format_old,
        } => {
            let format = spelling::prefer(output_format, format_old, "--format", "--output-format");
            let store = open_store(&store)?;
            let stored = rt.block_on(store.get_page(&id))?;
            let format = format
                .or(stored.source_format.clone())
                .unwrap_or_else(|| "anthropic".into());
            let view = wire::page_view(&stored.page, &format).map_err(anyhow::Error::msg)?;
            out!("{}", view.pretty());
        }
        PagesCommand::List { store, limit, json } => {
            let store = open_store(&store)?;
            let pages = rt.block_on(store.list_pages(limit))?;
            if pages.is_empty() {
                eprintln!("no pages in {}", store.describe());
            }
            if json {
                for p in pages {
                    out!("{}", serde_json::to_string(&p)?);
                }
            } else if !pages.is_empty() {
                out!(
                    "{:<36}{:<21}{:<22}{:>8}  THREAD",
                    "PAGE",
                    "CREATED",
                    "STRATEGY",
                    "MESSAGES"
                );
                for p in pages {
                    out!(
                        "{:<36}{:<21}{:<22}{:>8}  {}",
                        p.id,
                        tamp_host::time_text::utc(p.created_at),
                        p.strategy,
                        p.message_count,
                        p.thread_id.as_deref().unwrap_or("-")
                    );
                }
            }
        }
        PagesCommand::Verify { store } => {
            let store = open_whole_store(&store)?;
            let check = rt.block_on(store::verify(&store))?;
            for problem in check.problems() {
                out!("{problem}");
            }
            let checked = [&check.threads, &check.cache, &check.queue]
                .iter()
                .map(|c| c.checked)
                .sum::<u64>()
                + check.pages.checked;
            let damaged = [&check.threads, &check.cache, &check.queue]
                .iter()
                .map(|c| c.damaged.len())
                .sum::<usize>()
                + check.pages.damaged.len();
            let integrity = match &check.integrity {
                None => "; the database has no integrity check to run".to_string(),
                Some(found) if found.is_empty() => {
                    "; the database's integrity check found nothing wrong".to_string()
                }
                Some(found) => format!(
                    "; the database's integrity check found {} problem(s)",
                    found.len()
                ),
            };
            if !check.problems().is_empty() {
                bail!(
                    "{damaged} of {checked} item(s) in {} are damaged{integrity}",
                    store.describe()
                );
            }
            out!(
                "ok: {} page(s), {} thread state(s), {} cache entries and {} queue item(s) in {} \
                 verified{integrity}",
                check.pages.checked,
                check.threads.checked,
                check.cache.checked,
                check.queue.checked,
                store.describe()
            );
        }
    }
    Ok(())
}
