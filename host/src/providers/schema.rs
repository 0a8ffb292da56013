//! A request's JSON Schema turned into one a provider's structured output accepts.
//!
//! Both providers constrain generation with a subset of JSON Schema: every object closed
//! (`additionalProperties: false`), no `$schema`, no length, range or count keywords, only a
//! few `format`s, `anyOf` rather than `oneOf`; OpenAI's strict mode also wants every property
//! `required`. What is dropped here is not lost: the host validates every answer against the
//! request's *original* schema ([`check_answer`]) before a plugin sees it.
//!
//! Every answer valid for the sent schema is valid for the original except for the dropped
//! keywords: closing an object only forbids extra keys, and requiring an optional property
//! only asks the model to always fill it.
//!
//! Keywords are removed only where they are keywords: a property *named* `maximum` stays.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

/// Whose rules the sent schema follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Anthropic `output_config.format` and tool `input_schema`.
    Anthropic,
    /// OpenAI `response_format.json_schema` with `strict: true`: every property required.
    OpenAiStrict,
}

/// Keywords neither provider's structured output supports; the host enforces them after
/// parsing.
const UNSUPPORTED: &[&str] = &[
    "$schema",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
];

/// The string formats both providers document; others (schemars' `uint32`, `double`...) are
/// dropped.
const SUPPORTED_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords whose value is one schema.
const ONE_SCHEMA: &[&str] = &[
    "items",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
];
/// Keywords whose value is a list of schemas.
const SCHEMA_LIST: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];
/// Keywords whose value maps names to schemas.
const SCHEMA_MAP: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// `schema` (JSON text) as `dialect` accepts it. The root must describe an object (both
/// providers require it); the error says what is wrong with the schema.
pub fn for_provider(schema_json: &str, dialect: Dialect) -> Result<Value, String> {
    let schema: Value = serde_json::from_str(schema_json)
        .map_err(|e| format!("the response schema is not JSON: {e}"))?;
    if !describes_object(&schema) {
        return Err(
            "the response schema must describe an object (\"type\": \"object\") for structured output"
                .to_string(),
        );
    }
    Ok(convert(&schema, dialect))
}

/// `schema` without its `$schema` key: what "reply with JSON only" prompts quote, limits and
/// all, since there the model's only guide is the text.
pub fn for_prompt(schema_json: &str) -> Result<Value, String> {
    let mut schema: Value = serde_json::from_str(schema_json)
        .map_err(|e| format!("the response schema is not JSON: {e}"))?;
    if let Value::Object(map) = &mut schema {
        map.shift_remove("$schema");
    }
    Ok(schema)
}

fn describes_object(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        None => schema.get("properties").is_some(),
        _ => false,
    }
}

fn convert(schema: &Value, dialect: Dialect) -> Value {
    let Value::Object(map) = schema else {
        // `true`/`false` schemas and anything else pass unchanged.
        return schema.clone();
    };
    let mut out = Map::with_capacity(map.len() + 1);
    for (key, value) in map {
        let key_str = key.as_str();
        if UNSUPPORTED.contains(&key_str) {
            continue;
        }
        let converted = match key_str {
            "format"
                if !value
                    .as_str()
                    .is_some_and(|f| SUPPORTED_FORMATS.contains(&f)) =>
            {
                continue
            }
            k if ONE_SCHEMA.contains(&k) => match value {
                // Draft-07 tuple `items: [..]`.
                Value::Array(list) => {
                    Value::Array(list.iter().map(|s| convert(s, dialect)).collect())
                }
                one => convert(one, dialect),
            },
            k if SCHEMA_LIST.contains(&k) => match value {
                Value::Array(list) => {
                    Value::Array(list.iter().map(|s| convert(s, dialect)).collect())
                }
                other => other.clone(),
            },
            k if SCHEMA_MAP.contains(&k) => match value {
                Value::Object(named) => Value::Object(
                    named
                        .iter()
                        .map(|(name, s)| (name.clone(), convert(s, dialect)))
                        .collect(),
                ),
                other => other.clone(),
            },
            // Replaced below for objects; a schema-valued one cannot be expressed closed.
            "additionalProperties" if describes_object(schema) => continue,
            "additionalProperties" | "unevaluatedProperties" => match value {
                Value::Object(_) => convert(value, dialect),
                other => other.clone(),
            },
            _ => value.clone(),
        };
        // `oneOf` is not supported by strict decoders; `anyOf` constrains the same shapes
        // (exclusivity is checked by the host's validation).
        let key = if key_str == "oneOf" {
            "anyOf".to_string()
        } else {
            key.clone()
        };
        out.insert(key, converted);
    }
    if describes_object(schema) {
        out.insert("additionalProperties".into(), Value::Bool(false));
        if dialect == Dialect::OpenAiStrict {
            let names: Vec<Value> = match out.get("properties") {
                Some(Value::Object(props)) => props.keys().cloned().map(Value::String).collect(),
                _ => Vec::new(),
            };
            out.insert("required".into(), Value::Array(names));
            if !out.contains_key("properties") {
                out.insert("properties".into(), Value::Object(Map::new()));
            }
        }
    }
    Value::Object(out)
}

/// Distinct response schemas whose compiled validators are kept; past it the cache starts
/// over (plugins use a handful of fixed schemas, so this only bounds a pathological caller).
const MAX_CACHED_SCHEMAS: usize = 64;

/// Checks a structured answer before the plugin sees it: the provider must have returned
/// `structured_json`, and it must be JSON satisfying the request's schema. Validators are
/// compiled once per distinct schema text.
pub fn check_answer(schema: &str, response: &tamp_plugin_api::LlmResponse) -> Result<(), String> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> =
        OnceLock::new();
    let tamp_plugin_api::FfiOption::RSome(answer) = &response.structured_json else {
        return Err(
            "the request has a response schema but the answer has no structured JSON".to_string(),
        );
    };
    let validator = {
        let mut cache = VALIDATORS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match cache.get(schema) {
            Some(validator) => validator.clone(),
            None => {
                let parsed: serde_json::Value = serde_json::from_str(schema)
                    .map_err(|e| format!("the request's response schema is not JSON: {e}"))?;
                let validator = Arc::new(jsonschema::validator_for(&parsed).map_err(|e| {
                    format!("the request's response schema is not a valid JSON Schema: {e}")
                })?);
                if cache.len() >= MAX_CACHED_SCHEMAS {
                    cache.clear();
                }
                cache.insert(schema.to_string(), validator.clone());
                validator
            }
        }
    };
    let value: serde_json::Value = serde_json::from_str(answer.as_str())
        .map_err(|e| format!("the structured answer is not valid JSON: {e}"))?;
    if let Some(error) = validator.iter_errors(&value).next() {
        let at = error.instance_path().to_string();
        let at = if at.is_empty() { "/".to_string() } else { at };
        return Err(format!(
            "the structured answer does not satisfy the schema at {at}: {error}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shape schemars 1 gives a Rust struct: `$schema`, `title`, length and count limits,
    /// an integer `format`, an optional field.
    fn schemars_like() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "AnchoredSummary",
            "type": "object",
            "properties": {
                "session_intent": {"type": "string", "maxLength": 2000, "description": "why"},
                "files_modified": {"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 50},
                "count": {"type": "integer", "format": "uint32", "minimum": 0},
                "when": {"type": ["string", "null"], "format": "date-time"},
                "maximum": {"type": "number", "maximum": 3}
            },
            "required": ["session_intent", "files_modified"]
        })
    }

    #[test]
    fn anthropic_schema_is_closed_and_unbounded() {
        let sent = for_provider(&schemars_like().to_string(), Dialect::Anthropic).unwrap();
        assert_eq!(
            sent,
            json!({
                "title": "AnchoredSummary",
                "type": "object",
                "properties": {
                    "session_intent": {"type": "string", "description": "why"},
                    "files_modified": {"type": "array", "items": {"type": "string"}},
                    "count": {"type": "integer"},
                    "when": {"type": ["string", "null"], "format": "date-time"},
                    "maximum": {"type": "number"}
                },
                "required": ["session_intent", "files_modified"],
                "additionalProperties": false
            })
        );
        // Declaration order survives.
        let keys: Vec<_> = sent["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [
                "session_intent",
                "files_modified",
                "count",
                "when",
                "maximum"
            ]
        );
    }

    #[test]
    fn openai_strict_requires_every_property_in_order() {
        let sent = for_provider(&schemars_like().to_string(), Dialect::OpenAiStrict).unwrap();
        assert_eq!(
            sent["required"],
            json!([
                "session_intent",
                "files_modified",
                "count",
                "when",
                "maximum"
            ])
        );
        assert_eq!(sent["additionalProperties"], json!(false));
    }

    #[test]
    fn nested_objects_defs_and_unions_are_converted() {
        let schema = json!({
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1},
                "choice": {"oneOf": [{"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}}, {"type": "null"}]},
                "map": {"type": "object", "additionalProperties": {"type": "string"}}
            },
            "$defs": {
                "Item": {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": true}
            }
        });
        let sent = for_provider(&schema.to_string(), Dialect::OpenAiStrict).unwrap();
        assert_eq!(
            sent,
            json!({
                "type": "object",
                "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                    "choice": {"anyOf": [
                        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false, "required": ["a"]},
                        {"type": "null"}
                    ]},
                    "map": {"type": "object", "additionalProperties": false, "required": [], "properties": {}}
                },
                "$defs": {
                    "Item": {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": false, "required": ["name"]}
                },
                "additionalProperties": false,
                "required": ["items", "choice", "map"]
            })
        );
    }

    #[test]
    fn the_root_must_be_an_object() {
        let err = for_provider(
            r#"{"type": "array", "items": {"type": "string"}}"#,
            Dialect::Anthropic,
        )
        .unwrap_err();
        assert!(err.contains("must describe an object"), "{err}");
        assert!(for_provider("not json", Dialect::Anthropic)
            .unwrap_err()
            .contains("not JSON"));
        assert!(for_provider(r#"{"properties": {}}"#, Dialect::Anthropic).is_ok());
    }

    #[test]
    fn prompt_schema_keeps_the_limits() {
        let quoted = for_prompt(&schemars_like().to_string()).unwrap();
        assert!(quoted.get("$schema").is_none());
        assert_eq!(
            quoted["properties"]["session_intent"]["maxLength"],
            json!(2000)
        );
    }

    #[test]
    fn the_real_plugin_schema_converts() {
        // The schema tamp's anchored-structured plugin sends, as schemars writes it.
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "AnchoredSummary",
            "type": "object",
            "properties": {
                "session_intent": {"description": "What the session is trying to achieve.", "type": "string", "maxLength": 2000},
                "next_steps": {"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 50}
            },
            "additionalProperties": false,
            "required": ["session_intent", "next_steps"]
        });
        let sent = for_provider(&schema.to_string(), Dialect::Anthropic).unwrap();
        let text = sent.to_string();
        for keyword in ["$schema", "maxLength", "maxItems"] {
            assert!(!text.contains(keyword), "{keyword} left in {text}");
        }
        assert_eq!(sent["additionalProperties"], json!(false));
    }

    fn answer(structured: Option<&str>) -> tamp_plugin_api::LlmResponse {
        tamp_plugin_api::LlmResponse {
            text: "t".into(),
            structured_json: match structured {
                Some(json) => tamp_plugin_api::FfiOption::RSome(json.into()),
                None => tamp_plugin_api::FfiOption::RNone,
            },
            usage: tamp_plugin_api::Usage::default(),
            model: "m".into(),
            stop_reason: "end_turn".into(),
        }
    }

    const SCHEMA: &str = r#"{"type":"object","required":["facts"],
        "properties":{"facts":{"type":"array","items":{"type":"string"},"maxItems":2}}}"#;

    #[test]
    fn structured_answers_are_checked_against_the_schema() {
        check_answer(SCHEMA, &answer(Some(r#"{"facts":["a"]}"#))).unwrap();
        // Twice: the second run uses the cached validator.
        check_answer(SCHEMA, &answer(Some(r#"{"facts":[]}"#))).unwrap();
        let missing = check_answer(SCHEMA, &answer(None)).unwrap_err();
        assert!(missing.contains("no structured JSON"), "{missing}");
        let broken = check_answer(SCHEMA, &answer(Some("{\"facts\": ["))).unwrap_err();
        assert!(broken.contains("not valid JSON"), "{broken}");
        let too_many =
            check_answer(SCHEMA, &answer(Some(r#"{"facts":["a","b","c"]}"#))).unwrap_err();
        assert!(too_many.contains("/facts"), "{too_many}");
        let wrong_type = check_answer(SCHEMA, &answer(Some(r#"{"facts":[1]}"#))).unwrap_err();
        assert!(wrong_type.contains("/facts/0"), "{wrong_type}");
        let bad_schema = check_answer("{\"type\": 5}", &answer(Some("{}"))).unwrap_err();
        assert!(
            bad_schema.contains("not a valid JSON Schema"),
            "{bad_schema}"
        );
    }
}
