//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI, vLLM,
//! llama.cpp's server, Ollama's `/v1`.
//!
//! One request per [`LlmRequest`]: a `system` message (when there is system text), one `user`
//! message, the token limit and `temperature`. The token limit is `max_completion_tokens` for
//! OpenAI's own endpoint (its newer models refuse `max_tokens`) and `max_tokens` for any
//! other `base_url` (what every compatible server reads).
//!
//! With a response schema:
//! - `native`: `response_format: {type: "json_schema", json_schema: {name, schema, strict:
//!   true}}` (llama.cpp and Ollama read only `json_schema.schema`).
//! - `prompt`: "reply with JSON only" added to the prompt; the JSON is read out of the text,
//!   fenced or bare.
//! - `auto`: `native`, until the server answers a 400 (or 422) that rejects `response_format`:
//!   then the same request is sent once more in `prompt` mode, and this provider stays in
//!   `prompt` mode from then on.
//!
//! Usage: `prompt_tokens` includes the cached part (`prompt_tokens_details.cached_tokens`), so
//! `input_tokens` is the uncached remainder and `cache_read_tokens` the cached part, as
//! Anthropic counts them; a server that reports no usage gives zeros.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Usage};

use super::http::{self, ApiKey, ClientSettings};
use super::schema::{self, Dialect};
use super::structured::{
    extract_or_mend, keep_cut_answer_if_accepted, prompt_with_json_instruction, StructuredMode,
};
use super::{Provider, ProviderError, ProviderErrorKind};

/// The public endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// `json_schema.name` of structured requests.
pub const SCHEMA_NAME: &str = "answer";

/// A Chat Completions client. Its name is `openai/<model>`.
pub struct OpenAiProvider {
    name: String,
    model: String,
    endpoint: String,
    key: Option<ApiKey>,
    structured: StructuredMode,
    /// Whether the token limit goes in `max_completion_tokens` (OpenAI itself).
    completion_tokens_field: bool,
    /// `auto` mode learned that this server rejects `response_format`.
    prompt_fallback: AtomicBool,
    client: reqwest::Client,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("model", &self.model)
            .field("endpoint", &crate::redact::url(&self.endpoint))
            .field("key", &self.key)
            .field("structured", &self.structured)
            .field("prompt_fallback", &self.prompt_fallback)
            .finish()
    }
}

/// How a request was asked, so the answer is read the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Text,
    Native,
    Prompt,
}

impl OpenAiProvider {
    /// A client for `settings`; the key is optional (local servers need none). `tool` mode is
    /// Anthropic's and is refused.
    pub fn new(settings: ClientSettings) -> Result<Self, String> {
        if settings.structured == StructuredMode::Tool {
            return Err("structured_output = \"tool\" is for the Anthropic API".into());
        }
        Ok(OpenAiProvider {
            name: format!("openai/{}", settings.model),
            endpoint: http::endpoint(&settings.base_url, "/chat/completions"),
            completion_tokens_field: settings
                .base_url
                .trim_end_matches('/')
                .eq_ignore_ascii_case(DEFAULT_BASE_URL),
            client: http::client(settings.timeout, &settings.base_url)?,
            model: settings.model,
            key: settings.key,
            structured: settings.structured,
            prompt_fallback: AtomicBool::new(false),
        })
    }

    /// Whether `auto` mode has switched this provider to "reply with JSON only".
    pub fn uses_prompt_fallback(&self) -> bool {
        self.prompt_fallback.load(Ordering::Relaxed)
    }

    fn asked(&self, request: &LlmRequest) -> Asked {
        if request.response_schema_json.is_none() {
            return Asked::Text;
        }
        match self.structured {
            StructuredMode::Prompt => Asked::Prompt,
            StructuredMode::Auto if self.uses_prompt_fallback() => Asked::Prompt,
            StructuredMode::Auto | StructuredMode::Native | StructuredMode::Tool => Asked::Native,
        }
    }

    /// The JSON body sent for `request` as this provider would send it now.
    pub fn request_body(&self, request: &LlmRequest) -> Result<Value, ProviderError> {
        self.body(request, self.asked(request))
    }

    fn body(&self, request: &LlmRequest, asked: Asked) -> Result<Value, ProviderError> {
        let invalid =
            |m: String| ProviderError::new(&self.name, ProviderErrorKind::InvalidRequest, m);
        let schema_json = request.response_schema_json.as_ref().map(|s| s.as_str());
        let prompt = match (asked, schema_json) {
            (Asked::Prompt, FfiOption::RSome(s)) => prompt_with_json_instruction(
                &request.prompt,
                &schema::for_prompt(s).map_err(invalid)?,
            ),
            _ => request.prompt.to_string(),
        };
        let mut messages = Vec::with_capacity(2);
        if !request.system.is_empty() {
            messages.push(json!({"role": "system", "content": request.system.as_str()}));
        }
        messages.push(json!({"role": "user", "content": prompt}));
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        let limit_field = if self.completion_tokens_field {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(limit_field.into(), json!(request.max_output_tokens.max(1)));
        if let FfiOption::RSome(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let (Asked::Native, FfiOption::RSome(s)) = (asked, schema_json) {
            let schema = schema::for_provider(s, Dialect::OpenAiStrict).map_err(invalid)?;
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema",
                       "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": true}}),
            );
        }
        Ok(Value::Object(body))
    }

    async fn attempt(
        &self,
        request: &LlmRequest,
        asked: Asked,
    ) -> Result<LlmResponse, ProviderError> {
        let body = self.body(request, asked)?;
        let mut http_request = self.client.post(&self.endpoint);
        if let Some(key) = &self.key {
            let auth = key.header("Bearer ").map_err(|m| {
                ProviderError::new(&self.name, ProviderErrorKind::Authentication, m)
            })?;
            http_request = http_request.header(reqwest::header::AUTHORIZATION, auth);
        }
        let answer = http::post_json(&self.name, http_request, &body, self.key.as_ref()).await?;
        parse_completion(&self.name, asked, &answer)
            .and_then(|r| keep_cut_answer_if_accepted(&self.name, request, r, "length"))
    }

    async fn call(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let asked = self.asked(request);
        match self.attempt(request, asked).await {
            Err(e)
                if asked == Asked::Native
                    && self.structured == StructuredMode::Auto
                    && rejects_response_format(&e) =>
            {
                if !self.prompt_fallback.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        provider = %self.name,
                        "the server rejects response_format ({}); asking for JSON in the prompt from now on",
                        e.message
                    );
                }
                self.attempt(request, Asked::Prompt).await
            }
            other => other,
        }
    }
}

/// A 400/422 about `response_format` or `json_schema`: a server without schema support.
fn rejects_response_format(e: &ProviderError) -> bool {
    let message = e.message.to_lowercase();
    e.kind == ProviderErrorKind::InvalidRequest
        && (message.contains("response_format") || message.contains("json_schema"))
}

fn parse_completion(
    provider: &str,
    asked: Asked,
    body: &Value,
) -> Result<LlmResponse, ProviderError> {
    let malformed = |m: String| ProviderError::new(provider, ProviderErrorKind::Malformed, m);
    let message = http::required(provider, body, "choices.0.message")?;
    let finish_reason = http::optional(body, "choices.0.finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => match message.get("refusal").and_then(Value::as_str) {
            Some(refusal) => {
                return Err(ProviderError::new(
                    provider,
                    ProviderErrorKind::Other,
                    format!("the model refused: {refusal}"),
                ))
            }
            None => String::new(),
        },
        Some(other) => {
            return Err(malformed(format!(
                "`choices.0.message.content` is not text: {other}"
            )))
        }
    };
    let prompt_tokens = http::tokens(provider, body, "usage.prompt_tokens", false)?;
    let cached = http::tokens(
        provider,
        body,
        "usage.prompt_tokens_details.cached_tokens",
        false,
    )?;
    let usage = Usage {
        input_tokens: prompt_tokens.saturating_sub(cached),
        output_tokens: http::tokens(provider, body, "usage.completion_tokens", false)?,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    };
    let model = match http::optional(body, "model").and_then(Value::as_str) {
        Some(m) => format!("openai/{m}"),
        None => provider.to_string(),
    };
    let structured_json = match asked {
        Asked::Text => None,
        Asked::Native | Asked::Prompt => Some(
            extract_or_mend(&text, finish_reason == "length")
                .ok_or_else(|| {
                    malformed(format!(
                        "the structured answer is not a JSON object (finish_reason {finish_reason:?}): {}",
                        http::excerpt(&text)
                    ))
                })?
                .to_string(),
        ),
    };
    Ok(LlmResponse {
        text: text.into(),
        structured_json: structured_json.map(Into::into).into(),
        usage,
        model: model.into(),
        stop_reason: finish_reason.into(),
    })
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(self.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn provider(base_url: &str, structured: StructuredMode) -> OpenAiProvider {
        OpenAiProvider::new(ClientSettings {
            model: "gpt-test".into(),
            base_url: base_url.into(),
            key: None,
            structured,
            timeout: Duration::from_secs(1),
        })
        .unwrap()
    }

    fn structured_request() -> LlmRequest {
        let mut r = LlmRequest::new("Be brief.", "Summarize.", 300);
        r.response_schema_json = FfiOption::RSome(
            json!({"type": "object", "properties": {"summary": {"type": "string", "maxLength": 50},
                   "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["summary"]})
            .to_string()
            .into(),
        );
        r
    }

    #[test]
    fn bodies() {
        let local = provider("http://127.0.0.1:8080/v1/", StructuredMode::Auto);
        assert_eq!(local.endpoint, "http://127.0.0.1:8080/v1/chat/completions");
        let plain = local.request_body(&LlmRequest::new("", "hi", 10)).unwrap();
        assert_eq!(
            plain,
            json!({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10})
        );
        let native = local.request_body(&structured_request()).unwrap();
        assert_eq!(
            native["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(
            native["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "strict": true, "schema": {
                "type": "object",
                "properties": {"summary": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["summary", "tags"], "additionalProperties": false}}})
        );
        let prompt = provider("http://127.0.0.1:8080/v1", StructuredMode::Prompt)
            .request_body(&structured_request())
            .unwrap();
        assert!(prompt.get("response_format").is_none());
        assert!(prompt["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("Reply with JSON only"));
        let openai = provider(DEFAULT_BASE_URL, StructuredMode::Auto);
        let body = openai.request_body(&LlmRequest::new("", "hi", 10)).unwrap();
        assert_eq!(body["max_completion_tokens"], 10);
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn tool_mode_is_refused() {
        let e = OpenAiProvider::new(ClientSettings {
            model: "m".into(),
            base_url: DEFAULT_BASE_URL.into(),
            key: None,
            structured: StructuredMode::Tool,
            timeout: Duration::from_secs(1),
        })
        .unwrap_err();
        assert!(e.contains("Anthropic"), "{e}");
    }

    #[test]
    fn answers_and_usage() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test-2026",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "```json\n{\"summary\": \"ok\"}\n```", "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                      "prompt_tokens_details": {"cached_tokens": 60, "audio_tokens": 0}}
        });
        let r = parse_completion("openai/gpt-test", Asked::Prompt, &body).unwrap();
        assert_eq!(
            r.structured_json.as_ref().map(|s| s.as_str()),
            FfiOption::RSome(r#"{"summary":"ok"}"#)
        );
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 40,
                output_tokens: 7,
                cache_read_tokens: 60,
                cache_write_tokens: 0
            }
        );
        assert_eq!(r.model.as_str(), "openai/gpt-test-2026");
        assert_eq!(r.stop_reason.as_str(), "stop");
        let no_usage =
            json!({"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}]});
        let r = parse_completion("p", Asked::Text, &no_usage).unwrap();
        assert_eq!(r.usage, Usage::default());
        assert_eq!(r.model.as_str(), "p");
    }

    #[test]
    fn malformed_and_refused_answers() {
        let e = parse_completion("openai/m", Asked::Text, &json!({"choices": []})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "openai/m: malformed: the answer has no `choices.0.message`"
        );
        let e = parse_completion(
            "p",
            Asked::Native,
            &json!({"choices": [{"message": {"content": "nope"}, "finish_reason": "length"}]}),
        )
        .unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Malformed);
        assert!(e.message.contains("finish_reason \"length\""), "{e}");
        let e = parse_completion("p", Asked::Native, &json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."}}]})).unwrap_err();
        assert_eq!(e.message, "the model refused: I can't help with that.");
        let e = parse_completion(
            "p",
            Asked::Text,
            &json!({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -1}}),
        )
        .unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::Malformed);
    }

    #[test]
    fn response_format_rejections_are_recognized() {
        let e = |kind, m: &str| ProviderError::new("p", kind, m);
        assert!(rejects_response_format(&e(
            ProviderErrorKind::InvalidRequest,
            "HTTP 400 'response_format' of type 'json_schema' is not supported"
        )));
        assert!(!rejects_response_format(&e(
            ProviderErrorKind::InvalidRequest,
            "HTTP 400 max_tokens too large"
        )));
        assert!(!rejects_response_format(&e(
            ProviderErrorKind::Server,
            "HTTP 500 response_format crashed"
        )));
    }
}
