//! A scripted upstream for the coding agents (Claude Code, Codex) run through `tamp proxy`:
//! it checks every request as the real API would, and answers a tool task, one shell command
//! per turn, then a final text.
//!
//! The task: step `n` is the command `echo step n`; the next step is one past the highest step
//! among the request's own tool calls (so a compaction that archived old calls but kept the
//! newest, as every strategy must, leaves the count intact), and after the last step the answer
//! is the text [`AgentUpstream::final_text`]. Each answer carries what a real model's does
//! beside the call: a signed `thinking` block (Anthropic) or an encrypted `reasoning` item
//! (Responses); the upstream remembers what it issued and refuses one that comes back altered.
//!
//! The checks, each the real API's answer to a request that breaks it (a 400 in the provider's
//! error envelope, recorded as a refusal):
//!
//! - Anthropic Messages: the key; roles `user`, `assistant` and `system`, the first message
//!   `user`, a `system` message only right after a user turn; every `tool_use` answered by a
//!   `tool_result` in the next message, every `tool_result` answering a `tool_use` of the
//!   message before it; with thinking on, a last assistant turn that uses a tool starts with
//!   its thinking block; thinking blocks unaltered; at most 4 `cache_control` breakpoints.
//! - OpenAI Responses: the key; known item types only (as OpenAI's: a vLLM-like upstream,
//!   [`ServerCompaction::Absent`], also refuses `compaction` and `compaction_trigger`);
//!   `function_call` / `function_call_output` paired by `call_id` both ways; a `reasoning`
//!   item followed by the item it belongs to, and unaltered; `compaction_trigger` last.
//!
//! [`Task::WriteFiles`] makes step `n` write the file `step-n.txt` with the agent's own editor
//! tool instead: Claude Code's `Write`, Codex's `apply_patch` (a freeform tool: its input is
//! the patch, not JSON); [`Task::FailingCommands`] makes it `cat missing-n.txt`, which fails.
//!
//! [`Task::Logs`] makes each step print a build log of about 3,000 tokens, the first step's
//! starting with a planted fact ([`PLANTED_FACT`]); with `recall_after`, once that many steps
//! are done the model calls the agent's `recall` tool (an MCP tool: any tool whose name ends in
//! `recall`) on the page that holds the first step's output, then goes on with the steps.
//!
//! Usage is reported as the request's size / 4 input tokens, so an agent that compacts on its
//! own when usage passes a limit (Codex's `model_auto_compact_token_limit`) sees it grow.
//!
//! An answer is gzip-encoded, chunk by chunk, when the request's `accept-encoding` names gzip,
//! as a compressing server's is: Claude Code asks for it, and Codex from 0.171 on. The proxy
//! relays it as it came and the agent decodes it.

use std::collections::HashSet;
use std::convert::Infallible;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::local_server::MockServer;

/// The marker every tamp summary's text starts with (see `host/src/wire/summary_marker.rs`).
const SUMMARY_MARKER: &str = "<tamp-summary page=\"";

/// Whether the upstream does OpenAI's server-side compaction (`compaction_trigger`,
/// `/v1/responses/compact`, `compaction` items), as OpenAI does, or lacks it, as vLLM,
/// llama.cpp and Ollama do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCompaction {
    Present,
    Absent,
}

/// One request the upstream answered.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub headers: Vec<(String, String)>,
    /// The body (`Null` when it is not JSON).
    pub body: Value,
    /// The body's bytes as they arrived.
    pub raw: Bytes,
    pub status: u16,
    /// Why the request was refused, when it was (`status` 4xx).
    pub refusal: Option<String>,
    /// The answer went out gzip-encoded (the request's `accept-encoding` named gzip).
    pub gzip: bool,
}

impl Exchange {
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::local_server::header(&self.headers, name)
    }

    /// The request carries a tamp summary: it reached the upstream compacted.
    pub fn compacted(&self) -> bool {
        let text = String::from_utf8_lossy(&self.raw);
        text.contains(SUMMARY_MARKER) || text.contains(&SUMMARY_MARKER.replace('"', "\\\""))
    }

    /// The agent session the request belongs to: Claude Code's `metadata.user_id`
    /// `session_id`, or the Responses `prompt_cache_key`.
    pub fn session(&self) -> Option<String> {
        if let Some(key) = self.body["prompt_cache_key"].as_str() {
            return Some(key.to_string());
        }
        let user_id = self.body["metadata"]["user_id"].as_str()?;
        let parsed: Value = serde_json::from_str(user_id).ok()?;
        parsed["session_id"].as_str().map(str::to_string)
    }
}

/// What each step of the scripted task does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// The shell command `echo step n`.
    Echo,
    /// The shell command `cat missing-n.txt`, which fails: no such file.
    FailingCommands,
    /// Writes `step-n.txt`, `step n` in it, into this directory (absolute, as Claude Code's
    /// `Write` requires), with the agent's editor tool.
    WriteFiles(std::path::PathBuf),
    /// The shell command `echo step n; seq …`: a build log of about 3,000 tokens, the first
    /// step's starting with [`PLANTED_FACT`]. With `recall_after`, once that many steps are
    /// done, one call of the `recall` tool first (see the module's doc).
    Logs { recall_after: Option<u32> },
}

/// The fact the first step of [`Task::Logs`] prints on its first line.
pub const PLANTED_FACT: &str = "deploy code: K7-4481-QX";

/// What the handler records and reads.
pub struct Shared {
    key: String,
    steps: u32,
    task: Task,
    compaction: ServerCompaction,
    exchanges: Mutex<Vec<Exchange>>,
    /// Thinking signatures, reasoning and compaction contents this upstream issued.
    issued: Mutex<HashSet<String>>,
    /// The id of the first step's tool call, once issued: its result is what a recall asks
    /// for (the call's input may be cleared with it).
    first_call: Mutex<Option<String>>,
    next_id: AtomicU64,
}

/// The running upstream; stopped when dropped.
pub type AgentUpstream = MockServer<Shared>;

impl AgentUpstream {
    /// An upstream that takes only `key` and scripts a task of `steps` commands.
    pub fn start(key: &str, steps: u32, compaction: ServerCompaction) -> AgentUpstream {
        AgentUpstream::start_task(key, steps, compaction, Task::Echo)
    }

    /// [`AgentUpstream::start`] for a task whose steps do `task`.
    pub fn start_task(
        key: &str,
        steps: u32,
        compaction: ServerCompaction,
        task: Task,
    ) -> AgentUpstream {
        MockServer::serve(
            Shared {
                key: key.to_string(),
                steps,
                task,
                compaction,
                exchanges: Mutex::new(Vec::new()),
                issued: Mutex::new(HashSet::new()),
                first_call: Mutex::new(None),
                next_id: AtomicU64::new(1),
            },
            handle,
        )
    }

    /// The text the task ends with.
    pub fn final_text(&self) -> String {
        final_text(self.shared.steps)
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.shared.exchanges.lock().unwrap().clone()
    }
}

fn final_text(steps: u32) -> String {
    format!("All {steps} steps are done.")
}

/// What the request asked for, once checked.
enum Answer {
    /// The next command, as step `n` of the task.
    Step(u32),
    /// The task is done (or the request offers no shell tool): the final text.
    Done,
    /// A Responses request ending in `compaction_trigger`: a `compaction` item.
    Compaction,
    /// A call of the agent's recall tool (its name as the request's `tools` give it, and its
    /// namespace when it is in one) on a page.
    Recall {
        tool: String,
        namespace: Option<String>,
        page: String,
    },
    /// A client-executed `tool_search_call` for the recall tool (Codex defers MCP tools
    /// behind its `tool_search` tool, as OpenAI's API lets a client do).
    ToolSearch,
}

/// A refusal: status, the provider's error type, the message.
struct Refusal(u16, &'static str, String);

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal(400, "invalid_request_error", message.into())
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let path = uri.path().to_string();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let anthropic = path.starts_with("/v1/messages");
    let bearer = format!("Bearer {}", shared.key);
    let answer = if anthropic && header("x-api-key") != Some(shared.key.as_str()) {
        Err(Refusal(
            401,
            "authentication_error",
            "invalid x-api-key".into(),
        ))
    } else if !anthropic && header("authorization") != Some(bearer.as_str()) {
        Err(Refusal(
            401,
            "invalid_request_error",
            "Incorrect API key provided".into(),
        ))
    } else if body.is_null() && method == Method::POST {
        Err(invalid("the request body is not JSON"))
    } else {
        match (method.as_str(), path.as_str()) {
            ("POST", "/v1/messages") => check_messages(&shared, &body),
            ("POST", "/v1/responses") => check_responses(&shared, &body),
            ("POST", "/v1/responses/compact") if shared.compaction == ServerCompaction::Present => {
                check_responses(&shared, &body).map(|_| Answer::Compaction)
            }
            _ => Err(Refusal(
                404,
                "not_found_error",
                format!("no route {method} {path}"),
            )),
        }
    };
    let response = match &answer {
        Err(Refusal(status, kind, message)) => error(anthropic, *status, kind, message),
        Ok(answer) if path == "/v1/responses/compact" => compact_answer(&shared, &body, answer, n),
        Ok(answer) if anthropic => anthropic_answer(&shared, &body, answer, n),
        Ok(answer) => responses_answer(&shared, &body, answer, n),
    };
    let gzip = answer.is_ok() && accepts_gzip(&headers);
    let response = if gzip {
        gzipped(response).await
    } else {
        response
    };
    shared.exchanges.lock().unwrap().push(Exchange {
        method: method.to_string(),
        target: crate::mock_upstream::request_target(&uri),
        headers: crate::mock_upstream::header_pairs(&headers),
        body,
        raw,
        status: response.status().as_u16(),
        refusal: answer.err().map(|Refusal(_, _, message)| message),
        gzip,
    });
    response
}

/// Whether `accept-encoding` names gzip (with a weight other than 0).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all("accept-encoding")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            parts
                .next()
                .is_some_and(|name| name.eq_ignore_ascii_case("gzip"))
                && parts.all(|param| param.replace(' ', "") != "q=0")
        })
}

/// The answer gzip-encoded chunk by chunk, a sync flush after each, so that a stream stays a
/// stream: each event can be decoded as it arrives.
async fn gzipped(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let chunks: Vec<Bytes> = body
        .into_data_stream()
        .map(|chunk| chunk.expect("the upstream's own answer"))
        .collect()
        .await;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut encoded = Vec::with_capacity(chunks.len() + 1);
    for chunk in chunks {
        encoder.write_all(&chunk).unwrap();
        encoder.flush().unwrap();
        encoded.push(Bytes::from(std::mem::take(encoder.get_mut())));
    }
    encoded.push(Bytes::from(encoder.finish().unwrap()));
    parts
        .headers
        .insert("content-encoding", HeaderValue::from_static("gzip"));
    parts.headers.remove("content-length");
    let stream = futures::stream::iter(encoded.into_iter().map(Ok::<_, Infallible>));
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The step number of a command `echo step N` or `cat missing-N.txt`.
fn step_of(command: &str) -> Option<u32> {
    let command = command.trim();
    let number = match command.strip_prefix("echo step ") {
        // A log step goes on after its number: `echo step 3; seq …`.
        Some(n) => n.split(';').next()?,
        None => command.strip_prefix("cat missing-")?.strip_suffix(".txt")?,
    };
    number.trim().parse().ok()
}

/// The shell command of step `step` of a shell task.
fn shell_command(task: &Task, step: u32) -> String {
    match task {
        Task::FailingCommands => format!("cat missing-{step}.txt"),
        // 200 lines of about 15 tokens: some 3,000 tokens of output.
        Task::Logs { .. } => {
            let fact = if step == 1 {
                format!("echo '{PLANTED_FACT}'; ")
            } else {
                String::new()
            };
            format!(
                "echo step {step}; {fact}seq -f 'step {step} build log line %g: compiled one \
                 more module without warnings, artifacts cached' 1 200"
            )
        }
        _ => format!("echo step {step}"),
    }
}

/// The step number of a file `…/step-N.txt`.
fn step_of_file(path: &str) -> Option<u32> {
    path.trim()
        .rsplit('/')
        .next()?
        .strip_prefix("step-")?
        .strip_suffix(".txt")?
        .parse()
        .ok()
}

/// The step a `Write` call (`file_path`) or an `apply_patch` patch (`*** Add File: `) did.
fn step_of_write(input: &str) -> Option<u32> {
    input
        .lines()
        .filter_map(|line| line.strip_prefix("*** Add File: "))
        .find_map(step_of_file)
}

/// The file step `step` writes, and what it holds.
fn step_file(dir: &std::path::Path, step: u32) -> (String, String) {
    (
        format!("{}/step-{step}.txt", dir.display()),
        format!("step {step}"),
    )
}

fn next(shared: &Shared, done: u32, has_tool: bool) -> Answer {
    if has_tool && done < shared.steps {
        Answer::Step(done + 1)
    } else {
        Answer::Done
    }
}

/// With [`Task::Logs`]' `recall_after` steps done and no recall made yet, the recall of the
/// page that holds the first step's output, as a model would make it: the page its cleared
/// placeholder names, or (once the step was summarized) the first summary's. `None` while the
/// output is still there as it was, or when the request offers no recall tool.
///
/// `tools` are the request's tool names; `calls` its tool calls' names and inputs in order
/// (inputs as text); `first_output` the text of the first step's result, if it is still there;
/// `text` the whole request.
fn recall(
    shared: &Shared,
    done: u32,
    tools: &[&str],
    calls: &[(String, String)],
    first_output: Option<&str>,
    text: &str,
) -> Option<Answer> {
    let Task::Logs {
        recall_after: Some(after),
    } = shared.task
    else {
        return None;
    };
    let tool = tools.iter().find(|t| t.ends_with("recall"))?;
    if done < after || calls.iter().any(|(name, _)| name == tool) {
        return None;
    }
    let page = match first_output {
        Some(output) if output.contains(PLANTED_FACT) => return None,
        Some(output) => page_named(output, "<tamp-cleared page=\"")?,
        None => page_named(text, SUMMARY_MARKER)
            .or_else(|| page_named(&text.replace("\\\"", "\""), SUMMARY_MARKER))?,
    };
    Some(Answer::Recall {
        tool: tool.to_string(),
        namespace: None,
        page,
    })
}

/// The page id right after the first `marker` in `text`.
fn page_named(text: &str, marker: &str) -> Option<String> {
    let at = text.find(marker)? + marker.len();
    let id: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// The text of a tool result's content: a string, or its text blocks joined.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::Array(blocks) => blocks.clone(),
        _ => Vec::new(),
    }
}

/// The Messages API's checks (see the module's doc).
fn check_messages(shared: &Shared, body: &Value) -> Result<Answer, Refusal> {
    let messages = body["messages"]
        .as_array()
        .ok_or_else(|| invalid("messages: Field required"))?;
    if messages.is_empty() {
        return Err(invalid("messages: at least one message is required"));
    }
    let issued = shared.issued.lock().unwrap();
    let mut breakpoints =
        count_cache_control(&body["system"]) + count_cache_control(&body["tools"]);
    let mut done = 0;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        let previous = i
            .checked_sub(1)
            .map(|j| messages[j]["role"].as_str().unwrap_or(""));
        match (role, previous) {
            ("user", None) | ("user" | "assistant", Some(_)) => {}
            ("system", Some("user")) => {}
            ("system", _) => {
                return Err(invalid(format!(
                    "messages.{i}: a system message must follow a user message"
                )))
            }
            (_, None) => {
                return Err(invalid(
                    "messages.0: the first message must use the \"user\" role",
                ))
            }
            (other, _) => {
                return Err(invalid(format!(
                    "messages.{i}.role: unknown role \"{other}\""
                )))
            }
        }
        breakpoints += count_cache_control(&message["content"]);
        let uses: Vec<String> = blocks(message)
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap_or("").to_string())
            .collect();
        for block in blocks(message) {
            match block["type"].as_str() {
                Some("tool_use") => {
                    let input = &block["input"];
                    let step = match block["name"].as_str() {
                        Some("Write") => input["file_path"].as_str().and_then(step_of_file),
                        _ => input["command"].as_str().and_then(step_of),
                    };
                    done = done.max(step.unwrap_or(0));
                }
                Some("thinking") => {
                    let signature = block["signature"].as_str().unwrap_or("");
                    if !issued.contains(signature) {
                        return Err(invalid(format!(
                            "messages.{i}.content: Invalid `signature` in `thinking` block"
                        )));
                    }
                }
                Some("tool_result") => {
                    let id = block["tool_use_id"].as_str().unwrap_or("");
                    let before = i.checked_sub(1).map(|j| &messages[j]);
                    let answered = before.is_some_and(|m| {
                        blocks(m)
                            .iter()
                            .any(|b| b["type"] == "tool_use" && b["id"] == id)
                    });
                    if !answered {
                        return Err(invalid(format!(
                            "messages.{i}.content: unexpected `tool_use_id` found in \
                             `tool_result` blocks: {id}. Each `tool_result` block must have a \
                             corresponding `tool_use` block in the previous message."
                        )));
                    }
                }
                _ => {}
            }
        }
        if !uses.is_empty() {
            let after = messages.get(i + 1);
            for id in &uses {
                let answered = after.is_some_and(|m| {
                    blocks(m)
                        .iter()
                        .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == id.as_str())
                });
                if !answered {
                    return Err(invalid(format!(
                        "messages.{i}: `tool_use` ids were found without `tool_result` blocks \
                         immediately after: {id}. Each `tool_use` block must have a \
                         corresponding `tool_result` block in the next message."
                    )));
                }
            }
        }
    }
    if breakpoints > 4 {
        return Err(invalid(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        )));
    }
    let thinking = body["thinking"]["type"]
        .as_str()
        .is_some_and(|t| t != "disabled");
    if let Some(last) = messages.iter().rposition(|m| m["role"] == "assistant") {
        let content = blocks(&messages[last]);
        let uses_tool = content.iter().any(|b| b["type"] == "tool_use");
        if thinking && uses_tool && content.first().is_some_and(|b| b["type"] != "thinking") {
            return Err(invalid(format!(
                "messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found `{}`. When `thinking` is enabled, a final `assistant` message must start \
                 with a thinking block.",
                content[0]["type"].as_str().unwrap_or("?")
            )));
        }
    }
    let tool = match shared.task {
        Task::Echo | Task::FailingCommands | Task::Logs { .. } => "Bash",
        Task::WriteFiles(_) => "Write",
    };
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    let all_blocks: Vec<Value> = messages.iter().flat_map(blocks).collect();
    let calls: Vec<(String, String)> = all_blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| {
            let name = b["name"].as_str().unwrap_or("").to_string();
            (name, b["input"].to_string())
        })
        .collect();
    let first_call = shared.first_call.lock().unwrap().clone();
    let first_output = first_call.and_then(|id| {
        all_blocks
            .iter()
            .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id.as_str())
            .map(|b| result_text(&b["content"]))
    });
    let text = body["messages"].to_string();
    if let Some(recall) = recall(shared, done, &tools, &calls, first_output.as_deref(), &text) {
        return Ok(recall);
    }
    Ok(next(shared, done, tools.contains(&tool)))
}

fn count_cache_control(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(count_cache_control).sum(),
        Value::Object(map) => usize::from(map.contains_key("cache_control")),
        _ => 0,
    }
}

/// The item types of OpenAI's Responses input the upstream knows.
const KNOWN_ITEMS: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
    "compaction",
    "compaction_trigger",
    "item_reference",
    "web_search_call",
    "tool_search_call",
    "tool_search_output",
];

/// The Responses API's checks (see the module's doc).
fn check_responses(shared: &Shared, body: &Value) -> Result<Answer, Refusal> {
    let items = match &body["input"] {
        Value::Array(items) => items.clone(),
        Value::String(_) => Vec::new(),
        _ => return Err(invalid("Missing required parameter: 'input'.")),
    };
    let issued = shared.issued.lock().unwrap();
    let absent = shared.compaction == ServerCompaction::Absent;
    let calls: Vec<&str> = items
        .iter()
        .filter(|i| i["type"] == "function_call" || i["type"] == "custom_tool_call")
        .filter_map(|i| i["call_id"].as_str())
        .collect();
    let outputs: Vec<&str> = items
        .iter()
        .filter(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output")
        .filter_map(|i| i["call_id"].as_str())
        .collect();
    let mut done = 0;
    let mut trigger = false;
    for (i, item) in items.iter().enumerate() {
        let kind = item["type"].as_str().unwrap_or("message");
        if !KNOWN_ITEMS.contains(&kind) || (absent && kind.starts_with("compaction")) {
            return Err(invalid(format!(
                "Invalid value: '{kind}'. Supported values are: {}.",
                KNOWN_ITEMS.join(", ")
            )));
        }
        match kind {
            "function_call" => {
                let call_id = item["call_id"].as_str().unwrap_or("");
                if !outputs.contains(&call_id) {
                    return Err(invalid(format!(
                        "No tool output found for function call {call_id}."
                    )));
                }
                let args: Value = item["arguments"]
                    .as_str()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or(Value::Null);
                if let Some(step) = args["cmd"].as_str().and_then(step_of) {
                    done = done.max(step);
                }
            }
            "custom_tool_call" => {
                let call_id = item["call_id"].as_str().unwrap_or("");
                if !outputs.contains(&call_id) {
                    return Err(invalid(format!(
                        "No tool output found for custom tool call {call_id}."
                    )));
                }
                if let Some(step) = item["input"].as_str().and_then(step_of_write) {
                    done = done.max(step);
                }
            }
            "function_call_output" | "custom_tool_call_output" => {
                let call_id = item["call_id"].as_str().unwrap_or("");
                let earlier = items[..i].iter().any(|c| {
                    (c["type"] == "function_call" || c["type"] == "custom_tool_call")
                        && c["call_id"] == call_id
                });
                if !earlier || !calls.contains(&call_id) {
                    return Err(invalid(format!(
                        "No tool call found for function call output with call_id {call_id}."
                    )));
                }
            }
            "reasoning" => {
                let content = item["encrypted_content"].as_str().unwrap_or("");
                if !issued.contains(content) {
                    return Err(invalid(format!(
                        "input[{i}]: The encrypted content for item {} could not be verified.",
                        item["id"].as_str().unwrap_or("?")
                    )));
                }
                let followed = items.get(i + 1).is_some_and(|f| f["type"] != "reasoning");
                if !followed {
                    return Err(invalid(format!(
                        "Item '{}' of type 'reasoning' was provided without its required following item.",
                        item["id"].as_str().unwrap_or("?")
                    )));
                }
            }
            "compaction" => {
                let content = item["encrypted_content"].as_str().unwrap_or("");
                if !issued.contains(content) {
                    return Err(invalid(format!(
                        "input[{i}]: The encrypted content of the compaction item could not be verified."
                    )));
                }
            }
            "compaction_trigger" => {
                if i + 1 != items.len() {
                    return Err(invalid(
                        "input: a compaction_trigger item must be the final input item.",
                    ));
                }
                trigger = true;
            }
            _ => {}
        }
    }
    if trigger {
        return Ok(Answer::Compaction);
    }
    let tool = match shared.task {
        Task::Echo | Task::FailingCommands | Task::Logs { .. } => "exec_command",
        Task::WriteFiles(_) => "apply_patch",
    };
    // The tools offered, and those a client-executed tool search loaded since; a namespace's
    // tools by their own names, with the namespace a call names.
    let loaded: Vec<&Value> = items
        .iter()
        .filter(|i| i["type"] == "tool_search_output")
        .flat_map(|i| i["tools"].as_array().into_iter().flatten())
        .collect();
    let offered: Vec<&Value> = body["tools"].as_array().into_iter().flatten().collect();
    let mut namespaced: Vec<(Option<&str>, &str)> = Vec::new();
    for tool in offered.iter().chain(&loaded) {
        match tool["type"].as_str() {
            Some("namespace") => namespaced.extend(
                tool["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| Some((tool["name"].as_str(), t["name"].as_str()?))),
            ),
            _ => namespaced.extend(tool["name"].as_str().map(|name| (None, name))),
        }
    }
    let tools: Vec<&str> = namespaced.iter().map(|(_, name)| *name).collect();
    let searched = items.iter().any(|i| i["type"] == "tool_search_call");
    let can_search = offered.iter().any(|t| t["type"] == "tool_search");
    let calls: Vec<(String, String)> = items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| {
            let name = i["name"].as_str().unwrap_or("").to_string();
            (name, i["arguments"].as_str().unwrap_or("").to_string())
        })
        .collect();
    let first_call = shared.first_call.lock().unwrap().clone();
    let first_output = first_call.and_then(|id| {
        items
            .iter()
            .find(|i| i["type"] == "function_call_output" && i["call_id"] == id.as_str())
            .map(|i| result_text(&i["output"]))
    });
    let text = body["input"].to_string();
    let first_output = first_output.as_deref();
    if let Some(mut answer) = recall(shared, done, &tools, &calls, first_output, &text) {
        if let Answer::Recall {
            tool, namespace, ..
        } = &mut answer
        {
            *namespace = namespaced
                .iter()
                .find(|(_, name)| name == tool)
                .and_then(|(ns, _)| ns.map(str::to_string));
        }
        return Ok(answer);
    }
    // A recall is due but its tool is deferred: search for it first.
    if can_search
        && !searched
        && recall(shared, done, &["recall"], &calls, first_output, &text).is_some()
    {
        return Ok(Answer::ToolSearch);
    }
    Ok(next(shared, done, tools.contains(&tool)))
}

fn issue(shared: &Shared, what: String) -> String {
    shared.issued.lock().unwrap().insert(what.clone());
    what
}

fn error(anthropic: bool, status: u16, kind: &str, message: &str) -> Response {
    let body = if anthropic {
        json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn json_answer(body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn sse(events: Vec<String>) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(futures::stream::iter(
            events
                .into_iter()
                .map(|e| Ok::<_, std::convert::Infallible>(Bytes::from(e))),
        )))
        .unwrap()
}

fn anthropic_answer(shared: &Shared, request: &Value, answer: &Answer, n: u64) -> Response {
    let model = request["model"].as_str().unwrap_or("claude-test");
    let input_tokens = request.to_string().len() / 4;
    let mut content = Vec::new();
    let stop = match answer {
        Answer::Step(step) => {
            let signature = issue(shared, format!("EsYDCkYIBxgCKkD{n:08}step{step}sig=="));
            content.push(json!({"type": "thinking", "thinking": "", "signature": signature}));
            let (name, input) = match &shared.task {
                Task::Echo | Task::FailingCommands | Task::Logs { .. } => (
                    "Bash",
                    json!({"command": shell_command(&shared.task, *step), "description": format!("Print step {step}")}),
                ),
                Task::WriteFiles(dir) => {
                    let (path, text) = step_file(dir, *step);
                    (
                        "Write",
                        json!({"file_path": path, "content": format!("{text}\n")}),
                    )
                }
            };
            if *step == 1 {
                *shared.first_call.lock().unwrap() = Some(format!("toolu_{n:08}"));
            }
            content.push(
                json!({"type": "tool_use", "id": format!("toolu_{n:08}"), "name": name,
                "input": input}),
            );
            "tool_use"
        }
        Answer::Recall { tool, page, .. } => {
            let signature = issue(shared, format!("EsYDCkYIBxgCKkD{n:08}recall=="));
            content.push(json!({"type": "thinking", "thinking": "", "signature": signature}));
            content.push(
                json!({"type": "tool_use", "id": format!("toolu_{n:08}"), "name": tool,
                "input": {"page": page}}),
            );
            "tool_use"
        }
        Answer::Done | Answer::Compaction | Answer::ToolSearch => {
            content.push(json!({"type": "text", "text": final_text(shared.steps)}));
            "end_turn"
        }
    };
    let id = format!("msg_{n:08}");
    if request["stream"] != json!(true) {
        return json_answer(
            &json!({"id": id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 20}}),
        );
    }
    let event = |data: Value| {
        format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap_or("")
        )
    };
    let mut events = vec![event(
        json!({"type": "message_start", "message": {"id": id, "type": "message",
        "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
    )];
    for (index, block) in content.iter().enumerate() {
        let (start, delta) = match block["type"].as_str() {
            Some("thinking") => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                json!({"type": "signature_delta", "signature": block["signature"]}),
            ),
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
            ),
            _ => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            ),
        };
        events.push(event(
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        events.push(event(
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        events.push(event(json!({"type": "content_block_stop", "index": index})));
    }
    events.push(event(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 20}}),
    ));
    events.push(event(json!({"type": "message_stop"})));
    sse(events)
}

fn responses_usage(request: &Value) -> Value {
    let input = request.to_string().len() / 4;
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + 20})
}

fn compaction_item(shared: &Shared, n: u64) -> Value {
    let content = issue(shared, format!("gAAAAB-compaction-{n:08}"));
    json!({"type": "compaction", "id": format!("cmp_{n:08}"), "encrypted_content": content})
}

fn responses_answer(shared: &Shared, request: &Value, answer: &Answer, n: u64) -> Response {
    let output = match answer {
        Answer::Step(step) => {
            let content = issue(shared, format!("gAAAAB-reasoning-{n:08}-step{step}"));
            if *step == 1 {
                *shared.first_call.lock().unwrap() = Some(format!("call_{n:08}"));
            }
            vec![
                json!({"type": "reasoning", "id": format!("rs_{n:08}"), "summary": [], "encrypted_content": content}),
                match &shared.task {
                    Task::Echo | Task::FailingCommands | Task::Logs { .. } => {
                        json!({"type": "function_call",
                        "id": format!("fc_{n:08}"), "status": "completed", "call_id": format!("call_{n:08}"),
                        "name": "exec_command",
                        "arguments": json!({"cmd": shell_command(&shared.task, *step)}).to_string()})
                    }
                    Task::WriteFiles(dir) => {
                        let (path, text) = step_file(dir, *step);
                        json!({"type": "custom_tool_call", "id": format!("ctc_{n:08}"),
                            "status": "completed", "call_id": format!("call_{n:08}"), "name": "apply_patch",
                            "input": format!("*** Begin Patch\n*** Add File: {path}\n+{text}\n*** End Patch\n")})
                    }
                },
            ]
        }
        Answer::Recall {
            tool,
            namespace,
            page,
        } => {
            let content = issue(shared, format!("gAAAAB-reasoning-{n:08}-recall"));
            let mut call = json!({"type": "function_call", "id": format!("fc_{n:08}"),
                "status": "completed", "call_id": format!("call_{n:08}"), "name": tool,
                "arguments": json!({"page": page}).to_string()});
            if let Some(namespace) = namespace {
                call["namespace"] = json!(namespace);
            }
            vec![
                json!({"type": "reasoning", "id": format!("rs_{n:08}"), "summary": [], "encrypted_content": content}),
                call,
            ]
        }
        Answer::Done => vec![
            json!({"type": "message", "id": format!("msg_{n:08}"), "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": final_text(shared.steps), "annotations": []}]}),
        ],
        Answer::Compaction => vec![compaction_item(shared, n)],
        Answer::ToolSearch => {
            let content = issue(shared, format!("gAAAAB-reasoning-{n:08}-search"));
            vec![
                json!({"type": "reasoning", "id": format!("rs_{n:08}"), "summary": [], "encrypted_content": content}),
                json!({"type": "tool_search_call", "id": format!("tsc_{n:08}"), "call_id": format!("call_{n:08}"),
                    "execution": "client", "arguments": {"query": "recall archived page", "limit": 3},
                    "status": "completed"}),
            ]
        }
    };
    let response = json!({"id": format!("resp_{n:08}"), "object": "response", "created_at": 1_795_000_000u64,
        "status": "completed", "model": request["model"], "output": output, "usage": responses_usage(request)});
    if request["stream"] != json!(true) {
        return json_answer(&response);
    }
    let mut event = crate::mock_upstream::sequenced_events("");
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let mut events = vec![
        event(json!({"type": "response.created", "response": started})),
        event(json!({"type": "response.in_progress", "response": started})),
    ];
    for (index, item) in response["output"].as_array().unwrap().iter().enumerate() {
        events.push(event(
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        ));
        events.push(event(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
    }
    events.push(event(
        json!({"type": "response.completed", "response": response}),
    ));
    sse(events)
}

/// `/v1/responses/compact`: the user messages kept, then one `compaction` item (OpenAI's
/// `CompactResource`).
fn compact_answer(shared: &Shared, request: &Value, _answer: &Answer, n: u64) -> Response {
    let mut output = crate::mock_upstream::user_messages(request);
    output.push(compaction_item(shared, n));
    json_answer(
        &json!({"id": format!("resp_{n:08}"), "object": "response.compaction", "output": output,
        "created_at": 1_795_000_000u64, "usage": responses_usage(request)}),
    )
}
