//! The HTTP routes, their JSON bodies and errors.
//!
//! Every error is `{"error": {"code": "...", "message": "..."}}` with a stable `code` (see
//! [`ApiError`]) and a message that names the field at fault.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::metrics::Metrics;
use super::reload::ChainSlot;
use crate::chain::{ChainError, CompactOptions};
use crate::store::StoreError;
use crate::wire::{self, WireFormat};

/// What every handler shares.
pub struct AppState {
    pub slot: Arc<ChainSlot>,
    pub metrics: Arc<Metrics>,
    /// The bearer token every route but `/healthz` requires, when one is configured.
    pub auth_token: Option<String>,
    pub in_flight: Arc<InFlight>,
    /// The deferred-summary worker's counters, when this server runs one.
    pub batch_metrics: Option<Arc<crate::deferred::DeferredMetrics>>,
}

/// The compactions running now; shutdown waits for them to finish.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

pub struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    pub fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(Arc::clone(self))
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Returns once no compaction is running.
    pub async fn wait_idle(&self) {
        loop {
            // Created before the check, so a wake-up between the two is not lost.
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// An error answer. `code` is stable; `message` is for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// `invalid_request`, `invalid_conversation`, `body_too_large`, `unauthorized`,
    /// `not_found`, `method_not_allowed`, `unsupported_media_type`, `internal_error`.
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The router: routes, body limit, auth and request counting.
pub fn router(state: Arc<AppState>, max_body: usize) -> Router {
    Router::new()
        .route("/v1/compact", post(compact))
        .route("/v1/pages/{id}", get(page))
        .route("/v1/chain", get(chain))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authorize,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_requests,
        ))
        .with_state(state)
}

async fn count_requests(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let route = match request.extensions().get::<MatchedPath>() {
        Some(path) => format!("{} {}", request.method(), path.as_str()),
        None => "unmatched".to_string(),
    };
    let response = next.run(request).await;
    state
        .metrics
        .http_request(route, response.status().as_u16());
    response
}

/// Bearer-token check. The token is compared in constant time and never logged.
async fn authorize(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(expected) = &state.auth_token else {
        return Ok(next.run(request).await);
    };
    // Health checks (load balancers, orchestrators) carry no credentials.
    if request.uri().path() == "/healthz" {
        return Ok(next.run(request).await);
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing bearer token: send `Authorization: Bearer <token>`",
        )),
        Some(token) if !constant_time_eq(token.as_bytes(), expected.as_bytes()) => {
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "wrong bearer token",
            ))
        }
        Some(_) => Ok(next.run(request).await),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route {} {}; routes: POST /v1/compact, GET /v1/pages/{{id}}, GET /v1/chain, \
             GET /healthz, GET /metrics",
            request.method(),
            request.uri().path()
        ),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let active = state.slot.current();
    let mut text = state.metrics.render(
        &active.config_hash,
        active.loaded_at_unix(),
        state.in_flight.count(),
    );
    if let Some(batch) = &state.batch_metrics {
        text.push_str(&batch.snapshot().prometheus());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn chain(State(state): State<Arc<AppState>>) -> Json<Value> {
    let active = state.slot.current();
    let budget = active.chain.budget();
    Json(json!({
        "config_path": active.config_path,
        "config_hash": active.config_hash,
        "loaded_at": httpdate::fmt_http_date(active.loaded_at),
        "loaded_at_unix": active.loaded_at_unix(),
        "build_ms": active.build_time.as_secs_f64() * 1e3,
        "budget": budget,
        "stages": active.stages(),
        "store": active.chain.store().describe(),
        "last_reload_error": state.slot.last_error(),
    }))
}

/// `POST /v1/compact` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactBody {
    /// An Anthropic Messages or OpenAI Chat Completions request, kept as its text: the wire
    /// reader works on text (exact tool inputs), so a `Value` would only be written back out.
    conversation: Box<serde_json::value::RawValue>,
    /// `anthropic` or `openai`; detected when absent.
    #[serde(default)]
    format: Option<WireFormat>,
    /// The conversation's thread (keys the summary cache and tags archived pages).
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    budget: Option<BudgetOverrides>,
    /// Run over-budget stages even under the high watermark.
    #[serde(default)]
    force: bool,
    /// Continue the thread from its last compaction (see `docs/architecture.md`, "Thread
    /// continuity"); `false` compacts exactly what this request sends.
    #[serde(default = "yes")]
    thread_continuity: bool,
}

fn yes() -> bool {
    true
}

/// Per-request changes to the chain's `[budget]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetOverrides {
    max_tokens: Option<u64>,
    keep_recent: Option<u32>,
    high_watermark: Option<f64>,
    low_watermark: Option<f64>,
}

fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than the server's limit (tamp serve --max-body)",
            )
        } else {
            ApiError::invalid_request(format!("cannot read the request body: {rejection}"))
        }
    })
}

async fn compact(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = read_body(body)?;
    let request = parse_compact_body(&body).inspect_err(|_| {
        state.metrics.compaction_failed("invalid");
    })?;
    // The chain is taken once: a reload during this compaction does not affect it.
    let active = state.slot.current();
    let guard = state.in_flight.enter();
    let metrics = Arc::clone(&state.metrics);
    // On its own task: a client that hangs up does not cancel a compaction half-way (its
    // pages are still archived), and shutdown waits for it through `in_flight`.
    let task = tokio::spawn(async move {
        let _guard = guard;
        let (conversation, format, options) = request.into_parts(active.chain.budget())?;
        let compacted =
            active
                .chain
                .compact(conversation, &options)
                .await
                .map_err(|e| match e {
                    ChainError::InvalidInput(w) => ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_conversation",
                        conversation_error(&w),
                    ),
                    ChainError::Setup(message) => ApiError::invalid_request(message),
                    other => ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal_error",
                        other.to_string(),
                    ),
                })?;
        metrics.compaction(&compacted.report);
        // Written by the wire writer, not through `Value`: what tamp does not interpret
        // reaches the client as the exact text it sent.
        let loaded_at = httpdate::fmt_http_date(active.loaded_at);
        let answer = wire::Written::object(vec![
            ("conversation", wire::write(&compacted.conversation, format)),
            ("format", wire::Written::of(&format)),
            ("report", wire::Written::of(&compacted.report)),
            (
                "chain",
                wire::Written::of(&json!({
                    "config_hash": active.config_hash,
                    "loaded_at": loaded_at,
                })),
            ),
        ]);
        Ok::<_, ApiError>(answer.compact())
    });
    let result = task.await.unwrap_or_else(|e| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("the compaction task failed: {e}"),
        ))
    });
    match result {
        Ok(body) => Ok(json_answer(body)),
        Err(e) => {
            state.metrics.compaction_failed(match e.code {
                "internal_error" => "error",
                _ => "invalid",
            });
            Err(e)
        }
    }
}

/// A conversation error, with the path written from the request body's root.
fn conversation_error(e: &wire::WireError) -> String {
    if e.path.is_empty() {
        format!("conversation: {}", e.message)
    } else {
        format!("conversation.{}: {}", e.path, e.message)
    }
}

fn parse_compact_body(body: &[u8]) -> Result<CompactBody, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid_request(
            "empty body: expected a JSON object with a \"conversation\" field",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::invalid_request(format!("request body: {inner}"))
        } else {
            ApiError::invalid_request(format!("{path}: {inner}"))
        }
    })
}

impl CompactBody {
    fn into_parts(
        self,
        chain_budget: &crate::config::BudgetConfig,
    ) -> Result<(crate::plugin_api::Conversation, WireFormat, CompactOptions), ApiError> {
        let (mut conversation, format) = wire::parse_str(self.conversation.get(), self.format)
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_conversation",
                    conversation_error(&e),
                )
            })?;
        if let Some(thread) = self.thread_id {
            conversation.thread_id = abi_stable::std_types::ROption::RSome(thread.into());
        }
        let mut budget = *chain_budget;
        if let Some(o) = self.budget {
            budget.max_tokens = o.max_tokens.unwrap_or(budget.max_tokens);
            budget.keep_recent = o.keep_recent.unwrap_or(budget.keep_recent);
            budget.high_watermark = o.high_watermark.unwrap_or(budget.high_watermark);
            budget.low_watermark = o.low_watermark.unwrap_or(budget.low_watermark);
        }
        budget.validate().map_err(ApiError::invalid_request)?;
        let options = CompactOptions {
            format: Some(format),
            force: self.force,
            budget: Some(budget),
            thread_continuity: self.thread_continuity,
        };
        Ok((conversation, format, options))
    }
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    /// `anthropic`, `openai` or `internal`; the page's source format by default.
    format: Option<String>,
}

/// `GET /v1/pages/{id}`: the archived original messages behind a page ref.
async fn page(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
) -> Result<Response, ApiError> {
    let active = state.slot.current();
    let stored = active.chain.store().get_page(&id).await.map_err(|e| {
        match e {
            e if e.is_not_found() => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
            }
            // The database or file cannot be reached: worth retrying, unlike a corrupt page.
            StoreError::Backend { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                e.to_string(),
            ),
            e => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                e.to_string(),
            ),
        }
    })?;
    let format = query
        .format
        .or(stored.source_format.clone())
        .unwrap_or_else(|| "anthropic".into());
    let view = wire::page_view(&stored.page, &format)
        .map_err(|e| ApiError::invalid_request(e.to_string()))?;
    Ok(json_answer(view.compact()))
}

/// A `200 OK` with a JSON body written by tamp (see [`wire::Written`]).
fn json_answer(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_errors_name_the_field() {
        let e = parse_compact_body(br#"{"conversation": {}, "budget": {"max_tokens": "x"}}"#)
            .unwrap_err();
        assert_eq!(e.code, "invalid_request");
        assert!(
            e.message.starts_with("budget.max_tokens: "),
            "{}",
            e.message
        );
        let e = parse_compact_body(br#"{"conversation": {}, "budgit": {}}"#).unwrap_err();
        assert!(e.message.contains("budgit"), "{}", e.message);
        let e = parse_compact_body(br#"{"budget": {}}"#).unwrap_err();
        assert!(e.message.contains("conversation"), "{}", e.message);
        let e = parse_compact_body(br#"{"conversation": {}, "format": "gemini"}"#).unwrap_err();
        assert!(e.message.starts_with("format: "), "{}", e.message);
    }

    #[test]
    fn conversation_errors_are_located_from_the_body_root() {
        let body = parse_compact_body(
            br#"{"conversation": {"messages": [{"role": "user", "content": 5}]}}"#,
        )
        .unwrap();
        let e = body
            .into_parts(&crate::config::BudgetConfig::default())
            .unwrap_err();
        assert_eq!(e.code, "invalid_conversation");
        assert!(
            e.message.starts_with("conversation.messages[0]"),
            "{}",
            e.message
        );
    }

    #[test]
    fn budget_overrides_are_validated() {
        let body = parse_compact_body(
            br#"{"conversation": {"messages": []}, "budget": {"high_watermark": 2.0}}"#,
        )
        .unwrap();
        let e = body
            .into_parts(&crate::config::BudgetConfig::default())
            .unwrap_err();
        assert!(e.message.contains("budget.high_watermark"), "{}", e.message);
    }

    #[test]
    fn tokens_compare_by_content() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
