//! `tamp proxy`'s flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use tamp_host::proxy::ProxyOptions;

use crate::serve::{parse_grace_secs, parse_secs, parse_size};

/// `tamp proxy` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Example:\n  tamp proxy --config chain.toml\n  \
    export ANTHROPIC_BASE_URL=http://127.0.0.1:7475\n  \
    export OPENAI_BASE_URL=http://127.0.0.1:7475/v1\n\n\
    Compacted: POST /v1/messages and /v1/messages/count_tokens (Anthropic), POST \
    /v1/chat/completions (OpenAI); every other path is forwarded as it is (models, batches, \
    files, the Responses API). Headers, credentials included, go upstream untouched and are \
    never logged; the answer (SSE streams included) comes back as the upstream sends it, with \
    x-tamp-compaction saying what the chain did. A compaction that fails or takes longer than \
    [proxy] compaction_timeout_secs forwards the original body ([proxy] strict = true answers \
    502 instead).\n\n\
    Upstreams: [proxy] anthropic = \"https://api.anthropic.com\", openai = \
    \"https://api.openai.com/v1\" (the defaults) in the chain file, reloaded with the chain.\n\
    tamp's own routes: GET /tamp/v1/pages/{id}, /tamp/healthz, /tamp/metrics. See \
    docs/proxy.md.")]
pub struct ProxyArgs {
    /// The chain file to compact with and watch; its `[proxy]` table names the upstreams.
    #[arg(short, long)]
    pub config: PathBuf,
    /// Address to listen on. Loopback by default: the pages under /tamp/ hold the
    /// conversations, and anyone who reaches the port can read them.
    #[arg(long, default_value = "127.0.0.1:7475", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Largest body of a compacted route (bytes, or with a KiB/MiB/GiB suffix); larger
    /// ones are answered 413. Other routes stream their bodies through, unbounded.
    #[arg(long, default_value = "64MiB", value_parser = parse_size, value_name = "SIZE")]
    pub max_body: usize,
    /// Require `Authorization: Bearer <token>` on tamp's own routes under /tamp/ (but
    /// /tamp/healthz), the token read from this environment variable, as `tamp serve
    /// --auth-token-env`. The provider routes pass the client's own key upstream untouched.
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
    /// On SIGTERM or Ctrl-C, wait at most this long for answers still streaming (seconds).
    #[arg(long, default_value_t = 60.0, value_parser = parse_grace_secs, value_name = "SECS")]
    pub shutdown_grace_secs: f64,
    /// Close a connection whose request head has not all arrived this long after it began,
    /// or that has been idle this long before its first or next request (seconds).
    #[arg(long, default_value_t = 30.0, value_parser = parse_secs, value_name = "SECS")]
    pub header_timeout_secs: f64,
    /// Answer 408 to a compacted route's request whose body has not all arrived this long
    /// after its headers (seconds).
    #[arg(long, default_value_t = 60.0, value_parser = parse_secs, value_name = "SECS")]
    pub body_timeout_secs: f64,
    /// Connections open at once; beyond it new connections wait until one closes. Each
    /// streaming answer holds one: keep it above the streams expected at once, and under the
    /// open-file limit (`ulimit -n`) less two files per stream (its upstream connection).
    #[arg(long, default_value_t = 1024, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
}

impl From<ProxyArgs> for ProxyOptions {
    fn from(a: ProxyArgs) -> Self {
        ProxyOptions {
            config: a.config,
            listen: a.listen,
            max_body: a.max_body,
            auth_token_env: a.auth_token_env,
            debounce_ms: a.debounce_ms,
            store: a.store,
            shutdown_grace_secs: a.shutdown_grace_secs,
            header_timeout_secs: a.header_timeout_secs,
            body_timeout_secs: a.body_timeout_secs,
            max_connections: a.max_connections,
        }
    }
}
