//! Sending a request upstream and relaying its answer: status, headers and body as they
//! come, the body chunk by chunk as the upstream writes it (an SSE stream event by event),
//! never gathered whole.

use crate::error_text::error_chain;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use futures::Stream;

use super::error::ProxyError;
use super::metrics::ProxyMetrics;
use super::route::response_headers;

/// How long connecting to an upstream may take. The answer itself has no limit: a long
/// stream is the upstream's business and the client's, who may hang up at any time.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP clients to the upstreams: one that bypasses proxies for loopback upstreams (a
/// proxy set in the environment must not swallow a local server), one that honours them.
pub struct Upstreams {
    direct: reqwest::Client,
    via_env: reqwest::Client,
}

impl Upstreams {
    pub fn new() -> anyhow::Result<Upstreams> {
        let builder = || {
            reqwest::Client::builder()
                // A redirect is the client's to follow (with its own credentials policy).
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .pool_idle_timeout(Duration::from_secs(90))
        };
        Ok(Upstreams {
            direct: builder().no_proxy().build()?,
            via_env: builder().build()?,
        })
    }

    /// Sends the request and returns the upstream's answer head (its body still to come).
    /// Connection errors are 502 in the client's provider's shape; the message names the
    /// upstream's host, never its credentials or the request's query or headers.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Option<reqwest::Body>,
    ) -> Result<reqwest::Response, ProxyError> {
        let client = if crate::providers::http::is_loopback(url) {
            &self.direct
        } else {
            &self.via_env
        };
        let mut request = client.request(method, url).headers(headers);
        if let Some(body) = body {
            request = request.body(body);
        }
        request.send().await.map_err(|e| {
            let origin = url.split(['?', '#']).next().unwrap_or(url);
            let origin = origin
                .find("://")
                .and_then(|i| origin[i + 3..].find('/').map(|j| &origin[..i + 3 + j]))
                .unwrap_or(origin);
            let why = if e.is_connect() {
                "cannot connect"
            } else if e.is_timeout() {
                "timed out"
            } else {
                "failed"
            };
            ProxyError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                format!(
                    "the request to the upstream {} {why}: {}",
                    crate::redact::url(origin),
                    crate::redact::urls_in(&error_chain(&e.without_url()))
                ),
            )
        })
    }
}

/// The client's answer: the upstream's status and headers (less the hop-by-hop ones) plus
/// `extra`, and its body relayed as it arrives.
pub fn relay(
    upstream: reqwest::Response,
    extra: Vec<(HeaderName, HeaderValue)>,
    metrics: Arc<ProxyMetrics>,
    route: &'static str,
) -> Response {
    let status = upstream.status();
    let mut headers = response_headers(upstream.headers());
    for (name, value) in extra {
        headers.insert(name, value);
    }
    let body = Body::from_stream(Relay::new(upstream.bytes_stream(), metrics, route));
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The upstream's body on its way to the client, counted: bytes relayed, streams open.
/// Each chunk is handed on as it arrives; hyper writes it out before asking for the next.
struct Relay {
    inner: ByteStream,
    metrics: Arc<ProxyMetrics>,
    route: &'static str,
    bytes: u64,
}

impl Relay {
    fn new(
        inner: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
        metrics: Arc<ProxyMetrics>,
        route: &'static str,
    ) -> Relay {
        metrics.stream_opened();
        Relay {
            inner: Box::pin(inner),
            metrics,
            route,
            bytes: 0,
        }
    }
}

impl Stream for Relay {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => self.bytes += chunk.len() as u64,
            // The upstream broke off: the error ends the client's answer without its last
            // chunk, so the client sees a truncated stream, not a complete one.
            Poll::Ready(Some(Err(e))) => {
                let e = crate::redact::urls_in(&e.to_string()).into_owned();
                tracing::warn!(route = self.route, "the upstream's answer broke off: {e}");
            }
            _ => {}
        }
        polled
    }
}

impl Drop for Relay {
    /// Ended, broken off, or dropped because the client hung up: counted all the same.
    fn drop(&mut self) {
        self.metrics.stream_closed(self.route, self.bytes);
    }
}
