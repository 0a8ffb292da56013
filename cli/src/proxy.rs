//! `tamp proxy`'s flags: those `tamp serve` has too ([`ServerArgs`]), and the after-help that
//! says what the proxy does with them.

use clap::Args;
use tamp_host::proxy::ProxyOptions;

use crate::server_flags::{Proxy, ServerArgs};

/// `tamp proxy` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Example:\n  tamp proxy --config chain.toml\n  \
    export ANTHROPIC_BASE_URL=http://127.0.0.1:7475\n  \
    export OPENAI_BASE_URL=http://127.0.0.1:7475/v1\n\n\
    Compacted: POST /v1/messages and /v1/messages/count_tokens (Anthropic), POST \
    /v1/chat/completions and /v1/responses (OpenAI); every other path is forwarded as it is \
    (models, batches, files). Headers, credentials included, go upstream untouched and are \
    never logged; the answer (SSE streams included) comes back as the upstream sends it, with \
    x-tamp-compaction saying what the chain did. A compaction that fails or takes longer than \
    [proxy] compaction_timeout_secs forwards the original body ([proxy] strict = true answers \
    502 instead).\n\n\
    Upstreams: [proxy] anthropic = \"https://api.anthropic.com\", openai = \
    \"https://api.openai.com/v1\" (the defaults) in the chain file, reloaded with the chain.\n\
    tamp's own routes: GET /tamp/v1/pages/{id}, /tamp/healthz, /tamp/metrics. See \
    docs/proxy.md.")]
pub struct ProxyArgs {
    #[command(flatten)]
    pub server: ServerArgs<Proxy>,
}

impl From<ProxyArgs> for ProxyOptions {
    fn from(a: ProxyArgs) -> Self {
        ProxyOptions {
            server: a.server.into(),
        }
    }
}
