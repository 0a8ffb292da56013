//! The console's data, as JSON (and a thread's timeline as SVG), under `/tamp/ui/api/`. Read
//! only: every handler reads the store or the server's counters and changes nothing. Before
//! reading the store, a handler waits for this server's records still on their way
//! ([`super::Recorder::flush`]), so a request just answered is on the next view.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use super::compaction::{replacement_view, Replacement};
use super::savings::Savings;
use super::{chart, conversation, health, Console};
use crate::http::answers::{chain_view, page_answer};
use crate::http::error::{store_failure, ApiError, ApiErrorCode};
use crate::store::activity::{ActivityStore, ThreadQuery};

/// The most threads one list answers.
const MAX_THREADS: usize = 1000;
/// The requests of a thread its view reads (the latest).
const THREAD_REQUESTS: usize = 1000;

pub(super) fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route("/tamp/ui/api/threads", get(threads))
        .route("/tamp/ui/api/thread", get(thread))
        .route("/tamp/ui/api/timeline.svg", get(timeline))
        .route("/tamp/ui/api/compactions/{seq}", get(compaction))
        .route("/tamp/ui/api/pages", get(pages))
        .route("/tamp/ui/api/pages/{id}", get(page))
        .route("/tamp/ui/api/pages/{id}/wire", get(page_wire))
        .route("/tamp/ui/api/savings", get(savings))
        .route("/tamp/ui/api/chain", get(chain))
        .route("/tamp/ui/api/health", get(health))
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::invalid_request(format!("query: {}", e.body_text()))
}

fn bad_path(e: PathRejection) -> ApiError {
    ApiError::invalid_request(format!("path: {}", e.body_text()))
}

/// A list's `limit`: `default` when not given, refused outside 1 to `max`.
fn limit(given: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    match given.unwrap_or(default) {
        n if (1..=max).contains(&n) => Ok(n),
        n => Err(ApiError::invalid_request(format!(
            "limit: must be from 1 to {max}, got {n}"
        ))),
    }
}

/// The active chain's activity record (every chain built from a file has one).
fn activity(console: &Console) -> Result<Arc<dyn ActivityStore>, ApiError> {
    console
        .slot
        .current()
        .chain
        .activity()
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ApiErrorCode::StoreUnavailable,
                "the chain has no store to read the console's records from",
            )
        })
}

fn now_secs() -> u64 {
    super::record::millis(std::time::SystemTime::now()) / 1000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadsQuery {
    /// Threads whose name or model holds this text.
    q: Option<String>,
    /// Only threads with a compaction.
    #[serde(default)]
    compacted: bool,
    limit: Option<usize>,
}

/// `GET /tamp/ui/api/threads`: the recent threads, most recently seen first.
async fn threads(
    State(console): State<Arc<Console>>,
    query: Result<Query<ThreadsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let limit = limit(query.limit, 200, MAX_THREADS)?;
    console.recorder.flush().await;
    let store = activity(&console)?;
    let threads = store
        .threads(ThreadQuery {
            text: query.q.filter(|q| !q.trim().is_empty()),
            compacted_only: query.compacted,
            limit,
        })
        .await
        .map_err(store_failure)?;
    Ok(Json(json!({
        "threads": threads,
        "now": now_secs(),
        "server": console.server,
        "store": console.slot.current().chain.store().describe(),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadId {
    id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TimelineQuery {
    thread: String,
}

/// `GET /tamp/ui/api/thread?id=…`: a thread's totals, its latest requests (oldest first) and
/// its savings.
async fn thread(
    State(console): State<Arc<Console>>,
    query: Result<Query<ThreadId>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(ThreadId { id }) = query.map_err(bad_query)?;
    console.recorder.flush().await;
    let store = activity(&console)?;
    let Some(totals) = store.thread(&id).await.map_err(store_failure)? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ApiErrorCode::NotFound,
            format!("no thread {id:?} is recorded (or it is older than [console] retention_days)"),
        ));
    };
    let requests = store
        .thread_requests(&id, THREAD_REQUESTS)
        .await
        .map_err(store_failure)?;
    let savings = Savings::of(&totals, console.slot.current().console());
    Ok(Json(json!({
        "thread": totals,
        "requests": requests,
        "savings": savings,
        "now": now_secs(),
    })))
}

/// `GET /tamp/ui/api/timeline.svg?thread=…`: the thread's timeline (see [`chart`]).
async fn timeline(
    State(console): State<Arc<Console>>,
    query: Result<Query<TimelineQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(TimelineQuery { thread }) = query.map_err(bad_query)?;
    console.recorder.flush().await;
    let requests = activity(&console)?
        .thread_requests(&thread, THREAD_REQUESTS)
        .await
        .map_err(store_failure)?;
    Ok((
        [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
        chart::timeline(&requests),
    )
        .into_response())
}

/// `GET /tamp/ui/api/compactions/{seq}`: what the compaction of request `seq` did: its
/// report, and for each page written its messages beside what stands for them.
async fn compaction(
    State(console): State<Arc<Console>>,
    seq: Result<Path<i64>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(seq) = seq.map_err(bad_path)?;
    console.recorder.flush().await;
    let Some(row) = activity(&console)?
        .compaction(seq)
        .await
        .map_err(store_failure)?
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ApiErrorCode::NotFound,
            format!("no compaction is recorded for request {seq}"),
        ));
    };
    let report: Value = serde_json::from_str(&row.report_json).unwrap_or(Value::Null);
    let replacements: Vec<Replacement> =
        serde_json::from_str(&row.replacements_json).unwrap_or_default();
    let written: Vec<String> = report["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["pages"].as_array().into_iter().flatten())
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    let store = Arc::clone(console.slot.current().chain.store());
    let mut pages = Vec::with_capacity(written.len());
    for id in written {
        let replacement = replacements
            .iter()
            .find(|r| r.page == id)
            .map(replacement_view);
        let mut view = json!({"page": id, "replacement": replacement});
        match store.get_page(&id).await {
            Ok(stored) => {
                view["strategy"] = json!(stored.page.strategy.as_str());
                view["messages"] = json!(conversation::messages_view(&stored.page.messages));
            }
            Err(e) => view["error"] = json!(e.to_string()),
        }
        pages.push(view);
    }
    Ok(Json(
        json!({"request": row.request, "report": report, "pages": pages}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PagesQuery {
    limit: Option<usize>,
}

/// `GET /tamp/ui/api/pages`: the newest pages.
async fn pages(
    State(console): State<Arc<Console>>,
    query: Result<Query<PagesQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let limit = limit(query.limit, 100, 1000)?;
    let pages = console
        .slot
        .current()
        .chain
        .store()
        .list_pages(limit)
        .await
        .map_err(store_failure)?;
    Ok(Json(json!({ "pages": pages })))
}

/// `GET /tamp/ui/api/pages/{id}`: a page as a conversation, and whether it matches its seal
/// (a page whose messages or seal no longer match is named damaged, and not shown).
async fn page(
    State(console): State<Arc<Console>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(id) = id.map_err(bad_path)?;
    let store = Arc::clone(console.slot.current().chain.store());
    match store.get_page(&id).await {
        Ok(stored) => {
            let page = &stored.page;
            Ok(Json(json!({
                "id": page.id.as_str(),
                "thread_id": page.thread_id.as_ref().into_option().map(|t| t.as_str()),
                "strategy": page.strategy.as_str(),
                "created_at": page.created_at,
                "format": stored.source_format,
                "seal": {"verified": true},
                "messages": conversation::messages_view(&page.messages),
            })))
        }
        Err(e) if e.is_corrupt() || e.is_damaged() => Ok(Json(json!({
            "id": id,
            "seal": {"verified": false, "detail": e.to_string()},
        }))),
        Err(e) => Err(store_failure(e)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireQuery {
    format: Option<String>,
    #[serde(default)]
    download: bool,
}

/// `GET /tamp/ui/api/pages/{id}/wire?format=…`: the page as `/v1/pages/{id}` answers it (in
/// the format it came in by default); `download=true` names it a file to save.
async fn page_wire(
    State(console): State<Arc<Console>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<WireQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(bad_path)?;
    let Query(query) = query.map_err(bad_query)?;
    let format = query.format.clone();
    let mut answer = page_answer(&console.slot, &id, query.format).await?;
    if query.download {
        // The name is built from the id and format only where both are plain.
        let plain = |s: &str| {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
        };
        let format = format.unwrap_or_else(|| "page".into());
        let name = if plain(&id) && plain(&format) {
            format!("{id}.{format}.json")
        } else {
            "page.json".into()
        };
        if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
            answer
                .headers_mut()
                .insert(header::CONTENT_DISPOSITION, value);
        }
    }
    Ok(answer)
}

/// `GET /tamp/ui/api/savings`: each thread's savings (the latest 1,000 threads) and their sum.
async fn savings(State(console): State<Arc<Console>>) -> Result<Json<Value>, ApiError> {
    console.recorder.flush().await;
    let threads = activity(&console)?
        .threads(ThreadQuery {
            limit: MAX_THREADS,
            ..ThreadQuery::default()
        })
        .await
        .map_err(store_failure)?;
    let config = console.slot.current().console().clone();
    let each: Vec<Savings> = threads.iter().map(|t| Savings::of(t, &config)).collect();
    let total = Savings::total(&each);
    let rows: Vec<Value> = threads
        .iter()
        .zip(&each)
        .map(|(t, s)| json!({"thread": t.thread, "model": t.model, "savings": s}))
        .collect();
    Ok(Json(json!({"threads": rows, "total": total})))
}

/// `GET /tamp/ui/api/chain`: the running chain (as `tamp serve`'s `GET /v1/chain`), each
/// stage's pin, the reloads counted, and the `[console]` table.
async fn chain(State(console): State<Arc<Console>>) -> Json<Value> {
    let active = console.slot.current();
    let mut view = chain_view(&console.slot);
    if let Some(stages) = view["stages"].as_array_mut() {
        for (stage, pin) in stages.iter_mut().zip(&active.pins) {
            stage["pin"] = json!(pin);
        }
    }
    view["reloads"] = health::health_view(&(console.exposition)())["reloads"].clone();
    view["console"] = json!(active.console());
    Json(view)
}

/// `GET /tamp/ui/api/health`: this server's counters (see [`health`]), the recorder's, the
/// store's, and the latest failed requests of every replica.
async fn health(State(console): State<Arc<Console>>) -> Result<Json<Value>, ApiError> {
    console.recorder.flush().await;
    let mut view = health::health_view(&(console.exposition)());
    let active = console.slot.current();
    let alive = active.chain.store().check_alive();
    view["store"] = json!(active.chain.store().describe());
    view["store_ok"] = json!(alive.is_ok());
    view["store_error"] = json!(alive.err().map(|e| e.to_string()));
    let stats = &console.recorder.stats;
    let last_error = stats
        .last_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    view["recorder"] = json!({
        "written": stats.written.load(std::sync::atomic::Ordering::Relaxed),
        "dropped": stats.dropped.load(std::sync::atomic::Ordering::Relaxed),
        "last_error": last_error.map(|(_, e)| e),
    });
    view["failed"] = json!(activity(&console)?
        .failed_requests(20)
        .await
        .map_err(store_failure)?);
    Ok(Json(view))
}
