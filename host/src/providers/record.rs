//! Recording real answers and replaying them: `[provider] record = "answers.jsonl"` and
//! `kind = "replay"`.
//!
//! - [`Recording`] wraps any provider and appends one JSON line per successful answer to a
//!   file: the request's [`request_key`], the request itself and the answer.
//! - [`ReplayProvider`] answers from such a file, by key, and fails a request it has no answer
//!   for with a non-retryable `invalid_request` error that says what is missing. A test that
//!   replays answers recorded from a real model therefore notices a changed prompt as a
//!   missing answer instead of drifting silently.
//!
//! ## What the key covers
//!
//! [`request_key`] is the SHA-256 (hex) of, in order: the tag `tamp-recorded-answer-v1`, the
//! `system` text, the `prompt`, `max_output_tokens`, `temperature` (or its absence) and the
//! exact `response_schema_json` text (or its absence). Strings are length-prefixed, so no two
//! different requests share their bytes. The `label` is not keyed (it only names the call in
//! logs), nor is the provider or model: a recording says which model answered (`provider`,
//! and the answer's `model`), and replaying it stands in for that model whatever else the
//! chain file says.
//!
//! ## The file
//!
//! JSON Lines, one object per answer:
//!
//! ```json
//! {"key":"3f…","provider":"openai/qwen2.5-coder","request":{"label":"map 1/3","system":"…",
//!  "prompt":"…","max_output_tokens":1024,"temperature":null,"response_schema_json":null},
//!  "answer":{"text":"…","structured_json":null,"usage":{…},"model":"openai/…","stop_reason":"stop"}}
//! ```
//!
//! (one line in the file). When a request appears more than once, the last line wins, so
//! answers appended by a later recording replace earlier ones. Replay recomputes each line's
//! key from its `request` and refuses a line whose stored key differs (an edited request, or
//! a file from another key scheme).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Usage};

use super::{Provider, ProviderError, ProviderErrorKind};
use crate::digest::hash_answer_inputs;

/// The key of a request in a recording: SHA-256 hex over everything that changes the answer
/// (see the module docs for the exact list).
pub fn request_key(request: &LlmRequest) -> String {
    let mut h = Sha256::new();
    h.update(b"tamp-recorded-answer-v1");
    hash_answer_inputs(&mut h, request);
    hex::encode(h.finalize())
}

/// One line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedAnswer {
    /// [`request_key`] of `request`.
    pub key: String,
    /// The provider that answered ([`Provider::name`]), e.g. `openai/qwen2.5-coder`.
    pub provider: String,
    pub request: RecordedRequest,
    pub answer: RecordedResponse,
}

/// The request of a recorded answer, as the strategy made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedRequest {
    /// Not keyed; kept to tell the calls apart when reading the file.
    #[serde(default)]
    pub label: String,
    pub system: String,
    pub prompt: String,
    pub max_output_tokens: u32,
    pub temperature: Option<f32>,
    /// The schema's exact text (keyed as text, so it is kept as text).
    pub response_schema_json: Option<String>,
}

/// A recorded answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedResponse {
    pub text: String,
    pub structured_json: Option<String>,
    pub usage: Usage,
    pub model: String,
    pub stop_reason: String,
}

impl RecordedRequest {
    pub fn of(request: &LlmRequest) -> Self {
        RecordedRequest {
            label: request.label.to_string(),
            system: request.system.to_string(),
            prompt: request.prompt.to_string(),
            max_output_tokens: request.max_output_tokens,
            temperature: request.temperature.into_option(),
            response_schema_json: request
                .response_schema_json
                .as_ref()
                .into_option()
                .map(|s| s.to_string()),
        }
    }

    pub fn to_request(&self) -> LlmRequest {
        LlmRequest {
            system: self.system.as_str().into(),
            prompt: self.prompt.as_str().into(),
            max_output_tokens: self.max_output_tokens,
            temperature: self.temperature.into(),
            response_schema_json: self.response_schema_json.as_deref().map(Into::into).into(),
            label: self.label.as_str().into(),
        }
    }
}

impl RecordedResponse {
    pub fn of(response: &LlmResponse) -> Self {
        RecordedResponse {
            text: response.text.to_string(),
            structured_json: response
                .structured_json
                .as_ref()
                .into_option()
                .map(|s| s.to_string()),
            usage: response.usage,
            model: response.model.to_string(),
            stop_reason: response.stop_reason.to_string(),
        }
    }

    pub fn to_response(&self) -> LlmResponse {
        LlmResponse {
            text: self.text.as_str().into(),
            structured_json: match &self.structured_json {
                Some(s) => FfiOption::RSome(s.as_str().into()),
                None => FfiOption::RNone,
            },
            usage: self.usage,
            model: self.model.as_str().into(),
            stop_reason: self.stop_reason.as_str().into(),
        }
    }
}

/// Wraps a provider and appends every answer it gives to a JSON Lines file
/// (`[provider] record`). Failed calls are not recorded. Each answer is one `write` of one
/// line under a mutex, so concurrent calls never interleave their lines.
///
/// A request the file already answers (from earlier in this run, or from a run before) is
/// answered from it, not asked again: a model asked twice may answer twice differently, and a
/// replay has one answer per request, so a run that asks the same thing twice (`tamp eval`'s
/// one-shot and replay runs share their first map requests) replays as it was recorded. Two
/// identical requests in flight at once are both asked; the replay then gives the first
/// recorded answer to both.
///
/// Not [`cacheable`](Provider::cacheable): while recording, every request reaches the
/// provider (and so the file), never the summary cache, so the recording holds every request
/// of the run.
pub struct Recording<P> {
    inner: P,
    path: PathBuf,
    file: Mutex<std::fs::File>,
    /// What the file answers already.
    recorded: Mutex<HashMap<String, RecordedAnswer>>,
}

impl<P: Provider> Recording<P> {
    /// Opens `path` for appending (creating it, not its directory), reading the answers it
    /// holds already.
    pub fn open(inner: P, path: &Path) -> Result<Self, String> {
        let recorded =
            match crate::input_file::read_to_string(path, crate::input_file::Limit::RECORDING) {
                Ok(text) => ReplayProvider::parse(path, &text)?.answers,
                Err(e) if e.is_not_found() => HashMap::new(),
                Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
            };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {} for appending: {e}", path.display()))?;
        Ok(Recording {
            inner,
            path: path.to_path_buf(),
            file: Mutex::new(file),
            recorded: Mutex::new(recorded),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(
        &self,
        key: String,
        request: &LlmRequest,
        response: &LlmResponse,
    ) -> std::io::Result<()> {
        let line = RecordedAnswer {
            key,
            provider: self.inner.name().to_string(),
            request: RecordedRequest::of(request),
            answer: RecordedResponse::of(response),
        };
        let mut text = serde_json::to_string(&line).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(text.as_bytes())?;
        file.flush()?;
        drop(file);
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(line.key.clone())
            .or_insert(line);
        Ok(())
    }
}

impl<P: Provider> Provider for Recording<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cacheable(&self) -> bool {
        false
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(async move {
            // The key hashes the whole prompt: made once, for the lookup and the line.
            let key = request_key(request);
            let known = self
                .recorded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .map(|line| line.answer.to_response());
            if let Some(response) = known {
                return Ok(response);
            }
            let response = self.inner.complete(request).await?;
            // The answer was paid for: a recording that cannot be written is logged, and the
            // strategy still gets its answer (a replay of the file then names the request).
            if let Err(e) = self.append(key, request, &response) {
                tracing::error!(
                    provider = self.inner.name(),
                    label = %request.label,
                    "cannot record the answer to {}: {e}",
                    self.path.display()
                );
            }
            Ok(response)
        })
    }
}

/// Answers from a recording made with `[provider] record` (`kind = "replay"`,
/// `answers = "…"`). A request the file has no answer for fails with `invalid_request`
/// (not retried) naming its key, label and the start of its prompt.
///
/// Not [`cacheable`](Provider::cacheable): replaying costs nothing, and every request must be
/// checked against the file, so none is answered from the summary cache instead.
#[derive(Debug)]
pub struct ReplayProvider {
    path: PathBuf,
    answers: HashMap<String, RecordedAnswer>,
}

/// How much of a missing request's prompt an error quotes.
const PROMPT_QUOTE_CHARS: usize = 120;

impl ReplayProvider {
    /// Reads a recording. An unreadable file, or a line that is not a recorded answer (or
    /// whose key does not match its request), is an error naming the file and line.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = crate::input_file::read_to_string(path, crate::input_file::Limit::RECORDING)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(path, &text)
    }

    /// Parses recording text; `path` is for errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, String> {
        let mut answers = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = || format!("{}:{}", path.display(), i + 1);
            let answer: RecordedAnswer = serde_json::from_str(line)
                .map_err(|e| format!("{}: not a recorded answer: {e}", at()))?;
            let key = request_key(&answer.request.to_request());
            if key != answer.key {
                return Err(format!(
                    "{}: the key {} does not match its request (whose key is {key}): the line \
                     was edited or written by another version; re-record it",
                    at(),
                    answer.key
                ));
            }
            // The first answer to a request is the one a recording gave again (`Recording`).
            answers.entry(key).or_insert(answer);
        }
        Ok(ReplayProvider {
            path: path.to_path_buf(),
            answers,
        })
    }

    /// How many distinct requests the recording answers.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The recorded answer to `request`, if any.
    pub fn answer(&self, request: &LlmRequest) -> Option<&RecordedAnswer> {
        self.answers.get(&request_key(request))
    }

    fn missing(&self, request: &LlmRequest) -> ProviderError {
        let key = request_key(request);
        let mut prompt: String = request.prompt.chars().take(PROMPT_QUOTE_CHARS).collect();
        if request.prompt.chars().count() > PROMPT_QUOTE_CHARS {
            prompt.push('…');
        }
        let label = if request.label.is_empty() {
            String::new()
        } else {
            format!("label \"{}\", ", request.label)
        };
        ProviderError::new(
            self.name(),
            ProviderErrorKind::InvalidRequest,
            format!(
                "no recorded answer for this request (key {}, {label}prompt starts {prompt:?}) \
                 in {} ({} answer(s)): the request changed since it was recorded, or was never \
                 recorded; re-record with `record = ` on the real provider",
                &key[..16],
                self.path.display(),
                self.answers.len(),
            ),
        )
    }
}

impl Provider for ReplayProvider {
    fn name(&self) -> &str {
        "replay"
    }

    fn cacheable(&self) -> bool {
        false
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        let result = match self.answer(request) {
            Some(recorded) => Ok(recorded.answer.to_response()),
            None => Err(self.missing(request)),
        };
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ScriptedProvider, ScriptedResponse};
    use std::sync::Arc;

    fn scratch(tag: &str) -> PathBuf {
        crate::scratch::dir(&format!("record-{tag}")).join("answers.jsonl")
    }

    fn structured_request() -> LlmRequest {
        let mut r = LlmRequest::new("be brief", "summarize <content>\nabc\n</content>", 300)
            .with_label("map 1/2");
        r.temperature = FfiOption::RSome(0.25);
        r.response_schema_json = FfiOption::RSome(r#"{"type":"object"}"#.into());
        r
    }

    #[test]
    fn the_key_covers_what_changes_the_answer_and_not_the_label() {
        let r = structured_request();
        let key = request_key(&r);
        assert_eq!(key.len(), 64);
        assert_eq!(key, request_key(&r.clone().with_label("other")));
        let mut changed = Vec::new();
        let mut c = r.clone();
        c.system = "be briefer".into();
        changed.push(c);
        let mut c = r.clone();
        c.prompt = "summarize <content>\nabd\n</content>".into();
        changed.push(c);
        let mut c = r.clone();
        c.max_output_tokens = 301;
        changed.push(c);
        let mut c = r.clone();
        c.temperature = FfiOption::RNone;
        changed.push(c);
        let mut c = r.clone();
        c.response_schema_json = FfiOption::RSome(r#"{"type": "object"}"#.into());
        changed.push(c);
        let mut c = r.clone();
        c.response_schema_json = FfiOption::RNone;
        changed.push(c);
        // The same bytes split differently between system and prompt.
        let mut c = r.clone();
        c.system = "be brie".into();
        c.prompt = format!("f{}", r.prompt).into();
        changed.push(c);
        for c in changed {
            assert_ne!(request_key(&c), key, "{c:?}");
        }
    }

    #[tokio::test]
    async fn a_request_asked_again_is_answered_from_the_recording() {
        let path = scratch("asked-twice");
        // A model that answers the same request differently each time.
        let scripted = ScriptedProvider::sequence([
            ScriptedResponse::text("first"),
            ScriptedResponse::text("second"),
        ]);
        let recording = Recording::open(scripted, &path).unwrap();
        let request = LlmRequest::new("", "hello", 100);
        assert_eq!(
            recording.complete(&request).await.unwrap().text.as_str(),
            "first"
        );
        assert_eq!(
            recording.complete(&request).await.unwrap().text.as_str(),
            "first"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
        // Opened again, the file answers what it holds: the provider is not asked.
        let failing = ScriptedProvider::failing(ProviderErrorKind::Server, "not asked");
        let again = Recording::open(failing, &path).unwrap();
        assert_eq!(
            again.complete(&request).await.unwrap().text.as_str(),
            "first"
        );
        // A file written before this rule, with two answers to one request: the replay gives
        // the first, as a recording would have.
        let line = std::fs::read_to_string(&path).unwrap();
        let second = line.replace("\"first\"", "\"second\"");
        std::fs::write(&path, format!("{line}{second}")).unwrap();
        let replay = ReplayProvider::from_file(&path).unwrap();
        assert_eq!(
            replay.complete(&request).await.unwrap().text.as_str(),
            "first"
        );
    }

    #[tokio::test]
    async fn a_recording_replays_every_answer_and_only_those() {
        let path = scratch("round-trip");
        let scripted = ScriptedProvider::sequence([
            ScriptedResponse::text("first answer").with_usage(11, 3),
            ScriptedResponse::structured(serde_json::json!({"a": 1})),
        ]);
        let recording = Recording::open(scripted, &path).unwrap();
        assert!(!recording.cacheable());
        let plain = LlmRequest::new("", "hello", 100).with_label("one");
        let structured = structured_request();
        let a = recording.complete(&plain).await.unwrap();
        let b = recording.complete(&structured).await.unwrap();
        let lines = std::fs::read_to_string(&path).unwrap();
        assert_eq!(lines.lines().count(), 2, "{lines}");

        let replay = ReplayProvider::from_file(&path).unwrap();
        assert_eq!(replay.len(), 2);
        assert_eq!(replay.name(), "replay");
        assert!(!replay.cacheable());
        assert_eq!(replay.complete(&plain).await.unwrap(), a);
        assert_eq!(replay.complete(&structured).await.unwrap(), b);
        assert_eq!(a.text.as_str(), "first answer");
        assert_eq!(a.usage.input_tokens, 11);
        assert_eq!(
            b.structured_json.as_ref().into_option().map(|s| s.as_str()),
            Some("{\"a\":1}")
        );
        // The label is not keyed.
        assert_eq!(
            replay
                .complete(&plain.clone().with_label("x"))
                .await
                .unwrap(),
            a
        );
        let line: RecordedAnswer = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        assert_eq!(line.provider, "scripted");
        assert_eq!(line.request.label, "one");
        assert_eq!(line.key, request_key(&plain));
    }

    #[tokio::test]
    async fn a_request_the_recording_lacks_fails_clearly_and_is_not_retried() {
        let path = scratch("missing");
        let recording = Recording::open(ScriptedProvider::always("ok"), &path).unwrap();
        recording
            .complete(&LlmRequest::new("", "hello", 100))
            .await
            .unwrap();
        let replay = ReplayProvider::from_file(&path).unwrap();
        let changed = LlmRequest::new("", "hello, changed", 100).with_label("map 2/3");
        let err = replay.complete(&changed).await.unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::InvalidRequest);
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(
            text.starts_with("replay: invalid_request: no recorded answer for this request"),
            "{text}"
        );
        assert!(text.contains(&request_key(&changed)[..16]), "{text}");
        assert!(text.contains("label \"map 2/3\""), "{text}");
        assert!(text.contains("\"hello, changed\""), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("(1 answer(s))"), "{text}");
        // A different token limit is a different request too.
        let err = replay
            .complete(&LlmRequest::new("", "hello", 101))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::InvalidRequest);
    }

    #[tokio::test]
    async fn failed_calls_are_not_recorded() {
        let path = scratch("failed");
        let scripted = ScriptedProvider::sequence([
            ScriptedResponse::error(ProviderErrorKind::Server, "boom"),
            ScriptedResponse::text("ok"),
        ]);
        let recording = Recording::open(scripted, &path).unwrap();
        let r = LlmRequest::new("", "hello", 100);
        assert!(recording.complete(&r).await.is_err());
        assert!(recording.complete(&r).await.is_ok());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_the_file_and_line() {
        let path = Path::new("rec/answers.jsonl");
        let good = serde_json::to_string(&RecordedAnswer {
            key: request_key(&LlmRequest::new("", "p", 1)),
            provider: "scripted".into(),
            request: RecordedRequest::of(&LlmRequest::new("", "p", 1)),
            answer: RecordedResponse::of(&LlmResponse {
                text: "a".into(),
                structured_json: FfiOption::RNone,
                usage: Usage::default(),
                model: "scripted".into(),
                stop_reason: "end_turn".into(),
            }),
        })
        .unwrap();
        assert_eq!(
            ReplayProvider::parse(path, &format!("{good}\n\n{good}\n"))
                .unwrap()
                .len(),
            1
        );
        let err = ReplayProvider::parse(path, &format!("{good}\n\n{{\"key\": 3}}\n")).unwrap_err();
        assert!(
            err.starts_with("rec/answers.jsonl:3: not a recorded answer:"),
            "{err}"
        );
        let err = ReplayProvider::parse(path, &format!("{good}\nnot json")).unwrap_err();
        assert!(err.starts_with("rec/answers.jsonl:2: "), "{err}");
        let edited = good.replace("\"prompt\":\"p\"", "\"prompt\":\"q\"");
        assert_ne!(edited, good);
        let err = ReplayProvider::parse(path, &edited).unwrap_err();
        assert!(
            err.starts_with("rec/answers.jsonl:1: the key ") && err.contains("does not match"),
            "{err}"
        );
        let err = ReplayProvider::from_file(Path::new("/nonexistent/answers.jsonl")).unwrap_err();
        assert!(
            err.starts_with("cannot read /nonexistent/answers.jsonl:"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_calls_record_whole_lines() {
        let path = scratch("concurrent");
        let recording =
            Arc::new(Recording::open(ScriptedProvider::always("x".repeat(20_000)), &path).unwrap());
        let calls = (0..64).map(|i| {
            let recording = Arc::clone(&recording);
            tokio::spawn(async move {
                let r = LlmRequest::new("", format!("request {i} {}", "y".repeat(10_000)), 100);
                recording.complete(&r).await.unwrap();
            })
        });
        futures::future::join_all(calls).await;
        let replay = ReplayProvider::from_file(&path).unwrap();
        assert_eq!(replay.len(), 64);
        for i in 0..64 {
            let r = LlmRequest::new("", format!("request {i} {}", "y".repeat(10_000)), 100);
            assert!(replay.answer(&r).is_some(), "request {i}");
        }
    }
}
