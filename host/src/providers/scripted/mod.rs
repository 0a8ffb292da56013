//! The scripted provider: answers from a script, records every request it gets, and can inject
//! errors and delays. For tests and benchmarks.
//!
//! ## Script format (JSON)
//!
//! ```json
//! {
//!   "default": {"text": "summary"},
//!   "responses": [
//!     {"match": "substring of the prompt", "text": "answer", "delay_ms": 200},
//!     {"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 1000}},
//!     {"text": "garbage { not json", "usage": {"input_tokens": 10, "output_tokens": 3}},
//!     {"structured": {"facts": ["a", "b"]}},
//!     {"echo": true, "stop_reason": "max_tokens"}
//!   ],
//!   "mode": "sequence",
//!   "delay_ms": 0,
//!   "record_to": "requests.jsonl",
//!   "name": "scripted"
//! }
//! ```
//!
//! Top level (every field optional; unknown fields are errors):
//!
//! - `mode`: `"sequence"` (default): the n-th request gets `responses[n-1]`; after the end,
//!   `default`, or an error (kind `other`) when there is no default. In this mode a response's
//!   `match` is an *expectation*: a request whose prompt does not contain it fails with kind
//!   `invalid_request`, so a test learns that the requests came in another order (prompt or system text, as below).
//!   `"match"`: each request gets the first response whose `match` occurs in its prompt or its
//!   system text (a response without `match` matches every request), else `default`, else an
//!   error (kind `other`).
//! - `default`: the response when `responses` has none for a request.
//! - `delay_ms`: the delay of responses that do not set their own (default 0).
//! - `record_to`: append every request, as one JSON line (an `LlmRequest`), to this file, so that
//!   a test in another process can read what was asked. Relative to the script file's folder.
//! - `name`: the provider name and the responses' `model` (default `scripted`).
//!
//! A response has exactly one of:
//!
//! - `text`: the answer. `{n}` (the request number, 1-based), `{prompt_chars}` and `{label}` in
//!   it are replaced; other braces are left alone.
//! - `structured`: a JSON value, returned as `structured_json` and (serialized) as `text`; a
//!   `text` next to it replaces the latter.
//! - `echo: true`: the answer is the first 200 characters of the request's material (its
//!   `<content>` section, see [`super::content_section`], trimmed).
//! - `error`: `{"kind": <snake_case ProviderErrorKind>, "message": "...", "retry_after_ms": 1000}`
//!   (message and retry_after_ms optional): the call fails with that [`ProviderError`].
//!
//! and optionally `match` (above), `delay_ms` (awaited with `tokio::time::sleep` before the
//! answer or error, so thousands of delayed requests wait concurrently), `usage`
//! (`input_tokens`, `output_tokens`, `cache_read_tokens`, `cache_write_tokens`; input and output
//! default to an estimate of ⌈chars/4⌉ of system + prompt and of the answer, cache to 0) and
//! `stop_reason` (default `end_turn`).
//!
//! A request is numbered, recorded and given its response when [`Provider::complete`] is
//! *called* (not when its future is first polled), so "arrival order" is call order.
//! Delays use tokio's timer, so a delayed response must be awaited inside a tokio runtime;
//! without delays any executor works.
//!
//! In Rust, [`ScriptedProvider::always`], [`ScriptedProvider::sequence`],
//! [`ScriptedProvider::matching`] and [`ScriptedProvider::failing`] build providers without a
//! file; those builders do not validate, and a response with several answers uses the first of
//! `error`, `echo`, `structured`/`text`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Usage};

use super::{content_section, estimate_tokens, Provider, ProviderError, ProviderErrorKind};

/// The default provider name and `model`.
pub const SCRIPTED_NAME: &str = "scripted";

/// Characters of the material an `echo` response answers with.
pub const ECHO_CHARS: usize = 200;

/// How a script assigns responses to requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScriptMode {
    /// The n-th request gets the n-th response, then `default`.
    #[default]
    Sequence,
    /// The first response whose `match` occurs in the request, else `default`.
    Match,
}

/// A whole script (see the module docs for the JSON format).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<ScriptedResponse>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub responses: Vec<ScriptedResponse>,
    #[serde(default)]
    pub mode: ScriptMode,
    /// Delay of the responses that set none, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Append each request as a JSON line to this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_to: Option<PathBuf>,
    /// Provider name and response `model` (default `scripted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One scripted answer (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedResponse {
    /// `match` in JSON: a substring of the prompt (or system text) this response is for.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptedError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptedUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

/// An injected failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    pub kind: ProviderErrorKind,
    #[serde(default = "default_error_message")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

fn default_error_message() -> String {
    "scripted error".to_string()
}

/// Usage to report; absent input/output fields are estimated, absent cache fields are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl ScriptedResponse {
    /// Answers `text`.
    pub fn text(text: impl Into<String>) -> Self {
        ScriptedResponse {
            text: Some(text.into()),
            ..Default::default()
        }
    }

    /// Answers `value` as structured output (and as text).
    pub fn structured(value: serde_json::Value) -> Self {
        ScriptedResponse {
            structured: Some(value),
            ..Default::default()
        }
    }

    /// Answers the first 200 characters of the request's material.
    pub fn echo() -> Self {
        ScriptedResponse {
            echo: true,
            ..Default::default()
        }
    }

    /// Fails with `kind` and `message`.
    pub fn error(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        ScriptedResponse {
            error: Some(ScriptedError {
                kind,
                message: message.into(),
                retry_after_ms: None,
            }),
            ..Default::default()
        }
    }

    /// Sets the `retry_after` of an error response (no effect on other responses).
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        if let Some(e) = &mut self.error {
            e.retry_after_ms = Some(duration_ms(retry_after));
        }
        self
    }

    /// Sets `match`.
    pub fn matching(mut self, substring: impl Into<String>) -> Self {
        self.matches = Some(substring.into());
        self
    }

    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay_ms = Some(duration_ms(delay));
        self
    }

    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some(ScriptedUsage {
            input_tokens: Some(input_tokens),
            output_tokens: Some(output_tokens),
            ..Default::default()
        });
        self
    }

    pub fn with_stop_reason(mut self, stop_reason: impl Into<String>) -> Self {
        self.stop_reason = Some(stop_reason.into());
        self
    }

    /// Checks that the response has exactly one kind of answer.
    fn validate(&self) -> Result<(), String> {
        let answers = [
            ("text", self.text.is_some()),
            ("structured", self.structured.is_some()),
            ("echo", self.echo),
            ("error", self.error.is_some()),
        ];
        let set: Vec<&str> = answers.iter().filter(|a| a.1).map(|a| a.0).collect();
        match set.as_slice() {
            [] => Err("needs one of `text`, `structured`, `echo`, `error`".to_string()),
            [_] | ["text", "structured"] => Ok(()),
            many => Err(format!(
                "has {} at once; a response is either an answer or an error",
                many.iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A script that could not be loaded: names the file and, for JSON errors, the line, column and
/// field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scripted provider script{}: {message}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
pub struct ScriptError {
    /// The script file, when the script came from one.
    pub path: Option<PathBuf>,
    /// What is wrong, with the line, column and field when known.
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The field path, e.g. `responses[1].error.kind`.
    pub field: Option<String>,
}

impl ScriptError {
    fn new(path: Option<&Path>, message: impl Into<String>) -> Self {
        ScriptError {
            path: path.map(Path::to_path_buf),
            message: message.into(),
            line: None,
            column: None,
            field: None,
        }
    }
}

struct State {
    /// Requests so far (the next request's number is `count + 1`).
    count: u64,
    requests: Vec<LlmRequest>,
    /// Whether `requests` keeps copies (off for load tests, where it would hold every prompt).
    keep_requests: bool,
    record: Option<(PathBuf, File)>,
}

/// The scripted provider (see the module docs).
pub struct ScriptedProvider {
    name: String,
    script: Script,
    state: Mutex<State>,
}

impl std::fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("name", &self.name)
            .field("script", &self.script)
            .field("requests", &self.request_count())
            .finish()
    }
}

impl ScriptedProvider {
    /// Loads a JSON script. `record_to` is resolved against the script's folder and opened.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = crate::input_file::read_to_string(path, crate::input_file::Limit::SETTINGS)
            .map_err(|e| ScriptError::new(Some(path), format!("cannot read: {e}")))?;
        let mut script = parse_script(&text).map_err(|mut e| {
            e.path = Some(path.to_path_buf());
            e
        })?;
        if let Some(record) = &script.record_to {
            if record.is_relative() {
                let base = path.parent().unwrap_or_else(|| Path::new(""));
                script.record_to = Some(base.join(record));
            }
        }
        Self::build(script, Some(path))
    }

    /// A provider for a script built in Rust; validated like a file (`record_to` relative to the
    /// working directory).
    pub fn from_script(script: Script) -> Result<Self, ScriptError> {
        Self::build(script, None)
    }

    fn build(script: Script, path: Option<&Path>) -> Result<Self, ScriptError> {
        let responses = script
            .default
            .iter()
            .map(|r| ("default".to_string(), r))
            .chain(
                script
                    .responses
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (format!("responses[{i}]"), r)),
            );
        for (field, response) in responses {
            if let Err(message) = response.validate() {
                let mut e = ScriptError::new(path, format!("{field}: {message}"));
                e.field = Some(field);
                return Err(e);
            }
        }
        let record = match &script.record_to {
            Some(record) => Some((
                record.clone(),
                open_record(record).map_err(|m| ScriptError::new(path, m))?,
            )),
            None => None,
        };
        Ok(ScriptedProvider {
            name: script
                .name
                .clone()
                .unwrap_or_else(|| SCRIPTED_NAME.to_string()),
            script,
            state: Mutex::new(State {
                count: 0,
                requests: Vec::new(),
                keep_requests: true,
                record,
            }),
        })
    }

    fn unchecked(script: Script) -> Self {
        ScriptedProvider {
            name: script
                .name
                .clone()
                .unwrap_or_else(|| SCRIPTED_NAME.to_string()),
            script,
            state: Mutex::new(State {
                count: 0,
                requests: Vec::new(),
                keep_requests: true,
                record: None,
            }),
        }
    }

    /// Answers every request with `text`.
    pub fn always(text: impl Into<String>) -> Self {
        Self::unchecked(Script {
            default: Some(ScriptedResponse::text(text)),
            ..Default::default()
        })
    }

    /// Fails every request with `kind` and `message`.
    pub fn failing(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self::unchecked(Script {
            default: Some(ScriptedResponse::error(kind, message)),
            ..Default::default()
        })
    }

    /// Answers the n-th request with the n-th response, then fails (add [`Self::with_default`]).
    pub fn sequence(responses: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        Self::unchecked(Script {
            responses: responses.into_iter().collect(),
            mode: ScriptMode::Sequence,
            ..Default::default()
        })
    }

    /// Answers each request with the first response whose `match` it contains.
    pub fn matching(responses: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        Self::unchecked(Script {
            responses: responses.into_iter().collect(),
            mode: ScriptMode::Match,
            ..Default::default()
        })
    }

    /// Sets the response for requests the script has nothing else for.
    pub fn with_default(mut self, response: ScriptedResponse) -> Self {
        self.script.default = Some(response);
        self
    }

    /// Delays every response that sets no delay of its own.
    /// Stops keeping copies of requests in memory ([`Self::requests`] stays empty; the count
    /// and `record_to` still work): for load tests, where they would hold every prompt.
    pub fn without_request_log(self) -> Self {
        self.lock().keep_requests = false;
        self
    }

    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.script.delay_ms = Some(duration_ms(delay));
        self
    }

    /// Sets the provider name (and the responses' `model`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.script.name = Some(name.clone());
        self.name = name;
        self
    }

    /// Also appends every request, as a JSON line, to `path` (created if missing).
    pub fn with_record_path(mut self, path: impl Into<PathBuf>) -> Result<Self, ScriptError> {
        let path = path.into();
        let file = open_record(&path).map_err(|m| ScriptError::new(None, m))?;
        self.script.record_to = Some(path.clone());
        self.lock().record = Some((path, file));
        Ok(self)
    }

    /// The script this provider answers from.
    pub fn script(&self) -> &Script {
        &self.script
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.lock().requests.clone()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters to a test provider; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn error(&self, kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(self.name.clone(), kind, message)
    }

    /// Numbers and records `request`, then picks its response.
    fn arrive(&self, request: &LlmRequest) -> Result<(u64, &ScriptedResponse), ProviderError> {
        let n = {
            let mut state = self.lock();
            state.count += 1;
            let n = state.count;
            if state.keep_requests {
                state.requests.push(request.clone());
            }
            if let Some((path, file)) = &mut state.record {
                let mut line = serde_json::to_string(request).map_err(|e| {
                    self.error(
                        ProviderErrorKind::Other,
                        format!("cannot record request: {e}"),
                    )
                })?;
                line.push('\n');
                file.write_all(line.as_bytes()).map_err(|e| {
                    self.error(
                        ProviderErrorKind::Other,
                        format!("cannot record request to {}: {e}", path.display()),
                    )
                })?;
            }
            n
        };
        let script = &self.script;
        match script.mode {
            ScriptMode::Sequence => match script.responses.get((n - 1) as usize) {
                Some(response) => {
                    if let Some(expected) = &response.matches {
                        if !mentions(request, expected) {
                            return Err(self.error(
                                ProviderErrorKind::InvalidRequest,
                                format!(
                                    "request {n} was expected to contain {expected:?} (script responses[{}])",
                                    n - 1
                                ),
                            ));
                        }
                    }
                    Ok((n, response))
                }
                None => script.default.as_ref().map(|d| (n, d)).ok_or_else(|| {
                    self.error(
                        ProviderErrorKind::Other,
                        format!(
                            "script exhausted: request {n}, but the script has {} responses and no default",
                            script.responses.len()
                        ),
                    )
                }),
            },
            ScriptMode::Match => script
                .responses
                .iter()
                .find(|r| match &r.matches {
                    None => true,
                    Some(m) => mentions(request, m),
                })
                .or(script.default.as_ref())
                .map(|r| (n, r))
                .ok_or_else(|| {
                    self.error(
                        ProviderErrorKind::Other,
                        format!("no scripted response matches request {n} and the script has no default"),
                    )
                }),
        }
    }

    fn respond(
        &self,
        n: u64,
        request: &LlmRequest,
        response: &ScriptedResponse,
    ) -> Result<LlmResponse, ProviderError> {
        if let Some(e) = &response.error {
            let mut err = self.error(e.kind, e.message.clone());
            err.retry_after = e.retry_after_ms.map(Duration::from_millis);
            return Err(err);
        }
        let mut structured_json = FfiOption::RNone;
        let text = if response.echo {
            let material = content_section(request.prompt.as_str()).trim();
            match material.char_indices().nth(ECHO_CHARS) {
                Some((i, _)) => material[..i].to_string(),
                None => material.to_string(),
            }
        } else {
            let structured = response.structured.as_ref().map(|v| v.to_string());
            if let Some(s) = &structured {
                structured_json = FfiOption::RSome(s.clone().into());
            }
            match (&response.text, structured) {
                (Some(t), _) => fill_placeholders(t, n, request),
                (None, Some(s)) => s,
                (None, None) => String::new(),
            }
        };
        let usage = response.usage.unwrap_or_default();
        let usage = Usage {
            input_tokens: usage.input_tokens.unwrap_or_else(|| {
                estimate_tokens(request.system.as_str()) + estimate_tokens(request.prompt.as_str())
            }),
            output_tokens: usage
                .output_tokens
                .unwrap_or_else(|| estimate_tokens(&text)),
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        };
        Ok(LlmResponse {
            text: text.into(),
            structured_json,
            usage,
            model: self.name.as_str().into(),
            stop_reason: response.stop_reason.as_deref().unwrap_or("end_turn").into(),
        })
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        // Numbered and recorded now, at the call, so arrival order is call order.
        let arrived = self.arrive(request);
        Box::pin(async move {
            let (n, response) = arrived?;
            let delay = response.delay_ms.or(self.script.delay_ms).unwrap_or(0);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            self.respond(n, request, response)
        })
    }
}

/// Whether the request's prompt or system text contains `needle`.
fn mentions(request: &LlmRequest, needle: &str) -> bool {
    request.prompt.as_str().contains(needle) || request.system.as_str().contains(needle)
}

fn open_record(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open record_to file {}: {e}", path.display()))
}

/// Parses a script, naming the line, column and field of the first error.
fn parse_script(text: &str) -> Result<Script, ScriptError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let script: Script = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = (inner.line(), inner.column());
        let full = inner.to_string();
        let bare = full
            .strip_suffix(&format!(" at line {line} column {column}"))
            .unwrap_or(&full);
        let at = if field.is_empty() || field == "." {
            String::new()
        } else {
            format!(" (field `{field}`)")
        };
        ScriptError {
            path: None,
            message: format!("line {line}, column {column}{at}: {bare}"),
            line: Some(line),
            column: Some(column),
            field: (!field.is_empty() && field != ".").then_some(field),
        }
    })?;
    de.end().map_err(|e| ScriptError {
        path: None,
        message: format!(
            "line {}, column {}: trailing characters after the script",
            e.line(),
            e.column()
        ),
        line: Some(e.line()),
        column: Some(e.column()),
        field: None,
    })?;
    Ok(script)
}

/// Replaces `{n}`, `{prompt_chars}` and `{label}`; leaves every other brace alone.
fn fill_placeholders(text: &str, n: u64, request: &LlmRequest) -> String {
    if !text.contains('{') {
        return text.to_string();
    }
    let mut out = text.replace("{n}", &n.to_string());
    if out.contains("{prompt_chars}") {
        out = out.replace(
            "{prompt_chars}",
            &request.prompt.as_str().chars().count().to_string(),
        );
    }
    if out.contains("{label}") {
        out = out.replace("{label}", request.label.as_str());
    }
    out
}

#[cfg(test)]
mod tests;
