//! The error answer every tamp HTTP route gives: `{"error": {"code": "...", "message": "..."}}`,
//! with a stable `code` ([`ApiErrorCode`]) and a message that names the field at fault.
//! `tamp serve` answers with it everywhere; `tamp proxy` on its own routes (pages, health) and
//! turned into each provider's error shape on the relayed ones (`proxy::error`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde_json::json;

use crate::store::StoreError;

/// An error answer's stable `code`; [`ApiErrorCode::as_str`] is its text in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiErrorCode {
    InvalidRequest,
    InvalidConversation,
    BodyTooLarge,
    BodyTimeout,
    UriTooLong,
    Unauthorized,
    HostNotAllowed,
    NotFound,
    MethodNotAllowed,
    UnsupportedMediaType,
    Overloaded,
    ShuttingDown,
    StoreUnavailable,
    InternalError,
}

impl ApiErrorCode {
    pub const ALL: [ApiErrorCode; 14] = [
        ApiErrorCode::InvalidRequest,
        ApiErrorCode::InvalidConversation,
        ApiErrorCode::BodyTooLarge,
        ApiErrorCode::BodyTimeout,
        ApiErrorCode::UriTooLong,
        ApiErrorCode::Unauthorized,
        ApiErrorCode::HostNotAllowed,
        ApiErrorCode::NotFound,
        ApiErrorCode::MethodNotAllowed,
        ApiErrorCode::UnsupportedMediaType,
        ApiErrorCode::Overloaded,
        ApiErrorCode::ShuttingDown,
        ApiErrorCode::StoreUnavailable,
        ApiErrorCode::InternalError,
    ];

    /// The code as the body writes it (`invalid_request`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApiErrorCode::InvalidRequest => "invalid_request",
            ApiErrorCode::InvalidConversation => "invalid_conversation",
            ApiErrorCode::BodyTooLarge => "body_too_large",
            ApiErrorCode::BodyTimeout => "body_timeout",
            ApiErrorCode::UriTooLong => "uri_too_long",
            ApiErrorCode::Unauthorized => "unauthorized",
            ApiErrorCode::HostNotAllowed => "host_not_allowed",
            ApiErrorCode::NotFound => "not_found",
            ApiErrorCode::MethodNotAllowed => "method_not_allowed",
            ApiErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ApiErrorCode::Overloaded => "overloaded",
            ApiErrorCode::ShuttingDown => "shutting_down",
            ApiErrorCode::StoreUnavailable => "store_unavailable",
            ApiErrorCode::InternalError => "internal_error",
        }
    }

    /// Whether the same request may succeed in a moment: the answer says `retry-after`.
    fn is_momentary(self) -> bool {
        matches!(self, ApiErrorCode::Overloaded | ApiErrorCode::ShuttingDown)
    }
}

impl std::fmt::Display for ApiErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error answer. `code` is stable; `message` is for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ApiErrorCode,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: ApiErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ApiErrorCode::InvalidRequest,
            message,
        )
    }

    pub(crate) fn body_too_large(max_body: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ApiErrorCode::BodyTooLarge,
            format!(
                "the request body is larger than the server's limit of {max_body} bytes \
                 (--max-body)"
            ),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code.as_str(), "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.code.is_momentary() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// A store's error as an answer: a missing page is the caller's 404, a backend gone the
/// server's 503, anything else a 500.
pub(crate) fn store_failure(e: StoreError) -> ApiError {
    match e {
        e if e.is_not_found() => {
            ApiError::new(StatusCode::NOT_FOUND, ApiErrorCode::NotFound, e.to_string())
        }
        StoreError::Backend { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::StoreUnavailable,
            e.to_string(),
        ),
        e => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ApiErrorCode::InternalError,
            e.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[tokio::test]
    async fn an_error_body_writes_its_code_as_text_and_momentary_ones_say_retry_after() {
        let names: Vec<&str> = ApiErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        // The codes the docs list, in their spelling.
        for name in [
            "invalid_request",
            "invalid_conversation",
            "body_too_large",
            "body_timeout",
            "uri_too_long",
            "unauthorized",
            "host_not_allowed",
            "not_found",
            "method_not_allowed",
            "unsupported_media_type",
            "overloaded",
            "shutting_down",
            "store_unavailable",
            "internal_error",
        ] {
            assert!(names.contains(&name), "{name}");
        }
        assert_eq!(names.len(), 14);
        for code in ApiErrorCode::ALL {
            let response =
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, "m").into_response();
            let retry = response.headers().contains_key(header::RETRY_AFTER);
            assert_eq!(
                retry,
                matches!(code, ApiErrorCode::Overloaded | ApiErrorCode::ShuttingDown),
                "{code}"
            );
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                body,
                json!({"error": {"code": code.as_str(), "message": "m"}})
            );
        }
    }
}
