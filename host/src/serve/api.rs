//! `tamp serve`'s routes and handlers: `POST /v1/compact`, `GET /v1/pages/{id}`,
//! `GET /v1/chain`, `/healthz`, `/metrics`, with their request bodies.
//!
//! Every error is `{"error": {"code": "...", "message": "..."}}` with a stable `code` (see
//! [`ApiError`]) and a message that names the field at fault. The limits put before the
//! handlers ([`Gate`]) and the answers the proxy gives the same way are `crate::http`'s.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::chain::{ChainError, CompactOptions};
use crate::console::{record, Console, Recorder};
use crate::http::access::{self, Access};
use crate::http::answers::{
    chain_view, health_answer, json_answer, method_not_allowed, page_answer, PageQuery,
};
use crate::http::error::{store_failure, ApiError, ApiErrorCode};
use crate::http::limits::{
    close_if_body_unread, declared_length, Gate, InFlight, RequestPermit, MAX_URI_BYTES,
};
use crate::http::metrics::{self, Metrics};
use crate::http::reload::ChainSlot;
use crate::wire::{self, WireFormat};

/// What every handler shares.
pub struct AppState {
    pub slot: Arc<ChainSlot>,
    pub metrics: Arc<Metrics>,
    /// The Host check and the bearer token every route but `/healthz` requires, when one
    /// is configured (`access::serve_guards`).
    pub access: Arc<Access>,
    pub in_flight: Arc<InFlight>,
    /// The deferred-summary worker's counters, when this server runs one.
    pub batch_metrics: Option<Arc<crate::deferred::DeferredMetrics>>,
    /// The per-request limits.
    pub gate: Gate,
    /// Each compaction's record, kept in the store for the console.
    pub recorder: Arc<Recorder>,
    /// The console, when it is served.
    pub console: Option<Arc<Console>>,
}

/// The router: routes, limits, auth and request counting (outermost).
pub fn router(state: Arc<AppState>) -> Router {
    let mut routes = Router::new()
        .route("/v1/compact", post(compact))
        .route("/v1/pages/{id}", get(page))
        .route("/v1/chain", get(chain))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics));
    if let Some(console) = &state.console {
        routes = routes.merge(crate::console::router(Arc::clone(console)));
    }
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&state), limit))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state.access),
            access::enforce,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_requests,
        ))
        .layer(middleware::from_fn(close_if_body_unread))
        .with_state(state)
}

async fn count_requests(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let route = match request.extensions().get::<MatchedPath>() {
        Some(path) => route_label(request.method(), path.as_str()),
        None => "unmatched".to_string(),
    };
    let response = next.run(request).await;
    state
        .metrics
        .http_request(route, response.status().as_u16());
    response
}

/// The metrics label of a request to a route: its method, or `OTHER` for a method HTTP does
/// not define. Any token is a valid extension method, and each label is a series kept for
/// the server's life: a client could otherwise grow `/metrics` without bound, one method
/// name at a time, even with requests the access check refuses.
fn route_label(method: &axum::http::Method, path: &str) -> String {
    use axum::http::Method;
    let known = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::HEAD,
        Method::OPTIONS,
        Method::PATCH,
        Method::TRACE,
        Method::CONNECT,
    ];
    let method = if known.contains(method) {
        method.as_str()
    } else {
        "OTHER"
    };
    format!("{method} {path}")
}

/// The per-request limits, before a handler runs: the request target's length (414), the
/// declared body size (413, at once: the body is not awaited), and the number of requests
/// answered at once (503 with `retry-after`). `/healthz` and `/metrics` take no permit, so
/// an overloaded server still answers its monitoring.
async fn limit(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let gate = &state.gate;
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len());
    if target > MAX_URI_BYTES {
        return Err(ApiError::new(
            StatusCode::URI_TOO_LONG,
            ApiErrorCode::UriTooLong,
            format!("the request target is {target} bytes; the limit is {MAX_URI_BYTES}"),
        ));
    }
    gate.check_declared(declared_length(request.headers()))?;
    if matches!(request.uri().path(), "/healthz" | "/metrics") {
        return Ok(next.run(request).await);
    }
    // Held here until the answer is ready, and by the compaction task (which takes the copy
    // in the extensions) until the compaction ends, whichever is later.
    let permit = gate.admit()?;
    request.extensions_mut().insert(permit.clone());
    let response = next.run(request).await;
    drop(permit);
    Ok(response)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ApiErrorCode::NotFound,
        format!(
            "no route {} {}; routes: POST /v1/compact, GET /v1/pages/{{id}}, GET /v1/chain, \
             GET /healthz, GET /metrics, GET /tamp/ui (the console, unless --console off)",
            request.method(),
            request.uri().path()
        ),
    )
}

/// `200 {"status": "ok"}`, or 503 when the store can no longer keep pages (its file was
/// deleted or replaced while open): acknowledged pages would be lost.
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    health_answer(&state.slot)
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = Exposition::of(&state).text();
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

/// What `GET /metrics` is written from (the console's health view reads the same).
#[derive(Clone)]
pub(super) struct Exposition {
    slot: Arc<ChainSlot>,
    metrics: Arc<Metrics>,
    in_flight: Arc<InFlight>,
    batch_metrics: Option<Arc<crate::deferred::DeferredMetrics>>,
}

impl Exposition {
    pub(super) fn of(state: &AppState) -> Exposition {
        Exposition {
            slot: Arc::clone(&state.slot),
            metrics: Arc::clone(&state.metrics),
            in_flight: Arc::clone(&state.in_flight),
            batch_metrics: state.batch_metrics.clone(),
        }
    }

    /// The exposition now.
    pub(super) fn text(&self) -> String {
        let active = self.slot.current();
        let mut batch = prometheus_client::registry::Registry::default();
        if let Some(worker) = &self.batch_metrics {
            batch.register_collector(Box::new(Arc::clone(worker)));
        }
        self.metrics.render(
            &active.config_hash,
            active.loaded_at_unix(),
            self.in_flight.count(),
            &[&batch],
        )
    }
}

async fn chain(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(chain_view(&state.slot))
}

/// `POST /v1/compact` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactBody {
    /// An Anthropic Messages, OpenAI Chat Completions or OpenAI Responses request, kept as its
    /// text: the wire reader works on text (exact tool inputs), so a `Value` would only be
    /// written back out.
    conversation: Box<serde_json::value::RawValue>,
    /// `anthropic`, `openai` or `responses`; detected when absent.
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
    keep_recent_tokens: Option<u64>,
    high_watermark: Option<f64>,
    low_watermark: Option<f64>,
    ledgers_outside: Option<bool>,
}

/// Refuses a `POST /v1/compact` whose `Content-Type` is not JSON (with 415): a web page can
/// post `text/plain` (or a body with no type) across origins without a preflight, so a
/// loopback server without a token would otherwise run what any visited page sends it.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers.get(header::CONTENT_TYPE).map(|v| v.to_str());
    let is_json = matches!(given, Some(Ok(v))
        if v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"));
    if is_json {
        return Ok(());
    }
    let given = match given {
        None => "none was sent".to_string(),
        Some(Ok(v)) => format!("got `{v}`"),
        Some(Err(_)) => "got a value that is not text".to_string(),
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ApiErrorCode::UnsupportedMediaType,
        format!("POST /v1/compact takes `Content-Type: application/json`; {given}"),
    ))
}

async fn compact(
    State(state): State<Arc<AppState>>,
    mut request: Request,
) -> Result<Response, ApiError> {
    let permit = request.extensions_mut().remove::<RequestPermit>();
    let declared = declared_length(request.headers());
    // Checked after the body is read (within the same limits as any body): refused unread,
    // a large body would be reset under the client's write when hyper closes the connection.
    let json = require_json(request.headers());
    let body = state.gate.read_body(request.into_body(), declared).await?;
    json?;
    let request = parse_compact_body(&body).inspect_err(|_| {
        state.metrics.compaction_failed("invalid");
    })?;
    drop(body);
    // The chain is taken once: a reload during this compaction does not affect it.
    let active = state.slot.current();
    let guard = state.in_flight.enter();
    let metrics = Arc::clone(&state.metrics);
    let (at, started) = (std::time::SystemTime::now(), std::time::Instant::now());
    // On its own task: a client that hangs up does not cancel a compaction half-way (its
    // pages are still archived), and shutdown waits for it through `in_flight`. It keeps
    // its share of --max-concurrent to its end.
    let task = tokio::spawn(async move {
        let _guard = guard;
        let _permit = permit;
        let (conversation, format, options) = request.into_parts(active.chain.budget())?;
        let asked = record::Asked::of(&conversation);
        let compacted = active
            .chain
            .compact(conversation, &options)
            .await
            .map_err(compaction_error)?;
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
        ])
        .compact();
        let noted = asked.compacted(&active.chain, compacted);
        Ok::<_, ApiError>((answer, noted))
    });
    let result = task.await.unwrap_or_else(|e| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ApiErrorCode::InternalError,
            format!("the compaction task failed: {e}"),
        ))
    });
    let mut noted = record::Noted::serve(at);
    noted.record.duration_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok((body, compacted)) => {
            noted.add(compacted);
            state.recorder.record(noted.record, noted.run);
            Ok(json_answer(body))
        }
        Err(e) => {
            noted.record.status = e.status.as_u16();
            noted.record.error = Some(e.code.as_str().to_string());
            state.recorder.record(noted.record, None);
            // The server's failures (a store that failed too) are errors; the rest are the
            // caller's.
            state
                .metrics
                .compaction_failed(if e.status.is_server_error() {
                    "error"
                } else {
                    "invalid"
                });
            Err(e)
        }
    }
}

/// The answer to a compaction the chain refused or could not do: the caller's mistakes are
/// 400, a store that failed is the store's answer (503 when it cannot be reached), the rest
/// 500.
fn compaction_error(e: ChainError) -> ApiError {
    match e {
        ChainError::InvalidInput(w) => ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiErrorCode::InvalidConversation,
            conversation_error(&w),
        ),
        ChainError::InvalidBudget(e) => ApiError::invalid_request(e.to_string()),
        ChainError::Store(e) => store_failure(e),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ApiErrorCode::InternalError,
            other.to_string(),
        ),
    }
}

/// A store error as an answer: a page that is not there is 404; a database or file that
/// cannot be reached is 503, worth retrying (on another replica, or once it is back),
/// unlike a corrupt page or a schema from a newer tamp (500).
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
    // Checked first (it is fast), so the error gives the byte offset rather than a line and
    // column inside a string.
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::invalid_request(format!(
            "request body: invalid UTF-8 at byte offset {} (JSON must be UTF-8)",
            e.valid_up_to()
        ))
    })?;
    let de = &mut serde_json::Deserializer::from_str(text);
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
        chain_budget: &crate::budget::BudgetConfig,
    ) -> Result<(crate::plugin_api::Conversation, WireFormat, CompactOptions), ApiError> {
        let (mut conversation, format) = wire::parse_str(self.conversation.get(), self.format)
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    ApiErrorCode::InvalidConversation,
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
            budget.keep_recent_tokens = o.keep_recent_tokens.or(budget.keep_recent_tokens);
            budget.high_watermark = o.high_watermark.unwrap_or(budget.high_watermark);
            budget.low_watermark = o.low_watermark.unwrap_or(budget.low_watermark);
            budget.ledgers_outside = o.ledgers_outside.unwrap_or(budget.ledgers_outside);
        }
        budget
            .validate()
            .map_err(|e| ApiError::invalid_request(e.to_string()))?;
        let options = CompactOptions {
            format: Some(format),
            force: self.force,
            budget: Some(budget),
            thread_continuity: self.thread_continuity,
        };
        Ok((conversation, format, options))
    }
}

/// `GET /v1/pages/{id}`: the archived original messages behind a page ref.
async fn page(
    State(state): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    // axum's own rejections are plain text: every error here is the JSON shape.
    let Path(id) =
        id.map_err(|e| ApiError::invalid_request(format!("page id: {}", e.body_text())))?;
    let Query(query) =
        query.map_err(|e| ApiError::invalid_request(format!("query: {}", e.body_text())))?;
    page_answer(&state.slot, &id, query.format).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    use crate::store::StoreError;

    #[test]
    fn an_extension_method_shares_one_metrics_label() {
        use axum::http::Method;
        assert_eq!(
            route_label(&Method::POST, "/v1/compact"),
            "POST /v1/compact"
        );
        let a = Method::from_bytes(b"A1").unwrap();
        let b = Method::from_bytes(b"A2").unwrap();
        assert_eq!(route_label(&a, "/healthz"), "OTHER /healthz");
        assert_eq!(route_label(&a, "/healthz"), route_label(&b, "/healthz"));
    }

    #[test]
    fn body_errors_name_the_field() {
        let e = parse_compact_body(br#"{"conversation": {}, "budget": {"max_tokens": "x"}}"#)
            .unwrap_err();
        assert_eq!(e.code, ApiErrorCode::InvalidRequest);
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
    fn a_failing_store_is_the_servers_fault_not_the_callers() {
        let unreachable = StoreError::Backend {
            location: "/srv/tamp/store.sqlite3".into(),
            operation: "open".into(),
            detail: "unable to open database file".into(),
        };
        let e = compaction_error(ChainError::Store(unreachable.clone()));
        assert_eq!(
            (e.status, e.code),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                ApiErrorCode::StoreUnavailable
            )
        );
        assert_eq!(e.message, unreachable.to_string());
        let corrupt = StoreError::UnsupportedSchema {
            location: "/srv/tamp/store.sqlite3".into(),
            found: 9,
            supported: 3,
        };
        let e = compaction_error(ChainError::Store(corrupt));
        assert_eq!(
            (e.status, e.code),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                ApiErrorCode::InternalError
            )
        );
        // The caller's mistakes stay 400.
        let budget = crate::budget::BudgetConfig {
            max_tokens: 0,
            ..Default::default()
        };
        let e = compaction_error(ChainError::InvalidBudget(budget.validate().unwrap_err()));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, ApiErrorCode::InvalidRequest)
        );
        assert_eq!(e.message, "budget.max_tokens: must be greater than 0");
    }

    #[test]
    fn conversation_errors_are_located_from_the_body_root() {
        let body = parse_compact_body(
            br#"{"conversation": {"messages": [{"role": "user", "content": 5}]}}"#,
        )
        .unwrap();
        let e = body
            .into_parts(&crate::budget::BudgetConfig::default())
            .unwrap_err();
        assert_eq!(e.code, ApiErrorCode::InvalidConversation);
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
            .into_parts(&crate::budget::BudgetConfig::default())
            .unwrap_err();
        assert!(e.message.contains("budget.high_watermark"), "{}", e.message);
    }

    #[test]
    fn a_request_s_budget_may_leave_the_ledgers_outside_the_watermarks() {
        let chain_budget = crate::budget::BudgetConfig::default();
        let parts = |budget: &str| {
            let body = format!(r#"{{"conversation": {{"messages": []}}, "budget": {budget}}}"#);
            let (_, _, options) = parse_compact_body(body.as_bytes())
                .unwrap()
                .into_parts(&chain_budget)
                .unwrap();
            options.budget.unwrap().ledgers_outside
        };
        assert!(parts(r#"{"ledgers_outside": true}"#));
        assert!(!parts(r#"{"max_tokens": 9000}"#), "the chain's own: off");
    }

    #[test]
    fn invalid_utf8_in_a_body_is_located_by_byte_offset() {
        let e = parse_compact_body(b"{\"conversation\": {\"messages\": \"ab\xff\"}}").unwrap_err();
        assert_eq!(e.code, ApiErrorCode::InvalidRequest);
        assert!(e.message.contains("byte offset 33"), "{}", e.message);
    }

    #[test]
    fn compact_takes_json_only() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert!(require_json(&with("application/json")).is_ok());
        assert!(require_json(&with("Application/JSON ; charset=utf-8")).is_ok());
        let e = require_json(&with("text/plain;charset=UTF-8")).unwrap_err();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(e.code, ApiErrorCode::UnsupportedMediaType);
        assert!(e.message.contains("text/plain"), "{}", e.message);
        assert!(require_json(&with("application/jsonx")).is_err());
        assert!(require_json(&HeaderMap::new())
            .unwrap_err()
            .message
            .contains("none was sent"));
    }
}
