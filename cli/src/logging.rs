//! The `tamp` binary's log subscriber.

/// Human-readable lines on stderr, filtered by `TAMP_LOG` (same syntax as `RUST_LOG`), `warn`
/// by default, or `debug` with `verbose`. `reports_rollbacks`: the command prints each stage
/// rolled back from the report itself, so by default the chain's log line for it is left out
/// (`TAMP_LOG` still decides when set). `access_log`: the command's one line per request
/// (`tamp proxy`'s) is shown by default.
pub fn init(verbose: bool, reports_rollbacks: bool, access_log: bool) {
    let mut default = if verbose { "debug" } else { "warn" }.to_string();
    if reports_rollbacks && !verbose {
        default.push_str(&format!(",{}=error", tamp_host::chain::ROLLBACK_LOG_TARGET));
    }
    if access_log && !verbose {
        default.push_str(&format!(",{}=info", tamp_host::proxy::access_log::TARGET));
    }
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
