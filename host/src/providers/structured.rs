//! How the HTTP providers ask for structured answers (`provider.structured_output`), and the
//! "reply with JSON only" mode for servers without schema support: the prompt addition and
//! the reading of JSON out of free text.

use serde_json::Value;

/// `provider.structured_output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StructuredMode {
    /// The provider's native JSON-schema output; OpenAI-compatible servers that reject
    /// `response_format` are switched to [`StructuredMode::Prompt`] (once, remembered).
    Auto,
    /// Native JSON-schema output only.
    Native,
    /// Anthropic: a forced tool whose `input_schema` is the schema.
    Tool,
    /// "Reply with JSON only" in the prompt, then the JSON is read out of the text.
    Prompt,
}

impl StructuredMode {
    /// The config values, for messages.
    pub const NAMES: [&'static str; 4] = ["auto", "native", "tool", "prompt"];

    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "auto" => StructuredMode::Auto,
            "native" => StructuredMode::Native,
            "tool" => StructuredMode::Tool,
            "prompt" => StructuredMode::Prompt,
            _ => return None,
        })
    }
}

/// `prompt` with the instruction to answer with JSON satisfying `schema` (the request's schema
/// with its limits: here the text is the model's only guide).
pub fn prompt_with_json_instruction(prompt: &str, schema: &Value) -> String {
    format!(
        "{prompt}\n\nReply with JSON only: one JSON object that satisfies the JSON Schema below, \
         with no other text before or after it.\n\n{}",
        serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string())
    )
}

/// The JSON object in a free-text answer: the whole text, else the first fenced code block
/// that parses (```` ```json ````), else the span from the first `{` to the last `}`.
pub fn extract_json(text: &str) -> Option<Value> {
    let parse = |s: &str| {
        serde_json::from_str::<Value>(s.trim())
            .ok()
            .filter(Value::is_object)
    };
    if let Some(v) = parse(text) {
        return Some(v);
    }
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        // Skip the info string (`json`) up to the end of the line.
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(after.len());
        let body = &after[body_start..];
        let Some(close) = body.find("```") else { break };
        if let Some(v) = parse(&body[..close]) {
            return Some(v);
        }
        rest = &body[close + 3..];
    }
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    (end > start).then(|| parse(&text[start..=end])).flatten()
}

/// The JSON object a structured free-text answer holds ([`extract_json`]); for an answer the
/// provider `cut` at its output limit, else what it finished, closed ([`close_cut_json`]).
/// The schema check that follows still asks for every required key.
pub fn extract_or_mend(text: &str, cut: bool) -> Option<Value> {
    extract_json(text).or_else(|| cut.then(|| close_cut_json(text)).flatten())
}

/// The object a structured answer cut at its output limit holds so far: its text up to the
/// last value it finished, with the brackets still open closed. `None` when no value inside
/// the outermost object was finished.
pub fn close_cut_json(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let body = &text[start..];
    let mut open: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    // The last place a value ended (before a comma, or after a closing bracket), with the
    // brackets open there.
    let mut last: Option<(usize, Vec<char>)> = None;
    for (i, c) in body.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => open.push(c),
            '}' | ']' => {
                open.pop();
                if open.is_empty() {
                    return serde_json::from_str(&body[..=i]).ok();
                }
                last = Some((i + 1, open.clone()));
            }
            ',' if !open.is_empty() => last = Some((i, open.clone())),
            _ => {}
        }
    }
    let (end, open) = last?;
    let mut closed = body[..end].trim_end().to_string();
    for bracket in open.iter().rev() {
        closed.push(if *bracket == '{' { '}' } else { ']' });
    }
    serde_json::from_str::<Value>(&closed)
        .ok()
        .filter(Value::is_object)
}

/// A structured answer that stopped at its output limit (`cut_reason`, as the provider names
/// it) is kept only if the request's schema accepts it: what [`close_cut_json`] mended, or
/// anything else cut, is otherwise the provider's `malformed` error, as a cut answer was
/// before mending, so a recording never keeps an answer the host then refuses.
pub fn keep_cut_answer_if_accepted(
    provider: &str,
    request: &tamp_plugin_api::LlmRequest,
    response: tamp_plugin_api::LlmResponse,
    cut_reason: &str,
) -> Result<tamp_plugin_api::LlmResponse, super::ProviderError> {
    let tamp_plugin_api::FfiOption::RSome(schema) = &request.response_schema_json else {
        return Ok(response);
    };
    if response.stop_reason.as_str() != cut_reason {
        return Ok(response);
    }
    match super::schema::check_answer(schema.as_str(), &response) {
        Ok(()) => Ok(response),
        Err(reason) => Err(super::ProviderError::new(
            provider,
            super::ProviderErrorKind::Malformed,
            format!("the structured answer stopped at its output limit ({cut_reason}): {reason}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cut_answer_is_kept_only_if_the_schema_accepts_it() {
        use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Usage};
        let mut request = LlmRequest::new("", "p", 10);
        request.response_schema_json = FfiOption::RSome(
            json!({"type": "object", "required": ["a"]})
                .to_string()
                .into(),
        );
        let answer = |json: &str, stop: &str| LlmResponse {
            text: json.into(),
            structured_json: FfiOption::RSome(json.into()),
            usage: Usage::default(),
            model: "m".into(),
            stop_reason: stop.into(),
        };
        assert!(keep_cut_answer_if_accepted(
            "p",
            &request,
            answer(r#"{"a":1}"#, "length"),
            "length"
        )
        .is_ok());
        let refused =
            keep_cut_answer_if_accepted("p", &request, answer(r#"{"b":1}"#, "length"), "length")
                .unwrap_err();
        assert!(
            refused.to_string().contains("output limit (length)"),
            "{refused}"
        );
        // Not cut: the host's check decides later, as for any answer.
        assert!(
            keep_cut_answer_if_accepted("p", &request, answer(r#"{"b":1}"#, "stop"), "length")
                .is_ok()
        );
    }

    #[test]
    fn a_cut_answer_is_closed_after_its_last_finished_value() {
        let cut = r#"{"session_intent": "Fix the loader, then ship.", "next_steps": ["Add a test.", "Bisect the loader ch"#;
        assert_eq!(
            close_cut_json(cut),
            Some(
                json!({"session_intent": "Fix the loader, then ship.", "next_steps": ["Add a test."]})
            )
        );
        let in_intent = r#"{"session_intent": "Fix the lo"#;
        assert_eq!(close_cut_json(in_intent), None);
        let escaped = r#"{"a": ["say \"x, y\"", "z"#;
        assert_eq!(
            close_cut_json(escaped),
            Some(json!({"a": ["say \"x, y\""]}))
        );
    }

    #[test]
    fn modes_parse() {
        for name in StructuredMode::NAMES {
            assert!(StructuredMode::parse(name).is_some(), "{name}");
        }
        assert_eq!(StructuredMode::parse("json"), None);
    }

    #[test]
    fn json_is_found_bare_fenced_or_embedded() {
        let want = json!({"a": [1, 2], "b": "x}"});
        assert_eq!(
            extract_json(r#" {"a": [1, 2], "b": "x}"} "#),
            Some(want.clone())
        );
        assert_eq!(
            extract_json("Here it is:\n```json\n{\"a\": [1, 2], \"b\": \"x}\"}\n```\nDone."),
            Some(want.clone())
        );
        assert_eq!(
            extract_json("```\nnot json\n```\n```json\n{\"a\": [1, 2], \"b\": \"x}\"}\n```"),
            Some(want.clone())
        );
        assert_eq!(
            extract_json("Sure! {\"a\": [1, 2], \"b\": \"x}\"} Hope that helps."),
            Some(want)
        );
        assert_eq!(extract_json("no json here"), None);
        assert_eq!(extract_json("[1, 2]"), None);
        assert_eq!(extract_json("{\"truncated\": "), None);
    }

    #[test]
    fn the_instruction_quotes_the_schema() {
        let p = prompt_with_json_instruction("Summarize.", &json!({"type": "object"}));
        assert!(p.starts_with("Summarize.\n\nReply with JSON only"));
        assert!(p.ends_with("{\n  \"type\": \"object\"\n}"));
    }
}
