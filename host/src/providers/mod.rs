//! LLM providers: the backends that answer the [`LlmRequest`]s plugins make through the host.
//!
//! - [`Provider`]: the interface every backend implements. [`from_config`] wraps the HTTP
//!   ones in [`Retrying`]; the host's services add the overall deadline and the cache.
//! - [`ExtractiveSummarizer`] (`extractive`): the default. Offline and deterministic, it picks
//!   the most informative sentences of the material, so everything runs without a key.
//! - [`ScriptedProvider`] (`scripted`): answers from a script, records every request, and can
//!   inject errors and delays; for tests and benchmarks.
//! - [`AnthropicProvider`] (`anthropic`, the Messages API) and [`OpenAiProvider`] (`openai`,
//!   any Chat Completions server), over HTTP ([`http`]: keys, the error mapping), with
//!   structured output ([`structured`], [`schema`]), wrapped in [`Retrying`] ([`retry`]).
//! - [`ReplayProvider`] (`replay`): answers from a file of answers recorded by [`Recording`]
//!   (`record = "answers.jsonl"` on any other kind), keyed by the exact request ([`record`]).
//!
//! ## The `<content>` convention
//!
//! A strategy's prompt is instructions plus material. By tamp's convention the material is
//! wrapped in [`CONTENT_OPEN`] … [`CONTENT_CLOSE`] (use [`wrap_content`]), so that providers
//! that do not follow instructions (the extractive summarizer, the scripted provider's `echo`)
//! know what to work on: [`content_section`] returns the text inside the last pair, or the
//! whole prompt when there is none.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tamp_plugin_api::{LlmRequest, LlmResponse};

use crate::config_error::FieldError;

#[cfg(feature = "http-providers")]
pub mod anthropic;
#[cfg(feature = "http-providers")]
pub mod batches;
pub mod config;
pub mod extractive;
#[cfg(feature = "http-providers")]
pub mod http;
#[cfg(feature = "http-providers")]
pub mod openai;
pub mod record;
pub mod retry;
pub mod schema;
pub mod scripted;
pub mod structured;

#[cfg(feature = "http-providers")]
pub use anthropic::AnthropicProvider;
pub use config::{PriceConfig, ProviderConfig, ProviderKind};
pub use extractive::{summarize, ExtractiveSummarizer, Summary};
#[cfg(feature = "http-providers")]
pub use http::{ApiKey, ClientSettings};
#[cfg(feature = "http-providers")]
pub use openai::OpenAiProvider;
pub use record::{request_key, Recording, ReplayProvider};
pub use retry::{RetryPolicy, Retrying};
pub use scripted::{
    Script, ScriptError, ScriptMode, ScriptedError, ScriptedProvider, ScriptedResponse,
    ScriptedUsage,
};
pub use structured::StructuredMode;

/// Builds the provider a chain file's `[provider]` section describes; relative paths in it
/// (`script`, `answers`, `record`) are from `base_dir`, the chain file's directory. The HTTP
/// providers (`anthropic`, `openai`) are wrapped in [`Retrying`]; their key is read from the
/// environment variable `api_key_env` names, now, so a missing key fails here, naming the
/// variable. `kind = "replay"` reads its `answers` file now (a malformed line fails here,
/// naming the file and line); `record` wraps the provider in [`Recording`], outside the
/// retries (one line per answer, not per attempt), opening the file now. An error names the
/// key at fault; [`crate::config::LoadedChainFile::provider`] adds the file and line.
pub fn from_config(cfg: &ProviderConfig, base_dir: &Path) -> Result<Arc<dyn Provider>, FieldError> {
    let provider = base_provider(cfg, base_dir)?;
    Ok(match &cfg.record {
        Some(path) => Arc::new(
            Recording::open(provider, &base_dir.join(path))
                .map_err(|m| FieldError::new("provider", "record", m))?,
        ),
        None => provider,
    })
}

fn base_provider(cfg: &ProviderConfig, base_dir: &Path) -> Result<Arc<dyn Provider>, FieldError> {
    // The config check made sure the file a kind reads is named; an empty path fails to open.
    let named = |path: &Option<PathBuf>| base_dir.join(path.as_deref().unwrap_or(Path::new("")));
    Ok(match cfg.kind {
        ProviderKind::Replay => Arc::new(
            ReplayProvider::from_file(&named(&cfg.answers))
                .map_err(|m| FieldError::new("provider", "answers", m))?,
        ),
        ProviderKind::Scripted => Arc::new(
            ScriptedProvider::from_file(named(&cfg.script))
                .map_err(|e| FieldError::new("provider", "script", e.to_string()))?,
        ),
        ProviderKind::Anthropic | ProviderKind::OpenAi => http_provider(cfg)?,
        ProviderKind::Extractive => Arc::new(ExtractiveSummarizer::default()),
    })
}

#[cfg(not(feature = "http-providers"))]
fn http_provider(cfg: &ProviderConfig) -> Result<Arc<dyn Provider>, FieldError> {
    Err(FieldError::new(
        "provider",
        "kind",
        format!(
            "\"{}\" needs an HTTP client, and this build of tamp has none (tamp-host's \
             `http-providers` feature is off)",
            cfg.kind
        ),
    ))
}

#[cfg(feature = "http-providers")]
fn http_provider(cfg: &ProviderConfig) -> Result<Arc<dyn Provider>, FieldError> {
    let error = |key, message| FieldError::new("provider", key, message);
    let key = match &cfg.api_key_env {
        Some(var) => Some(ApiKey::from_env(var).map_err(|m| error("api_key_env", m))?),
        None => None,
    };
    let structured = StructuredMode::parse(&cfg.structured_output).ok_or_else(|| {
        error(
            "structured_output",
            format!("unknown mode \"{}\"", cfg.structured_output),
        )
    })?;
    let anthropic = cfg.kind == ProviderKind::Anthropic;
    let settings = ClientSettings {
        model: cfg
            .model
            .clone()
            .ok_or_else(|| error("model", format!("required when kind = \"{}\"", cfg.kind)))?,
        base_url: cfg.base_url.clone().unwrap_or_else(|| {
            if anthropic {
                anthropic::DEFAULT_BASE_URL
            } else {
                openai::DEFAULT_BASE_URL
            }
            .to_string()
        }),
        key,
        structured,
        timeout: crate::bounded::saturating_seconds(cfg.timeout_secs),
    };
    let policy = RetryPolicy::from_config(cfg);
    Ok(if anthropic {
        let client = AnthropicProvider::new(settings).map_err(|m| error("kind", m))?;
        Arc::new(Retrying::new(client, policy))
    } else {
        let client = OpenAiProvider::new(settings).map_err(|m| error("kind", m))?;
        Arc::new(Retrying::new(client, policy))
    })
}

/// What went wrong in a provider call; decides whether the host retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// HTTP 429 or the provider's equivalent. Retryable, usually with a `retry_after`.
    RateLimited,
    /// The provider is overloaded (Anthropic 529, 503). Retryable.
    Overloaded,
    /// A 5xx or other server-side failure. Retryable.
    Server,
    /// The call took longer than allowed. Retryable.
    Timeout,
    /// The connection failed or broke. Retryable.
    Connection,
    /// The request itself is wrong (400, a schema this provider cannot fill). Not retryable.
    InvalidRequest,
    /// Missing or rejected credentials (401, 403). Not retryable.
    Authentication,
    /// Credit or quota used up (as opposed to a transient rate limit). Not retryable.
    QuotaExhausted,
    /// The provider answered something that could not be parsed. Not retryable.
    Malformed,
    /// Anything else. Not retryable.
    Other,
}

impl ProviderErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ProviderErrorKind; 10] = [
        ProviderErrorKind::RateLimited,
        ProviderErrorKind::Overloaded,
        ProviderErrorKind::Server,
        ProviderErrorKind::Timeout,
        ProviderErrorKind::Connection,
        ProviderErrorKind::InvalidRequest,
        ProviderErrorKind::Authentication,
        ProviderErrorKind::QuotaExhausted,
        ProviderErrorKind::Malformed,
        ProviderErrorKind::Other,
    ];

    /// The snake_case name, as in scripts and logs (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderErrorKind::RateLimited => "rate_limited",
            ProviderErrorKind::Overloaded => "overloaded",
            ProviderErrorKind::Server => "server",
            ProviderErrorKind::Timeout => "timeout",
            ProviderErrorKind::Connection => "connection",
            ProviderErrorKind::InvalidRequest => "invalid_request",
            ProviderErrorKind::Authentication => "authentication",
            ProviderErrorKind::QuotaExhausted => "quota_exhausted",
            ProviderErrorKind::Malformed => "malformed",
            ProviderErrorKind::Other => "other",
        }
    }

    /// Transient failures worth retrying: rate limits, overload, server errors, timeouts and
    /// connection failures.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ProviderErrorKind::RateLimited
                | ProviderErrorKind::Overloaded
                | ProviderErrorKind::Server
                | ProviderErrorKind::Timeout
                | ProviderErrorKind::Connection
        )
    }
}

impl std::fmt::Display for ProviderErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed provider call. Displays as `provider: kind: message`, e.g.
/// `anthropic/claude-x: rate_limited: slow down (retry after 1s)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider}: {kind}: {message}{}", fmt_retry_after(.retry_after))]
pub struct ProviderError {
    /// The provider's [`Provider::name`].
    pub provider: String,
    pub kind: ProviderErrorKind,
    pub message: String,
    /// How long the provider asked us to wait before retrying (`retry-after`), if it said.
    pub retry_after: Option<Duration>,
}

fn fmt_retry_after(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (retry after {})", fmt_duration(*d)),
        None => String::new(),
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl ProviderError {
    pub fn new(
        provider: impl Into<String>,
        kind: ProviderErrorKind,
        message: impl Into<String>,
    ) -> Self {
        ProviderError {
            provider: provider.into(),
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// True for the transient kinds (see [`ProviderErrorKind::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

/// A backend that answers LLM requests.
///
/// Implementations must be cheap to call concurrently: the host issues many requests at once
/// (`complete_all`) and awaits them on a shared runtime, so `complete` must never block a
/// thread on I/O or sleep (use async I/O and `tokio::time::sleep`).
pub trait Provider: Send + Sync {
    /// A stable name for logs, errors and cache keys: `extractive`, `scripted`,
    /// `anthropic/<model>`.
    fn name(&self) -> &str;

    /// Answers one request. Retries, timeouts and caching are the caller's business.
    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>>;

    /// Whether answers are worth keeping in the summary cache. A provider that answers
    /// locally and for free (the extractive summarizer) says no, so the store does not fill
    /// with answers that cost nothing to make again.
    fn cacheable(&self) -> bool {
        true
    }
}

impl<P: Provider + ?Sized> Provider for Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn cacheable(&self) -> bool {
        (**self).cacheable()
    }
    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        (**self).complete(request)
    }
}

impl<P: Provider + ?Sized> Provider for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn cacheable(&self) -> bool {
        (**self).cacheable()
    }
    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        (**self).complete(request)
    }
}

/// The material section of a prompt, written once in the SDK (plugins wrap their material
/// with the same escaping the providers read it back with).
pub use tamp_plugin_api::sdk::prompt::{
    content_section, wrap_content, CONTENT_CLOSE, CONTENT_OPEN,
};

/// A token count estimated from characters: ⌈chars / 4⌉. Used where a provider does not report
/// usage (the extractive and scripted providers); it is an estimate, not a tokenizer's count.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run by `.ci/run`'s test of the core alone (`--no-default-features`).
    #[cfg(not(feature = "http-providers"))]
    #[test]
    fn without_http_providers_an_http_kind_is_refused_naming_the_feature() {
        let cfg = ProviderConfig {
            kind: ProviderKind::OpenAi,
            model: Some("m".into()),
            ..ProviderConfig::default()
        };
        let e = from_config(&cfg, Path::new(".")).err().expect("refused");
        assert_eq!((e.table, e.key), ("provider", "kind"), "{e}");
        assert!(e.message.contains("`http-providers` feature"), "{e}");
    }

    #[test]
    fn retryable_kinds() {
        let retryable: Vec<_> = ProviderErrorKind::ALL
            .iter()
            .filter(|k| k.is_retryable())
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            retryable,
            [
                "rate_limited",
                "overloaded",
                "server",
                "timeout",
                "connection"
            ]
        );
        let e = ProviderError::new("x", ProviderErrorKind::Authentication, "no key");
        assert!(!e.is_retryable());
    }

    #[test]
    fn kind_names_match_serde() {
        for kind in ProviderErrorKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            let back: ProviderErrorKind = serde_json::from_str(&json).unwrap();
            assert_eq!(back, kind);
        }
    }

    #[test]
    fn error_display() {
        let e = ProviderError::new("anthropic/m", ProviderErrorKind::RateLimited, "slow down")
            .with_retry_after(Duration::from_secs(2));
        assert_eq!(
            e.to_string(),
            "anthropic/m: rate_limited: slow down (retry after 2s)"
        );
        let e = ProviderError::new("scripted", ProviderErrorKind::Server, "boom")
            .with_retry_after(Duration::from_millis(1500));
        assert_eq!(e.to_string(), "scripted: server: boom (retry after 1500ms)");
        let e = ProviderError::new("extractive", ProviderErrorKind::InvalidRequest, "no schema");
        assert_eq!(e.to_string(), "extractive: invalid_request: no schema");
    }

    #[test]
    fn estimates_tokens_from_chars() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("éééé"), 1);
    }

    #[tokio::test]
    async fn arc_and_box_are_providers() {
        let p: Arc<dyn Provider> = Arc::new(ExtractiveSummarizer::new());
        let b: Box<dyn Provider> = Box::new(ScriptedProvider::always("ok"));
        fn takes(p: &impl Provider) -> &str {
            p.name()
        }
        assert_eq!(takes(&p), "extractive");
        assert_eq!(takes(&b), "scripted");
        let r = b.complete(&LlmRequest::new("", "hi", 10)).await.unwrap();
        assert_eq!(r.text.as_str(), "ok");
    }
}
