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
mod tests {
    use super::*;
    use crate::providers::wrap_content;
    use std::sync::Arc;
    use std::time::Instant;

    fn req(prompt: &str) -> LlmRequest {
        LlmRequest::new("sys", prompt, 100)
    }

    fn temp_dir(name: &str) -> PathBuf {
        crate::scratch::dir(&format!("scripted-{name}"))
    }

    const EXAMPLE: &str = r#"{ "default": {"text": "summary"},
  "responses": [
    {"match": "substring of the prompt", "text": "answer", "delay_ms": 200},
    {"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 1000}},
    {"text": "garbage { not json", "usage": {"input_tokens": 10, "output_tokens": 3}}
  ],
  "mode": "sequence" }"#;

    #[test]
    fn parses_the_documented_example() {
        let script = parse_script(EXAMPLE).unwrap();
        assert_eq!(script.mode, ScriptMode::Sequence);
        assert_eq!(script.responses.len(), 3);
        assert_eq!(script.responses[0].delay_ms, Some(200));
        let e = script.responses[1].error.as_ref().unwrap();
        assert_eq!(e.kind, ProviderErrorKind::RateLimited);
        assert_eq!(e.retry_after_ms, Some(1000));
        // The module docs' larger example parses too.
        let doc = r#"{
          "default": {"text": "summary"},
          "responses": [
            {"match": "substring of the prompt", "text": "answer", "delay_ms": 200},
            {"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 1000}},
            {"text": "garbage { not json", "usage": {"input_tokens": 10, "output_tokens": 3}},
            {"structured": {"facts": ["a", "b"]}},
            {"echo": true, "stop_reason": "max_tokens"}
          ],
          "mode": "sequence", "delay_ms": 0, "record_to": "requests.jsonl", "name": "scripted"
        }"#;
        let script = parse_script(doc).unwrap();
        assert_eq!(script.responses.len(), 5);
        // Round trip.
        let back: Script = serde_json::from_str(&serde_json::to_string(&script).unwrap()).unwrap();
        assert_eq!(back, script);
    }

    #[tokio::test]
    async fn sequence_mode_then_default() {
        let mut script = parse_script(EXAMPLE).unwrap();
        script.responses[0].delay_ms = None;
        let p = ScriptedProvider::from_script(script).unwrap();
        let r = p
            .complete(&req("a substring of the prompt here"))
            .await
            .unwrap();
        assert_eq!(r.text.as_str(), "answer");
        assert_eq!(r.model.as_str(), "scripted");
        assert_eq!(r.stop_reason.as_str(), "end_turn");
        let e = p.complete(&req("two")).await.unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::RateLimited);
        assert_eq!(e.retry_after, Some(Duration::from_millis(1000)));
        assert_eq!(e.message, "slow down");
        assert_eq!(e.provider, "scripted");
        assert!(e.is_retryable());
        let r = p.complete(&req("three")).await.unwrap();
        assert_eq!(r.text.as_str(), "garbage { not json");
        assert_eq!(r.usage.input_tokens, 10);
        assert_eq!(r.usage.output_tokens, 3);
        for _ in 0..3 {
            assert_eq!(
                p.complete(&req("more")).await.unwrap().text.as_str(),
                "summary"
            );
        }
        assert_eq!(p.request_count(), 6);
    }

    #[tokio::test]
    async fn sequence_without_default_errors_when_exhausted() {
        let p = ScriptedProvider::sequence([ScriptedResponse::text("one")]);
        assert_eq!(p.complete(&req("x")).await.unwrap().text.as_str(), "one");
        let e = p.complete(&req("x")).await.unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Other);
        assert!(e.message.contains("exhausted"), "{e}");
    }

    #[tokio::test]
    async fn sequence_match_is_an_expectation() {
        let p = ScriptedProvider::sequence([ScriptedResponse::text("ok").matching("group 1")]);
        let e = p.complete(&req("group 2")).await.unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::InvalidRequest);
        assert!(e.message.contains("group 1"), "{e}");
    }

    #[tokio::test]
    async fn match_mode_and_default() {
        let p = ScriptedProvider::matching([
            ScriptedResponse::text("apples!").matching("apple"),
            ScriptedResponse::text("pears!").matching("pear"),
            ScriptedResponse::error(ProviderErrorKind::Overloaded, "busy").matching("SYSTEM-X"),
        ]);
        assert_eq!(
            p.complete(&req("an apple and a pear"))
                .await
                .unwrap()
                .text
                .as_str(),
            "apples!"
        );
        assert_eq!(
            p.complete(&req("a pear")).await.unwrap().text.as_str(),
            "pears!"
        );
        let e = p
            .complete(&LlmRequest::new("SYSTEM-X", "plum", 10))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Overloaded);
        let e = p.complete(&req("plum")).await.unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Other);
        let p = p.with_default(ScriptedResponse::text("fallback {n}"));
        assert_eq!(
            p.complete(&req("plum")).await.unwrap().text.as_str(),
            "fallback 5"
        );
        // A response without `match` matches everything.
        let p = ScriptedProvider::matching([
            ScriptedResponse::text("specific").matching("zzz"),
            ScriptedResponse::text("catch-all"),
        ]);
        assert_eq!(
            p.complete(&req("abc")).await.unwrap().text.as_str(),
            "catch-all"
        );
    }

    #[tokio::test]
    async fn structured_echo_placeholders_and_usage() {
        let p = ScriptedProvider::sequence([
            ScriptedResponse::structured(serde_json::json!({"facts": ["a"]})),
            ScriptedResponse::echo(),
            ScriptedResponse::text("n={n} chars={prompt_chars} label={label} {other}")
                .with_stop_reason("max_tokens"),
        ]);
        let r = p.complete(&req("x")).await.unwrap();
        assert_eq!(r.text.as_str(), r#"{"facts":["a"]}"#);
        assert_eq!(
            r.structured_json,
            FfiOption::RSome(r#"{"facts":["a"]}"#.into())
        );

        let material = "é".repeat(300);
        let prompt = format!("Summarize this.\n{}", wrap_content(&material));
        let r = p.complete(&req(&prompt)).await.unwrap();
        assert_eq!(r.text.as_str(), "é".repeat(200));
        assert_eq!(r.usage.output_tokens, 50);
        assert_eq!(r.usage.input_tokens, 1 + estimate_tokens(&prompt));

        let r = p.complete(&req("abcdef").with_label("g1")).await.unwrap();
        assert_eq!(r.text.as_str(), "n=3 chars=6 label=g1 {other}");
        assert_eq!(r.stop_reason.as_str(), "max_tokens");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delay_is_honoured() {
        let p = ScriptedProvider::always("slow").with_delay(Duration::from_millis(150));
        let start = Instant::now();
        p.complete(&req("x")).await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(150));
        // A response's own delay wins over the script's.
        let p = ScriptedProvider::sequence([
            ScriptedResponse::text("fast").with_delay(Duration::from_millis(0))
        ])
        .with_delay(Duration::from_secs(10));
        let start = Instant::now();
        p.complete(&req("x")).await.unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        // Errors are delayed too.
        let p = ScriptedProvider::failing(ProviderErrorKind::Timeout, "late")
            .with_delay(Duration::from_millis(100));
        let start = Instant::now();
        let e = p.complete(&req("x")).await.unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Timeout);
        assert!(start.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn many_concurrent_delayed_requests() {
        let p = Arc::new(ScriptedProvider::always("done").with_delay(Duration::from_millis(200)));
        let requests: Vec<LlmRequest> = (0..10_000).map(|i| req(&format!("request {i}"))).collect();
        let start = Instant::now();
        let results = futures::future::join_all(requests.iter().map(|r| p.complete(r))).await;
        let elapsed = start.elapsed();
        assert!(results
            .iter()
            .all(|r| r.as_ref().unwrap().text.as_str() == "done"));
        assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
        // 1,000 through spawned tasks, across threads.
        let start = Instant::now();
        let handles: Vec<_> = (0..1000)
            .map(|i| {
                let p = p.clone();
                tokio::spawn(async move { p.complete(&req(&format!("spawned {i}"))).await })
            })
            .collect();
        for h in handles {
            h.await.unwrap().unwrap();
        }
        let elapsed = start.elapsed();
        assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
        assert_eq!(p.request_count(), 11_000);
    }

    #[tokio::test]
    async fn records_in_memory_and_to_file() {
        let dir = temp_dir("record");
        let script_path = dir.join("script.json");
        std::fs::write(
            &script_path,
            r#"{"default": {"text": "ok"}, "record_to": "asked.jsonl"}"#,
        )
        .unwrap();
        let p = ScriptedProvider::from_file(&script_path).unwrap();
        let a = req("first").with_label("one");
        let mut b = req("second <content>x</content>");
        b.response_schema_json = FfiOption::RSome("{}".into());
        p.complete(&a).await.unwrap();
        // Recorded at the call, even before the future is awaited.
        let pending = p.complete(&b);
        assert_eq!(p.requests(), vec![a.clone(), b.clone()]);
        pending.await.unwrap();
        let lines: Vec<LlmRequest> = std::fs::read_to_string(dir.join("asked.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![a.clone(), b.clone()]);

        let path = dir.join("builder.jsonl");
        let p = ScriptedProvider::always("ok")
            .with_record_path(&path)
            .unwrap();
        p.complete(&a).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_script_file_names_file_line_and_field() {
        let dir = temp_dir("bad");
        let path = dir.join("bad.json");
        std::fs::write(
            &path,
            "{\n  \"responses\": [\n    {\"text\": \"a\"},\n    {\"error\": {\"kind\": \"rate_limit\"}}\n  ]\n}\n",
        )
        .unwrap();
        let e = ScriptedProvider::from_file(&path).unwrap_err();
        let shown = e.to_string();
        assert!(shown.contains("bad.json"), "{shown}");
        assert!(shown.contains("line 4"), "{shown}");
        assert!(shown.contains("responses[1].error.kind"), "{shown}");
        assert!(shown.contains("rate_limit"), "{shown}");
        assert_eq!(e.line, Some(4));
        assert_eq!(e.field.as_deref(), Some("responses[1].error.kind"));

        std::fs::write(&path, r#"{"responses": [{"txt": "a"}]}"#).unwrap();
        let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
        assert!(
            shown.contains("txt") && shown.contains("responses[0]"),
            "{shown}"
        );

        std::fs::write(
            &path,
            r#"{"responses": [{"text": "a", "error": {"kind": "server"}}]}"#,
        )
        .unwrap();
        let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
        assert!(
            shown.contains("bad.json") && shown.contains("responses[0]"),
            "{shown}"
        );

        std::fs::write(&path, r#"{"default": {"delay_ms": 5}}"#).unwrap();
        let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
        assert!(
            shown.contains("default") && shown.contains("needs one of"),
            "{shown}"
        );

        std::fs::write(&path, "{\"mode\": \"random\"}").unwrap();
        let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
        assert!(
            shown.contains("mode") && shown.contains("random"),
            "{shown}"
        );

        std::fs::write(&path, "{\"default\": {\"text\": \"a\"}} trailing").unwrap();
        assert!(ScriptedProvider::from_file(&path).is_err());

        let missing = dir.join("missing.json");
        let shown = ScriptedProvider::from_file(&missing)
            .unwrap_err()
            .to_string();
        assert!(
            shown.contains("missing.json") && shown.contains("cannot read"),
            "{shown}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sequence_numbers_follow_call_order_under_concurrency() {
        let p = ScriptedProvider::sequence((0..200).map(|i| {
            ScriptedResponse::text(format!("r{i}")).with_delay(Duration::from_millis(200 - i))
        }));
        let requests: Vec<LlmRequest> = (0..200).map(|i| req(&format!("q{i}"))).collect();
        let results = futures::future::join_all(requests.iter().map(|r| p.complete(r))).await;
        for (i, r) in results.into_iter().enumerate() {
            assert_eq!(r.unwrap().text.as_str(), format!("r{i}"));
        }
        let prompts: Vec<String> = p.requests().iter().map(|r| r.prompt.to_string()).collect();
        assert_eq!(
            prompts,
            (0..200).map(|i| format!("q{i}")).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn name_and_model() {
        let p = ScriptedProvider::always("x").with_name("anthropic/fake");
        assert_eq!(p.name(), "anthropic/fake");
        let r = p.complete(&req("y")).await.unwrap();
        assert_eq!(r.model.as_str(), "anthropic/fake");
        let e = ScriptedProvider::failing(ProviderErrorKind::QuotaExhausted, "no credit")
            .with_name("n")
            .complete(&req("y"))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "n: quota_exhausted: no credit");
        assert!(!e.is_retryable());
    }
}
