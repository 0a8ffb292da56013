//! The answers both servers give the same way: a page (`GET /v1/pages/{id}`, the proxy's
//! `/tamp/v1/pages/{id}`), health, the active chain (`GET /v1/chain`, the console's), and 405.

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{store_failure, ApiError, ApiErrorCode};
use super::reload::ChainSlot;
use crate::wire;

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

/// The active chain as `GET /v1/chain` shows it: file, hash, load time, budget, stages, store
/// and the last reload refused.
pub(crate) fn chain_view(slot: &ChainSlot) -> Value {
    let active = slot.current();
    json!({
        "config_path": active.config_path,
        "config_hash": active.config_hash,
        "loaded_at": httpdate::fmt_http_date(active.loaded_at),
        "loaded_at_unix": active.loaded_at_unix(),
        "build_ms": active.build_time.as_secs_f64() * 1e3,
        "budget": active.chain.budget(),
        "stages": active.stages(),
        "store": active.chain.store().describe(),
        "last_reload_error": slot.last_error(),
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct PageQuery {
    /// `anthropic`, `openai`, `responses` or `internal`; the page's source format by default.
    pub(crate) format: Option<String>,
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
