//! `tamp mcp`: the MCP server a local agent starts, over stdio, on its chain file's store.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tamp_host::config::{self, LoadedChainFile};
use tamp_host::mcp::{self, Reader, RecallServer};
use tamp_host::store;

/// `tamp mcp` arguments.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Serves the MCP tools `recall` (a page's archived messages, by the \
    id a placeholder or summary names) and `search` (archived messages by their words) over \
    stdin and stdout, for an agent that starts it:\n  \
    claude mcp add tamp -- tamp mcp --config /path/to/agents.toml\n\
    It reads the chain file's store whole (every thread's pages): run it for your own agent, \
    on your own store. `tamp proxy` serves the same tools over HTTP at /tamp/mcp, each \
    caller reading the pages of its own API key. See docs/proxy.md."
)]
pub struct McpArgs {
    /// The chain file whose `[store]` holds the pages (a SQLite file or a PostgreSQL
    /// database); relative store paths are relative to it.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// This page store file instead of the chain file's (default: .tamp/store.sqlite3).
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
}

/// Serves until the agent closes stdin. Logs go to stderr (stdout is the protocol's).
pub async fn run(args: McpArgs) -> Result<()> {
    let file = args
        .config
        .as_deref()
        .map(LoadedChainFile::read)
        .transpose()?;
    let spec = config::store_spec(file.as_ref(), args.store.as_deref())?;
    // Opened to write: the store is migrated (its search index made) and created when no
    // compaction has written to it yet, so an agent can start this before the proxy runs.
    let opened = tokio::task::spawn_blocking(move || store::open(&spec)).await?;
    let opened = opened.map_err(|e| match (&args.store, &file) {
        (Some(path), _) => anyhow::anyhow!("--store {}: {e}", path.display()),
        (None, Some(file)) => file.store_error(e.to_string()).into(),
        (None, None) => anyhow::anyhow!(e),
    })?;
    tracing::info!(
        "tamp mcp: serving recall and search on {}",
        opened.describe()
    );
    mcp::serve_stdio(RecallServer::new(
        opened.pages,
        opened.search,
        Reader::Local,
    ))
    .await
}
