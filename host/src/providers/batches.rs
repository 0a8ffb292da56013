//! The Anthropic Message Batches API: create, retrieve, results, cancel, list.
//!
//! - `POST {base}/v1/messages/batches` `{requests: [{custom_id, params}]}`, each `params` the
//!   body [`AnthropicProvider::request_body`] builds for the Messages API (one home for it).
//! - `GET …/batches/{id}`, `POST …/batches/{id}/cancel`, `GET …/batches?limit&after_id`: a
//!   `message_batch` object (`processing_status` `in_progress` / `canceling` / `ended`,
//!   `request_counts`, `results_url`, …) or a page of them.
//! - Results: `GET results_url`, JSON Lines, one `{custom_id, result}` per request, in any
//!   order; read line by line from the body stream, never held whole in memory. A `result`
//!   is `succeeded` (`message`, a Messages API answer), `errored` (`error`, Anthropic's
//!   error envelope), `canceled` or `expired`.
//!
//! Errors map through [`super::http`] (one mapping for every HTTP provider); 429, 5xx and
//! transport failures are retried with [`RetryPolicy`]'s backoff, honouring `retry-after`.

use std::time::SystemTime;

use futures::stream::BoxStream;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tamp_plugin_api::{LlmRequest, LlmResponse};

use super::anthropic::{AnthropicProvider, API_VERSION};
use super::http::{self, ApiKey, ClientSettings};
use super::retry::RetryPolicy;
use super::{ProviderError, ProviderErrorKind};

/// The API's limit on requests per batch.
pub const MAX_REQUESTS_PER_BATCH: usize = 100_000;

/// `processing_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessingStatus {
    InProgress,
    Canceling,
    Ended,
}

/// `request_counts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub processing: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

/// A `message_batch` object (the fields tamp reads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageBatch {
    pub id: String,
    pub processing_status: ProcessingStatus,
    pub request_counts: RequestCounts,
    pub results_url: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub cancel_initiated_at: Option<String>,
}

/// One page of `GET /v1/messages/batches`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchList {
    pub data: Vec<MessageBatch>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

/// What one request of a batch came to.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchOutcome {
    /// The Messages API answer, as JSON (read it with [`BatchesClient::parse_message`]).
    Succeeded(Value),
    /// The error's `type` (`invalid_request_error`, `overloaded_error`, …) and message.
    Errored {
        error_type: String,
        message: String,
    },
    Canceled,
    Expired,
}

/// One line of a batch's results.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchResult {
    pub custom_id: String,
    pub outcome: BatchOutcome,
}

/// Whether an `errored` result's error type is worth another attempt: the transient ones
/// (rate limit, overload, server error, timeout); a request the API refused as invalid, or
/// refused for the key, fails the same way every time.
pub fn error_type_is_retryable(error_type: &str) -> bool {
    matches!(
        error_type,
        "rate_limit_error" | "overloaded_error" | "api_error" | "timeout_error"
    )
}

/// A client of the Message Batches API. Its name is `anthropic-batches/<model>`.
pub struct BatchesClient {
    name: String,
    base_url: String,
    key: ApiKey,
    client: reqwest::Client,
    messages: AnthropicProvider,
    policy: RetryPolicy,
}

impl std::fmt::Debug for BatchesClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchesClient")
            .field("name", &self.name)
            .field("base_url", &crate::redact::url(&self.base_url))
            .field("key", &self.key)
            .finish()
    }
}

impl BatchesClient {
    /// A client for `settings` (the key is required), retrying as `policy` says.
    pub fn new(settings: ClientSettings, policy: RetryPolicy) -> Result<Self, String> {
        let key = settings
            .key
            .clone()
            .ok_or_else(|| "the Message Batches API needs a key (batch.api_key_env)".to_string())?;
        Ok(BatchesClient {
            name: format!("anthropic-batches/{}", settings.model),
            client: http::client(settings.timeout, &settings.base_url)?,
            base_url: settings.base_url.clone(),
            key,
            messages: AnthropicProvider::new(settings)?,
            policy,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The request body of a batch of `(custom_id, request)` pairs.
    pub fn create_body(&self, requests: &[(String, LlmRequest)]) -> Result<Value, ProviderError> {
        let requests = requests
            .iter()
            .map(|(custom_id, request)| {
                Ok(json!({
                    "custom_id": custom_id,
                    "params": self.messages.request_body(request)?,
                }))
            })
            .collect::<Result<Vec<Value>, ProviderError>>()?;
        Ok(json!({ "requests": requests }))
    }

    /// Reads a `succeeded` result's message as the answer to `request`.
    pub fn parse_message(
        &self,
        request: &LlmRequest,
        message: &Value,
    ) -> Result<LlmResponse, ProviderError> {
        self.messages.parse_response(request, message)
    }

    /// Creates a batch of `(custom_id, request)` pairs.
    pub async fn create(
        &self,
        requests: &[(String, LlmRequest)],
    ) -> Result<MessageBatch, ProviderError> {
        if requests.is_empty() || requests.len() > MAX_REQUESTS_PER_BATCH {
            return Err(self.error(
                ProviderErrorKind::InvalidRequest,
                format!(
                    "a batch holds 1 to {MAX_REQUESTS_PER_BATCH} requests, not {}",
                    requests.len()
                ),
            ));
        }
        let body = self.create_body(requests)?;
        let url = http::endpoint(&self.base_url, "/v1/messages/batches");
        self.batch_call(|| self.client.post(&url).json(&body)).await
    }

    pub async fn retrieve(&self, id: &str) -> Result<MessageBatch, ProviderError> {
        let url = http::endpoint(&self.base_url, &format!("/v1/messages/batches/{id}"));
        self.batch_call(|| self.client.get(&url)).await
    }

    /// Asks the API to cancel a batch; it moves to `canceling`, then `ended`.
    pub async fn cancel(&self, id: &str) -> Result<MessageBatch, ProviderError> {
        let url = http::endpoint(&self.base_url, &format!("/v1/messages/batches/{id}/cancel"));
        self.batch_call(|| self.client.post(&url)).await
    }

    /// One page of batches, newest first.
    pub async fn list(
        &self,
        limit: u32,
        after_id: Option<&str>,
    ) -> Result<BatchList, ProviderError> {
        let mut url = http::endpoint(
            &self.base_url,
            &format!("/v1/messages/batches?limit={}", limit.clamp(1, 1000)),
        );
        if let Some(after) = after_id {
            // Batch ids are `msgbatch_` and URL-safe characters.
            url.push_str("&after_id=");
            url.push_str(after);
        }
        let value = self
            .with_retries(|| self.send(self.client.get(&url)))
            .await?;
        self.decode(value)
    }

    /// An ended batch's results as a stream, one item per JSONL line as it arrives off the
    /// wire (the file is never held whole in memory). A line that is not a result is an
    /// error naming its number; the stream goes on after it.
    pub async fn results(
        &self,
        batch: &MessageBatch,
    ) -> Result<BoxStream<'_, Result<BatchResult, ProviderError>>, ProviderError> {
        let url = match &batch.results_url {
            Some(url) => url.clone(),
            None => {
                return Err(self.error(
                    ProviderErrorKind::InvalidRequest,
                    format!("batch {} has no results_url (not ended yet)", batch.id),
                ))
            }
        };
        let response = self
            .with_retries(|| async {
                let response = self
                    .authorized(self.client.get(&url))?
                    .send()
                    .await
                    .map_err(|e| self.transport(&e))?;
                if response.status().is_success() {
                    Ok(response)
                } else {
                    Err(self.failed_answer(response).await)
                }
            })
            .await?;
        struct Lines<'c> {
            client: &'c BatchesClient,
            body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
            buffer: Vec<u8>,
            /// How much of `buffer` holds no newline: only what comes after is searched.
            scanned: usize,
            number: u64,
            finished: bool,
        }
        let state = Lines {
            client: self,
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|b| b.to_vec()))
                .boxed(),
            buffer: Vec::new(),
            scanned: 0,
            number: 0,
            finished: false,
        };
        Ok(futures::stream::unfold(state, |mut s| async move {
            loop {
                let newline = s.buffer[s.scanned..].iter().position(|&b| b == b'\n');
                let line: Option<Vec<u8>> = match newline {
                    Some(at) => {
                        let end = s.scanned + at;
                        s.scanned = 0;
                        Some(s.buffer.drain(..=end).collect())
                    }
                    None if s.finished && !s.buffer.is_empty() => {
                        s.scanned = 0;
                        Some(std::mem::take(&mut s.buffer))
                    }
                    None if s.finished => return None,
                    None => None,
                };
                if let Some(line) = line {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim();
                    if text.is_empty() {
                        continue;
                    }
                    s.number += 1;
                    let parsed = s.client.parse_result_line(text, s.number);
                    return Some((parsed, s));
                }
                s.scanned = s.buffer.len();
                if s.buffer.len() > http::MAX_ANSWER_BYTES {
                    // One line past any real result's length: the rest of the body is not
                    // read, and the results already given stand.
                    s.finished = true;
                    s.buffer.clear();
                    s.scanned = 0;
                    let error = s.client.error(
                        ProviderErrorKind::Malformed,
                        format!(
                            "results line {} is longer than {} MiB; the rest is not read",
                            s.number + 1,
                            http::MAX_ANSWER_BYTES >> 20
                        ),
                    );
                    return Some((Err(error), s));
                }
                match s.body.next().await {
                    Some(Ok(chunk)) => s.buffer.extend_from_slice(&chunk),
                    Some(Err(e)) => {
                        s.finished = true;
                        s.buffer.clear();
                        s.scanned = 0;
                        let error = s.client.transport(&e);
                        return Some((Err(error), s));
                    }
                    None => s.finished = true,
                }
            }
        })
        .boxed())
    }

    fn parse_result_line(&self, text: &str, number: u64) -> Result<BatchResult, ProviderError> {
        let malformed = |m: String| {
            self.error(
                ProviderErrorKind::Malformed,
                format!("results line {number}: {m}"),
            )
        };
        let value: Value = serde_json::from_str(text)
            .map_err(|e| malformed(format!("not JSON ({e}): {}", http::excerpt(text))))?;
        let custom_id = value
            .get("custom_id")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("no `custom_id`".into()))?
            .to_string();
        let result = value
            .get("result")
            .ok_or_else(|| malformed(format!("{custom_id}: no `result`")))?;
        let outcome = match result.get("type").and_then(Value::as_str) {
            Some("succeeded") => {
                BatchOutcome::Succeeded(result.get("message").cloned().ok_or_else(|| {
                    malformed(format!("{custom_id}: succeeded without `message`"))
                })?)
            }
            Some("errored") => {
                // `error` is the error envelope `{type: "error", error: {type, message}}`.
                let error = result.get("error").unwrap_or(&Value::Null);
                let inner = error.get("error").unwrap_or(error);
                BatchOutcome::Errored {
                    error_type: inner
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown_error")
                        .to_string(),
                    message: inner
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                }
            }
            Some("canceled") => BatchOutcome::Canceled,
            Some("expired") => BatchOutcome::Expired,
            other => {
                return Err(malformed(format!(
                    "{custom_id}: unknown result type {}",
                    other.unwrap_or("(none)")
                )))
            }
        };
        Ok(BatchResult { custom_id, outcome })
    }

    fn error(&self, kind: ProviderErrorKind, message: String) -> ProviderError {
        ProviderError::new(&self.name, kind, message)
    }

    fn transport(&self, e: &reqwest::Error) -> ProviderError {
        http::transport_error(&self.name, e, &|t| self.key.scrub(&t))
    }

    fn authorized(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        let auth = self
            .key
            .header("")
            .map_err(|m| self.error(ProviderErrorKind::Authentication, m))?;
        Ok(request
            .header("x-api-key", auth)
            .header("anthropic-version", API_VERSION))
    }

    async fn failed_answer(&self, response: reqwest::Response) -> ProviderError {
        let status = response.status();
        let headers = response.headers().clone();
        // An error answer too large or cut off still says its status.
        let body = http::read_body(response).await.unwrap_or_default();
        http::error_from_response(
            &self.name,
            status,
            &headers,
            &self.key.scrub(&body),
            SystemTime::now(),
        )
    }

    /// One attempt: the JSON body of a successful answer, or the error the answer means.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, ProviderError> {
        let response = self
            .authorized(request)?
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        if !response.status().is_success() {
            return Err(self.failed_answer(response).await);
        }
        let status = response.status();
        let text = http::read_body(response)
            .await
            .map_err(|e| e.into_provider_error(&self.name, status, &|t| self.key.scrub(&t)))?;
        serde_json::from_str(&text).map_err(|e| {
            self.error(
                ProviderErrorKind::Malformed,
                format!(
                    "HTTP {} answer is not JSON ({e}): {}",
                    status.as_u16(),
                    http::excerpt(&self.key.scrub(&text))
                ),
            )
        })
    }

    async fn batch_call(
        &self,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<MessageBatch, ProviderError> {
        let value = self.with_retries(|| self.send(request())).await?;
        self.decode(value)
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, value: Value) -> Result<T, ProviderError> {
        serde_json::from_value(value.clone()).map_err(|e| {
            self.error(
                ProviderErrorKind::Malformed,
                format!(
                    "unexpected answer ({e}): {}",
                    http::excerpt(&value.to_string())
                ),
            )
        })
    }

    /// Runs `attempt` with the policy's retries ([`RetryPolicy::run`]).
    async fn with_retries<T, F, Fut>(&self, attempt: F) -> Result<T, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        self.policy
            .run(attempt, |retry, wait, error| {
                tracing::warn!(
                    client = %self.name,
                    attempt = retry + 1,
                    wait_ms = wait.as_millis() as u64,
                    "batches API: {error}; retrying"
                );
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn client() -> BatchesClient {
        BatchesClient::new(
            ClientSettings {
                model: "claude-test".into(),
                base_url: "http://127.0.0.1:9".into(),
                key: Some(ApiKey::new("sk-test")),
                structured: super::super::StructuredMode::Auto,
                timeout: Duration::from_secs(1),
            },
            RetryPolicy {
                max_retries: 0,
                initial: Duration::from_millis(1),
                max: Duration::from_millis(1),
            },
        )
        .unwrap()
    }

    #[test]
    fn create_body_carries_custom_ids_and_messages_params() {
        let body = client()
            .create_body(&[("dq_1".into(), LlmRequest::new("sys", "hello", 50))])
            .unwrap();
        let request = &body["requests"][0];
        assert_eq!(request["custom_id"], "dq_1");
        assert_eq!(request["params"]["model"], "claude-test");
        assert_eq!(request["params"]["max_tokens"], 50);
        assert_eq!(request["params"]["system"], "sys");
        assert_eq!(request["params"]["messages"][0]["content"], "hello");
    }

    #[test]
    fn result_lines_of_every_type_parse() {
        let c = client();
        let ok = c
            .parse_result_line(
                r#"{"custom_id":"dq_1","result":{"type":"succeeded","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}}"#,
                1,
            )
            .unwrap();
        let BatchOutcome::Succeeded(message) = &ok.outcome else {
            panic!("{ok:?}")
        };
        let answer = c
            .parse_message(&LlmRequest::new("", "x", 10), message)
            .unwrap();
        assert_eq!(answer.text.as_str(), "hi");
        assert_eq!(answer.usage.input_tokens, 5);
        let errored = c
            .parse_result_line(
                r#"{"custom_id":"dq_2","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}}}"#,
                2,
            )
            .unwrap();
        assert_eq!(
            errored.outcome,
            BatchOutcome::Errored {
                error_type: "overloaded_error".into(),
                message: "Overloaded".into()
            }
        );
        for (kind, outcome) in [
            ("canceled", BatchOutcome::Canceled),
            ("expired", BatchOutcome::Expired),
        ] {
            let line = format!(r#"{{"custom_id":"dq_3","result":{{"type":"{kind}"}}}}"#);
            assert_eq!(c.parse_result_line(&line, 3).unwrap().outcome, outcome);
        }
        let bad = c.parse_result_line("{nope", 7).unwrap_err();
        assert!(bad.message.contains("results line 7"), "{bad}");
        assert!(error_type_is_retryable("overloaded_error"));
        assert!(!error_type_is_retryable("invalid_request_error"));
    }
}
