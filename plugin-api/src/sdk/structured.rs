//! Typed structured output: ask for an answer shaped like a Rust type, and read it back as
//! that type, without touching the request's and answer's wire fields.
//!
//! ```
//! use tamp_plugin_api::prelude::*;
//! use tamp_plugin_api::sdk::structured::{scripted_answer, SchemaRequest as _, StructuredAnswer as _};
//!
//! #[derive(Debug, Deserialize, JsonSchema)]
//! #[serde(crate = "tamp_plugin_api::serde")]
//! #[schemars(crate = "tamp_plugin_api::schemars")]
//! struct Verdict { keep: bool, why: String }
//!
//! let request = LlmRequest::new("system", "Is this worth keeping?", 100).with_schema::<Verdict>();
//! assert!(request.response_schema_json.is_some());
//!
//! // The host answers a request with a schema with the JSON it validated.
//! let answer = scripted_answer("", Some(r#"{"keep": true, "why": "it names the fix"}"#));
//! let verdict: Verdict = answer.structured().unwrap();
//! assert!(verdict.keep);
//!
//! let wrong = scripted_answer("", Some(r#"{"keep": "yes"}"#));
//! let err = wrong.structured::<Verdict>().unwrap_err().to_string();
//! assert!(err.starts_with("the answer does not fit Verdict: keep: invalid type"), "{err}");
//! ```

use std::fmt;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::llm::{LlmRequest, LlmResponse, Usage};

/// What the SDK adds to [`LlmRequest`] (in the prelude).
pub trait SchemaRequest: Sized {
    /// The request asking for an answer that is a `T`: `T`'s JSON Schema (from `schemars`) is
    /// sent as the response schema, and the host checks the answer against it.
    fn with_schema<T: JsonSchema>(self) -> Self {
        let schema = schemars::schema_for!(T);
        self.with_schema_json(&serde_json::to_value(schema).expect("a JSON Schema serializes"))
    }

    /// The request with `schema` as its response schema, for a schema written or adjusted by
    /// hand (a property left out for this call, say).
    fn with_schema_json(self, schema: &Value) -> Self;
}

impl SchemaRequest for LlmRequest {
    fn with_schema_json(mut self, schema: &Value) -> Self {
        self.response_schema_json =
            abi_stable::std_types::ROption::RSome(schema.to_string().into());
        self
    }
}

/// Why a structured answer cannot be read as the type asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StructuredError {
    /// The answer carries no structured JSON (the request had no schema).
    Missing,
    /// The structured JSON does not parse.
    NotJson(String),
    /// It parses but is not a `type_name`: `path` (`.` for the whole value) says where.
    Mismatch {
        type_name: &'static str,
        path: String,
        message: String,
    },
}

impl fmt::Display for StructuredError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StructuredError::Missing => f.write_str("the answer has no structured JSON"),
            StructuredError::NotJson(e) => write!(f, "invalid JSON: {e}"),
            StructuredError::Mismatch {
                type_name,
                path,
                message,
            } if path == "." => write!(f, "the answer does not fit {type_name}: {message}"),
            StructuredError::Mismatch {
                type_name,
                path,
                message,
            } => write!(f, "the answer does not fit {type_name}: {path}: {message}"),
        }
    }
}

impl std::error::Error for StructuredError {}

/// What the SDK adds to [`LlmResponse`] (in the prelude).
pub trait StructuredAnswer {
    /// The structured JSON of the answer, parsed.
    fn structured_value(&self) -> Result<Value, StructuredError>;

    /// The structured JSON of the answer, as a `T`; the error names what is wrong and where.
    fn structured<T: DeserializeOwned>(&self) -> Result<T, StructuredError> {
        parse(self.structured_value()?)
    }
}

impl StructuredAnswer for LlmResponse {
    fn structured_value(&self) -> Result<Value, StructuredError> {
        let json = self
            .structured_json
            .as_ref()
            .into_option()
            .ok_or(StructuredError::Missing)?;
        serde_json::from_str(json).map_err(|e| StructuredError::NotJson(e.to_string()))
    }
}

/// `value` as a `T`, with the error [`StructuredAnswer::structured`] gives: for an answer
/// adjusted as a [`Value`] first (a property the request left out, filled in).
pub fn parse<T: DeserializeOwned>(value: Value) -> Result<T, StructuredError> {
    serde_path_to_error::deserialize(value).map_err(|e| StructuredError::Mismatch {
        type_name: short_type_name::<T>(),
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// `Verdict`, not `my_plugin::schema::Verdict`: what a reader of a warning recognizes.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    let generic = full.find('<').unwrap_or(full.len());
    match full[..generic].rfind("::") {
        Some(i) => &full[i + 2..],
        None => full,
    }
}

/// An answer as the host hands it over, for a plugin's unit tests: `text`, and `structured`
/// as its structured JSON (what a request with a schema gets).
pub fn scripted_answer(text: &str, structured: Option<&str>) -> LlmResponse {
    LlmResponse {
        text: text.into(),
        structured_json: structured.map(Into::into).into(),
        usage: Usage::default(),
        model: "scripted".into(),
        stop_reason: "end_turn".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Notes {
        intent: String,
        steps: Vec<String>,
    }

    /// A JSON value in a request (a schema a plugin adjusts, a prior shown in a prompt) keeps
    /// its fields in the order they were inserted, in any build: a request's text, and so its
    /// recorded answer and its cache key, must not depend on whether another crate in the
    /// build turned on serde_json's `preserve_order` (the host does; `cargo test -p
    /// tamp-plugin-api` builds this crate's features alone). Without it, removing a field
    /// from a schema's `properties` reorders the rest in one build and not in the other.
    #[test]
    fn json_in_a_request_keeps_its_field_order_in_any_build() {
        let mut schema = serde_json::json!({"properties": {"c": 1, "b": 2, "a": 3, "z": 4}});
        schema["properties"]
            .as_object_mut()
            .unwrap()
            .shift_remove("b");
        let request = LlmRequest::new("s", "p", 10).with_schema_json(&schema);
        assert_eq!(
            request.response_schema_json.unwrap().as_str(),
            r#"{"properties":{"c":1,"a":3,"z":4}}"#
        );
    }

    #[test]
    fn a_request_carries_the_schema_of_its_type() {
        let request = LlmRequest::new("", "p", 10).with_schema::<Notes>();
        let schema: Value =
            serde_json::from_str(request.response_schema_json.as_ref().unwrap()).unwrap();
        assert_eq!(schema["title"], "Notes");
        assert_eq!(schema["required"], serde_json::json!(["intent", "steps"]));
        let by_hand = LlmRequest::new("", "p", 10).with_schema_json(&serde_json::json!({}));
        assert_eq!(
            by_hand.response_schema_json.as_ref().unwrap().as_str(),
            "{}"
        );
    }

    #[test]
    fn an_answer_reads_back_as_its_type() {
        let answer = scripted_answer("", Some(r#"{"intent":"fix","steps":["test"]}"#));
        assert_eq!(
            answer.structured::<Notes>().unwrap(),
            Notes {
                intent: "fix".into(),
                steps: vec!["test".into()],
            }
        );
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let err = |structured: Option<&str>| {
            scripted_answer("text", structured)
                .structured::<Notes>()
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(None), "the answer has no structured JSON");
        assert!(err(Some("{not json")).starts_with("invalid JSON: "));
        assert_eq!(
            err(Some(r#"{"intent":"x","steps":[1]}"#)),
            "the answer does not fit Notes: steps[0]: invalid type: integer `1`, expected a string"
        );
        assert!(
            err(Some(r#"{"intent":"x"}"#)).contains("missing field `steps`"),
            "{}",
            err(Some(r#"{"intent":"x"}"#))
        );
        assert_eq!(short_type_name::<Notes>(), "Notes");
        assert!(short_type_name::<Vec<Notes>>().starts_with("Vec<"));
    }
}
