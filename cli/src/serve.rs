//! `tamp serve`: its flags (those `tamp proxy` has too are [`ServerArgs`]).

use clap::Args;
use tamp_host::serve::ServeOptions;

use crate::server_flags::{Serve, ServerArgs};

/// `tamp serve` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Example (from the repository's root):\n  \
    tamp serve --config examples/chains/default.toml --listen 127.0.0.1:7474\n  \
    curl -s localhost:7474/v1/compact -H 'content-type: application/json' \\\n    \
    -d \"{\\\"conversation\\\": $(cat examples/conversations/ponyc-4588.anthropic.json)}\"\n\n\
    Routes: POST /v1/compact, GET /v1/pages/{id}, GET /v1/chain, GET /healthz, GET /metrics.\n\
    Edit the chain file while it runs: the new chain is built aside and swapped in; an \
    invalid one is refused (see GET /v1/chain's last_reload_error) and the old chain stays.\n\n\
    Limits: a connection that has not sent a whole request head within --header-timeout-secs \
    (or sits idle that long between requests) is closed; a body that has not arrived within \
    --body-timeout-secs is answered 408, one declared or sent larger than --max-body 413; \
    beyond --max-concurrent requests at once the answer is 503 with retry-after; beyond \
    --max-connections open connections new ones wait to be accepted. Keep --max-connections \
    well under the open-file limit (ulimit -n).")]
pub struct ServeArgs {
    #[command(flatten)]
    pub server: ServerArgs<Serve>,
    /// Requests answered at once; beyond it the answer is 503 with `retry-after: 1`.
    /// /healthz and /metrics are not counted. A compaction counts until it ends, even when
    /// its client has hung up.
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent: u32,
    /// Refuse a chain with a stage that has no `sha256 = "..."` pin, at start and at every
    /// reload (`tamp plugins hash <file>` prints the pin). See docs/security.md.
    #[arg(long)]
    pub require_pins: bool,
}

impl From<ServeArgs> for ServeOptions {
    fn from(a: ServeArgs) -> Self {
        ServeOptions {
            server: a.server.into(),
            max_concurrent: a.max_concurrent,
            require_pins: a.require_pins,
        }
    }
}
