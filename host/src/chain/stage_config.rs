//! A stage's config checked against its plugin's schema, the error naming the field at fault.

/// A stage config that does not fit its plugin's schema.
#[derive(Debug, Clone)]
pub struct StageConfigError {
    /// The keys (and array indexes) from the config's root to the field at fault, from the
    /// validator's instance path; for a key the schema does not allow, the key itself. Empty
    /// when no field is known (the plugin refused the config as a whole).
    pub path: Vec<String>,
    pub message: String,
}

impl std::fmt::Display for StageConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

pub(super) fn validate_against_schema(
    schema: &serde_json::Value,
    config: &serde_json::Value,
) -> Result<(), StageConfigError> {
    let validator = jsonschema::validator_for(schema).map_err(|e| StageConfigError {
        path: Vec::new(),
        message: format!("the plugin's config schema is not valid JSON Schema: {e}"),
    })?;
    if let Some(error) = validator.iter_errors(config).next() {
        let pointer = error.instance_path().to_string();
        let message = if pointer.is_empty() {
            format!("config: {error}")
        } else {
            format!("config{}: {error}", pointer.replace('/', "."))
        };
        let mut path: Vec<String> = error
            .instance_path()
            .iter()
            .map(|segment| segment.to_string())
            .collect();
        let mut message = message;
        // An unknown key is reported at the object that holds it; the key is what to point at,
        // and the keys the object takes are what the author needs next (usually a typo).
        if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
            error.kind()
        {
            path.extend(unexpected.first().cloned());
            let keys = allowed_keys(schema, &error.schema_path().to_string());
            if !keys.is_empty() {
                message.push_str(&format!("; the keys it takes: {}", keys.join(", ")));
            }
        }
        return Err(StageConfigError { path, message });
    }
    Ok(())
}

/// The property names of the schema object holding the `additionalProperties` rule at
/// `schema_path` (a JSON pointer into the schema, ending in `/additionalProperties`), with a
/// `$ref` to the schema's definitions followed once. Empty when it cannot be found.
fn allowed_keys(schema: &serde_json::Value, schema_path: &str) -> Vec<String> {
    let holder = schema_path
        .strip_suffix("/additionalProperties")
        .and_then(|parent| schema.pointer(parent));
    // The validator's path may run through the `$ref` keyword itself (then it names the
    // reference's text) or stop at the object holding it.
    let reference = holder.and_then(|h| h.as_str().or_else(|| h.get("$ref")?.as_str()));
    let holder = match reference {
        Some(reference) => reference
            .strip_prefix('#')
            .and_then(|pointer| schema.pointer(pointer)),
        None => holder,
    };
    let mut keys: Vec<String> = holder
        .and_then(|h| h.get("properties"))
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> serde_json::Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "group_size": {"type": "integer", "minimum": 1},
                "prompt": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"style": {"type": "string"}}
                },
                "labels": {"type": "array", "items": {"type": "string"}}
            }
        })
    }

    fn error_for(config: serde_json::Value) -> StageConfigError {
        validate_against_schema(&schema(), &config).unwrap_err()
    }

    #[test]
    fn a_schema_error_names_the_path_of_the_field_from_the_validator() {
        let e = error_for(json!({"group_size": 0}));
        assert_eq!(e.path, ["group_size"]);
        assert!(e.message.starts_with("config.group_size: "), "{e}");
        let e = error_for(json!({"labels": ["a", 3]}));
        assert_eq!(e.path, ["labels", "1"]);
        assert!(e.message.starts_with("config.labels.1: "), "{e}");
    }

    #[test]
    fn an_unknown_key_is_named_by_the_key_not_its_parent() {
        let e = error_for(json!({"grup_size": 2}));
        assert_eq!(e.path, ["grup_size"]);
        assert!(e.message.starts_with("config: "), "{e}");
        // Nested: the unknown key's own name, under the object holding it. The message text
        // quotes the key, but the path does not come from it: a key with a quote in it is
        // still named whole.
        let e = error_for(json!({"prompt": {"it's": "x"}}));
        assert_eq!(e.path, ["prompt", "it's"]);
        assert!(e.message.starts_with("config.prompt: "), "{e}");
        assert!(validate_against_schema(&schema(), &json!({"group_size": 3})).is_ok());
    }

    #[test]
    fn an_unknown_key_lists_the_keys_its_object_takes() {
        let e = error_for(json!({"grup_size": 2}));
        assert!(
            e.message
                .ends_with("; the keys it takes: group_size, labels, prompt"),
            "{e}"
        );
        let e = error_for(json!({"prompt": {"stile": "x"}}));
        assert!(e.message.ends_with("; the keys it takes: style"), "{e}");
        // Through a reference to the schema's definitions, as schemars writes nested structs.
        let referenced = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {"prompt": {"$ref": "#/$defs/Prompt"}},
            "$defs": {"Prompt": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"style": {"type": "string"}, "words": {"type": "integer"}}
            }}
        });
        let e = validate_against_schema(&referenced, &json!({"prompt": {"wrds": 3}})).unwrap_err();
        assert!(
            e.message.ends_with("; the keys it takes: style, words"),
            "{e}"
        );
    }
}
