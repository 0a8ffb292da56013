//! The `tamp` binary's log subscriber.

/// Human-readable lines on stderr, filtered by `TAMP_LOG` (same syntax as `RUST_LOG`), `warn`
/// by default, or `debug` with `verbose`.
pub fn init(verbose: bool) {
    let default = if verbose { "debug" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TAMP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
