//! The `tamp` binary's log subscriber.

/// Human-readable lines on stderr, filtered by `TAMP_LOG` (same syntax as `RUST_LOG`), `warn`
/// by default, or `debug` with `verbose`.
pub fn init(verbose: bool) {
    let default = if verbose { "debug" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TAMP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour codes only for a terminal: redirected to a file (`2> tamp.log`, a service's
    // journal), they would be written into it as escape sequences.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
