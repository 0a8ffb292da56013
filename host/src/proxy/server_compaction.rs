//! OpenAI's server-side compaction, answered by tamp's chain for an upstream that lacks it
//! (`[proxy] openai_compaction = "tamp"`: vLLM, llama.cpp, Ollama behind an OpenAI base URL).
//!
//! A client asks for it two ways: `POST /v1/responses/compact` (the SDKs' `responses.compact`;
//! the answer is a `response.compaction` object: the input's user messages, then one
//! `compaction` item), or, as Codex 0.169 does, a `POST /v1/responses` whose last input item is
//! `{"type": "compaction_trigger"}` (the answer is a response, streamed when asked, whose
//! output is one `compaction` item). The client then replaces what it sent with the
//! developer and user messages it keeps and that `compaction` item.
//!
//! tamp's answer: the chain runs on the input, forced and with nothing protected at the end,
//! and its pages archive what it takes out. The `compaction` item stands for everything the
//! client drops: the chain's answer less the leading instructions and the input's own user
//! messages (the client keeps those), written as Responses items into its
//! `encrypted_content` behind [`wire::OWN_COMPACTION`]. The Responses reader turns
//! such an item back into those items on the next request, summaries with their page refs, so
//! the upstream never sees the item (see `wire::responses`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::error::ProxyError;
use crate::chain::{ChainError, CompactOptions};
use crate::http::active::ActiveChain;
use crate::http::metrics::Metrics;
use crate::plugin_api::{Message, Role};
use crate::wire::{self, WireFormat};

/// What was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// `POST /v1/responses/compact`.
    CompactEndpoint,
    /// `POST /v1/responses` ending in a `compaction_trigger` item.
    Trigger,
}

/// Whether a Responses request body ends its input with a `compaction_trigger` item (read
/// only when the body names one at all).
pub fn ends_in_trigger(body: &[u8]) -> bool {
    const TRIGGER: &[u8] = b"compaction_trigger";
    if !body.windows(TRIGGER.len()).any(|w| w == TRIGGER) {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Request {
        #[serde(default)]
        input: Value,
    }
    serde_json::from_slice::<Request>(body)
        .ok()
        .and_then(|r| r.input.as_array()?.last().cloned())
        .is_some_and(|last| last["type"] == "compaction_trigger")
}

/// tamp's answer to `asked`, with the `x-tamp-compaction` header; an error in OpenAI's shape
/// when the body cannot be read (400) or the chain fails (502).
pub async fn answer(
    active: &Arc<ActiveChain>,
    metrics: &Metrics,
    asked: Asked,
    body: &Bytes,
    owner: Option<&str>,
) -> Result<Response, ProxyError> {
    let invalid = |message: String| {
        let mut e = ProxyError::new(StatusCode::BAD_REQUEST, "invalid_request", message);
        e.final_answer = true;
        e
    };
    let mut request: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("request body is not JSON: {e}")))?;
    let stream = request["stream"] == json!(true);
    let model = request["model"].clone();
    let Some(items) = request.get_mut("input").and_then(Value::as_array_mut) else {
        return Err(invalid(
            "input: tamp compacts a list of input items (a string input has nothing to compact)"
                .into(),
        ));
    };
    if items
        .last()
        .is_some_and(|i| i["type"] == "compaction_trigger")
    {
        items.pop();
    }
    let kept_users: Vec<Value> = items
        .iter()
        .filter(|i| is_user_message(i))
        .cloned()
        .collect();
    let text = request.to_string();
    let (conversation, _) = wire::parse_str(&text, Some(WireFormat::Responses))
        .map_err(|e| invalid(format!("request body: {e}")))?;
    let kept_texts: Vec<String> = conversation
        .messages
        .iter()
        .filter(|m| m.role == Role::User && !m.is_summary())
        .map(Message::joined_text)
        .collect();

    let budget = crate::budget::BudgetConfig {
        keep_recent: 0,
        ..*active.chain.budget()
    };
    let options = CompactOptions {
        format: Some(WireFormat::Responses),
        force: true,
        budget: Some(budget),
        thread_continuity: false,
    };
    let compacted = active
        .chain
        .compact(conversation, &options)
        .await
        .map_err(|e| {
            let status = match e {
                ChainError::InvalidInput(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::BAD_GATEWAY,
            };
            metrics.compaction_failed("error");
            ProxyError::new(status, "compaction_failed", e.to_string())
        })?;
    metrics.compaction(&compacted.report);
    if let Some(owner) = owner {
        super::owner::record(active, owner, &compacted.report, None).await;
    }

    // What the client drops and the item stands for: all but the leading instructions and
    // the user messages it keeps.
    let messages = &compacted.conversation.messages;
    let lead = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let dropped: Vec<Message> = messages[lead..]
        .iter()
        .filter(|m| {
            m.is_summary() || m.role != Role::User || !kept_texts.contains(&m.joined_text())
        })
        .cloned()
        .collect();
    let item = compaction_item(&dropped);

    let report = &compacted.report;
    let pages: Vec<String> = report
        .stages
        .iter()
        .flat_map(|s| s.pages.iter().cloned())
        .collect();
    let header_text = if pages.is_empty() {
        format!("{}->{}", report.tokens_before, report.tokens_after)
    } else {
        format!(
            "{}->{}; pages={}",
            report.tokens_before,
            report.tokens_after,
            pages.join(",")
        )
    };
    let usage = json!({
        "input_tokens": report.tokens_before,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": report.tokens_after,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": report.tokens_before + report.tokens_after,
    });
    let id = format!("resp_tamp_{}", &item["id"].as_str().unwrap_or("")[9..]);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut response = match asked {
        Asked::CompactEndpoint => {
            let mut output = kept_users;
            output.push(item);
            json_response(
                &json!({"id": id, "object": "response.compaction", "output": output,
                "created_at": created, "usage": usage}),
            )
        }
        Asked::Trigger => {
            let done = json!({"id": id, "object": "response", "created_at": created,
                "status": "completed", "error": null, "incomplete_details": null,
                "instructions": null, "model": model, "output": [item],
                "parallel_tool_calls": true, "metadata": {}, "tool_choice": "auto",
                "tools": [], "temperature": null, "top_p": null, "usage": usage});
            if stream {
                stream_response(done)
            } else {
                json_response(&done)
            }
        }
    };
    if let Ok(value) = HeaderValue::from_str(&header_text) {
        response.headers_mut().insert(
            HeaderName::from_static(super::compact::COMPACTION_HEADER),
            value,
        );
    }
    Ok(response)
}

/// A `message` item of role `user` (an input message with no `type` is one too).
fn is_user_message(item: &Value) -> bool {
    item["role"] == "user" && (item["type"] == "message" || item.get("type").is_none())
}

/// The `compaction` item standing for `messages`: their Responses items behind
/// [`wire::OWN_COMPACTION`], its id from their hash. The items are the writer's text as it
/// is: an item tamp carries unread (a type it does not know) may hold what a
/// `serde_json::Value` cannot (a lone surrogate escape, nesting past its depth limit), and
/// reading them back into one could only lose them.
fn compaction_item(messages: &[Message]) -> Value {
    let items = wire::write_messages(messages, WireFormat::Responses).compact();
    let content = format!("{}{items}", wire::OWN_COMPACTION);
    let hash = hex::encode(&Sha256::digest(content.as_bytes())[..12]);
    json!({"type": "compaction", "id": format!("cmp_tamp_{hash}"), "encrypted_content": content})
}

fn json_response(body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("a valid response")
}

/// A completed response as OpenAI streams it: created, in progress, each output item added
/// and done, completed; each event with its `sequence_number`.
fn stream_response(done: Value) -> Response {
    let mut started = done.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let mut events: Vec<Value> = vec![
        json!({"type": "response.created", "response": started}),
        json!({"type": "response.in_progress", "response": started}),
    ];
    for (index, item) in done["output"].as_array().into_iter().flatten().enumerate() {
        events.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        );
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": done}));
    let mut text = String::new();
    for (sequence, mut event) in events.into_iter().enumerate() {
        event["sequence_number"] = json!(sequence);
        let name = event["type"].as_str().unwrap_or("").to_string();
        text.push_str(&format!("event: {name}\ndata: {event}\n\n"));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(text))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_a_value_cannot_hold_survives_in_the_compaction_item() {
        // An item of a type tamp does not know, carried unread, with a lone surrogate escape
        // (valid JSON text, which serde_json's Value refuses).
        let unknown = r#"{"type":"web_search_call","id":"w","action":{"q":"\ud83d"}}"#;
        let body = format!(
            r#"{{"model":"m","input":[{{"type":"message","role":"user","content":"hi"}},{unknown},{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"done"}}]}}]}}"#
        );
        let (conversation, _) = wire::parse_str(&body, Some(WireFormat::Responses)).unwrap();
        let item = compaction_item(&conversation.messages[1..]);
        let content = item["encrypted_content"].as_str().unwrap();
        assert!(content.starts_with(wire::OWN_COMPACTION), "{content}");
        assert!(content.contains(r#""q":"\ud83d""#), "{content}");
        assert!(content.contains("done"), "{content}");
        // Sent back as the client's input, it reads as the items it stands for.
        let again = format!(
            r#"{{"model":"m","input":[{{"type":"message","role":"user","content":"hi"}},{item}]}}"#
        );
        let (read, _) = wire::parse_str(&again, Some(WireFormat::Responses)).unwrap();
        assert_eq!(read.messages.len(), conversation.messages.len());
    }

    #[test]
    fn a_trigger_is_the_last_input_item_only() {
        assert!(ends_in_trigger(
            br#"{"input": [{"type": "message", "role": "user", "content": "hi"}, {"type": "compaction_trigger"}]}"#
        ));
        assert!(!ends_in_trigger(
            br#"{"input": [{"type": "compaction_trigger"}, {"type": "message", "role": "user", "content": "hi"}]}"#
        ));
        assert!(!ends_in_trigger(br#"{"input": "compaction_trigger"}"#));
        assert!(!ends_in_trigger(br#"{"input": []}"#));
    }
}
