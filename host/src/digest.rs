//! The digests that name stored things: the summary cache's keys, a recording's request key,
//! a stage config's hash and a message's content hash (which thread keys and thread prefixes
//! chain). A leaf: it imports nothing of the host, so the store, the providers and thread
//! continuity all build on it without importing each other.
//!
//! Stores keep these digests, so every function here must hash the same bytes forever: a
//! change would make every existing cache entry, recording and thread state miss. The tests
//! pin their outputs.

use sha2::{Digest, Sha256};
use tamp_plugin_api::{LlmRequest, Message};

/// A cache key: a SHA-256 digest.
pub type CacheKey = [u8; 32];

/// Feeds `hasher` every field of `request` that can change its answer, each length-prefixed or
/// tagged so that no two requests feed the same bytes. The label is for logs only. One
/// encoding for every key of an answer: the summary cache's and a recording's.
pub fn hash_answer_inputs(hasher: &mut Sha256, request: &LlmRequest) {
    let LlmRequest {
        system,
        prompt,
        max_output_tokens,
        temperature,
        response_schema_json,
        label: _,
    } = request;
    for part in [system.as_str(), prompt.as_str()] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(max_output_tokens.to_le_bytes());
    match temperature.into_option() {
        Some(t) => {
            hasher.update(b"t");
            hasher.update(t.to_le_bytes());
        }
        None => hasher.update(b"-"),
    }
    match response_schema_json.as_ref().into_option() {
        Some(schema) => {
            hasher.update(b"s");
            hasher.update((schema.len() as u64).to_le_bytes());
            hasher.update(schema.as_bytes());
        }
        None => hasher.update(b"-"),
    }
}

/// A message's content hash (role, content and summary marker; the same message hashes the
/// same in every conversation).
pub fn message_digest(message: &Message) -> CacheKey {
    // Serializing plain data to a Vec cannot fail: every map key is a string.
    let json = serde_json::to_vec(message).expect("messages serialize to JSON");
    Sha256::digest(json).into()
}

/// The hash of a stage config, independent of key order: part of every cache scope
/// (`store::CacheScope`), so a retuned stage never reuses answers made under another config.
pub fn config_hash(config: &serde_json::Value) -> String {
    // Compact JSON with every object's keys sorted (serde_json keeps insertion order here,
    // with `preserve_order`).
    let mut sorted = config.clone();
    sorted.sort_all_objects();
    let text = serde_json::to_string(&sorted).expect("a JSON value serializes");
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

/// What makes a chain another chain, for thread continuity: each stage's name, plugin (name
/// and version), trigger and config. A thread's last answer made by another chain is not
/// continued (see `store::threads`). The budget is left out: an answer made under another
/// budget is still this chain's work, and the next compaction works to the new watermarks,
/// so retuning a budget does not restart every thread.
pub fn chain_identity<'a>(
    stages: impl Iterator<Item = (&'a str, &'a str, &'a str, &'a str, &'a str)>,
) -> String {
    let mut h = Sha256::new();
    h.update(b"tamp-chain-identity/1");
    for (name, plugin, version, trigger, config_hash) in stages {
        // Each field ended by a NUL: a name cannot run into the next field.
        for field in [name, plugin, version, trigger, config_hash] {
            h.update(field.as_bytes());
            h.update([0]);
        }
    }
    hex::encode(&h.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_another_when_any_stage_field_differs_and_fields_do_not_run_together() {
        let id = |stages: &[(&str, &str, &str, &str, &str)]| chain_identity(stages.iter().copied());
        let one = (
            "archive",
            "buffered-tool-call",
            "0.1.0",
            "over_budget",
            "c1",
        );
        assert_eq!(id(&[one]), id(&[one]));
        for other in [
            (
                "archive2",
                "buffered-tool-call",
                "0.1.0",
                "over_budget",
                "c1",
            ),
            (
                "archive",
                "map-reduce-adaptive",
                "0.1.0",
                "over_budget",
                "c1",
            ),
            (
                "archive",
                "buffered-tool-call",
                "0.2.0",
                "over_budget",
                "c1",
            ),
            ("archive", "buffered-tool-call", "0.1.0", "always", "c1"),
            (
                "archive",
                "buffered-tool-call",
                "0.1.0",
                "over_budget",
                "c2",
            ),
            (
                "archiveb",
                "uffered-tool-call",
                "0.1.0",
                "over_budget",
                "c1",
            ),
        ] {
            assert_ne!(id(&[one]), id(&[other]), "{other:?}");
        }
        assert_ne!(id(&[one]), id(&[one, one]));
        assert_ne!(id(&[]), id(&[one]));
    }
    use tamp_plugin_api::{FfiOption, Role};

    #[test]
    fn config_hash_ignores_key_order() {
        let a = serde_json::json!({"x": 1, "y": {"b": [1, 2], "a": "s"}});
        let b = serde_json::json!({"y": {"a": "s", "b": [1, 2]}, "x": 1});
        assert_eq!(config_hash(&a), config_hash(&b));
        assert_ne!(config_hash(&a), config_hash(&serde_json::json!({"x": 2})));
        // Pinned: a changed hash would miss every summary cached before it.
        let nested = serde_json::json!({"z": [{"b": 1, "a": null}], "k\"ey": "v\u{e9}", "a": 1.5});
        assert_eq!(config_hash(&nested), "59c6b633da18d30cac0153434ed64ecb");
    }

    /// Pinned: a changed digest would miss every cache entry, recorded answer and thread
    /// state stored before it.
    #[test]
    fn digests_are_pinned() {
        assert_eq!(
            hex::encode(message_digest(&Message::text(Role::User, "a"))),
            "0970619e4d5ff63bc5f772c8069eece8aa6cbbe930e24178e5e4f2a7e3377e94"
        );
        let mut request = LlmRequest::new("sys", "prompt", 100);
        request.temperature = FfiOption::RSome(0.5);
        request.response_schema_json = FfiOption::RSome(r#"{"type":"object"}"#.into());
        let mut h = Sha256::new();
        h.update(b"tamp-recorded-answer-v1");
        hash_answer_inputs(&mut h, &request);
        assert_eq!(
            hex::encode(h.finalize()),
            "000609e61fe9d21ceb7d50d23bf6e0ecf6cebba0961b5c1e453d0b8034fff31d"
        );
    }
}
