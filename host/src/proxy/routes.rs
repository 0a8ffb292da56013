//! The proxy's server: its state, routes and run loop.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::Context as _;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper::body::Body as _;

use crate::http::access::{self, Access};
use crate::http::active::ActiveChain;
use crate::http::answers::{self, PageQuery};
use crate::http::error::{ApiError, ApiErrorCode};
use crate::http::limits::{self, Gate, InFlight};
use crate::http::listener::{ServerOptions, Startup};
use crate::http::metrics::{self, Metrics};
use crate::http::reload::ChainSlot;

use super::access_log;
use super::compact::{self, COMPACTION_HEADER};
use super::error::ProxyError;
use super::forward::Upstreams;
use super::last_read::LastReads;
use super::metrics::ProxyMetrics;
use super::outcome;
use super::owner::Owners;
use super::server_compaction::{self, Asked};
use super::{forward, precount, route, session};
use crate::config::proxy::CompactionBy;
use crate::console::{Console, Recorder};
use crate::mcp::{Reader, RecallServer};
use crate::store::activity::ThreadQuery;

/// The header a client names its thread with (else it is derived from the leading
/// messages, see `docs/architecture.md`, "Thread continuity").
pub use super::session::THREAD_HEADER;
/// The answer header that names the thread the request was counted under.
pub const THREAD_ANSWER_HEADER: &str = "x-tamp-thread";

/// How `tamp proxy` runs: the CLI's flags, parsed (`tamp proxy --help` says what each does).
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// The flags `tamp serve` has too; `max_body` and `body_timeout_secs` bound only the
    /// compacted routes' bodies (the others stream through).
    pub server: ServerOptions,
}

/// What every handler shares.
struct ProxyState {
    slot: Arc<ChainSlot>,
    /// The Host check for every route, the bearer token for tamp's own.
    access: Arc<Access>,
    metrics: Arc<Metrics>,
    proxy_metrics: Arc<ProxyMetrics>,
    in_flight: Arc<InFlight>,
    gate: Gate,
    upstreams: Upstreams,
    /// Each thread's last request read, to bound the next one's tokens unread.
    last_reads: Arc<LastReads>,
    /// Whose the pages a request's compaction writes are.
    owners: Owners,
    /// Each request's record, kept in the store for the console and `GET /tamp/v1/threads`.
    recorder: Arc<Recorder>,
}

/// Runs `tamp proxy` until SIGTERM or Ctrl-C.
pub async fn run(args: ProxyOptions) -> anyhow::Result<()> {
    let started = Startup::new("tamp proxy", access::proxy_guards, args.server)
        .start()
        .await?;
    let upstreams = {
        let active = started.slot.current();
        let proxy = active.proxy();
        format!(
            "upstreams anthropic -> {}, openai -> {}{}",
            crate::redact::url(&proxy.anthropic),
            crate::redact::url(&proxy.openai),
            if proxy.strict { " (strict)" } else { "" }
        )
    };
    let state = Arc::new(ProxyState {
        slot: Arc::clone(&started.slot),
        access: Arc::clone(&started.access),
        metrics: Arc::clone(&started.metrics),
        proxy_metrics: Arc::new(ProxyMetrics::default()),
        in_flight: Arc::clone(&started.in_flight),
        // The concurrency limit of `tamp serve` is not used here: a proxy that refused
        // requests would be in the way; the upstream limits its clients.
        gate: started.gate(1),
        upstreams: Upstreams::new().context("cannot build the upstream HTTP client")?,
        last_reads: Arc::default(),
        owners: Owners::new(started.access.has_token()),
        recorder: Arc::new(Recorder::start(Arc::clone(&started.slot))),
    });
    // The MCP server reads the store the chain was started with: a reload that names another
    // store is refused.
    let mcp = {
        let chain = &started.slot.current().chain;
        chain.search().map(|search| {
            let server = RecallServer::new(
                Arc::clone(chain.store()),
                Arc::clone(search),
                Reader::ByCredential {
                    own_token: state.owners.own_token(),
                },
            );
            crate::mcp::http_service(server)
        })
    };
    let options = started.options().clone();
    let console = crate::console::enabled(options.console, options.listen.ip()).then(|| {
        let exposition = Arc::clone(&state);
        Arc::new(Console {
            slot: Arc::clone(&state.slot),
            recorder: Arc::clone(&state.recorder),
            exposition: Box::new(move || exposition_text(&exposition)),
            server: "tamp proxy",
        })
    });
    let mut more = vec![upstreams];
    if console.is_some() {
        more.push(format!(
            "console on http://{}{}",
            crate::http::listener::LISTEN_ADDR,
            crate::console::PATH
        ));
    }
    // Closed once the server has stopped, so that the store is let go before the exit.
    let recorder = Arc::clone(&state.recorder);
    let served = started.serve(router(state, mcp, console), &more).await;
    recorder.close().await;
    served
}

/// tamp's own routes under `/tamp/` (no provider has that path); everything else goes
/// upstream.
fn router(
    state: Arc<ProxyState>,
    mcp: Option<crate::mcp::HttpService>,
    console: Option<Arc<Console>>,
) -> Router {
    let mut router = Router::new()
        .route("/tamp/v1/pages/{id}", get(page))
        .route("/tamp/v1/threads", get(threads))
        .route("/tamp/healthz", get(healthz))
        .route("/tamp/metrics", get(metrics_text));
    if let Some(mcp) = mcp {
        router = router.route_service("/tamp/mcp", mcp);
    }
    // Before the layers below, so the console is behind the same Host check and token.
    if let Some(console) = console {
        router = router.merge(crate::console::router(console));
    }
    router
        .method_not_allowed_fallback(answers::method_not_allowed)
        .fallback(proxy_request)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.access),
            access::enforce,
        ))
        .layer(axum::middleware::from_fn(limits::close_if_body_unread))
        .with_state(state)
}

async fn page(
    State(state): State<Arc<ProxyState>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiErrorCode::InvalidRequest,
            format!("page id: {}", e.body_text()),
        )
    })?;
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiErrorCode::InvalidRequest,
            format!("query: {}", e.body_text()),
        )
    })?;
    answers::page_answer(&state.slot, &id, query.format).await
}

async fn healthz(State(state): State<Arc<ProxyState>>) -> Response {
    answers::health_answer(&state.slot)
}

async fn metrics_text(State(state): State<Arc<ProxyState>>) -> Response {
    let text = exposition_text(&state);
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

/// What `/tamp/metrics` answers now (the console's health view reads the same).
fn exposition_text(state: &ProxyState) -> String {
    let active = state.slot.current();
    state.metrics.render(
        &active.config_hash,
        active.loaded_at_unix(),
        state.in_flight.count(),
        &[state.proxy_metrics.registry()],
    )
}

/// Every request that is not tamp's own: routed, compacted if it is a conversation,
/// forwarded, and its answer relayed.
async fn proxy_request(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let path = request.uri().path();
    if path == "/tamp" || path.starts_with("/tamp/") {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            ApiErrorCode::NotFound,
            format!(
                "no route {} {path}; tamp's routes: GET /tamp/v1/pages/{{id}}, GET \
                 /tamp/v1/threads, GET /tamp/healthz, GET /tamp/metrics, POST /tamp/mcp, GET \
                 /tamp/ui (the console, unless --console off) (every other path goes upstream)",
                request.method()
            ),
        )
        .into_response();
    }
    let method = request.method().clone();
    let started = Instant::now();
    let at = SystemTime::now();
    let Some(route) = route::route(&method, path, request.headers()) else {
        let response = not_a_provider_request(&method, path);
        state.metrics.http_request(
            "not a provider request".to_string(),
            response.status().as_u16(),
        );
        let note = access_log::Note::default();
        access_log::log(method.as_str(), path, &note, 404, started.elapsed());
        return response;
    };
    let path = path.to_string();
    let (response, note) = forward(&state, route, request).await;
    let status = response.status().as_u16();
    state.metrics.http_request(route.label.to_string(), status);
    let elapsed = started.elapsed();
    access_log::log(method.as_str(), &path, &note, status, elapsed);
    let (record, run) = access_log::record(method.as_str(), &path, note, status, elapsed, at);
    state.recorder.record(record, run);
    response
}

/// The answer to a request that belongs to no API the proxy serves: a path that is neither
/// Anthropic's nor OpenAI's, with no header that names either (see [`route::route`]).
fn not_a_provider_request(method: &axum::http::Method, path: &str) -> Response {
    let message = format!(
        "tamp proxy: {method} {path} belongs to no API this proxy serves (a path outside \
         the Anthropic and OpenAI APIs, with no anthropic-version, x-api-key or Authorization \
         header): it is answered here and sent to no upstream"
    );
    let mut response =
        ApiError::new(StatusCode::NOT_FOUND, ApiErrorCode::NotFound, message).into_response();
    if method == axum::http::Method::HEAD {
        *response.body_mut() = Body::empty();
    }
    response
}

/// How many threads `GET /tamp/v1/threads` lists.
const LISTED_THREADS: usize = 256;

/// `GET /tamp/v1/threads`: the recent threads' totals, most recently seen first, as the store
/// keeps them (every replica's requests, this one's up to the last).
async fn threads(State(state): State<Arc<ProxyState>>) -> Result<Response, ApiError> {
    state.recorder.flush().await;
    let Some(activity) = state.slot.current().chain.activity().cloned() else {
        return Ok(axum::Json(serde_json::json!({ "threads": [] })).into_response());
    };
    let threads = activity
        .threads(ThreadQuery {
            limit: LISTED_THREADS,
            ..ThreadQuery::default()
        })
        .await
        .map_err(crate::http::error::store_failure)?;
    Ok(axum::Json(serde_json::json!({ "threads": threads })).into_response())
}

/// Forwards a routed request; the answer, and what its compaction came to for the access log.
async fn forward(
    state: &ProxyState,
    route: route::Route,
    request: Request,
) -> (Response, access_log::Note) {
    let mut note = access_log::Note::default();
    let response = forward_noted(state, route, request, &mut note).await;
    (response, note)
}

async fn forward_noted(
    state: &ProxyState,
    route: route::Route,
    request: Request,
    note: &mut access_log::Note,
) -> Response {
    let (parts, body) = request.into_parts();
    // The chain and the `[proxy]` table are taken once: a reload does not change them under
    // this request.
    let active = state.slot.current();
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let url = match route::upstream_url(active.proxy(), route.provider, target) {
        Ok(url) => url,
        Err(message) => {
            let mut e = ProxyError::new(StatusCode::BAD_REQUEST, "invalid_request", message);
            e.final_answer = true;
            return e.into_response_for(route.provider);
        }
    };
    let mut extra = Vec::new();
    let tamp_compacts = active.proxy().openai_compaction == CompactionBy::Tamp;
    if route.server_compaction && tamp_compacts {
        let answer = async {
            let bytes = read_body(state, &parts.headers, body).await?;
            let owner = state.owners.of(&active, &parts.headers).await;
            let asked = Asked::CompactEndpoint;
            server_compaction::answer(&active, &state.metrics, asked, &bytes, owner.as_deref())
                .await
        };
        return answer
            .await
            .unwrap_or_else(|e| e.into_response_for(route.provider));
    }
    let body = match route.compact {
        Some(format) => match compacted_body(state, &active, &parts.headers, format, body).await {
            Ok(Prepared::Forward(body, headers, what)) => {
                extra.extend(headers);
                *note = what;
                Some(reqwest::Body::from(body))
            }
            Ok(Prepared::Stream(body, headers, what)) => {
                extra.extend(headers);
                *note = what;
                Some(reqwest::Body::wrap_stream(body.into_data_stream()))
            }
            Ok(Prepared::Answered(response)) => return response,
            Err(e) => return e.into_response_for(route.provider),
        },
        // An empty body stays absent, so a GET is not sent with a chunked body.
        None if body.is_end_stream() => None,
        None => Some(reqwest::Body::wrap_stream(body.into_data_stream())),
    };
    let headers = route::request_headers(&parts.headers, route.compact.is_some());
    let sent = Instant::now();
    match state
        .upstreams
        .send(parts.method, url.as_str(), headers, body)
        .await
    {
        Ok(upstream) => {
            state
                .proxy_metrics
                .upstream_answered(route.label, sent.elapsed());
            forward::relay(
                upstream,
                extra,
                Arc::clone(&state.proxy_metrics),
                route.label,
            )
        }
        Err(e) => {
            state.proxy_metrics.upstream_failed(route.label);
            note.error = Some(e.code.to_string());
            tracing::warn!(
                target: access_log::TARGET,
                "{}: the upstream failed after {} ms: {} ({})",
                route.label,
                sent.elapsed().as_millis(),
                e.message,
                e.code
            );
            let mut response = e.into_response_for(route.provider);
            response.headers_mut().extend(extra);
            response
        }
    }
}

/// What a compacted route does with its request.
enum Prepared {
    /// Forward this body, and add these headers to the answer (`x-tamp-compaction`,
    /// `x-tamp-thread`); what the body came to, for the access log.
    Forward(
        axum::body::Bytes,
        Vec<(HeaderName, HeaderValue)>,
        access_log::Note,
    ),
    /// Stream this body to the upstream as it arrives (the headers settled that the chain
    /// leaves it as it is), and add these headers to the answer.
    Stream(Body, Vec<(HeaderName, HeaderValue)>, access_log::Note),
    /// tamp answered it: OpenAI's server-side compaction, for an upstream that lacks it.
    Answered(Response),
}

/// The answer headers that say what became of a body (`x-tamp-compaction`, `x-tamp-thread`),
/// and the same for the access log and the console's record: what the chain reported, taken
/// out of `outcome`, and the budget of its model (the chain's own when the body was not read,
/// so its model is unknown).
fn answer_headers(
    active: &ActiveChain,
    outcome: &mut outcome::Outcome,
) -> (Vec<(HeaderName, HeaderValue)>, access_log::Note) {
    let mut headers = vec![(HeaderName::from_static(COMPACTION_HEADER), outcome.header())];
    if let Some(thread) = outcome.thread_header() {
        headers.push((HeaderName::from_static(THREAD_ANSWER_HEADER), thread));
    }
    let mut note = access_log::Note::of(outcome);
    let budget = active
        .proxy()
        .models
        .for_model(outcome.model(), active.chain.budget())
        .unwrap_or(*active.chain.budget());
    note.budget = Some((budget.max_tokens, budget.high_tokens(), budget.low_tokens()));
    (headers, note)
}

/// A compacted route's body, read whole (within `--max-body` and `--body-timeout-secs`).
async fn read_body(
    state: &ProxyState,
    headers: &axum::http::HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ProxyError> {
    state
        .gate
        .read_body(body, limits::declared_length(headers))
        .await
        .map_err(ProxyError::from_api)
}

/// The body to forward on a compacted route, and the answer headers that say what became of
/// it; or tamp's own answer (a Responses request asking for server-side compaction that
/// tamp does); an error when the body cannot be read whole, or, in strict mode, when no
/// compaction was had.
async fn compacted_body(
    state: &ProxyState,
    active: &Arc<ActiveChain>,
    headers: &axum::http::HeaderMap,
    format: crate::wire::WireFormat,
    body: Body,
) -> Result<Prepared, ProxyError> {
    let hint = session::ThreadHint::of(headers).map_err(|message| {
        let mut e = ProxyError::new(StatusCode::BAD_REQUEST, "invalid_request", message);
        e.final_answer = true;
        e
    })?;
    let tamp_compacts = active.proxy().openai_compaction == CompactionBy::Tamp;
    // A body of a declared length within `--max-body` that the headers already say the chain
    // leaves as it is goes upstream as it arrives, never collected (not in strict mode, where
    // every body is read so that one tamp cannot read is refused).
    let declared = limits::declared_length(headers)
        .filter(|_| !active.proxy().strict)
        .filter(|&n| state.gate.check_declared(Some(n)).is_ok());
    if let Some(declared) = declared {
        let started = Instant::now();
        let decided = tokio::time::timeout(
            active.proxy().compaction_timeout(),
            precount::decide_from_headers(
                &active.chain,
                format,
                declared,
                &hint,
                &active.proxy().models,
                tamp_compacts,
            ),
        );
        if let Ok(Some(mut outcome)) = decided.await {
            state
                .proxy_metrics
                .compaction_outcome(outcome.label(), started.elapsed());
            tracing::debug!(
                "body not collected: {}",
                outcome.header().to_str().unwrap_or("(not text)")
            );
            let (answer_headers, note) = answer_headers(active, &mut outcome);
            return Ok(Prepared::Stream(body, answer_headers, note));
        }
    }
    let bytes = read_body(state, headers, body).await?;
    if format == crate::wire::WireFormat::Responses
        && tamp_compacts
        && server_compaction::ends_in_trigger(&bytes)
    {
        let owner = state.owners.of(active, headers).await;
        let answer = server_compaction::answer(
            active,
            &state.metrics,
            Asked::Trigger,
            &bytes,
            owner.as_deref(),
        )
        .await?;
        return Ok(Prepared::Answered(answer));
    }
    let started = Instant::now();
    let mut outcome = compact::compact(
        Arc::clone(active),
        Arc::clone(&state.metrics),
        &state.in_flight,
        format,
        bytes.clone(),
        compact::Origin {
            thread: hint,
            owner: state.owners.of(active, headers).await,
        },
        Arc::clone(&state.last_reads),
    )
    .await;
    state
        .proxy_metrics
        .compaction_outcome(outcome.label(), started.elapsed());
    let (answer_headers, note) = answer_headers(active, &mut outcome);
    match outcome {
        outcome::Outcome::Compacted { body, .. } => {
            Ok(Prepared::Forward(body, answer_headers, note))
        }
        outcome::Outcome::Unchanged { .. } | outcome::Outcome::NothingToCompact { .. } => {
            Ok(Prepared::Forward(bytes, answer_headers, note))
        }
        outcome::Outcome::Skipped { reason, invalid } => {
            if active.proxy().strict {
                let mut e = ProxyError::new(
                    StatusCode::BAD_GATEWAY,
                    "compaction_failed",
                    format!("{reason} ([proxy] strict = true: the original is not forwarded)"),
                );
                e.final_answer = invalid;
                return Err(e);
            }
            tracing::warn!("compaction skipped, the original body is forwarded: {reason}");
            Ok(Prepared::Forward(bytes, answer_headers, note))
        }
    }
}
