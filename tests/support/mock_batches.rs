//! A local Anthropic Message Batches server on 127.0.0.1, for the deferred-summary tests.
//!
//! It speaks the wire format of the official spec (`tests/fixtures/specs/anthropic-openapi.json`):
//! `POST /v1/messages/batches` (validated: `requests[]` with unique `custom_id`s matching
//! `^[a-zA-Z0-9_-]{1,64}$` and `params` with `model`, `max_tokens`, `messages`) answers a
//! `message_batch` (`msgbatch_…`, `processing_status`, `request_counts`, `results_url`, RFC 3339
//! times); `GET …/{id}`, `POST …/{id}/cancel`, `GET /v1/messages/batches?limit&after_id`, and
//! `GET …/{id}/results` as JSON Lines (`succeeded`/`errored`/`canceled`/`expired`), in an order
//! other than the requests', sent in small chunks that cut lines anywhere. `POST /v1/messages`
//! answers synchronously (the worker's fallback). Errors use Anthropic's envelope; missing
//! `x-api-key` is a 401, missing `anthropic-version` a 400.
//!
//! The test decides what happens: a batch ends on its first poll unless [`MockBatches::stall`]
//! holds it `in_progress` (until [`MockBatches::end_all`]); each request's result follows the
//! first matching [`MockBatches::outcome_when`] rule (by a substring of its prompt), else
//! succeeds; [`MockBatches::fail_creates`] / [`MockBatches::fail_next`] answer 429/5xx.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::local_server::LocalServer;

/// What a request of a batch comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Succeed,
    /// `errored` with this error type (`overloaded_error`, `invalid_request_error`, …).
    Error(String),
    Cancel,
    Expire,
}

struct Rule {
    contains: String,
    outcome: Outcome,
    /// How many more requests it applies to (`None`: all).
    remaining: Option<u32>,
}

#[derive(Debug, Clone)]
struct Batch {
    id: String,
    /// `(custom_id, params)`.
    requests: Vec<(String, Value)>,
    status: &'static str,
    created: u64,
    cancel_initiated: Option<u64>,
    ended: Option<u64>,
    /// `(custom_id, result type, line)` once ended.
    results: Vec<(String, String, String)>,
    results_gone: bool,
}

#[derive(Default)]
struct State_ {
    batches: Vec<Batch>,
    rules: Vec<Rule>,
    stall: bool,
    fail_creates: VecDeque<u16>,
    fail_next: VecDeque<u16>,
    creates: u32,
    results_downloads: u32,
    sync_calls: u32,
    log: Vec<(String, String)>,
}

type Shared = Arc<Mutex<State_>>;

/// A batch as the server sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchInfo {
    pub id: String,
    pub custom_ids: Vec<String>,
    pub status: String,
    /// The prompts (first user message) in request order.
    pub prompts: Vec<String>,
}

/// The running server; stops when dropped.
pub struct MockBatches {
    server: LocalServer,
    shared: Shared,
}

impl MockBatches {
    pub fn start() -> Self {
        let shared: Shared = Arc::default();
        let state = shared.clone();
        let server = LocalServer::start(move |addr| {
            // The API accepts batches of up to 256 MB.
            axum::Router::new()
                .fallback(handle)
                .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024))
                .with_state((state, addr))
        });
        MockBatches { server, shared }
    }

    /// `http://127.0.0.1:<port>`: the `base_url`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State_> {
        self.shared.lock().unwrap()
    }

    /// New batches stay `in_progress` until [`MockBatches::end_all`] (or cancel).
    pub fn stall(&self, on: bool) {
        self.state().stall = on;
    }

    /// Ends every batch still in progress, computing its results now.
    pub fn end_all(&self) {
        let mut state = self.state();
        let State_ { batches, rules, .. } = &mut *state;
        for batch in batches.iter_mut().filter(|b| b.status == "in_progress") {
            end_batch(batch, rules, self.server.addr());
        }
    }

    /// Requests whose prompt contains `contains` come to `outcome`; `times` limits how many
    /// (`None`: every one). Rules are tried in the order given.
    pub fn outcome_when(&self, contains: &str, outcome: Outcome, times: Option<u32>) {
        self.state().rules.push(Rule {
            contains: contains.to_string(),
            outcome,
            remaining: times,
        });
    }

    /// The next `n` batch creations answer `status` (429 with `retry-after: 0`, or 5xx).
    pub fn fail_creates(&self, n: usize, status: u16) {
        self.state()
            .fail_creates
            .extend(std::iter::repeat_n(status, n));
    }

    /// The next `n` requests of any kind answer `status`.
    pub fn fail_next(&self, n: usize, status: u16) {
        self.state()
            .fail_next
            .extend(std::iter::repeat_n(status, n));
    }

    /// The results of `batch_id` are gone (as after 29 days): 404.
    pub fn drop_results(&self, batch_id: &str) {
        for b in self.state().batches.iter_mut().filter(|b| b.id == batch_id) {
            b.results_gone = true;
        }
    }

    pub fn batches(&self) -> Vec<BatchInfo> {
        self.state()
            .batches
            .iter()
            .map(|b| BatchInfo {
                id: b.id.clone(),
                custom_ids: b.requests.iter().map(|(c, _)| c.clone()).collect(),
                status: b.status.to_string(),
                prompts: b.requests.iter().map(|(_, p)| prompt_of(p)).collect(),
            })
            .collect()
    }

    /// Successful batch creations.
    pub fn creates(&self) -> u32 {
        self.state().creates
    }

    pub fn results_downloads(&self) -> u32 {
        self.state().results_downloads
    }

    /// Synchronous `POST /v1/messages` calls answered.
    pub fn sync_calls(&self) -> u32 {
        self.state().sync_calls
    }

    /// `(method, path)` of every request received.
    pub fn log(&self) -> Vec<(String, String)> {
        self.state().log.clone()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// RFC 3339 in UTC (`2026-11-22T08:00:00Z`).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn prompt_of(params: &Value) -> String {
    match &params["messages"][0]["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `<content>` section of a prompt (the material), or the prompt.
fn material(prompt: &str) -> &str {
    match (prompt.rfind("<content>"), prompt.rfind("</content>")) {
        (Some(a), Some(b)) if a < b => prompt[a + "<content>".len()..b].trim(),
        _ => prompt,
    }
}

/// The answer the "model" gives: a short, deterministic summary of the material.
fn message_for(params: &Value, prefix: &str, n: usize) -> Value {
    let prompt = prompt_of(params);
    let words: Vec<&str> = material(&prompt).split_whitespace().take(24).collect();
    let text = format!("{prefix}: {}", words.join(" "));
    json!({
        "id": format!("msg_mock{n:05}"),
        "type": "message",
        "role": "assistant",
        "model": params["model"],
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {
            "input_tokens": (prompt.len() / 4).max(1),
            "output_tokens": (text.len() / 4).max(1),
            "cache_creation_input_tokens": null,
            "cache_read_input_tokens": 0
        }
    })
}

fn end_batch(batch: &mut Batch, rules: &mut [Rule], addr: SocketAddr) {
    let canceled = batch.status == "canceling";
    let mut results = Vec::new();
    for (i, (custom_id, params)) in batch.requests.iter().enumerate() {
        let prompt = prompt_of(params);
        let outcome = if canceled {
            Outcome::Cancel
        } else {
            rules
                .iter_mut()
                .find(|r| prompt.contains(&r.contains) && r.remaining != Some(0))
                .map(|r| {
                    if let Some(n) = r.remaining.as_mut() {
                        *n -= 1;
                    }
                    r.outcome.clone()
                })
                .unwrap_or(Outcome::Succeed)
        };
        let (kind, result) = match outcome {
            Outcome::Succeed => (
                "succeeded",
                json!({"type": "succeeded", "message": message_for(params, "Batch summary", i)}),
            ),
            Outcome::Error(error_type) => (
                "errored",
                json!({"type": "errored", "error": {"type": "error", "error": {
                    "type": error_type, "message": format!("mock: {error_type} for {custom_id}")}}}),
            ),
            Outcome::Cancel => ("canceled", json!({"type": "canceled"})),
            Outcome::Expire => ("expired", json!({"type": "expired"})),
        };
        let line = json!({"custom_id": custom_id, "result": result}).to_string();
        results.push((custom_id.clone(), kind.to_string(), line));
    }
    // Results come in any order: here, reversed and rotated.
    results.reverse();
    if results.len() > 2 {
        results.rotate_left(1);
    }
    batch.results = results;
    batch.status = "ended";
    batch.ended = Some(now_secs());
    let _ = addr;
}

fn batch_json(batch: &Batch, addr: SocketAddr) -> Value {
    let mut counts: BTreeMap<&str, u64> =
        ["processing", "succeeded", "errored", "canceled", "expired"]
            .into_iter()
            .map(|k| (k, 0))
            .collect();
    if batch.status == "ended" {
        for (_, kind, _) in &batch.results {
            *counts.get_mut(kind.as_str()).unwrap() += 1;
        }
    } else {
        counts.insert("processing", batch.requests.len() as u64);
    }
    json!({
        "id": batch.id,
        "type": "message_batch",
        "processing_status": batch.status,
        "request_counts": counts,
        "created_at": rfc3339(batch.created),
        "expires_at": rfc3339(batch.created + 86_400),
        "ended_at": batch.ended.map(rfc3339),
        "archived_at": null,
        "cancel_initiated_at": batch.cancel_initiated.map(rfc3339),
        "results_url": (batch.status == "ended")
            .then(|| format!("http://{addr}/v1/messages/batches/{}/results", batch.id)),
    })
}

fn error(status: u16, error_type: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": error_type, "message": message}});
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    if status == 429 {
        response
            .headers_mut()
            .insert("retry-after", axum::http::HeaderValue::from_static("0"));
    }
    response
}

fn failure(status: u16) -> Response {
    let error_type = match status {
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    error(status, error_type, &format!("mock: injected HTTP {status}"))
}

fn ok_json(value: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn valid_custom_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn check_create(body: &Value) -> Result<Vec<(String, Value)>, String> {
    let requests = body["requests"]
        .as_array()
        .ok_or("requests: Field required")?;
    if requests.is_empty() {
        return Err("requests: List should have at least 1 item".into());
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let id = r["custom_id"]
            .as_str()
            .ok_or(format!("requests.{i}.custom_id: Field required"))?;
        if !valid_custom_id(id) {
            return Err(format!(
                "requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            ));
        }
        if !seen.insert(id.to_string()) {
            return Err(format!("requests.{i}.custom_id: duplicate custom_id {id}"));
        }
        let params = &r["params"];
        if !params["model"].is_string() {
            return Err(format!("requests.{i}.params.model: Field required"));
        }
        if params["max_tokens"].as_u64().unwrap_or(0) < 1 {
            return Err(format!("requests.{i}.params.max_tokens: Field required"));
        }
        if params["messages"].as_array().is_none_or(|m| m.is_empty()) {
            return Err(format!("requests.{i}.params.messages: Field required"));
        }
        out.push((id.to_string(), params.clone()));
    }
    Ok(out)
}

async fn handle(
    State((shared, addr)): State<(Shared, SocketAddr)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let mut state = shared.lock().unwrap();
    state.log.push((method.to_string(), path.clone()));
    if headers.get("x-api-key").is_none() {
        return error(401, "authentication_error", "x-api-key header is required");
    }
    if headers.get("anthropic-version").is_none() {
        return error(
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
        );
    }
    if let Some(status) = state.fail_next.pop_front() {
        return failure(status);
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.clone(), parts.as_slice()) {
        (Method::POST, ["v1", "messages"]) => {
            let Ok(params) = serde_json::from_slice::<Value>(&body) else {
                return error(400, "invalid_request_error", "the body is not JSON");
            };
            state.sync_calls += 1;
            let n = state.sync_calls as usize;
            ok_json(message_for(&params, "Sync summary", n))
        }
        (Method::POST, ["v1", "messages", "batches"]) => {
            let Ok(value) = serde_json::from_slice::<Value>(&body) else {
                return error(400, "invalid_request_error", "the body is not JSON");
            };
            let requests = match check_create(&value) {
                Ok(r) => r,
                Err(m) => return error(400, "invalid_request_error", &m),
            };
            if let Some(status) = state.fail_creates.pop_front() {
                return failure(status);
            }
            state.creates += 1;
            let batch = Batch {
                id: format!("msgbatch_{:024}", state.batches.len() + 1),
                requests,
                status: "in_progress",
                created: now_secs(),
                cancel_initiated: None,
                ended: None,
                results: Vec::new(),
                results_gone: false,
            };
            let answer = batch_json(&batch, addr);
            state.batches.push(batch);
            ok_json(answer)
        }
        (Method::GET, ["v1", "messages", "batches"]) => {
            let query: BTreeMap<String, String> = uri
                .query()
                .unwrap_or("")
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let limit: usize = query
                .get("limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(20);
            // Newest first; `after_id` pages towards older ones.
            let mut all: Vec<&Batch> = state.batches.iter().rev().collect();
            if let Some(after) = query.get("after_id") {
                if let Some(pos) = all.iter().position(|b| &b.id == after) {
                    all = all.split_off(pos + 1);
                }
            }
            let has_more = all.len() > limit;
            let page: Vec<Value> = all
                .iter()
                .take(limit)
                .map(|b| batch_json(b, addr))
                .collect();
            ok_json(json!({
                "data": page,
                "has_more": has_more,
                "first_id": page.first().map(|b| b["id"].clone()),
                "last_id": page.last().map(|b| b["id"].clone()),
            }))
        }
        (Method::GET, ["v1", "messages", "batches", id]) => {
            let State_ {
                batches,
                rules,
                stall,
                ..
            } = &mut *state;
            let Some(batch) = batches.iter_mut().find(|b| b.id == *id) else {
                return error(404, "not_found_error", &format!("batch {id} not found"));
            };
            if batch.status == "canceling" || (batch.status == "in_progress" && !*stall) {
                end_batch(batch, rules, addr);
            }
            ok_json(batch_json(batch, addr))
        }
        (Method::POST, ["v1", "messages", "batches", id, "cancel"]) => {
            let Some(batch) = state.batches.iter_mut().find(|b| b.id == *id) else {
                return error(404, "not_found_error", &format!("batch {id} not found"));
            };
            if batch.status == "in_progress" {
                batch.status = "canceling";
                batch.cancel_initiated = Some(now_secs());
            }
            ok_json(batch_json(batch, addr))
        }
        (Method::GET, ["v1", "messages", "batches", id, "results"]) => {
            let Some(batch) = state.batches.iter().find(|b| b.id == *id) else {
                return error(404, "not_found_error", &format!("batch {id} not found"));
            };
            if batch.status != "ended" {
                return error(400, "invalid_request_error", "the batch has not ended yet");
            }
            if batch.results_gone {
                return error(
                    404,
                    "not_found_error",
                    "the results are no longer available",
                );
            }
            let mut text = String::new();
            for (_, _, line) in &batch.results {
                text.push_str(line);
                text.push('\n');
            }
            state.results_downloads += 1;
            // Small chunks that cut lines anywhere, as a network would.
            let chunks: Vec<Result<Bytes, Infallible>> = text
                .into_bytes()
                .chunks(97)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            Response::builder()
                .status(200)
                .header("content-type", "application/x-jsonl")
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .unwrap()
        }
        _ => error(
            404,
            "not_found_error",
            &format!("mock: no route {method} {path}"),
        ),
    }
}

/// A chain file's `[provider]` table for these tests: Anthropic at `url` (this server), the
/// key in the variable `key_var`, one quick retry.
pub fn provider_table(url: &str, key_var: &str) -> String {
    format!(
        r#"[provider]
kind = "anthropic"
model = "claude-test"
base_url = "{url}"
api_key_env = "{key_var}"
max_retries = 1
retry_initial_ms = 1
retry_max_ms = 5"#
    )
}

/// A chain file's batch-deferred stage `defer`, always triggered, compacting from 4 messages
/// on (its `[stage.config]` open for more lines).
pub fn defer_stage() -> String {
    format!(
        r#"[[stage]]
name = "defer"
plugin = "{}"
trigger = "always"
[stage.config]
compact_when = "always"
min_messages = 4"#,
        crate::plugin("tamp_batch_deferred").display()
    )
}

/// A chain file's `[batch]` table for these tests: submit and poll every 50 ms, then the
/// lines `extra`.
pub fn batch_table(extra: &str) -> String {
    format!(
        r#"[batch]
submit_interval_secs = 0.05
poll_interval_secs = 0.05
{extra}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_763_798_400), "2025-11-22T08:00:00Z");
    }
}
