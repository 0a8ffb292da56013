//! A local LLM server for the provider tests: Anthropic Messages (`POST /v1/messages`) and
//! OpenAI Chat Completions (`POST /v1/chat/completions`) on 127.0.0.1, answering from a queue
//! of canned replies (status, headers, body, delay) and recording every request.
//!
//! It checks what the real APIs check before any model runs, in their own error envelopes:
//! a body that is not JSON is a 400; on `/v1/messages` a missing `x-api-key` is a 401 and a
//! missing `anthropic-version` a 400. Everything else is the queued reply, verbatim, so the
//! tests decide what the "model" says (fixtures in `tests/fixtures/providers/`).
//!
//! The server runs on a thread of its own with its own runtime, so tests that block, tests on
//! a tokio runtime and tests driving the `tamp` binary can all use it. It stops when dropped.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::local_server::MockServer;

/// One canned answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// How long the server waits before answering.
    pub delay: Duration,
}

impl Reply {
    /// A JSON answer.
    pub fn json(status: u16, body: &Value) -> Self {
        Reply::raw(status, &body.to_string())
    }

    /// An answer with this body as is (`content-type: application/json` all the same, as a
    /// misbehaving server would send).
    pub fn raw(status: u16, body: &str) -> Self {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    /// A fixture from `tests/fixtures/providers/`, e.g. `fixture(429,
    /// "anthropic/error_rate_limit.json")`.
    pub fn fixture(status: u16, name: &str) -> Self {
        Reply::raw(status, &fixture_text(name))
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// The text of a fixture in `tests/fixtures/providers/`.
pub fn fixture_text(name: &str) -> String {
    let path = crate::workspace_root()
        .join("tests/fixtures/providers")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fixture parsed.
pub fn fixture(name: &str) -> Value {
    serde_json::from_str(&fixture_text(name)).expect("fixtures are JSON")
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lowercase.
    pub headers: BTreeMap<String, String>,
    /// The body, parsed (`Value::Null` when it was not JSON).
    pub body: Value,
    /// When it arrived, from the server's start.
    pub at: Duration,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// What the handler records and reads.
pub struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    started: Instant,
}

/// The running server.
pub type MockLlm = MockServer<Shared>;

impl MockLlm {
    /// Starts a server on 127.0.0.1 at a free port.
    pub fn start() -> Self {
        MockServer::serve(
            Shared {
                replies: Mutex::new(VecDeque::new()),
                default: Mutex::new(None),
                requests: Mutex::new(Vec::new()),
                started: Instant::now(),
            },
            handle,
        )
    }

    /// `http://127.0.0.1:<port>/v1`: the OpenAI-compatible `base_url`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// Queues a reply; requests take them in order.
    pub fn push(&self, reply: Reply) -> &Self {
        self.shared.replies.lock().unwrap().push_back(reply);
        self
    }

    /// The reply when the queue is empty (otherwise a 500 saying so).
    pub fn set_default(&self, reply: Reply) -> &Self {
        *self.shared.default.lock().unwrap() = Some(reply);
        self
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Replies still queued.
    pub fn pending(&self) -> usize {
        self.shared.replies.lock().unwrap().len()
    }
}

/// The API a path belongs to, for error envelopes.
#[derive(Clone, Copy, PartialEq)]
enum Api {
    Anthropic,
    OpenAi,
}

fn error_reply(api: Api, status: u16, error_type: &str, message: &str) -> Reply {
    let body = match api {
        Api::Anthropic => {
            json!({"type": "error", "error": {"type": error_type, "message": message}})
        }
        Api::OpenAi => {
            json!({"error": {"message": message, "type": error_type, "param": null, "code": null}})
        }
    };
    Reply::json(status, &body)
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let recorded = Recorded {
        method: method.to_string(),
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: parsed.clone().unwrap_or(Value::Null),
        at: shared.started.elapsed(),
    };
    let number = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(recorded.clone());
        requests.len()
    };
    let api = match uri.path() {
        "/v1/messages" => Api::Anthropic,
        "/v1/chat/completions" => Api::OpenAi,
        other => {
            return respond(error_reply(
                Api::OpenAi,
                404,
                "not_found_error",
                &format!("mock: no route {method} {other}"),
            ))
            .await
        }
    };
    if method != Method::POST {
        return respond(error_reply(
            api,
            405,
            "invalid_request_error",
            "mock: POST only",
        ))
        .await;
    }
    if parsed.is_none() {
        return respond(error_reply(
            api,
            400,
            "invalid_request_error",
            "mock: the request body is not JSON",
        ))
        .await;
    }
    if api == Api::Anthropic {
        for (header, status, kind, message) in [
            (
                "x-api-key",
                401,
                "authentication_error",
                "x-api-key header is required",
            ),
            (
                "anthropic-version",
                400,
                "invalid_request_error",
                "anthropic-version: header is required",
            ),
        ] {
            if recorded.header(header).is_none() {
                return respond(error_reply(api, status, kind, message)).await;
            }
        }
    }
    let queued = shared.replies.lock().unwrap().pop_front();
    let reply = queued
        .or_else(|| shared.default.lock().unwrap().clone())
        .unwrap_or_else(|| {
            error_reply(
                api,
                500,
                "api_error",
                &format!("mock: no reply queued for request {number}"),
            )
        });
    respond(reply).await
}

async fn respond(reply: Reply) -> Response {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let status = StatusCode::from_u16(reply.status).expect("a valid status");
    let mut response = (status, reply.body).into_response();
    for (name, value) in &reply.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            axum::http::HeaderValue::from_str(value).expect("header value"),
        );
    }
    response
}
