//! One thread per agent session, from what the agents already send with every request of a
//! session.
//!
//! Without it the thread is derived from the system prompt and the user's opening turn, which
//! are the same for every session of one agent in one folder: two sessions running at once
//! would take turns overwriting each other's thread state, and neither would continue its
//! own. So before that fallback the proxy looks for a session of the agent's own:
//!
//! - Claude Code's `metadata.user_id`: a JSON string
//!   `{"device_id": ..., "account_uuid": ..., "session_id": "<uuid>"}` since 2.1, earlier
//!   `user_<hash>_account_<uuid>_session_<uuid>`; and its `x-claude-code-session-id` header
//!   (the same uuid). Any other `user_id` names a user, not a session, and is not used.
//! - Codex's `prompt_cache_key` (its session uuid; any Responses or Chat Completions client
//!   may set one: it names the requests that share a prompt cache, which is what a thread is)
//!   and its `session-id` header (the same uuid).
//!
//! The thread's name is `session:<id>`. A client's `x-tamp-thread-id` still wins.

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::Deserialize;

/// Longest session id taken; a longer value names no session.
const MAX_LEN: usize = 200;

/// The headers that carry an agent's session id: Claude Code's, then Codex's.
const SESSION_HEADERS: [&str; 2] = ["x-claude-code-session-id", "session-id"];

/// The thread of an agent session, from the request's top-level fields other than the
/// conversation (a wire reader's `metadata_json`), or else from the session its headers name
/// ([`header_session`]).
pub fn thread_of(metadata_json: &str, header_session: Option<&str>) -> Option<String> {
    // Fields of other types than these (a `metadata` that is not an object, ...) are the
    // upstream's to refuse: they name no session here.
    let fields: Option<Fields> = serde_json::from_str(metadata_json).ok();
    session_thread(fields.and_then(Fields::session), header_session)
}

/// The top-level fields that can name a session; every other field is skipped unread.
#[derive(Deserialize)]
pub(super) struct Fields<'a> {
    #[serde(borrow, default)]
    pub metadata: Option<Metadata<'a>>,
    #[serde(borrow, default)]
    pub prompt_cache_key: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct Metadata<'a> {
    #[serde(borrow, default)]
    user_id: Option<Cow<'a, str>>,
}

impl Fields<'_> {
    /// The session these fields name, if any.
    pub fn session(self) -> Option<String> {
        let claude = self
            .metadata
            .and_then(|m| m.user_id)
            .and_then(|user_id| claude_code_session(&user_id));
        claude
            .or_else(|| self.prompt_cache_key.map(Cow::into_owned))
            .filter(|id| usable(id))
    }
}

/// The thread of the session a body names (`body_session`, from its [`Fields`]), else of
/// the one its headers name.
pub(super) fn session_thread(
    body_session: Option<String>,
    header_session: Option<&str>,
) -> Option<String> {
    body_session
        .or_else(|| header_session.map(str::to_string))
        .map(|id| format!("session:{id}"))
}

/// The `session_id` of Claude Code's `metadata.user_id`, in either of its forms.
fn claude_code_session(user_id: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct UserId<'a> {
        #[serde(borrow)]
        session_id: Cow<'a, str>,
    }
    if user_id.starts_with('{') {
        let parsed: UserId = serde_json::from_str(user_id).ok()?;
        return Some(parsed.session_id.into_owned());
    }
    let (_, session) = user_id.rsplit_once("_session_")?;
    user_id.starts_with("user_").then(|| session.to_string())
}

/// The session a request's headers name (Claude Code's `x-claude-code-session-id`, Codex's
/// `session-id`), if any.
pub fn header_session(headers: &HeaderMap) -> Option<String> {
    SESSION_HEADERS.iter().find_map(|name| {
        let value = headers.get(*name)?.to_str().ok()?.trim();
        usable(value).then(|| value.to_string())
    })
}

/// A session id worth a thread: not empty, not too long, visible ASCII.
fn usable(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::route::tests::headers;

    #[test]
    fn claude_codes_user_id_names_its_session_in_both_forms() {
        // As Claude Code 2.1 sends it: a JSON string.
        let meta = r#"{"model":"claude-opus-5-5","metadata":{"user_id":"{\"device_id\":\"5e29\",\"account_uuid\":\"\",\"session_id\":\"0de6b6e7-0016\"}"},"max_tokens":128000}"#;
        assert_eq!(
            thread_of(meta, None).as_deref(),
            Some("session:0de6b6e7-0016")
        );
        // Earlier versions.
        let meta = r#"{"metadata":{"user_id":"user_ab12_account_cd34_session_9f8e-77"}}"#;
        assert_eq!(thread_of(meta, None).as_deref(), Some("session:9f8e-77"));
        // Any other user id names a user, not a session.
        let meta = r#"{"metadata":{"user_id":"customer-42"}}"#;
        assert_eq!(thread_of(meta, None), None);
        // Then Claude Code's header.
        let h = header_session(&headers(&[("x-claude-code-session-id", "0de6b6e7-0016")]));
        assert_eq!(h.as_deref(), Some("0de6b6e7-0016"));
        assert_eq!(
            thread_of(meta, h.as_deref()).as_deref(),
            Some("session:0de6b6e7-0016")
        );
    }

    #[test]
    fn codexs_prompt_cache_key_or_session_header_names_its_session() {
        let meta = r#"{"model":"gpt-5.5-codex","tools":[{"type":"function","name":"exec_command"}],"store":false,"prompt_cache_key":"01a215e7-6af6"}"#;
        assert_eq!(
            thread_of(meta, None).as_deref(),
            Some("session:01a215e7-6af6")
        );
        let h = header_session(&headers(&[("session-id", "01a215e7-6af6")]));
        assert_eq!(
            thread_of(r#"{"model":"m"}"#, h.as_deref()).as_deref(),
            Some("session:01a215e7-6af6")
        );
        assert_eq!(header_session(&headers(&[("session-id", " ")])), None);
    }

    #[test]
    fn nothing_usable_names_no_session() {
        for meta in [
            r#"{"model":"m"}"#,
            r#"{"prompt_cache_key":""}"#,
            r#"{"prompt_cache_key":"has space"}"#,
            r#"{"prompt_cache_key":7}"#,
            r#"{"metadata":"not an object"}"#,
            "not json",
        ] {
            assert_eq!(thread_of(meta, None), None, "{meta}");
        }
        let long = format!(r#"{{"prompt_cache_key":"{}"}}"#, "k".repeat(MAX_LEN + 1));
        assert_eq!(thread_of(&long, None), None);
    }
}
