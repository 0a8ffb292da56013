//! What a request must look like, said when what tamp was given is something else: an empty
//! file, a bare list of messages, or an API *response* saved in place of the request that
//! asked for it are the usual mistakes, and each gets its own word.

use super::WireError;

/// The shapes tamp reads, named in every error about the top level.
pub(crate) const ACCEPTED: &str = "tamp reads a request body: {\"messages\": [...]} \
    (Anthropic Messages or OpenAI Chat Completions) or {\"input\": [...]} (OpenAI Responses)";

/// Text that holds nothing but whitespace.
pub(crate) fn empty() -> WireError {
    WireError::new("", format!("empty (no JSON at all); {ACCEPTED}"))
}

/// A top level that is not an object (`kind`: "an array", "a string", ...).
pub(crate) fn not_an_object(kind: &str) -> WireError {
    let hint = if kind == "an array" {
        " (a bare list of messages? put it in {\"messages\": [...]})"
    } else {
        ""
    };
    WireError::new(
        "",
        format!("expected a JSON object, found {kind}{hint}; {ACCEPTED}"),
    )
}

/// An object without the conversation's list (`list_key`: `messages` or `input`), whose
/// top-level keys are `keys`.
pub(crate) fn no_conversation<'a>(
    list_key: &str,
    keys: impl IntoIterator<Item = &'a str>,
) -> WireError {
    let keys: Vec<&str> = keys.into_iter().collect();
    let has = |key: &str| keys.contains(&key);
    let looks_like = if has("choices") {
        Some("an OpenAI Chat Completions response (it has \"choices\")")
    } else if has("output") {
        Some("an OpenAI Responses response (it has \"output\")")
    } else if has("role") && has("content") {
        Some("one message or an Anthropic Messages response (it has \"role\" and \"content\")")
    } else {
        None
    };
    let looks_like = looks_like
        .map(|what| format!(": this looks like {what}, not a request"))
        .unwrap_or_default();
    WireError::new(
        "",
        format!("missing \"{list_key}\"{looks_like}; {ACCEPTED}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mistake_is_named_with_the_accepted_shapes() {
        let said = |e: WireError| e.to_string();
        assert!(said(empty()).starts_with("empty (no JSON at all); tamp reads"));
        assert!(said(not_an_object("an array")).contains("a bare list of messages?"));
        assert!(!said(not_an_object("a string")).contains("bare list"));
        let response = said(no_conversation(
            "messages",
            ["id", "type", "role", "content", "stop_reason"],
        ));
        assert!(
            response.starts_with("missing \"messages\": this looks like one message or an Anthropic Messages response"),
            "{response}"
        );
        let completion = said(no_conversation("messages", ["id", "choices"]));
        assert!(
            completion.contains("OpenAI Chat Completions response"),
            "{completion}"
        );
        let plain = said(no_conversation("input", ["model"]));
        assert!(
            plain.starts_with("missing \"input\"; tamp reads"),
            "{plain}"
        );
        for text in [said(empty()), response, plain] {
            assert!(text.ends_with(ACCEPTED), "{text}");
        }
    }
}
