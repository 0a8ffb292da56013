//! [`Retrying`]: a layer around any [`Provider`] that retries transient failures with
//! exponential backoff and jitter, honouring the wait a server asks for.
//!
//! - Retried: the kinds [`ProviderErrorKind::is_retryable`] names (429, 408, 409, 5xx, 529,
//!   timeouts, connection failures, as mapped by [`super::http`]). Not retried: invalid
//!   requests, authentication, an exhausted quota, malformed answers.
//! - The wait before retry `n` (1-based) is `retry_initial × 2^(n-1)`, capped at `retry_max`,
//!   less up to a quarter at random (so clients that failed together do not return together).
//! - A `retry-after` / `retry-after-ms` the server sent replaces that wait, exactly, when it is
//!   at most [`RetryPolicy::longest_honoured_wait`]; a server asking for longer (a quota that
//!   resets in hours) gets no retry: the call fails at once with the server's message.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use futures::future::BoxFuture;
use tamp_plugin_api::{LlmRequest, LlmResponse};

use super::ProviderConfig;
use super::{Provider, ProviderError};

/// How often and how patiently [`Retrying`] retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The wait before the first retry.
    pub initial: Duration,
    /// The longest computed wait.
    pub max: Duration,
}

impl RetryPolicy {
    pub fn from_config(cfg: &ProviderConfig) -> Self {
        RetryPolicy {
            max_retries: cfg.max_retries,
            initial: Duration::from_millis(cfg.retry_initial_ms),
            max: Duration::from_millis(cfg.retry_max_ms),
        }
    }

    /// The longest `retry-after` that is waited for: `max`, but at least a minute, since
    /// rate-limit windows are a minute long.
    pub fn longest_honoured_wait(&self) -> Duration {
        self.max.max(Duration::from_secs(60))
    }

    /// The backoff before retry `retry` (1-based), before jitter.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The wait before retry `retry` after `error`, or `None` when the error is not worth a
    /// retry (not transient, or the server asks for longer than we wait).
    pub fn wait_before(&self, retry: u32, error: &ProviderError) -> Option<Duration> {
        if !error.is_retryable() || retry > self.max_retries {
            return None;
        }
        match error.retry_after {
            Some(asked) if asked > self.longest_honoured_wait() => None,
            Some(asked) => Some(asked),
            None => Some(jittered(self.backoff(retry))),
        }
    }

    /// Runs `attempt` until it succeeds or [`RetryPolicy::wait_before`] says stop, sleeping
    /// the wait between attempts; `on_retry(retry, wait, error)` hears of each retry before
    /// its wait (to log it). The one retry loop of the HTTP providers and the batches client.
    pub async fn run<T, F, Fut>(
        &self,
        attempt: F,
        on_retry: impl Fn(u32, Duration, &ProviderError),
    ) -> Result<T, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut retry = 0;
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            retry += 1;
            let Some(wait) = self.wait_before(retry, &error) else {
                return Err(error);
            };
            on_retry(retry, wait, &error);
            tokio::time::sleep(wait).await;
        }
    }
}

/// `wait` less a random fraction of up to a quarter.
fn jittered(wait: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let fraction = (random % 10_000) as f64 / 10_000.0 * 0.25;
    wait.mul_f64(1.0 - fraction)
}

/// A provider that retries its inner provider's transient failures (see the module docs).
/// Each retry is logged at warn with the attempt number and the wait.
pub struct Retrying<P> {
    inner: P,
    policy: RetryPolicy,
}

impl<P: Provider> Retrying<P> {
    pub fn new(inner: P, policy: RetryPolicy) -> Self {
        Retrying { inner, policy }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }
}

impl<P: Provider> Provider for Retrying<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cacheable(&self) -> bool {
        self.inner.cacheable()
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(self.policy.run(
            || self.inner.complete(request),
            |retry, wait, error| {
                tracing::warn!(
                    provider = self.inner.name(),
                    label = %request.label,
                    attempt = retry,
                    of = self.policy.max_retries + 1,
                    wait_ms = wait.as_millis() as u64,
                    "LLM call failed, retrying in {}: {error}",
                    super::fmt_duration(wait)
                );
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ProviderErrorKind, ScriptedProvider, ScriptedResponse};

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            initial: Duration::from_millis(1),
            max: Duration::from_millis(4),
        }
    }

    fn error(kind: ProviderErrorKind, retry_after_ms: Option<u64>) -> ScriptedResponse {
        let response = ScriptedResponse::error(kind, format!("{kind} happened"));
        match retry_after_ms {
            Some(ms) => response.with_retry_after(Duration::from_millis(ms)),
            None => response,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            max_retries: 10,
            initial: Duration::from_millis(500),
            max: Duration::from_millis(30_000),
        };
        let waits: Vec<u128> = (1..=8).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(p.backoff(200), Duration::from_millis(30_000));
        for n in 1..=8 {
            let e = ProviderError::new("p", ProviderErrorKind::Server, "x");
            let w = p.wait_before(n, &e).unwrap();
            assert!(
                w <= p.backoff(n) && w >= p.backoff(n).mul_f64(0.75),
                "{w:?}"
            );
        }
    }

    #[test]
    fn server_waits_are_honoured_up_to_a_limit() {
        let p = policy(3);
        let asked = ProviderError::new("p", ProviderErrorKind::RateLimited, "x")
            .with_retry_after(Duration::from_secs(7));
        assert_eq!(p.wait_before(1, &asked), Some(Duration::from_secs(7)));
        let hours = asked.clone().with_retry_after(Duration::from_secs(7200));
        assert_eq!(p.wait_before(1, &hours), None);
        assert_eq!(p.wait_before(4, &asked), None, "past max_retries");
        let auth = ProviderError::new("p", ProviderErrorKind::Authentication, "x");
        assert_eq!(p.wait_before(1, &auth), None);
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_success() {
        let inner = ScriptedProvider::sequence(vec![
            error(ProviderErrorKind::RateLimited, Some(1)),
            error(ProviderErrorKind::Overloaded, None),
            error(ProviderErrorKind::Timeout, None),
            ScriptedResponse::text("finally"),
        ]);
        let p = Retrying::new(inner, policy(3));
        let r = p.complete(&LlmRequest::new("", "hi", 10)).await.unwrap();
        assert_eq!(r.text.as_str(), "finally");
        assert_eq!(p.inner().requests().len(), 4);
    }

    #[tokio::test]
    async fn retries_stop_at_max_retries_with_the_last_error() {
        let inner = ScriptedProvider::sequence(vec![
            error(ProviderErrorKind::Server, None),
            error(ProviderErrorKind::Server, None),
            error(ProviderErrorKind::Connection, None),
            ScriptedResponse::text("too late"),
        ]);
        let p = Retrying::new(inner, policy(2));
        let e = p
            .complete(&LlmRequest::new("", "hi", 10))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Connection);
        assert_eq!(p.inner().requests().len(), 3);
    }

    #[tokio::test]
    async fn permanent_failures_are_not_retried() {
        for kind in [
            ProviderErrorKind::InvalidRequest,
            ProviderErrorKind::Authentication,
            ProviderErrorKind::QuotaExhausted,
            ProviderErrorKind::Malformed,
        ] {
            let inner = ScriptedProvider::sequence(vec![
                error(kind, None),
                ScriptedResponse::text("never"),
            ]);
            let p = Retrying::new(inner, policy(4));
            let e = p
                .complete(&LlmRequest::new("", "hi", 10))
                .await
                .unwrap_err();
            assert_eq!(e.kind, kind);
            assert_eq!(e.message, format!("{kind} happened"), "verbatim");
            assert_eq!(p.inner().requests().len(), 1, "{kind}");
        }
    }

    #[tokio::test]
    async fn zero_retries_means_one_attempt() {
        let inner = ScriptedProvider::sequence(vec![
            error(ProviderErrorKind::Server, None),
            ScriptedResponse::text("never"),
        ]);
        let p = Retrying::new(inner, policy(0));
        assert!(p.complete(&LlmRequest::new("", "hi", 10)).await.is_err());
        assert_eq!(p.inner().requests().len(), 1);
    }
}
