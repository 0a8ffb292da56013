//! The Anthropic Messages API (`POST {base_url}/v1/messages`).
//!
//! One request per [`LlmRequest`]: `system`, one user message, `max_tokens`, `temperature`;
//! with a response schema, structured output as `provider.structured_output` says:
//!
//! - `auto`/`native`: `output_config: {format: {type: "json_schema", schema}}`; the answer is
//!   the JSON text of the reply.
//! - `tool`: a tool whose `input_schema` is the schema, forced with
//!   `tool_choice: {type: "tool", name}`; the answer is that `tool_use` block's `input`.
//! - `prompt`: "reply with JSON only" added to the prompt; the JSON is read out of the text.
//!
//! The schema sent is [`super::schema::for_provider`]'s; the host checks the answer against the
//! request's own schema afterwards. Usage: `input_tokens` and `output_tokens` are required;
//! `cache_read_input_tokens` and `cache_creation_input_tokens` may be absent or null (0).
//! `stop_reason` is passed on as the API says it (an open set).

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
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent.
pub const API_VERSION: &str = "2023-06-01";
/// The forced tool's name in `tool` mode.
pub const ANSWER_TOOL: &str = "record_answer";

/// A client of the Messages API. Its name is `anthropic/<model>`.
pub struct AnthropicProvider {
    name: String,
    model: String,
    endpoint: String,
    key: ApiKey,
    structured: StructuredMode,
    client: reqwest::Client,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("model", &self.model)
            .field("endpoint", &crate::redact::url(&self.endpoint))
            .field("key", &self.key)
            .field("structured", &self.structured)
            .finish()
    }
}

/// How a structured request was asked, so the answer is read the same way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Asked {
    Text,
    Native,
    Tool,
    Prompt,
}

impl AnthropicProvider {
    /// A client for `settings`; the key is required.
    pub fn new(settings: ClientSettings) -> Result<Self, String> {
        let key = settings
            .key
            .ok_or_else(|| "the Anthropic API needs a key (provider.api_key_env)".to_string())?;
        Ok(AnthropicProvider {
            name: format!("anthropic/{}", settings.model),
            endpoint: http::endpoint(&settings.base_url, "/v1/messages"),
            client: http::client(settings.timeout, &settings.base_url)?,
            model: settings.model,
            key,
            structured: settings.structured,
        })
    }

    fn asked(&self, request: &LlmRequest) -> Asked {
        match (&request.response_schema_json, self.structured) {
            (FfiOption::RNone, _) => Asked::Text,
            (FfiOption::RSome(_), StructuredMode::Auto | StructuredMode::Native) => Asked::Native,
            (FfiOption::RSome(_), StructuredMode::Tool) => Asked::Tool,
            (FfiOption::RSome(_), StructuredMode::Prompt) => Asked::Prompt,
        }
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &LlmRequest) -> Result<Value, ProviderError> {
        let invalid =
            |m: String| ProviderError::new(&self.name, ProviderErrorKind::InvalidRequest, m);
        let asked = self.asked(request);
        let schema_json = request.response_schema_json.as_ref().map(|s| s.as_str());
        let prompt = match (asked, schema_json) {
            (Asked::Prompt, FfiOption::RSome(s)) => prompt_with_json_instruction(
                &request.prompt,
                &schema::for_prompt(s).map_err(invalid)?,
            ),
            _ => request.prompt.to_string(),
        };
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("max_tokens".into(), json!(request.max_output_tokens.max(1)));
        if !request.system.is_empty() {
            body.insert("system".into(), json!(request.system.as_str()));
        }
        body.insert(
            "messages".into(),
            json!([{"role": "user", "content": prompt}]),
        );
        if let FfiOption::RSome(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let FfiOption::RSome(s) = schema_json {
            match asked {
                Asked::Native => {
                    let schema = schema::for_provider(s, Dialect::Anthropic).map_err(invalid)?;
                    body.insert(
                        "output_config".into(),
                        json!({"format": {"type": "json_schema", "schema": schema}}),
                    );
                }
                Asked::Tool => {
                    let schema = schema::for_provider(s, Dialect::Anthropic).map_err(invalid)?;
                    body.insert(
                        "tools".into(),
                        json!([{
                            "name": ANSWER_TOOL,
                            "description": "Record the answer, in exactly this structure.",
                            "input_schema": schema,
                        }]),
                    );
                    body.insert(
                        "tool_choice".into(),
                        json!({"type": "tool", "name": ANSWER_TOOL}),
                    );
                }
                Asked::Text | Asked::Prompt => {}
            }
        }
        Ok(Value::Object(body))
    }

    /// Reads a Messages API answer.
    pub fn parse_response(
        &self,
        request: &LlmRequest,
        body: &Value,
    ) -> Result<LlmResponse, ProviderError> {
        parse_message(&self.name, self.asked(request), body)
            .and_then(|r| keep_cut_answer_if_accepted(&self.name, request, r, "max_tokens"))
    }

    async fn call(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let body = self.request_body(request)?;
        let auth = self
            .key
            .header("")
            .map_err(|m| ProviderError::new(&self.name, ProviderErrorKind::Authentication, m))?;
        let http_request = self
            .client
            .post(&self.endpoint)
            .header("x-api-key", auth)
            .header("anthropic-version", API_VERSION);
        let answer = http::post_json(&self.name, http_request, &body, Some(&self.key)).await?;
        self.parse_response(request, &answer)
    }
}

fn parse_message(provider: &str, asked: Asked, body: &Value) -> Result<LlmResponse, ProviderError> {
    let malformed = |m: String| ProviderError::new(provider, ProviderErrorKind::Malformed, m);
    let content = http::required(provider, body, "content")?
        .as_array()
        .ok_or_else(|| malformed("`content` is not a list of blocks".into()))?;
    let usage = Usage {
        input_tokens: http::tokens(provider, body, "usage.input_tokens", true)?,
        output_tokens: http::tokens(provider, body, "usage.output_tokens", true)?,
        cache_read_tokens: http::tokens(provider, body, "usage.cache_read_input_tokens", false)?,
        cache_write_tokens: http::tokens(
            provider,
            body,
            "usage.cache_creation_input_tokens",
            false,
        )?,
    };
    let stop_reason = http::optional(body, "stop_reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let model = match http::optional(body, "model").and_then(Value::as_str) {
        Some(m) => format!("anthropic/{m}"),
        None => provider.to_string(),
    };
    let mut text = String::new();
    let mut tool_input = None;
    for (i, block) in content.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                text.push_str(block.get("text").and_then(Value::as_str).ok_or_else(|| {
                    malformed(format!("`content.{i}` is a text block without `text`"))
                })?)
            }
            Some("tool_use") if block.get("name").and_then(Value::as_str) == Some(ANSWER_TOOL) => {
                tool_input = Some(
                    block
                        .get("input")
                        .filter(|v| v.is_object())
                        .ok_or_else(|| {
                            malformed(format!(
                                "`content.{i}` is a tool_use block without an object `input`"
                            ))
                        })?
                        .clone(),
                );
            }
            Some(_) => {}
            None => return Err(malformed(format!("`content.{i}` has no `type`"))),
        }
    }
    let structured = match asked {
        Asked::Text => None,
        Asked::Tool => Some(tool_input.ok_or_else(|| {
            malformed(format!(
                "the answer has no `{ANSWER_TOOL}` tool_use block (stop_reason {stop_reason:?})"
            ))
        })?),
        Asked::Native | Asked::Prompt => Some(
            extract_or_mend(&text, stop_reason == "max_tokens").ok_or_else(|| {
                malformed(format!(
                    "the structured answer is not a JSON object (stop_reason {stop_reason:?}): {}",
                    http::excerpt(&text)
                ))
            })?,
        ),
    };
    let structured_json = structured.map(|v| v.to_string());
    if asked == Asked::Tool {
        // The tool call is the whole answer; a plugin reading `text` gets the JSON.
        text = structured_json.clone().unwrap_or_default();
    }
    Ok(LlmResponse {
        text: text.into(),
        structured_json: structured_json.map(Into::into).into(),
        usage,
        model: model.into(),
        stop_reason: stop_reason.into(),
    })
}

impl Provider for AnthropicProvider {
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
    use tamp_plugin_api::FfiOption;

    fn provider(structured: StructuredMode) -> AnthropicProvider {
        AnthropicProvider::new(ClientSettings {
            model: "claude-test".into(),
            base_url: "http://127.0.0.1:9/".into(),
            key: Some(ApiKey::new("sk-ant-test")),
            structured,
            timeout: Duration::from_secs(1),
        })
        .unwrap()
    }

    fn structured_request() -> LlmRequest {
        let mut r = LlmRequest::new("Be brief.", "Summarize <content>x</content>", 300);
        r.response_schema_json = FfiOption::RSome(
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                   "properties": {"summary": {"type": "string", "maxLength": 50}}, "required": ["summary"]})
            .to_string()
            .into(),
        );
        r
    }

    #[test]
    fn plain_request_body() {
        let p = provider(StructuredMode::Auto);
        let mut r = LlmRequest::new("", "hello", 100);
        r.temperature = FfiOption::RSome(0.0);
        assert_eq!(
            p.request_body(&r).unwrap(),
            json!({"model": "claude-test", "max_tokens": 100,
                   "messages": [{"role": "user", "content": "hello"}], "temperature": 0.0})
        );
        assert_eq!(p.endpoint, "http://127.0.0.1:9/v1/messages");
        assert_eq!(p.name(), "anthropic/claude-test");
        assert!(!format!("{p:?}").contains("sk-ant-test"));
    }

    #[test]
    fn structured_bodies_per_mode() {
        let sent_schema = json!({"type": "object", "properties": {"summary": {"type": "string"}},
                                 "required": ["summary"], "additionalProperties": false});
        let native = provider(StructuredMode::Native)
            .request_body(&structured_request())
            .unwrap();
        assert_eq!(native["system"], "Be brief.");
        assert_eq!(
            native["output_config"],
            json!({"format": {"type": "json_schema", "schema": sent_schema}})
        );
        assert!(native.get("tools").is_none());
        let auto = provider(StructuredMode::Auto)
            .request_body(&structured_request())
            .unwrap();
        assert_eq!(auto, native);
        let tool = provider(StructuredMode::Tool)
            .request_body(&structured_request())
            .unwrap();
        assert_eq!(tool["tools"][0]["input_schema"], sent_schema);
        assert_eq!(
            tool["tool_choice"],
            json!({"type": "tool", "name": ANSWER_TOOL})
        );
        assert!(tool.get("output_config").is_none());
        let prompt = provider(StructuredMode::Prompt)
            .request_body(&structured_request())
            .unwrap();
        let text = prompt["messages"][0]["content"].as_str().unwrap();
        assert!(
            text.contains("Reply with JSON only") && text.contains("\"maxLength\": 50"),
            "{text}"
        );
        assert!(prompt.get("output_config").is_none() && prompt.get("tools").is_none());
    }

    #[test]
    fn answers_are_read_per_mode() {
        let text_answer = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-20260101",
            "content": [{"type": "text", "text": "{\"summary\": \"ok\"}"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 3, "cache_creation_input_tokens": null}
        });
        let r = parse_message("anthropic/claude-test", Asked::Native, &text_answer).unwrap();
        assert_eq!(
            r.structured_json.as_ref().map(|s| s.as_str()),
            FfiOption::RSome(r#"{"summary":"ok"}"#)
        );
        assert_eq!(r.model.as_str(), "anthropic/claude-test-20260101");
        assert_eq!(r.stop_reason.as_str(), "end_turn");
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 5,
                cache_read_tokens: 3,
                cache_write_tokens: 0
            }
        );
        let plain = parse_message("a", Asked::Text, &text_answer).unwrap();
        assert_eq!(plain.structured_json, FfiOption::RNone);
        assert_eq!(plain.text.as_str(), "{\"summary\": \"ok\"}");

        let tool_answer = json!({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": ANSWER_TOOL, "input": {"summary": "ok"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2}
        });
        let r = parse_message("a", Asked::Tool, &tool_answer).unwrap();
        assert_eq!(r.text.as_str(), r#"{"summary":"ok"}"#);
        assert_eq!(r.stop_reason.as_str(), "tool_use");
        let e = parse_message("a", Asked::Tool, &text_answer).unwrap_err();
        assert!(
            e.message.contains("no `record_answer` tool_use block"),
            "{e}"
        );
    }

    #[test]
    fn a_json_answer_cut_at_max_tokens_keeps_what_it_finished() {
        let cut = |stop_reason: &str| {
            json!({
                "id": "msg_3", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "{\"summary\": \"ok\", \"steps\": [\"a\", \"b"}],
                "stop_reason": stop_reason, "usage": {"input_tokens": 1, "output_tokens": 2}
            })
        };
        let r = parse_message("a", Asked::Native, &cut("max_tokens")).unwrap();
        assert_eq!(
            r.structured_json.as_ref().map(|s| s.as_str()),
            FfiOption::RSome(r#"{"summary":"ok","steps":["a"]}"#)
        );
        assert_eq!(r.stop_reason.as_str(), "max_tokens");
        // Unclosed for any other reason, it is still malformed.
        assert!(parse_message("a", Asked::Prompt, &cut("end_turn")).is_err());
    }

    #[test]
    fn malformed_answers_name_what_is_missing() {
        let cases = [
            (
                json!({"usage": {"input_tokens": 1, "output_tokens": 1}}),
                "no `content`",
            ),
            (json!({"content": []}), "no `usage.input_tokens`"),
            (
                json!({"content": [], "usage": {"input_tokens": 1}}),
                "no `usage.output_tokens`",
            ),
            (
                json!({"content": "hi", "usage": {"input_tokens": 1, "output_tokens": 1}}),
                "not a list",
            ),
            (
                json!({"content": [{"text": "x"}], "usage": {"input_tokens": 1, "output_tokens": 1}}),
                "`content.0` has no `type`",
            ),
            (
                json!({"content": [{"type": "text"}], "usage": {"input_tokens": 1, "output_tokens": 1}}),
                "without `text`",
            ),
        ];
        for (body, want) in cases {
            let e = parse_message("anthropic/m", Asked::Text, &body).unwrap_err();
            assert_eq!(e.kind, ProviderErrorKind::Malformed);
            assert!(e.to_string().starts_with("anthropic/m: malformed: "), "{e}");
            assert!(e.message.contains(want), "{e} lacks {want}");
        }
        let not_json = json!({"content": [{"type": "text", "text": "I cannot"}], "stop_reason": "refusal",
                              "usage": {"input_tokens": 1, "output_tokens": 1}});
        let e = parse_message("a", Asked::Native, &not_json).unwrap_err();
        assert!(
            e.message
                .contains("not a JSON object (stop_reason \"refusal\")"),
            "{e}"
        );
    }

    #[test]
    fn a_schema_that_is_not_an_object_is_refused_before_sending() {
        let mut r = LlmRequest::new("", "x", 10);
        r.response_schema_json = FfiOption::RSome(r#"{"type": "string"}"#.into());
        let e = provider(StructuredMode::Native)
            .request_body(&r)
            .unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::InvalidRequest);
    }
}
