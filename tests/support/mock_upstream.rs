//! A local upstream for `tamp proxy` that answers like the real Anthropic Messages, OpenAI
//! Chat Completions and OpenAI Responses APIs, SSE streams included, and records every request
//! byte for byte.
//!
//! The wire shapes follow the providers' documentation: Anthropic's stream is
//! `message_start`, per block `content_block_start` / `content_block_delta`* /
//! `content_block_stop` (a `ping` after the first start), `message_delta`, `message_stop`,
//! each as `event: <type>` + `data: <json>`; OpenAI's is `data: <chat.completion.chunk>`
//! lines (the role first, then content or `tool_calls` deltas, a last chunk with
//! `finish_reason`, a usage chunk when `stream_options.include_usage`), then `data: [DONE]`;
//! the Responses stream is `response.created`, `response.in_progress`, per output item
//! `response.output_item.added`, its content or arguments deltas and `.done` events,
//! `response.output_item.done`, then `response.completed`, each with its `sequence_number`.
//! A request with `tools` is answered with a text block and a call of its first tool.
//! `POST /v1/responses/compact` answers OpenAI's compacted list: the request's user messages
//! and one `compaction` item.
//!
//! Like the real APIs it refuses a request without its credentials (Anthropic: `x-api-key`
//! or, as its SDKs send it since 2.x, `authorization` 401, `anthropic-version` 400; OpenAI: `authorization` 401) and a body that is not JSON
//! (400), in the provider's error envelope.
//!
//! A request steers its own answer through headers the proxy forwards untouched:
//! `x-mock-deltas: N` text deltas (3), `x-mock-delay-ms: MS` between events (0),
//! `x-mock-fail: STATUS:N:KEY` answers the first N requests carrying that KEY with STATUS in
//! the provider's error envelope (a 429 with `retry-after: 1` and rate-limit headers).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt as _;
use serde_json::{json, Value};

use crate::local_server::MockServer;

/// A request's path and query, as a recorded request names it.
pub fn request_target(uri: &Uri) -> String {
    uri.path_and_query()
        .map_or(uri.path(), |pq| pq.as_str())
        .to_string()
}

/// A request's headers as recorded: names lowercase, values as text, in arrival order.
pub fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// A request the upstream received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Every header, names lowercase, in arrival order (repeated names kept).
    pub headers: Vec<(String, String)>,
    /// The body as it arrived.
    pub body: Bytes,
    /// When it arrived, from the upstream's start.
    pub at: Duration,
}

impl Received {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::local_server::header(&self.headers, name)
    }

    /// The body parsed (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Default)]
/// What the handler records and reads.
pub struct Shared {
    received: Mutex<Vec<Received>>,
    /// Requests seen per `x-mock-fail` key.
    fail_counts: Mutex<HashMap<String, u32>>,
    next_id: AtomicU64,
    started: Option<Instant>,
    /// Record requests (off for load tests and benches, where only the count matters).
    record: bool,
}

/// The running upstream; stopped when dropped.
pub type MockUpstream = MockServer<Shared>;

impl MockUpstream {
    pub fn start() -> Self {
        Self::start_with(true)
    }

    /// An upstream that keeps no record of its requests, only their count (for load tests
    /// and benches). A record per request, over ten thousand by the end of the proxy
    /// bench, made this process slower at taking in a 200 KB body as the run went on (the
    /// direct request's p50 from 5.1 to 8.3 ms; 4.3 to 4.6 without them).
    pub fn start_unrecorded() -> Self {
        Self::start_with(false)
    }

    fn start_with(record: bool) -> Self {
        MockServer::serve(
            Shared {
                started: Some(Instant::now()),
                record,
                ..Shared::default()
            },
            handle,
        )
    }

    /// The requests received, in order (none for an upstream started unrecorded).
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// How many requests were received.
    pub fn count(&self) -> usize {
        if self.shared.record {
            self.shared.received.lock().unwrap().len()
        } else {
            self.shared.next_id.load(Ordering::Relaxed) as usize
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Anthropic,
    OpenAi,
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if shared.record {
        let received = Received {
            method: method.to_string(),
            target: request_target(&uri),
            headers: header_pairs(&headers),
            body: body.clone(),
            at: shared.started.map_or(Duration::ZERO, |s| s.elapsed()),
        };
        shared.received.lock().unwrap().push(received);
    }
    let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let path = uri.path();
    let api = if path.starts_with("/v1/messages")
        || header("anthropic-version").is_some()
        || header("x-api-key").is_some()
    {
        Api::Anthropic
    } else {
        Api::OpenAi
    };

    // Credentials, as the real APIs check them before anything else.
    let refused = match api {
        Api::Anthropic if header("x-api-key").is_none() && header("authorization").is_none() => {
            Some((401, "authentication_error", "x-api-key header is required"))
        }
        Api::Anthropic if header("anthropic-version").is_none() => Some((
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
        )),
        Api::OpenAi if header("authorization").is_none() => Some((
            401,
            "invalid_request_error",
            "You didn't provide an API key.",
        )),
        _ => None,
    };
    if let Some((status, kind, message)) = refused {
        return error(api, status, kind, message, n);
    }
    if let Some(spec) = header("x-mock-fail") {
        let mut parts = spec.splitn(3, ':');
        let status: u16 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(500);
        let times: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(1);
        let key = parts.next().unwrap_or("").to_string();
        let seen = {
            let mut counts = shared.fail_counts.lock().unwrap();
            let seen = counts.entry(key).or_default();
            *seen += 1;
            *seen
        };
        if seen <= times {
            let (kind, message) = match (api, status) {
                (Api::Anthropic, 429) => (
                    "rate_limit_error",
                    "Number of requests has exceeded your rate limit.",
                ),
                (Api::OpenAi, 429) => ("requests", "Rate limit reached for requests"),
                (Api::Anthropic, 400) => {
                    ("invalid_request_error", "messages: roles must alternate")
                }
                (Api::OpenAi, 400) => (
                    "invalid_request_error",
                    "Invalid 'messages': roles must alternate",
                ),
                (Api::Anthropic, 529) => ("overloaded_error", "Overloaded"),
                _ => ("api_error", "Internal server error"),
            };
            return error(api, status, kind, message, n);
        }
    }

    let delay = Duration::from_millis(
        header("x-mock-delay-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let deltas: usize = header("x-mock-deltas")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) if body.is_empty() => Value::Null,
        Err(e) => {
            return error(
                api,
                400,
                "invalid_request_error",
                &format!("request body is not valid JSON: {e}"),
                n,
            )
        }
    };
    match (method.as_str(), path) {
        ("POST", "/v1/messages") => anthropic_message(&request, n, deltas, delay),
        ("POST", "/v1/messages/count_tokens") => {
            json_answer(api, 200, &json!({"input_tokens": body.len() / 4}), n)
        }
        ("POST", "/v1/chat/completions") => openai_completion(&request, n, deltas, delay),
        ("POST", "/v1/responses") => openai_response(&request, n, deltas, delay),
        ("POST", "/v1/responses/compact") => openai_compact(&request, n),
        ("GET", "/v1/models") => json_answer(
            api,
            200,
            &match api {
                Api::Anthropic => {
                    json!({"data": [{"type": "model", "id": "claude-test", "display_name": "Claude Test", "created_at": "2026-01-01T00:00:00Z"}], "has_more": false, "first_id": "claude-test", "last_id": "claude-test"})
                }
                Api::OpenAi => {
                    json!({"object": "list", "data": [{"id": "gpt-test", "object": "model", "created": 1_700_000_000, "owned_by": "test"}]})
                }
            },
            n,
        ),
        // Anything else: what arrived, so a test sees the path and the body's size.
        _ => json_answer(
            api,
            200,
            &json!({"method": method.as_str(), "target": uri.to_string(), "body_bytes": body.len()}),
            n,
        ),
    }
}

/// The request-id header each API sets on every answer.
fn request_id_header(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "request-id",
        Api::OpenAi => "x-request-id",
    }
}

fn json_answer(api: Api, status: u16, body: &Value, n: u64) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header(request_id_header(api), format!("req_{n:08}"))
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn error(api: Api, status: u16, kind: &str, message: &str, n: u64) -> Response {
    let body = match api {
        Api::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": format!("req_{n:08}")})
        }
        Api::OpenAi => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": if status == 429 { json!("rate_limit_exceeded") } else { Value::Null }}})
        }
    };
    let mut response = json_answer(api, status, &body, n);
    if status == 429 {
        let headers = response.headers_mut();
        headers.insert("retry-after", "1".parse().unwrap());
        match api {
            Api::Anthropic => {
                headers.insert("anthropic-ratelimit-requests-limit", "50".parse().unwrap());
                headers.insert(
                    "anthropic-ratelimit-requests-remaining",
                    "0".parse().unwrap(),
                );
                headers.insert(
                    "anthropic-ratelimit-requests-reset",
                    "2026-01-01T00:00:01Z".parse().unwrap(),
                );
            }
            Api::OpenAi => {
                headers.insert("x-ratelimit-limit-requests", "50".parse().unwrap());
                headers.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
                headers.insert("x-ratelimit-reset-requests", "1s".parse().unwrap());
            }
        }
    }
    response
}

/// The answer's words: how many messages arrived (so a test sees what the model was sent),
/// then `word1 word2 ...` up to `deltas` deltas in all.
fn words(messages: usize, deltas: usize) -> Vec<String> {
    let mut words = vec![format!("Seen {messages} messages.")];
    words.extend((1..deltas).map(|i| format!(" word{i}")));
    words
}

/// The first tool of a request, if it offers any: its name.
fn first_tool(request: &Value, api: Api) -> Option<String> {
    let tool = request["tools"].as_array()?.first()?;
    match api {
        Api::Anthropic => tool["name"].as_str(),
        // Chat Completions nests the function; Responses does not.
        Api::OpenAi => tool["function"]["name"].as_str().or(tool["name"].as_str()),
    }
    .map(str::to_string)
}

const TOOL_INPUT_PARTS: [&str; 3] = ["{\"query\": ", "\"weather in ", "Paris\"}"];

fn anthropic_message(request: &Value, n: u64, deltas: usize, delay: Duration) -> Response {
    let model = request["model"]
        .as_str()
        .unwrap_or("claude-test")
        .to_string();
    let messages = request["messages"].as_array().map_or(0, Vec::len);
    let input_tokens = request.to_string().len() / 4;
    let words = words(messages, deltas);
    let tool = first_tool(request, Api::Anthropic);
    let id = format!("msg_{n:024}");
    let tool_id = format!("toolu_{n:024}");
    let stop_reason = if tool.is_some() {
        "tool_use"
    } else {
        "end_turn"
    };
    if request["stream"] != json!(true) {
        let mut content = vec![json!({"type": "text", "text": words.concat()})];
        if let Some(name) = &tool {
            content.push(json!({"type": "tool_use", "id": tool_id, "name": name, "input": {"query": "weather in Paris"}}));
        }
        let body = json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": words.len()},
        });
        return json_answer(Api::Anthropic, 200, &body, n);
    }
    let event = |data: Value| {
        format!(
            "event: {}\ndata: {}\n\n",
            data["type"].as_str().unwrap_or("unknown"),
            data
        )
    };
    let mut events = vec![
        event(json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "content": [], "model": model,
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})),
        event(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event(json!({"type": "ping"})),
    ];
    for word in &words {
        events.push(event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}})));
    }
    events.push(event(json!({"type": "content_block_stop", "index": 0})));
    if let Some(name) = &tool {
        events.push(event(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}})));
        for part in TOOL_INPUT_PARTS {
            events.push(event(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": part}})));
        }
        events.push(event(json!({"type": "content_block_stop", "index": 1})));
    }
    events.push(event(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": words.len()}})));
    events.push(event(json!({"type": "message_stop"})));
    sse(Api::Anthropic, events, delay, n)
}

fn openai_completion(request: &Value, n: u64, deltas: usize, delay: Duration) -> Response {
    let model = request["model"].as_str().unwrap_or("gpt-test").to_string();
    let messages = request["messages"].as_array().map_or(0, Vec::len);
    let prompt_tokens = request.to_string().len() / 4;
    let words = words(messages, deltas);
    let tool = first_tool(request, Api::OpenAi);
    let id = format!("chatcmpl-{n:020}");
    let call_id = format!("call_{n:020}");
    let created = 1_700_000_000u64;
    let finish = if tool.is_some() { "tool_calls" } else { "stop" };
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": words.len(), "total_tokens": prompt_tokens + words.len()});
    if request["stream"] != json!(true) {
        let message = match &tool {
            Some(name) => json!({"role": "assistant", "content": words.concat(), "refusal": null,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": TOOL_INPUT_PARTS.concat()}}]}),
            None => json!({"role": "assistant", "content": words.concat(), "refusal": null}),
        };
        let body = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
            "usage": usage, "system_fingerprint": "fp_test",
        });
        return json_answer(Api::OpenAi, 200, &body, n);
    }
    let chunk = |delta: Value, finish: Value| {
        let data = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        format!("data: {data}\n\n")
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    for word in &words {
        events.push(chunk(json!({"content": word}), Value::Null));
    }
    if let Some(name) = &tool {
        events.push(chunk(json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}), Value::Null));
        for part in TOOL_INPUT_PARTS {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), json!(finish)));
    if request["stream_options"]["include_usage"] == json!(true) {
        let data = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "fp_test", "choices": [], "usage": usage});
        events.push(format!("data: {data}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_string());
    sse(Api::OpenAi, events, delay, n)
}

/// How many items a Responses request's `input` holds (1 for a string).
fn input_items(request: &Value) -> usize {
    match &request["input"] {
        Value::Array(items) => items.len(),
        Value::String(_) => 1,
        _ => 0,
    }
}

fn responses_usage(request: &Value, output: usize) -> Value {
    let input = request.to_string().len() / 4;
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output})
}

fn openai_response(request: &Value, n: u64, deltas: usize, delay: Duration) -> Response {
    let model = request["model"].as_str().unwrap_or("gpt-test").to_string();
    let mut words = words(input_items(request), deltas);
    words[0] = words[0].replace("messages", "items");
    let tool = first_tool(request, Api::OpenAi);
    let id = format!("resp_{n:024}");
    let message_id = format!("msg_{n:024}");
    let call_id = format!("call_{n:020}");
    let text = words.concat();
    let mut output = vec![
        json!({"type": "message", "id": message_id, "status": "completed",
        "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}),
    ];
    if let Some(name) = &tool {
        output.push(
            json!({"type": "function_call", "id": format!("fc_{n:024}"), "status": "completed",
            "call_id": call_id, "name": name, "arguments": TOOL_INPUT_PARTS.concat()}),
        );
    }
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": id, "object": "response", "created_at": 1_700_000_000u64, "status": status,
            "error": null, "incomplete_details": null, "instructions": request["instructions"],
            "model": model, "output": output, "parallel_tool_calls": true, "metadata": {},
            "tool_choice": "auto", "tools": request["tools"].as_array().cloned().unwrap_or_default(),
            "temperature": 1.0, "top_p": 1.0, "usage": usage})
    };
    let done = response(
        "completed",
        json!(output),
        responses_usage(request, words.len()),
    );
    if request["stream"] != json!(true) {
        return json_answer(Api::OpenAi, 200, &done, n);
    }
    let mut event = sequenced_events("unknown");
    let started = response("in_progress", json!([]), Value::Null);
    let mut events = vec![
        event(json!({"type": "response.created", "response": started})),
        event(json!({"type": "response.in_progress", "response": started})),
    ];
    let empty_part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
    let mut message = output[0].clone();
    message["status"] = json!("in_progress");
    message["content"] = json!([]);
    events.push(event(
        json!({"type": "response.output_item.added", "output_index": 0, "item": message}),
    ));
    events.push(event(
        json!({"type": "response.content_part.added", "item_id": message_id,
        "output_index": 0, "content_index": 0, "part": empty_part}),
    ));
    for word in &words {
        events.push(event(
            json!({"type": "response.output_text.delta", "item_id": message_id,
            "output_index": 0, "content_index": 0, "delta": word, "logprobs": []}),
        ));
    }
    events.push(event(
        json!({"type": "response.output_text.done", "item_id": message_id,
        "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
    ));
    events.push(event(
        json!({"type": "response.content_part.done", "item_id": message_id,
        "output_index": 0, "content_index": 0, "part": output[0]["content"][0]}),
    ));
    events.push(event(
        json!({"type": "response.output_item.done", "output_index": 0, "item": output[0]}),
    ));
    if let Some(call) = output.get(1) {
        let mut added = call.clone();
        added["status"] = json!("in_progress");
        added["arguments"] = json!("");
        events.push(event(
            json!({"type": "response.output_item.added", "output_index": 1, "item": added}),
        ));
        for part in TOOL_INPUT_PARTS {
            events.push(event(
                json!({"type": "response.function_call_arguments.delta",
                "item_id": call["id"], "output_index": 1, "delta": part}),
            ));
        }
        events.push(event(
            json!({"type": "response.function_call_arguments.done", "item_id": call["id"],
            "name": call["name"], "output_index": 1, "arguments": call["arguments"]}),
        ));
        events.push(event(
            json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
        ));
    }
    events.push(event(
        json!({"type": "response.completed", "response": done}),
    ));
    sse(Api::OpenAi, events, delay, n)
}

/// A Responses stream's events, numbered in order (`sequence_number`) as OpenAI numbers them;
/// `untyped` names an event without a `type`.
pub(crate) fn sequenced_events(untyped: &'static str) -> impl FnMut(Value) -> String {
    let mut sequence = 0u64;
    move |mut data: Value| {
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap_or(untyped)
        )
    }
}

/// The user messages among a Responses request's `input` items, in order: what a
/// `/v1/responses/compact` answer keeps.
pub(crate) fn user_messages(request: &Value) -> Vec<Value> {
    request["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| i["type"] == "message" && i["role"] == "user")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// OpenAI's `CompactResource`: the request's user messages, then a `compaction` item.
fn openai_compact(request: &Value, n: u64) -> Response {
    let mut output = user_messages(request);
    output.push(json!({"type": "compaction", "id": format!("cmp_{n:024}"),
        "encrypted_content": format!("gAAAAB-mock-compaction-{n}")}));
    let body = json!({"id": format!("resp_{n:024}"), "object": "response.compaction",
        "output": output, "created_at": 1_700_000_000u64, "usage": responses_usage(request, 50)});
    json_answer(Api::OpenAi, 200, &body, n)
}

/// A `text/event-stream` answer, one chunk per event, `delay` before each after the first.
fn sse(api: Api, events: Vec<String>, delay: Duration, n: u64) -> Response {
    let stream =
        futures::stream::iter(events.into_iter().enumerate()).then(move |(i, event)| async move {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok::<_, std::convert::Infallible>(Bytes::from(event))
        });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .header(request_id_header(api), format!("req_{n:08}"))
        .body(Body::from_stream(stream))
        .unwrap()
}
