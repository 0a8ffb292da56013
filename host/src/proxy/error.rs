//! The proxy's own errors on the providers' routes, written in that provider's error shape:
//! the client's SDK then raises its own error type (and retries what it would retry), as if
//! the upstream had answered. Errors on `/tamp/` routes are `tamp serve`'s JSON errors.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::route::Provider;
use crate::http::error::ApiError;

/// An error tamp answers in place of the upstream.
#[derive(Debug)]
pub struct ProxyError {
    pub status: StatusCode,
    /// tamp's stable code (`upstream_unreachable`, `compaction_failed`, `body_too_large`, ...).
    pub code: &'static str,
    pub message: String,
    /// Sent as `x-should-retry: false`, which the official SDKs obey: the same request would
    /// fail the same way (a conversation tamp cannot read, in strict mode).
    pub final_answer: bool,
}

impl ProxyError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ProxyError {
            status,
            code,
            message: message.into(),
            final_answer: false,
        }
    }

    /// A `tamp serve` error (a body too large or too slow) on a provider's route.
    pub fn from_api(e: ApiError) -> Self {
        Self::new(e.status, e.code.as_str(), e.message)
    }

    /// The answer, in `provider`'s error shape.
    pub fn into_response_for(self, provider: Provider) -> Response {
        let message = format!("tamp proxy: {}", self.message);
        let body = match provider {
            // https://docs.anthropic.com/en/api/errors: `{"type": "error", "error": {...}}`.
            Provider::Anthropic => json!({
                "type": "error",
                "error": {"type": anthropic_type(self.status), "message": message},
            }),
            // OpenAI: `{"error": {"message", "type", "param", "code"}}`.
            Provider::OpenAi => json!({
                "error": {
                    "message": message,
                    "type": "tamp_proxy_error",
                    "param": null,
                    "code": self.code,
                },
            }),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert("x-tamp-error", HeaderValue::from_static(self.code));
        if self.final_answer {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Anthropic's error `type` for a status.
fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 408 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn errors_take_the_providers_shapes() {
        let e = ProxyError::new(StatusCode::BAD_GATEWAY, "upstream_unreachable", "no route");
        let response = e.into_response_for(Provider::Anthropic);
        assert_eq!(response.status(), 502);
        assert_eq!(response.headers()["x-tamp-error"], "upstream_unreachable");
        let body = body_of(response).await;
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "api_error");
        assert_eq!(body["error"]["message"], "tamp proxy: no route");

        let mut e = ProxyError::new(StatusCode::BAD_GATEWAY, "compaction_failed", "bad");
        e.final_answer = true;
        let response = e.into_response_for(Provider::OpenAi);
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body = body_of(response).await;
        assert_eq!(body["error"]["code"], "compaction_failed");
        assert_eq!(body["error"]["param"], serde_json::Value::Null);
        assert_eq!(
            anthropic_type(StatusCode::PAYLOAD_TOO_LARGE),
            "request_too_large"
        );
    }
}
