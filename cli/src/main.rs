//! `tamp`: the command-line front of the tamp host. This crate owns every flag (clap types);
//! the work is tamp-host's and tamp-conformance-engine's.

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};

/// mimalloc rather than the system allocator: with thousands of compactions in flight, glibc's
/// allocator spent its time in arena locks and page faults (CHANGELOG.md, 2026-11-23).
/// Plugins keep their own allocator: what crosses the boundary is freed by the side that
/// allocated it (abi_stable's types carry their vtables).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::{Args, CommandFactory as _, Parser, Subcommand};

mod batch;
mod conformance;
mod eval;
mod logging;
mod mcp;
mod output;
mod progress_bar;
mod proxy;
mod serve;
mod server;
mod spelling;

use output::OutputFile;
use tamp_host::budget::BudgetConfig;
use tamp_host::chain::{
    Chain, ChainError, ChainReport, CompactOptions, FileOverrides, StageStatus,
};
use tamp_host::config::{self, LoadedChainFile};
use tamp_host::input_file;
use tamp_host::loader::{resolve_plugin, LoadedPlugin};
use tamp_host::store::{self, PageStore, StoreSpec};
use tamp_host::wire::{self, WireFormat};

/// Prints a line to stdout. A closed pipe (`tamp pages list | head`) ends the program quietly
/// instead of panicking as `println!` would.
macro_rules! out {
    ($($arg:tt)*) => {
        write_stdout(format_args!($($arg)*))
    };
}

fn write_stdout(line: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// The chain used when `--config` is not given.
const DEFAULT_CHAIN: &str = include_str!("default_chain.toml");

#[derive(Parser)]
#[command(
    name = "tamp",
    version,
    about = "Compacts LLM conversations through a chain of strategy plugins.",
    long_about = "Compacts LLM conversations through a chain of strategy plugins.\n\n\
        A chain file (TOML) names the stages, their plugins and configs, the token budget, the \
        LLM provider and the page store. Conversations are Anthropic Messages, OpenAI Chat \
        Completions or OpenAI Responses JSON; the output is in the input's format. Every message a stage removes is \
        archived in a page (see `tamp pages show`).\n\n\
        Example:\n  tamp compact examples/conversations/ponyc-4588.anthropic.json \\\n    \
        --config examples/chains/default.toml --report"
)]
struct Cli {
    /// Log debug detail to stderr (or set TAMP_LOG, e.g. TAMP_LOG=tamp=debug).
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    verbose: bool,
    /// Errors only on stderr: no warnings, progress or access lines (TAMP_LOG still decides
    /// when set).
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Colour in what tamp writes to a terminal: `auto` (when stderr is one), `always`,
    /// `never` (also when NO_COLOR is set).
    #[arg(long, global = true, value_enum, default_value_t = logging::Color::Auto)]
    color: logging::Color,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compact one conversation and print it (in its own wire format) to stdout.
    #[command(after_help = "Example (from the repository root):\n  \
        tamp compact examples/conversations/ponyc-4588.anthropic.json \\\n    \
        --config examples/chains/default.toml --report -o compacted.json\n\n\
        The removed messages are archived in the chain's page store (here examples/chains/tamp-store.sqlite3); \
        `tamp pages list --config examples/chains/default.toml` lists them.")]
    Compact(CompactArgs),
    /// Inspect plugin libraries.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Read archived pages: the original messages behind a summary's page ref.
    #[command(subcommand)]
    Pages(PagesCommand),
    /// Serve the chain over HTTP, reloading it when its file changes.
    Serve(serve::ServeArgs),
    /// A drop-in base URL for the Anthropic and OpenAI APIs: every conversation is compacted
    /// on its way upstream, answers (streams included) relayed as they come.
    Proxy(proxy::ProxyArgs),
    /// Validate a chain file (plugins loaded, stage configs checked) without serving.
    CheckConfig(serve::CheckConfigArgs),
    /// Check a plugin library against tamp's plugin specification.
    Conformance(conformance::ConformanceArgs),
    /// Deferred summaries: send queued requests as Message Batches and apply their results.
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    Eval(eval::EvalArgs),
    /// An MCP server over stdio for a local agent: its model reads back what was archived
    /// (`recall`) and finds it by its words (`search`).
    Mcp(mcp::McpArgs),
    /// Print a shell's completion script for tamp.
    #[command(
        after_help = "Example:\n  tamp completions bash > ~/.local/share/bash-completion/completions/tamp\n  \
        tamp completions zsh > \"${fpath[1]}/_tamp\"\n  tamp completions fish > ~/.config/fish/completions/tamp.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Args)]
struct CompactArgs {
    /// The conversation JSON file, or `-` for stdin.
    #[arg(default_value = "-")]
    input: String,
    /// The chain file. Without it, a built-in chain: extractive summarizer, store in .tamp/,
    /// the template plugin.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// The input's wire format: Anthropic Messages, OpenAI Chat Completions or the OpenAI
    /// Responses API; detected when absent.
    #[arg(long, value_parser = ["anthropic", "openai", "responses"])]
    format: Option<String>,
    /// Print the per-stage report to stderr.
    #[arg(long)]
    report: bool,
    /// Write the report as JSON to this file (`-` for stderr).
    #[arg(long, value_name = "FILE")]
    report_json: Option<String>,
    /// Write the compacted conversation here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Run the stages even when the conversation is under the high watermark.
    #[arg(long)]
    force: bool,
    /// Override budget.max_tokens.
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Override budget.keep_recent.
    #[arg(long)]
    keep_recent: Option<u32>,
    /// Use this page store file instead of the chain file's.
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Print progress events (LLM calls finished) to stderr.
    #[arg(long)]
    progress: bool,
    /// The conversation's thread id: summary-cache entries and pages are kept per thread.
    /// Without it, cached summaries are shared by content alone.
    #[arg(long, value_name = "ID")]
    thread_id: Option<String>,
    /// Compact exactly what this input holds, not the thread's last answer plus what is new
    /// since (the thread is --thread-id, else the system prompt and the user's opening turn).
    #[arg(long)]
    no_thread_continuity: bool,
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Name, version, description, config schema and default config of a plugin.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins describe tamp_custom_strategy\n  \
        tamp plugins describe target/debug/libtamp_custom_strategy.so --json"
    )]
    Describe {
        /// A plugin file (a `.so` library or a `.wasm` component), or a name looked up like a
        /// chain file's `plugin = "..."`.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a plugin's config JSON Schema.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins schema tamp_custom_strategy"
    )]
    Schema {
        /// A plugin file (a `.so` library or a `.wasm` component), or a name looked up like a
        /// chain file's `plugin = "..."`.
        plugin: String,
    },
    /// Print the `sha256 = "..."` line that pins a plugin file in a chain file's [[stage]].
    /// The file is read, never loaded: none of its code runs.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins hash target/debug/libtamp_custom_strategy.so\n  \
        sha256 = \"3f0c...\"   (paste under the stage's plugin = \"...\")\n\n\
        With a pin, tamp refuses the stage when the file holds other bytes (a rebuild, a \
        replacement), at start and at every reload of tamp serve. See docs/security.md."
    )]
    Hash {
        /// A plugin file (a `.so` library or a `.wasm` component), or a name looked up like a
        /// chain file's `plugin = "..."`.
        plugin: String,
    },
    /// List the plugins in a directory (default: next to this executable and TAMP_PLUGIN_PATH).
    /// A library that does not load is named on stderr, with why.
    #[command(
        after_help = "Example (from the repository root, after `cargo build`):\n  \
        tamp plugins list\n  \
        tamp plugins list --dir target/debug"
    )]
    List {
        /// A directory to list instead of the default ones (repeat for several).
        #[arg(long, value_name = "DIR")]
        dir: Vec<PathBuf>,
        /// Also list tamp's own test fixtures (`libtamp_test_*`), which a build of the whole
        /// workspace puts beside the shipped plugins.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
enum PagesCommand {
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
struct StoreArgs {
    /// The page store file (default: the chain file's store, else .tamp/store.sqlite3).
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Take the store from this chain file's `[store]` (a SQLite file or a PostgreSQL
    /// database).
    #[arg(short, long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(&logging::Options {
        verbose: cli.verbose,
        quiet: cli.quiet,
        color: cli.color,
        reports_rollbacks: matches!(cli.command, Command::Compact(_)),
        access_log: matches!(cli.command, Command::Proxy(_)),
    });
    if let Command::Completions { shell } = cli.command {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "tamp", &mut script);
        out!("{}", String::from_utf8_lossy(&script).trim_end());
        return ExitCode::SUCCESS;
    }
    if let Command::Conformance(args) = cli.command {
        // No runtime: each check runs in a process of its own.
        return conformance::run(args);
    }
    // The process's one tokio runtime: every command's async work runs on it.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = check_store_flags(&cli.command) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Compact(args) => compact(&rt, args),
        Command::Plugins(cmd) => plugins(cmd),
        Command::Pages(cmd) => pages(&rt, cmd),
        Command::Serve(args) => rt.block_on(tamp_host::serve::run(args.into())),
        Command::Proxy(args) => rt.block_on(tamp_host::proxy::run(args.into())),
        Command::Eval(args) => rt.block_on(eval::run(args)),
        Command::CheckConfig(args) => serve::check_config(args),
        Command::Batch(cmd) => rt.block_on(batch::run(cmd)),
        Command::Mcp(args) => rt.block_on(mcp::run(args)),
        Command::Completions { .. } => unreachable!("answered above"),
        Command::Conformance(_) => unreachable!("run above"),
    };
    // A pinned plugin is loaded from a private copy even here (see `loader::load_trusted`);
    // the library stays mapped, the copy on disk is not needed any more.
    tamp_host::loader::remove_private_copies();
    // Every command has finished its work (a server has drained within its grace). A
    // blocking task still running (a read that never returns, a plugin's call that never
    // ends) would make dropping the runtime wait for it for ever: it is left to the exit.
    rt.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The `--store` flag of the commands that take one and do not check it themselves (`serve`,
/// `proxy`, `check-config`, `batch`): a directory or a file this user cannot open is named
/// with the flag, not blamed on the chain file.
fn check_store_flags(command: &Command) -> Result<()> {
    let (store, write) = match command {
        Command::Serve(a) => (&a.server.store, true),
        Command::Proxy(a) => (&a.server.store, true),
        Command::CheckConfig(a) => (&a.store, true),
        Command::Batch(batch::BatchCommand::RunOnce(a) | batch::BatchCommand::Work(a)) => {
            (&a.store, true)
        }
        Command::Batch(batch::BatchCommand::Status(a)) => (&a.store, false),
        _ => return Ok(()),
    };
    match store {
        Some(path) => check_store_flag(path, write),
        None => Ok(()),
    }
}

fn chain_file(config: Option<&Path>) -> Result<LoadedChainFile> {
    Ok(match config {
        Some(path) => LoadedChainFile::read(path)?,
        None => LoadedChainFile::parse(
            Path::new("<built-in default chain>"),
            DEFAULT_CHAIN.to_string(),
        )?,
    })
}

fn compact(rt: &tokio::runtime::Runtime, args: CompactArgs) -> Result<()> {
    // The chain file first: its errors do not depend on the input.
    let file = chain_file(args.config.as_deref())?;
    // Then the flags, before anything is read, archived or written.
    let budget = flag_budget(&file, &args)?;
    if let Some(path) = &args.store {
        check_store_flag(path, true)?;
    }
    let output = match &args.output {
        Some(path) => Some(OutputFile::open(path, "--output")?),
        None => None,
    };
    let report_json = match args.report_json.as_deref() {
        Some("-") | None => None,
        Some(path) => Some(OutputFile::open(Path::new(path), "--report-json")?),
    };
    for warning in file.warnings() {
        eprintln!("warning: {warning}");
    }
    compact_to(rt, &args, &file, budget, output, report_json)
}

/// The chain file's budget with `--max-tokens` and `--keep-recent` applied, checked: a value
/// a flag gave that breaks a budget rule is named by its flag.
fn flag_budget(file: &LoadedChainFile, args: &CompactArgs) -> Result<BudgetConfig> {
    let mut budget = file.file.budget;
    if let Some(n) = args.max_tokens {
        budget.max_tokens = n;
    }
    if let Some(n) = args.keep_recent {
        budget.keep_recent = n;
    }
    if let Err(e) = budget.validate() {
        let flag = match e.key {
            "max_tokens" => args.max_tokens.map(|n| format!("--max-tokens {n}")),
            "keep_recent" => args.keep_recent.map(|n| format!("--keep-recent {n}")),
            _ => None,
        };
        match flag {
            Some(flag) => bail!("{flag}: {}", e.message),
            None => bail!("{}: {e}", file.path.display()),
        }
    }
    Ok(budget)
}

fn compact_to(
    rt: &tokio::runtime::Runtime,
    args: &CompactArgs,
    file: &LoadedChainFile,
    budget: BudgetConfig,
    output: Option<OutputFile>,
    report_json: Option<OutputFile>,
) -> Result<()> {
    let source = if args.input == "-" {
        "<stdin>"
    } else {
        args.input.as_str()
    };
    let bytes = if args.input == "-" {
        if std::io::stdin().is_terminal() {
            eprintln!(
                "tamp compact: reading the conversation from stdin (end with Ctrl-D), or pass \
                 its file: tamp compact conversation.json"
            );
        }
        input_file::read_stdin(input_file::Limit::CONVERSATION)
            .map_err(|e| anyhow::anyhow!("cannot read stdin: {e}"))?
    } else {
        input_file::read(Path::new(&args.input), input_file::Limit::CONVERSATION)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.input))?
    };
    let text = utf8_text(bytes).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    let format = args
        .format
        .as_deref()
        .map(str::parse::<WireFormat>)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if let Some(given) = format {
        if let Some(detected) = detected_format(&text).filter(|d| *d != given) {
            eprintln!(
                "warning: {source}: --format {given} was given, but without it the \
                 conversation would be read as {detected}; reading it as {given}"
            );
        }
    }
    let (mut conversation, format) =
        wire::parse_str(&text, format).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    if let Some(id) = &args.thread_id {
        conversation.thread_id = tamp_host::plugin_api::FfiOption::RSome(id.as_str().into());
    }

    let progress: Option<tamp_host::services::ProgressFn> = args.progress.then(|| {
        Arc::new(|stage: &str, e: &tamp_host::plugin_api::ProgressEvent| {
            eprintln!("[{stage}] {}", e.message);
        }) as tamp_host::services::ProgressFn
    });
    let overrides = FileOverrides {
        store_path: args.store.clone(),
        progress,
        ..Default::default()
    };
    let chain = Chain::from_loaded(file, overrides).map_err(|e| match (&args.store, e) {
        // The store the flag named: the flag is what to fix, not the chain file.
        (Some(path), ChainError::Store(e)) => {
            anyhow::anyhow!("--store {}: {e}", path.display())
        }
        (_, e) => e.into(),
    })?;
    let options = CompactOptions {
        format: Some(format),
        force: args.force,
        budget: Some(budget),
        thread_continuity: !args.no_thread_continuity,
    };
    let compacted = rt
        .block_on(chain.compact(conversation, &options))
        .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;

    let out = wire::to_string_pretty(&compacted.conversation, format);
    match output {
        Some(file) => file.write(&(out + "\n"))?,
        None => out!("{out}"),
    }
    if args.report {
        eprint!("{}", render_report(&compacted.report));
    } else {
        for run in compacted
            .report
            .stages
            .iter()
            .filter(|r| r.status == StageStatus::RolledBack)
        {
            eprintln!("warning: stage \"{}\" {}", run.stage, run.reason);
        }
    }
    if args.report_json.is_some() {
        let json = serde_json::to_string_pretty(&compacted.report)?;
        match report_json {
            Some(file) => file.write(&(json + "\n"))?,
            None => eprintln!("{json}"),
        }
    }
    Ok(())
}

/// The format the body would be read in without `--format`, when it can be told.
fn detected_format(text: &str) -> Option<WireFormat> {
    match wire::parse_str(text, None) {
        Ok((_, format)) => Some(format),
        // It does not read in the detected format either: detect it on its own.
        Err(_) => serde_json::from_str(text)
            .ok()
            .and_then(|value| wire::detect(&value).ok()),
    }
}

/// A `--store` path, checked before anything opens it, its problem named with the flag: a
/// directory, something else than a file, or a file this user may not read (`write`: or
/// write). Nothing there yet passes: a writer creates the store, a reader says it is missing.
fn check_store_flag(path: &Path, write: bool) -> Result<()> {
    let flag = format!("--store {}", path.display());
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => bail!("{flag}: {}", io_reason(&e)),
        Ok(_) => {}
    }
    if let Some(why) = tamp_host::store::SqliteStore::not_a_file(path) {
        bail!("{flag}: {why}");
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
    {
        bail!("{flag}: cannot open: {}", io_reason(&e));
    }
    Ok(())
}

/// An I/O error in words, `permission denied` rather than `Permission denied (os error 13)`.
fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// The input as text, or where it stops being UTF-8 (`invalid UTF-8 at byte offset 1234`).
fn utf8_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        format!("invalid UTF-8 at byte offset {offset}: the conversation must be UTF-8 JSON")
    })
}

fn render_report(report: &ChainReport) -> String {
    let mut out = format!(
        "tamp: {} → {} tokens, {} → {} messages in {:.1} ms ({})\n",
        report.tokens_before,
        report.tokens_after,
        report.messages_before,
        report.messages_after,
        report.duration_ms,
        report.reason
    );
    if !report.opaque.is_empty() {
        let found: Vec<String> = report.opaque.iter().map(|o| o.describe()).collect();
        out.push_str(&format!(
            "  opaque: {} (kept verbatim in place, compacted around)\n",
            found.join(", ")
        ));
    }
    for run in &report.stages {
        let status = match run.status {
            StageStatus::Acted => "acted",
            StageStatus::Skipped => "skipped",
            StageStatus::NotRun => "not run",
            StageStatus::RolledBack => "ROLLED BACK",
        };
        out.push_str(&format!(
            "  stage {} ({} {}): {status}: {}\n",
            run.stage, run.plugin, run.plugin_version, run.reason
        ));
        if run.status == StageStatus::Acted || run.llm_calls > 0 {
            let archived = match (run.messages_removed, run.messages_cleared) {
                (removed, 0) => format!("{removed} message(s) archived"),
                (0, cleared) => format!("{cleared} message(s) cleared in place"),
                (removed, cleared) => {
                    format!("{removed} message(s) archived and {cleared} cleared in place")
                }
            };
            out.push_str(&format!(
                "    {} → {} tokens; {archived} in {} page(s); {} LLM call(s), {} in / {} out tokens; {:.1} ms\n",
                run.tokens_before,
                run.tokens_after,
                run.pages.len(),
                run.llm_calls,
                run.usage.input_tokens,
                run.usage.output_tokens,
                run.duration_ms
            ));
        }
        if !run.pages.is_empty() {
            out.push_str(&format!("    pages: {}\n", page_list(&run.pages)));
        }
        for w in &run.warnings {
            out.push_str(&format!("    warning: {w}\n"));
        }
    }
    out
}

/// A stage's pages for the text report: their short refs (which `tamp pages show` takes), at
/// most six, then how many more.
fn page_list(pages: &[String]) -> String {
    const SHOWN: usize = 6;
    let mut shown: Vec<&str> = pages
        .iter()
        .take(SHOWN)
        .map(|p| tamp_host::store::short_ref(p))
        .collect();
    let more = pages.len().saturating_sub(SHOWN);
    let more = if more > 0 {
        format!(" and {more} more (the JSON report lists them all)")
    } else {
        String::new()
    };
    shown.dedup();
    format!("{}{more}", shown.join(", "))
}

fn find_plugin(spec: &str) -> Result<Arc<LoadedPlugin>> {
    let path = resolve_plugin(spec, Path::new("."), &[])?;
    Ok(tamp_host::loader::load_plugin(&path)?)
}

fn plugins(cmd: PluginsCommand) -> Result<()> {
    match cmd {
        PluginsCommand::Describe { plugin, json } => {
            let p = find_plugin(&plugin)?;
            let meta = p.meta();
            if json {
                out!("{}", serde_json::to_string_pretty(meta)?);
            } else {
                out!("name:        {}", meta.name);
                out!("version:     {}", meta.version);
                out!("description: {}", meta.description);
                out!("plugin-api:  {}", meta.plugin_api_version);
                out!(
                    "kind:        {}",
                    match p.kind() {
                        "wasm" => "WebAssembly component (sandboxed)",
                        _ => "native library",
                    }
                );
                out!("file:        {}", p.path().display());
                out!(
                    "default config:\n{}",
                    serde_json::to_string_pretty(&meta.default_config)?
                );
                out!(
                    "config schema:\n{}",
                    serde_json::to_string_pretty(&meta.config_schema)?
                );
            }
        }
        PluginsCommand::Hash { plugin } => {
            let path = resolve_plugin(&plugin, Path::new("."), &[])?;
            check_plugin_header(&path)?;
            out!("sha256 = \"{}\"", tamp_host::loader::sha256_of_file(&path)?);
        }
        PluginsCommand::Schema { plugin } => {
            out!(
                "{}",
                serde_json::to_string_pretty(&find_plugin(&plugin)?.meta().config_schema)?
            );
        }
        PluginsCommand::List { dir, all } => list_plugins(dir, all)?,
    }
    Ok(())
}

/// `tamp plugins list`: a line per plugin, first the name a chain file's `plugin = "..."`
/// takes; a line on stderr per library that does not load (and why); when none is found, what
/// each directory held instead. tamp's test fixtures only with `all`.
fn list_plugins(given: Vec<PathBuf>, all: bool) -> Result<()> {
    let explicit = !given.is_empty();
    let mut fixtures = 0;
    let mut header = false;
    let dirs = if explicit {
        given
    } else {
        tamp_host::loader::plugin_search_dirs(Path::new("."), &[])
    };
    let mut found = 0;
    // Each directory that held no plugin, and what it held instead.
    let mut empty: Vec<(String, String)> = Vec::new();
    for d in &dirs {
        let entries = match std::fs::read_dir(d) {
            Ok(entries) => entries,
            Err(e) => {
                let what = match std::fs::metadata(d) {
                    Err(m) if m.kind() == std::io::ErrorKind::NotFound => {
                        "no such directory".to_string()
                    }
                    Ok(m) if !m.is_dir() => "not a directory".to_string(),
                    _ => format!("cannot read it: {}", io_reason(&e)),
                };
                empty.push((d.display().to_string(), what));
                continue;
            }
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        let libraries: Vec<&PathBuf> = paths
            .iter()
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
                    || tamp_host::wasm::is_component_path(p)
            })
            .collect();
        let mut here = 0;
        for path in &libraries {
            let chain_name =
                tamp_host::loader::chain_name(path).unwrap_or_else(|| path.display().to_string());
            if !all && chain_name.starts_with(tamp_host::loader::FIXTURE_PREFIX) {
                fixtures += 1;
                continue;
            }
            match tamp_host::loader::load_plugin(path) {
                Ok(p) => {
                    here += 1;
                    let name = match p.meta().name.trim() {
                        "" => "(no name)",
                        _ => p.meta().name.as_str(),
                    };
                    if !header {
                        out!(
                            "{:<30} {:<24} {:<10} FILE",
                            "PLUGIN = \"...\"",
                            "NAME",
                            "VERSION"
                        );
                        header = true;
                    }
                    out!(
                        "{:<30} {:<24} {:<10} {}",
                        chain_name,
                        name,
                        p.meta().version,
                        path.display()
                    );
                }
                Err(e) => eprintln!("skipped: {e}"),
            }
        }
        found += here;
        if here == 0 {
            let what = match (paths.len(), libraries.len()) {
                (0, _) => "empty".to_string(),
                (_, 0) => format!(
                    "no .{} or .wasm file in it",
                    std::env::consts::DLL_EXTENSION
                ),
                (_, n) => format!("none of its {n} libraries loads as a tamp plugin"),
            };
            empty.push((d.display().to_string(), what));
        }
    }
    if found == 0 {
        bail!(
            "no tamp plugins found in {}",
            empty
                .iter()
                .map(|(dir, what)| format!("{dir} ({what})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if explicit {
        // A directory asked for that is not there, with plugins found in another.
        for (dir, what) in &empty {
            eprintln!("warning: --dir {dir}: {what}");
        }
    }
    if fixtures > 0 && !logging::quiet() {
        eprintln!("({fixtures} test fixture(s) of tamp's own tests not listed; --all lists them)");
    }
    Ok(())
}

/// Refuses a file `tamp plugins hash` would pin that is no plugin at all: empty, or neither a
/// shared library (its object-file header) nor a WebAssembly component (`\0asm`). Devices
/// and FIFOs are refused before they are opened.
fn check_plugin_header(path: &Path) -> Result<()> {
    const WASM: &[u8] = b"\0asm";
    #[cfg(target_os = "macos")]
    const NATIVE: &[&[u8]] = &[
        b"\xcf\xfa\xed\xfe",
        b"\xce\xfa\xed\xfe",
        b"\xca\xfe\xba\xbe",
    ];
    #[cfg(windows)]
    const NATIVE: &[&[u8]] = &[b"MZ"];
    #[cfg(not(any(target_os = "macos", windows)))]
    const NATIVE: &[&[u8]] = &[b"\x7fELF"];
    tamp_host::loader::regular_file_stamp(path)?;
    let mut head = Vec::with_capacity(4);
    std::fs::File::open(path)
        .and_then(|f| f.take(4).read_to_end(&mut head))
        .with_context(|| format!("plugin {}: cannot read", path.display()))?;
    if head.is_empty() {
        bail!(
            "plugin {}: the file is empty, not a plugin (a shared library or a WebAssembly \
             component); nothing to pin",
            path.display()
        );
    }
    if !head.starts_with(WASM) && !NATIVE.iter().any(|m| head.starts_with(m)) {
        bail!(
            "plugin {}: not a shared library (no {} header) nor a WebAssembly component (no \
             \\0asm header); nothing to pin",
            path.display(),
            if cfg!(target_os = "macos") {
                "Mach-O"
            } else if cfg!(windows) {
                "PE"
            } else {
                "ELF"
            }
        );
    }
    Ok(())
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

fn pages(rt: &tokio::runtime::Runtime, cmd: PagesCommand) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tamp_host::http::server::ServerOptions;

    /// A command's flags, by long name (the global `--verbose` and `--help` are added later,
    /// when clap builds the command).
    fn flags(command: &str) -> BTreeSet<String> {
        Cli::command()
            .find_subcommand(command)
            .unwrap()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    }

    /// `tamp <command> <args>`'s options, the shared server flags and those of the command.
    fn parsed(command: &str, args: &[&str]) -> (ServerOptions, Option<(u32, bool)>) {
        let cli = Cli::try_parse_from(["tamp", command].iter().chain(args))
            .unwrap_or_else(|e| panic!("tamp {command} {args:?}: {e}"));
        match cli.command {
            Command::Serve(a) => {
                let o = tamp_host::serve::ServeOptions::from(a);
                (o.server, Some((o.max_concurrent, o.require_pins)))
            }
            Command::Proxy(a) => (tamp_host::proxy::ProxyOptions::from(a).server, None),
            _ => unreachable!("{command}"),
        }
    }

    #[test]
    fn serve_and_proxy_take_the_same_server_flags_with_the_same_meaning() {
        let serve_only: BTreeSet<String> =
            ["max-concurrent", "require-pins"].map(String::from).into();
        assert_eq!(
            flags("serve")
                .difference(&flags("proxy"))
                .cloned()
                .collect::<BTreeSet<_>>(),
            serve_only
        );
        assert!(flags("proxy").is_subset(&flags("serve")));

        let given = [
            ("--config", "chain.toml"),
            ("--listen", "127.0.0.1:9123"),
            ("--max-body", "2MiB"),
            ("--max-body-memory", "6MiB"),
            ("--auth-token-env", "TAMP_TOKEN"),
            ("--debounce-ms", "50"),
            ("--store", "pages.sqlite3"),
            ("--shutdown-grace-secs", "0"),
            ("--header-timeout-secs", "3"),
            ("--body-timeout-secs", "4.5"),
            ("--max-connections", "7"),
            ("--console", "off"),
        ];
        // Every shared flag is given, so a new one is tested here too.
        let named: BTreeSet<String> = given.iter().map(|(f, _)| f[2..].to_string()).collect();
        assert_eq!(named, flags("proxy"));
        let args: Vec<&str> = given.iter().flat_map(|(f, v)| [*f, *v]).collect();
        let expected = ServerOptions {
            config: "chain.toml".into(),
            listen: "127.0.0.1:9123".parse().unwrap(),
            max_body: 2 << 20,
            max_body_memory: 6 << 20,
            auth_token_env: Some("TAMP_TOKEN".into()),
            debounce_ms: 50,
            store: Some("pages.sqlite3".into()),
            shutdown_grace_secs: 0.0,
            header_timeout_secs: 3.0,
            body_timeout_secs: 4.5,
            max_connections: 7,
            console: Some(false),
        };
        assert_eq!(parsed("serve", &args).0, expected);
        assert_eq!(parsed("proxy", &args).0, expected);
        // The same values are refused by both, with the same error.
        for (flag, bad) in [
            ("--max-body", "8 parsecs"),
            ("--header-timeout-secs", "0"),
            ("--max-connections", "0"),
        ] {
            let errors: Vec<String> = ["serve", "proxy"]
                .map(
                    |c| match Cli::try_parse_from(["tamp", c, "-c", "x", flag, bad]) {
                        Ok(_) => panic!("tamp {c} {flag} {bad} was accepted"),
                        Err(e) => e.to_string().replace(c, "<command>"),
                    },
                )
                .into();
            assert_eq!(errors[0], errors[1], "{flag} {bad}");
        }
    }

    #[test]
    fn serve_and_proxy_keep_their_own_defaults_and_say_them_in_their_help() {
        let (serve, serve_only) = parsed("serve", &["-c", "chain.toml"]);
        let (proxy, _) = parsed("proxy", &["-c", "chain.toml"]);
        let defaults = |o: &ServerOptions| {
            (
                o.listen.to_string(),
                o.max_body,
                o.max_body_memory,
                o.header_timeout_secs,
                o.body_timeout_secs,
                o.max_connections,
            )
        };
        assert_eq!(
            defaults(&serve),
            ("127.0.0.1:7474".into(), 8 << 20, 512 << 20, 10.0, 30.0, 512)
        );
        assert_eq!(
            defaults(&proxy),
            ("127.0.0.1:7475".into(), 64 << 20, 1 << 30, 30.0, 60.0, 1024)
        );
        assert_eq!((serve.debounce_ms, serve.shutdown_grace_secs), (200, 60.0));
        assert_eq!((proxy.debounce_ms, proxy.shutdown_grace_secs), (200, 60.0));
        assert_eq!(serve_only, Some((64, false)));

        for (command, shown) in [
            (
                "serve",
                [
                    "[default: 127.0.0.1:7474]",
                    "[default: 8MiB]",
                    "[default: 512MiB]",
                    "[default: 512]",
                    "every route but /healthz",
                    "Largest body of a request",
                ],
            ),
            (
                "proxy",
                [
                    "[default: 127.0.0.1:7475]",
                    "[default: 64MiB]",
                    "[default: 1GiB]",
                    "[default: 1024]",
                    "tamp's own routes under /tamp/",
                    "Largest body of a compacted route's request",
                ],
            ),
        ] {
            let help = Cli::command()
                .find_subcommand_mut(command)
                .unwrap()
                .render_long_help()
                .to_string();
            for text in
                shown
                    .iter()
                    .chain(&["[default: 200]", "[default: 60]", "--debounce-ms <MS>"])
            {
                assert!(
                    help.contains(text),
                    "tamp {command} --help lacks {text}:\n{help}"
                );
            }
        }
    }

    #[test]
    fn input_that_is_not_utf8_is_refused_with_its_byte_offset() {
        assert_eq!(utf8_text(b"{\"a\": 1}".to_vec()).unwrap(), "{\"a\": 1}");
        let err = utf8_text(b"{\"messages\": \"caf\xe9\"}".to_vec()).unwrap_err();
        assert!(err.starts_with("invalid UTF-8 at byte offset 17"), "{err}");
    }
}
