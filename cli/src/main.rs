//! `tamp`: the command-line front of the tamp host. This crate owns every flag (clap types);
//! the work is tamp-host's and tamp-conformance-engine's.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Result};

/// mimalloc rather than the system allocator: with thousands of compactions in flight, glibc's
/// allocator spent its time in arena locks and page faults (CHANGELOG.md, 2026-11-23).
/// Plugins keep their own allocator: what crosses the boundary is freed by the side that
/// allocated it (abi_stable's types carry their vtables).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::{CommandFactory as _, Parser, Subcommand};

/// Prints a line to stdout. A closed pipe (`tamp pages list | head`) ends the program quietly
/// instead of panicking as `println!` would.
macro_rules! out {
    ($($arg:tt)*) => {
        write_stdout(format_args!($($arg)*))
    };
}

mod batch;
mod check_config;
mod compact;
mod conformance;
mod eval;
mod logging;
mod mcp;
mod output;
mod pages;
mod plugins;
mod progress_bar;
mod proxy;
mod serve;
mod server_flags;
mod spelling;

use tamp_host::config::LoadedChainFile;

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
    Compact(compact::CompactArgs),
    /// Inspect plugin libraries.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// Read archived pages: the original messages behind a summary's page ref.
    #[command(subcommand)]
    Pages(pages::PagesCommand),
    /// Serve the chain over HTTP, reloading it when its file changes.
    Serve(serve::ServeArgs),
    /// A drop-in base URL for the Anthropic and OpenAI APIs: every conversation is compacted
    /// on its way upstream, answers (streams included) relayed as they come.
    Proxy(proxy::ProxyArgs),
    /// Validate a chain file (plugins loaded, stage configs checked) without serving.
    CheckConfig(check_config::CheckConfigArgs),
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
        Command::Compact(args) => compact::compact(&rt, args),
        Command::Plugins(cmd) => plugins::plugins(cmd),
        Command::Pages(cmd) => pages::pages(&rt, cmd),
        Command::Serve(args) => rt.block_on(tamp_host::serve::run(args.into())),
        Command::Proxy(args) => rt.block_on(tamp_host::proxy::run(args.into())),
        Command::Eval(args) => rt.block_on(eval::run(args)),
        Command::CheckConfig(args) => check_config::check_config(args),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tamp_host::http::listener::ServerOptions;

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
}
