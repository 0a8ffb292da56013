//! The HTTP routes, their JSON bodies and errors.
//!
//! Every error is `{"error": {"code": "...", "message": "..."}}` with a stable `code` (see
//! [`ApiError`]) and a message that names the field at fault.
//!
//! The per-request limits live here too (see [`Gate`]): the request target's length, the
//! declared body size, the number of requests answered at once, and the time a body may take
//! to arrive. The per-connection ones (header timeout, connection count) are in the accept
//! loop of [`super`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use super::metrics::Metrics;
use super::reload::ChainSlot;
use crate::chain::{ChainError, CompactOptions};
use crate::http::error::{ApiError, ApiErrorCode};
use crate::store::StoreError;
use crate::wire::{self, WireFormat};

/// What every handler shares.
pub struct AppState {
    pub slot: Arc<ChainSlot>,
    pub metrics: Arc<Metrics>,
    /// The Host check and the bearer token every route but `/healthz` requires, when one
    /// is configured (`access::serve_guards`).
    pub access: Arc<super::access::Access>,
    pub in_flight: Arc<InFlight>,
    /// The deferred-summary worker's counters, when this server runs one.
    pub batch_metrics: Option<Arc<crate::deferred::DeferredMetrics>>,
    /// The per-request limits.
    pub gate: Gate,
}

/// The longest request target (path and query) answered; longer ones get 414. Page ids are
/// 35 bytes: this is for clients gone wrong, not a tight fit. (hyper itself answers 414,
/// with an empty body, above 64 KiB, before a request reaches the router.)
pub const MAX_URI_BYTES: usize = 8 << 10;

/// The per-request limits of `tamp serve`, and the shutdown signal a body read listens to.
#[derive(Debug)]
pub struct Gate {
    /// `--max-body`: larger bodies, declared or sent, are answered 413.
    max_body: usize,
    /// `--body-timeout-secs`: a body still arriving after this is answered 408.
    body_timeout: Duration,
    /// `--max-concurrent`: one permit per request answered (but `/healthz` and `/metrics`);
    /// a compaction keeps its permit to its end, even when its client has hung up.
    permits: Arc<Semaphore>,
    max_concurrent: usize,
    /// Turns true when the server starts shutting down: a body still arriving is answered
    /// 503 at once, since it holds no work yet.
    stopping: watch::Receiver<bool>,
}

/// A request's share of `--max-concurrent`, released when the last copy is dropped: the
/// [`limit`] middleware keeps one until the answer is ready, and the request's extensions
/// carry one that the compaction task takes along.
#[derive(Clone)]
struct RequestPermit {
    _held: Arc<OwnedSemaphorePermit>,
}

impl Gate {
    pub fn new(
        max_body: usize,
        body_timeout: Duration,
        max_concurrent: usize,
        stopping: watch::Receiver<bool>,
    ) -> Gate {
        Gate {
            max_body,
            body_timeout,
            permits: Arc::new(Semaphore::new(max_concurrent)),
            max_concurrent,
            stopping,
        }
    }

    /// Reads a whole body: at most `max_body` bytes (413 beyond), within `body_timeout` of
    /// the start (408 after), and only until the server starts shutting down (503).
    pub(crate) async fn read_body(
        &self,
        body: Body,
        declared: Option<u64>,
    ) -> Result<Bytes, ApiError> {
        let max = self.max_body;
        let read = async move {
            let capacity = declared.map_or(0, |n| n.min(max as u64) as usize);
            let mut bytes = Vec::with_capacity(capacity);
            let mut stream = body.into_data_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    ApiError::invalid_request(format!("cannot read the request body: {e}"))
                })?;
                if bytes.len() + chunk.len() > max {
                    return Err(ApiError::body_too_large(max));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(Bytes::from(bytes))
        };
        let mut stopping = self.stopping.clone();
        let stopped = async move {
            // A dropped sender is no shutdown signal: wait for ever then.
            if stopping.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            // A body that is all here is read even if the shutdown began meanwhile.
            biased;
            read = tokio::time::timeout(self.body_timeout, read) => read.unwrap_or_else(|_| {
                Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    ApiErrorCode::BodyTimeout,
                    format!(
                        "the request body did not arrive within {} (tamp serve \
                         --body-timeout-secs)",
                        seconds(self.body_timeout)
                    ),
                ))
            }),
            () = stopped => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ApiErrorCode::ShuttingDown,
                "the server is shutting down; send the request again (to it once restarted, \
                 or to another replica)",
            )),
        }
    }
}

/// `1.5 s`, `30 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
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

/// The router: routes, limits, auth and request counting (outermost).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/compact", post(compact))
        .route("/v1/pages/{id}", get(page))
        .route("/v1/chain", get(chain))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&state), limit))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state.access),
            super::access::enforce,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_requests,
        ))
        .layer(middleware::from_fn(close_if_body_unread))
        .with_state(state)
}

/// Says `connection: close` on an answer given before the request's body was read to its
/// end (a refused token, an oversized or late body, an unknown route, a full server).
/// hyper cannot carry another request on such a connection and closes it after the answer;
/// said in the answer, a keep-alive client opens a new connection for its next request
/// instead of sending it into the closed one (the fuzzer found reqwest's next request
/// failing with `IncompleteMessage`).
pub(crate) async fn close_if_body_unread(request: Request, next: Next) -> Response {
    let has_body = declared_length(request.headers()).is_some_and(|n| n > 0)
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    if !has_body {
        return next.run(request).await;
    }
    let read_to_end = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let flag = Arc::clone(&read_to_end);
    // The body's stream, then an empty one that marks the end when it is reached.
    let end = futures::stream::poll_fn(move |_| {
        flag.store(true, Ordering::Release);
        std::task::Poll::Ready(None)
    });
    let body = Body::from_stream(body.into_data_stream().chain(end));
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if !read_to_end.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
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
    if declared_length(request.headers()).is_some_and(|n| n > gate.max_body as u64) {
        return Err(ApiError::body_too_large(gate.max_body));
    }
    if matches!(request.uri().path(), "/healthz" | "/metrics") {
        return Ok(next.run(request).await);
    }
    let Ok(permit) = Arc::clone(&gate.permits).try_acquire_owned() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::Overloaded,
            format!(
                "the server is answering {} requests already (tamp serve --max-concurrent); \
                 retry later",
                gate.max_concurrent
            ),
        ));
    };
    // Held here until the answer is ready, and by the compaction task (which takes the copy
    // in the extensions) until the compaction ends, whichever is later.
    let permit = RequestPermit {
        _held: Arc::new(permit),
    };
    request.extensions_mut().insert(permit.clone());
    let response = next.run(request).await;
    drop(permit);
    Ok(response)
}

/// The request's `Content-Length`, when it has one (hyper refuses a malformed one).
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ApiErrorCode::NotFound,
        format!(
            "no route {} {}; routes: POST /v1/compact, GET /v1/pages/{{id}}, GET /v1/chain, \
             GET /healthz, GET /metrics",
            request.method(),
            request.uri().path()
        ),
    )
}

pub(crate) async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ApiErrorCode::MethodNotAllowed,
        format!(
            "{} is not allowed on {}",
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

/// The `/healthz` answer of a server answering with `slot` (`tamp proxy`'s too).
pub(crate) fn health_answer(slot: &ChainSlot) -> Response {
    match slot.health() {
        Ok(()) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::StoreUnavailable,
            e.to_string(),
        )
        .into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let active = state.slot.current();
    let mut batch = prometheus_client::registry::Registry::default();
    if let Some(worker) = &state.batch_metrics {
        batch.register_collector(Box::new(Arc::clone(worker)));
    }
    let text = state.metrics.render(
        &active.config_hash,
        active.loaded_at_unix(),
        state.in_flight.count(),
        &[&batch],
    );
    ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response()
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
    // On its own task: a client that hangs up does not cancel a compaction half-way (its
    // pages are still archived), and shutdown waits for it through `in_flight`. It keeps
    // its share of --max-concurrent to its end.
    let task = tokio::spawn(async move {
        let _guard = guard;
        let _permit = permit;
        let (conversation, format, options) = request.into_parts(active.chain.budget())?;
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
        ]);
        Ok::<_, ApiError>(answer.compact())
    });
    let result = task.await.unwrap_or_else(|e| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ApiErrorCode::InternalError,
            format!("the compaction task failed: {e}"),
        ))
    });
    match result {
        Ok(body) => Ok(json_answer(body)),
        Err(e) => {
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
fn store_failure(e: StoreError) -> ApiError {
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

#[derive(Debug, Deserialize)]
pub(crate) struct PageQuery {
    /// `anthropic`, `openai`, `responses` or `internal`; the page's source format by default.
    pub(crate) format: Option<String>,
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

/// A page as `GET /v1/pages/{id}` answers it (`tamp proxy`'s `/tamp/v1/pages/{id}` too): in
/// `format`, else the page's source format.
pub(crate) async fn page_answer(
    slot: &ChainSlot,
    id: &str,
    format: Option<String>,
) -> Result<Response, ApiError> {
    let active = slot.current();
    let stored = active
        .chain
        .store()
        .get_page(id)
        .await
        .map_err(store_failure)?;
    let format = format
        .or(stored.source_format.clone())
        .unwrap_or_else(|| "anthropic".into());
    let view = wire::page_view(&stored.page, &format)
        .map_err(|e| ApiError::invalid_request(e.to_string()))?;
    Ok(json_answer(view.compact()))
}

/// A `200 OK` with a JSON body written by tamp (see [`wire::Written`]).
pub(crate) fn json_answer(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A body whose first chunk is `first`, then nothing until `stall` ends.
    fn stalled_body(first: &'static [u8], stall: Duration) -> Body {
        let chunks =
            futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(first)) })
                .chain(futures::stream::once(async move {
                    tokio::time::sleep(stall).await;
                    Ok(Bytes::from_static(b"rest"))
                }));
        Body::from_stream(chunks)
    }

    #[tokio::test]
    async fn body_reads_are_bounded_in_size_time_and_by_the_shutdown() {
        let (stop, stopping) = watch::channel(false);
        let gate = Gate::new(16, Duration::from_millis(200), 4, stopping);

        let body = gate
            .read_body(Body::from("{\"a\": 1}"), Some(8))
            .await
            .unwrap();
        assert_eq!(&body[..], b"{\"a\": 1}");
        let e = gate
            .read_body(Body::from("x".repeat(17)), None)
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::PAYLOAD_TOO_LARGE, ApiErrorCode::BodyTooLarge)
        );

        let started = std::time::Instant::now();
        let e = gate
            .read_body(stalled_body(b"{", Duration::from_secs(60)), None)
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::REQUEST_TIMEOUT, ApiErrorCode::BodyTimeout)
        );
        assert!(started.elapsed() < Duration::from_secs(5));

        let slow = Gate::new(16, Duration::from_secs(60), 4, stop.subscribe());
        let read = tokio::spawn(async move {
            slow.read_body(stalled_body(b"{", Duration::from_secs(60)), None)
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(true).unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("the shutdown ends a body read")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, ApiErrorCode::ShuttingDown)
        );
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        // A body all here is still read after the shutdown began.
        assert!(gate.read_body(Body::from("{}"), None).await.is_ok());
    }
}
