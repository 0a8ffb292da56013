//! `tamp serve` and `tamp check-config`: their flags, and the parsers of sizes and seconds
//! that `tamp proxy` shares.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use tamp_host::chain::FileOverrides;
use tamp_host::serve::ServeOptions;

/// `tamp serve` arguments.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Example:\n  tamp serve --config chain.toml --listen 127.0.0.1:7474\n  \
    curl -s localhost:7474/v1/compact -H 'content-type: application/json' \\\n    \
    -d '{\"conversation\": {\"messages\": [...]}}'\n\n\
    Routes: POST /v1/compact, GET /v1/pages/{id}, GET /v1/chain, GET /healthz, GET /metrics.\n\
    Edit the chain file while it runs: the new chain is built aside and swapped in; an \
    invalid one is refused (see GET /v1/chain's last_reload_error) and the old chain stays.\n\n\
    Limits: a connection that has not sent a whole request head within --header-timeout-secs \
    (or sits idle that long between requests) is closed; a body that has not arrived within \
    --body-timeout-secs is answered 408, one declared or sent larger than --max-body 413; \
    beyond --max-concurrent requests at once the answer is 503 with retry-after; beyond \
    --max-connections open connections new ones wait to be accepted. Keep --max-connections \
    well under the open-file limit (ulimit -n)."
)]
pub struct ServeArgs {
    /// The chain file to serve and watch.
    #[arg(short, long)]
    pub config: PathBuf,
    /// Address to listen on. Loopback by default: put a proxy or --auth-token-env in front
    /// before exposing it.
    #[arg(long, default_value = "127.0.0.1:7474", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Largest request body accepted (bytes, or with a KiB/MiB/GiB suffix); larger ones are
    /// answered 413.
    #[arg(long, default_value = "8MiB", value_parser = parse_size, value_name = "SIZE")]
    pub max_body: usize,
    /// Require `Authorization: Bearer <token>` on every route but /healthz, the token read
    /// from this environment variable (never from the command line, so it stays out of `ps`).
    #[arg(long, value_name = "NAME")]
    pub auth_token_env: Option<String>,
    /// Reload once the config has been quiet this long after a change (milliseconds, at
    /// most 600000: ten minutes).
    #[arg(long, default_value_t = 200, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub debounce_ms: u64,
    /// Use this page store file instead of the chain file's.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// On SIGTERM or Ctrl-C, wait at most this long for requests in flight (seconds).
    #[arg(long, default_value_t = 60.0, value_parser = parse_grace_secs, value_name = "SECS")]
    pub shutdown_grace_secs: f64,
    /// Close a connection whose request line and headers have not all arrived this long
    /// after it began sending them, or that has been idle this long before its first or
    /// next request (seconds).
    #[arg(long, default_value_t = 10.0, value_parser = parse_secs, value_name = "SECS")]
    pub header_timeout_secs: f64,
    /// Answer 408 to a request whose body has not all arrived this long after its headers
    /// (seconds).
    #[arg(long, default_value_t = 30.0, value_parser = parse_secs, value_name = "SECS")]
    pub body_timeout_secs: f64,
    /// Requests answered at once; beyond it the answer is 503 with `retry-after: 1`.
    /// /healthz and /metrics are not counted. A compaction counts until it ends, even when
    /// its client has hung up.
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent: u32,
    /// Connections open at once; beyond it new connections wait (in the listen backlog)
    /// until one closes. Keep it under the open-file limit (`ulimit -n`), less the server's
    /// own files, so that accepting never fails for want of a file descriptor.
    #[arg(long, default_value_t = 512, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Refuse a chain with a stage that has no `sha256 = "..."` pin, at start and at every
    /// reload (`tamp plugins hash <file>` prints the pin). See docs/security.md.
    #[arg(long)]
    pub require_pins: bool,
}

/// `tamp check-config` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Example:\n  tamp check-config chain.toml && echo ok\n\n\
    Exits 1 with the same file:line: field: message a reload of `tamp serve` would log.")]
pub struct CheckConfigArgs {
    /// The chain file to validate.
    pub config: PathBuf,
    /// Use this page store file instead of the chain file's (the store is opened, as a
    /// reload would).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Refuse a stage without a `sha256` pin, as `tamp serve --require-pins` would.
    #[arg(long)]
    pub require_pins: bool,
}

/// A positive number of seconds (`10`, `0.5`), at most 30 days.
pub fn parse_secs(text: &str) -> Result<f64, String> {
    parse_seconds(text, tamp_host::bounded::positive_seconds)
}

/// 0 or a positive number of seconds, at most 30 days.
pub fn parse_grace_secs(text: &str) -> Result<f64, String> {
    parse_seconds(text, tamp_host::bounded::seconds_or_zero)
}

/// A number of seconds that `rule` (one of `tamp_host::bounded`'s) accepts.
fn parse_seconds(
    text: &str,
    rule: fn(f64) -> Result<std::time::Duration, String>,
) -> Result<f64, String> {
    let secs = text
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("\"{text}\": expected a number of seconds"))?;
    rule(secs)
        .map(|_| secs)
        .map_err(|e| format!("\"{text}\": {e}"))
}

/// `8MiB`, `512KiB`, `1GiB`, `1048576`.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: usize = digits
        .parse()
        .map_err(|_| format!("\"{text}\": expected a size like 8MiB, 512KiB or 1048576"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "\"{text}\": unknown unit \"{other}\" (KiB, MiB, GiB)"
            ))
        }
    };
    n.checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("\"{text}\": must be a positive size"))
}

impl From<ServeArgs> for ServeOptions {
    fn from(a: ServeArgs) -> Self {
        ServeOptions {
            config: a.config,
            listen: a.listen,
            max_body: a.max_body,
            auth_token_env: a.auth_token_env,
            debounce_ms: a.debounce_ms,
            store: a.store,
            shutdown_grace_secs: a.shutdown_grace_secs,
            header_timeout_secs: a.header_timeout_secs,
            body_timeout_secs: a.body_timeout_secs,
            max_concurrent: a.max_concurrent,
            max_connections: a.max_connections,
            require_pins: a.require_pins,
        }
    }
}

/// Runs `tamp check-config`: prints `ok: <chain>`, then any warning (a valid chain that may
/// not be meant, e.g. one that compacts nothing).
pub fn check_config(args: CheckConfigArgs) -> anyhow::Result<()> {
    let overrides = FileOverrides {
        store_path: args.store,
        progress: None,
        require_pins: args.require_pins,
        check_only: true,
    };
    println!(
        "ok: {}",
        tamp_host::serve::check_config(&args.config, overrides)?
    );
    for warning in tamp_host::config::LoadedChainFile::read(&args.config)
        .map(|f| f.warnings())
        .unwrap_or_default()
    {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert!(parse_size("8 parsecs").unwrap_err().contains("parsecs"));
        assert!(parse_size("0").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn seconds_must_be_positive() {
        assert_eq!(parse_secs("10").unwrap(), 10.0);
        assert_eq!(parse_secs("0.5").unwrap(), 0.5);
        for bad in ["0", "-1", "soon", "inf", "NaN", "1e20", "1e300"] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_grace_secs("0").unwrap(), 0.0);
        for bad in ["-1", "inf", "1e300"] {
            assert!(parse_grace_secs(bad).is_err(), "{bad}");
        }
    }
}
