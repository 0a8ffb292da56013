//! The `tamp` binary's log subscriber.

/// When what tamp writes to a terminal is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

/// What the command line says of logging.
pub struct Options {
    pub verbose: bool,
    pub quiet: bool,
    pub color: Color,
    /// The command prints each stage rolled back from the report itself, so by default the
    /// chain's log line for it is left out.
    pub reports_rollbacks: bool,
    /// The command's one line per request (`tamp proxy`'s) is shown by default.
    pub access_log: bool,
}

/// Set by `-q`: the command's own notes and warnings on stderr are left out too.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `-q` was given: print errors only.
pub fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// Human-readable lines on stderr, filtered by `TAMP_LOG` (same syntax as `RUST_LOG`) when it
/// is set, else `warn` by default, `debug` with `verbose`, `error` with `quiet`.
pub fn init(options: &Options) {
    QUIET.store(options.quiet, std::sync::atomic::Ordering::Relaxed);
    let mut default = if options.verbose {
        "debug"
    } else if options.quiet {
        "error"
    } else {
        "warn"
    }
    .to_string();
    let plain = !options.verbose && !options.quiet;
    if options.reports_rollbacks && plain {
        default.push_str(&format!(",{}=error", tamp_host::chain::ROLLBACK_LOG_TARGET));
    }
    if options.access_log && plain {
        default.push_str(&format!(",{}=info", tamp_host::proxy::access_log::TARGET));
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("TAMP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colored(options.color))
        .try_init();
}

/// Whether to colour stderr: never into a file or a journal (`2> tamp.log`), where escape
/// sequences would be written as text, unless asked; never with `NO_COLOR` set.
fn colored(color: Color) -> bool {
    match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => {
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::io::IsTerminal::is_terminal(&std::io::stderr())
        }
    }
}
