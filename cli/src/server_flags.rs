//! The flags `tamp serve` and `tamp proxy` share, defined once ([`ServerArgs`]) and flattened
//! into both commands, and the parsers of sizes and seconds they use. Where the two servers
//! differ (a default, or what a flag covers there), [`ServerKind`] says how.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use tamp_host::http::listener::ServerOptions;

/// What sets one server's flags apart from the other's: its defaults, and the words that say
/// which requests a flag covers in it. The defaults are text, parsed as the flag is: clap's
/// `default_value_t` keeps its rendering in a `static` of the generic `augment_args`, which
/// every `ServerArgs<K>` shares, so the first kind's default would show in both.
pub trait ServerKind: Debug + Clone + Send + Sync + 'static {
    /// `--listen`'s default.
    const LISTEN: &'static str;
    /// Why `--listen` is loopback by default.
    const LOOPBACK_WHY: &'static str;
    /// `--max-body`'s default.
    const MAX_BODY: &'static str;
    /// `--max-body-memory`'s default.
    const MAX_BODY_MEMORY: &'static str;
    /// The requests whose body is read whole, so bounded by `--max-body` and
    /// `--body-timeout-secs`.
    const BODIES_READ: &'static str;
    /// What becomes of the other bodies, said after `--max-body`'s 413 (or nothing).
    const OTHER_BODIES: &'static str;
    /// The routes that require `--auth-token-env`'s token.
    const GUARDED: &'static str;
    /// `--header-timeout-secs`' default.
    const HEADER_TIMEOUT_SECS: &'static str;
    /// `--body-timeout-secs`' default.
    const BODY_TIMEOUT_SECS: &'static str;
    /// `--max-connections`' default.
    const MAX_CONNECTIONS: &'static str;
    /// How to size `--max-connections` against the open-file limit.
    const SIZING: &'static str;
}

/// `tamp serve`: the HTTP API.
#[derive(Debug, Clone)]
pub struct Serve;

impl ServerKind for Serve {
    const LISTEN: &'static str = "127.0.0.1:7474";
    const LOOPBACK_WHY: &'static str =
        "put a proxy or --auth-token-env in front before exposing it";
    const MAX_BODY: &'static str = "8MiB";
    // --max-concurrent (64) bodies of --max-body at once: the bound serve had already.
    const MAX_BODY_MEMORY: &'static str = "512MiB";
    const BODIES_READ: &'static str = "a request";
    const OTHER_BODIES: &'static str = "";
    const GUARDED: &'static str = "every route but /healthz";
    const HEADER_TIMEOUT_SECS: &'static str = "10";
    const BODY_TIMEOUT_SECS: &'static str = "30";
    const MAX_CONNECTIONS: &'static str = "512";
    const SIZING: &'static str = "Keep it under the open-file limit (`ulimit -n`), less the \
        server's own files, so that accepting never fails for want of a file descriptor";
}

/// `tamp proxy`: the drop-in base URL, whose answers stream for as long as the model writes.
#[derive(Debug, Clone)]
pub struct Proxy;

impl ServerKind for Proxy {
    const LISTEN: &'static str = "127.0.0.1:7475";
    const LOOPBACK_WHY: &'static str = "the pages under /tamp/ hold the conversations, and \
        anyone who reaches the port can read them";
    const MAX_BODY: &'static str = "64MiB";
    // Sixteen of the largest bodies at once; an agent's requests are a few MiB at most.
    const MAX_BODY_MEMORY: &'static str = "1GiB";
    const BODIES_READ: &'static str = "a compacted route's request";
    const OTHER_BODIES: &'static str = "; other routes stream their bodies through, unbounded";
    const GUARDED: &'static str = "tamp's own routes under /tamp/ but /tamp/healthz (the \
        provider routes pass the client's own key upstream untouched)";
    const HEADER_TIMEOUT_SECS: &'static str = "30";
    const BODY_TIMEOUT_SECS: &'static str = "60";
    const MAX_CONNECTIONS: &'static str = "1024";
    const SIZING: &'static str = "Each streaming answer holds one until its stream ends: \
        keep it above the streams expected at once, and under the open-file limit (`ulimit -n`) \
        less two files per stream (its connection and the upstream one)";
}

/// The server flags of `tamp serve` and `tamp proxy`; `K` gives the defaults and the words
/// that differ.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs<K: ServerKind> {
    /// The chain file to compact with and watch: an edit is reloaded while the server runs.
    #[arg(short, long)]
    pub config: PathBuf,
    #[arg(long, value_name = "ADDR", default_value = K::LISTEN, value_parser = parse_listen::<K>,
          help = format!("Address to listen on: host:port, a host (on the default port) or a \
                          port (on 127.0.0.1). Loopback by default: {}", K::LOOPBACK_WHY))]
    pub listen: SocketAddr,
    #[arg(long, value_name = "SIZE", default_value = K::MAX_BODY, value_parser = parse_size,
          help = format!("Largest body of {} (bytes, or with a KiB/MiB/GiB suffix); a larger \
                          one, declared or sent, is answered 413{}",
                         K::BODIES_READ, K::OTHER_BODIES))]
    pub max_body: usize,
    /// Bytes of request bodies held at once, across requests (the bodies --max-body bounds);
    /// a body that would pass it (its declared length at once, else as it arrives) is
    /// answered 503 `overloaded` with retry-after. A body's bytes count until it is dropped:
    /// at once when its client hangs up. At least --max-body.
    #[arg(long, value_name = "SIZE", default_value = K::MAX_BODY_MEMORY, value_parser = parse_size)]
    pub max_body_memory: usize,
    #[arg(long, value_name = "NAME",
          help = format!("Require `Authorization: Bearer <token>` on {}, the token read from \
                          this environment variable (never from the command line, so it stays \
                          out of `ps`)", K::GUARDED))]
    pub auth_token_env: Option<String>,
    /// Reload once the config has been quiet this long after a change (milliseconds, at
    /// most 600000: ten minutes).
    #[arg(long, default_value_t = 200, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub debounce_ms: u64,
    /// Use this page store file instead of the chain file's.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// On SIGTERM or Ctrl-C, wait at most this long for requests in flight and answers still
    /// streaming (seconds).
    #[arg(long, default_value_t = 60.0, value_parser = parse_grace_secs, value_name = "SECS")]
    pub shutdown_grace_secs: f64,
    /// Close a connection whose request line and headers have not all arrived this long
    /// after it began sending them, or that has been idle this long before its first or
    /// next request (seconds).
    #[arg(long, default_value = K::HEADER_TIMEOUT_SECS, value_parser = parse_secs,
          value_name = "SECS")]
    pub header_timeout_secs: f64,
    #[arg(long, default_value = K::BODY_TIMEOUT_SECS, value_parser = parse_secs,
          value_name = "SECS",
          help = format!("Answer 408 to {} whose body has not all arrived this long after its \
                          headers (seconds)", K::BODIES_READ))]
    pub body_timeout_secs: f64,
    #[arg(long, default_value = K::MAX_CONNECTIONS, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..),
          help = format!("Connections open at once; beyond it new connections wait (in the \
                          listen backlog) until one closes. {}", K::SIZING))]
    pub max_connections: u32,
    /// Serve the console, a read-only web view of the threads, compactions, pages, savings,
    /// chain and health, at /tamp/ui (behind the same Host check and token as the other
    /// routes). By default on when listening on loopback, off otherwise.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub console: Option<bool>,
    #[arg(skip)]
    kind: PhantomData<K>,
}

impl<K: ServerKind> From<ServerArgs<K>> for ServerOptions {
    fn from(a: ServerArgs<K>) -> Self {
        ServerOptions {
            config: a.config,
            listen: a.listen,
            max_body: a.max_body,
            max_body_memory: a.max_body_memory,
            auth_token_env: a.auth_token_env,
            debounce_ms: a.debounce_ms,
            store: a.store,
            shutdown_grace_secs: a.shutdown_grace_secs,
            header_timeout_secs: a.header_timeout_secs,
            body_timeout_secs: a.body_timeout_secs,
            max_connections: a.max_connections,
            console: a.console,
        }
    }
}

/// `on` or `off`.
pub fn parse_on_off(text: &str) -> Result<bool, String> {
    match text.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("\"{other}\": expected on or off")),
    }
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

/// `--listen`: `host:port` (an address or a name), a host on the default port, or a port on
/// 127.0.0.1. A name resolves to its first IPv4 address, else its first address.
fn parse_listen<K: ServerKind>(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs as _;
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let default: SocketAddr = K::LISTEN.parse().expect("a literal address");
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(default.ip(), port));
    }
    if let Ok(ip) = text.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default.port()));
    }
    let with_port = match text.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => text.to_string(),
        _ => format!("{text}:{}", default.port()),
    };
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(|e| {
            format!("cannot resolve \"{text}\": {e} (expected host:port, a host or a port)")
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("\"{text}\" resolves to no address"))
}

#[cfg(test)]
mod listen_tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_a_host_or_a_port() {
        let parse = parse_listen::<Serve>;
        assert_eq!(
            parse("127.0.0.1:9000").unwrap().to_string(),
            "127.0.0.1:9000"
        );
        assert_eq!(parse("7476").unwrap().to_string(), "127.0.0.1:7476");
        assert_eq!(
            parse("localhost:7474").unwrap().to_string(),
            "127.0.0.1:7474"
        );
        assert_eq!(parse("localhost").unwrap().to_string(), "127.0.0.1:7474");
        assert_eq!(parse("0.0.0.0").unwrap().to_string(), "0.0.0.0:7474");
        assert_eq!(parse("[::1]:80").unwrap().to_string(), "[::1]:80");
    }
}
