//! The thread a proxied request counts under, and the top-level fields of a request that the
//! proxy reads without reading its conversation. One order, for the pre-count and the full
//! read alike ([`RequestFields::thread`]):
//!
//! 1. the client's `x-tamp-thread-id` header;
//! 2. the body's `thread_id`;
//! 3. the agent's own session, from its body, then from its headers (`session:<id>`);
//! 4. else none here: the chain derives one from the system prompt and the user's opening turn.
//!
//! Without the agent's session the thread would be derived from the system prompt and the
//! user's opening turn, which are the same for every session of one agent in one folder: two
//! sessions running at once would take turns overwriting each other's thread state, and
//! neither would continue its own. The sessions the agents already send with every request:
//!
//! - Claude Code's `metadata.user_id`: a JSON string
//!   `{"device_id": ..., "account_uuid": ..., "session_id": "<uuid>"}` since 2.1, earlier
//!   `user_<hash>_account_<uuid>_session_<uuid>`; and its `x-claude-code-session-id` header
//!   (the same uuid). Any other `user_id` names a user, not a session, and is not used.
//! - Codex's `prompt_cache_key` (its session uuid; any Responses or Chat Completions client
//!   may set one: it names the requests that share a prompt cache, which is what a thread is)
//!   and its `session-id` header (the same uuid).

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::de::IgnoredAny;
use serde::Deserialize;

/// Longest session id taken; a longer value names no session.
const MAX_LEN: usize = 200;

/// The header a client names its thread with; it wins over anything the body or the other
/// headers say.
pub const THREAD_HEADER: &str = "x-tamp-thread-id";

/// The headers that carry an agent's session id: Claude Code's, then Codex's.
const SESSION_HEADERS: [&str; 2] = ["x-claude-code-session-id", "session-id"];

/// What names a request's thread besides its body: the client's `x-tamp-thread-id`, which
/// wins, and the agent session its headers name.
#[derive(Debug, Clone, Default)]
pub struct ThreadHint {
    pub given: Option<String>,
    pub header_session: Option<String>,
}

impl ThreadHint {
    /// The hint of a request with these headers: its [`THREAD_HEADER`], trimmed, and the
    /// session they name. A thread header that is blank or not visible ASCII is refused,
    /// with the message to answer.
    pub fn of(headers: &HeaderMap) -> Result<ThreadHint, String> {
        let given = match headers.get(THREAD_HEADER).map(|v| v.to_str()) {
            None => None,
            Some(Ok(id)) if !id.trim().is_empty() => Some(id.trim().to_string()),
            Some(_) => {
                return Err(format!(
                    "{THREAD_HEADER}: expected a non-empty visible-ASCII thread id"
                ))
            }
        };
        Ok(ThreadHint {
            given,
            header_session: header_session(headers),
        })
    }
}

/// The top-level fields of a request body that the proxy reads: what names its thread, its
/// model, and whether its history is the upstream's. Every other field (the conversation
/// among them) is skipped unread.
#[derive(Deserialize, Default)]
pub struct RequestFields<'a> {
    #[serde(borrow, default)]
    thread_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<Metadata<'a>>,
    #[serde(borrow, default)]
    prompt_cache_key: Option<Cow<'a, str>>,
    /// The model the request asks for (`[proxy.models]` picks its budget by it).
    #[serde(borrow, default)]
    pub model: Option<Cow<'a, str>>,
    #[serde(default)]
    previous_response_id: Option<IgnoredAny>,
    #[serde(default)]
    conversation: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow, default)]
    user_id: Option<Cow<'a, str>>,
}

impl<'a> RequestFields<'a> {
    /// The fields of the JSON object `text` (a body, or a wire reader's `metadata_json`);
    /// `None` when it is not an object or a field has another type than these (such a body
    /// takes the path that says what is wrong with it).
    pub fn read(text: &'a str) -> Option<RequestFields<'a>> {
        serde_json::from_str(text).ok()
    }

    /// The thread the request counts under, in the order of the module's doc; `None` when
    /// nothing but its leading messages names it.
    pub fn thread(&self, hint: &ThreadHint) -> Option<String> {
        if let Some(given) = &hint.given {
            return Some(given.clone());
        }
        if let Some(id) = &self.thread_id {
            return Some(id.to_string());
        }
        let claude = self
            .metadata
            .as_ref()
            .and_then(|m| m.user_id.as_deref())
            .and_then(claude_code_session);
        claude
            .or_else(|| self.prompt_cache_key.as_ref().map(|k| k.to_string()))
            .filter(|id| usable(id))
            .or_else(|| hint.header_session.clone())
            .map(|id| format!("session:{id}"))
    }

    /// The field through which the request leans on state the upstream keeps
    /// (`previous_response_id`, `conversation`, non-null), if it does: its history is then the
    /// upstream's, not in the body.
    pub fn server_side(&self) -> Option<&'static str> {
        if self.previous_response_id.is_some() {
            Some("previous_response_id")
        } else if self.conversation.is_some() {
            Some("conversation")
        } else {
            None
        }
    }
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
fn header_session(headers: &HeaderMap) -> Option<String> {
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
    fn the_thread_header_is_read_trimmed_and_a_blank_one_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(THREAD_HEADER, " t1 ".parse().unwrap());
        headers.insert("x-claude-code-session-id", "s1".parse().unwrap());
        let hint = ThreadHint::of(&headers).unwrap();
        assert_eq!(hint.given.as_deref(), Some("t1"));
        assert_eq!(hint.header_session.as_deref(), Some("s1"));
        headers.insert(THREAD_HEADER, "  ".parse().unwrap());
        let refused = ThreadHint::of(&headers).unwrap_err();
        assert!(refused.starts_with(THREAD_HEADER), "{refused}");
        assert_eq!(ThreadHint::of(&HeaderMap::new()).unwrap().given, None);
    }

    /// The thread of a body with these top-level fields and no `x-tamp-thread-id`.
    fn thread_of(fields: &str, header_session: Option<&str>) -> Option<String> {
        let hint = ThreadHint {
            given: None,
            header_session: header_session.map(str::to_string),
        };
        RequestFields::read(fields)
            .unwrap_or_default()
            .thread(&hint)
    }

    #[test]
    fn the_header_then_the_body_s_thread_id_then_the_session_name_the_thread() {
        let body = r#"{"thread_id":"t8","prompt_cache_key":"s1"}"#;
        let hint = |given: Option<&str>| ThreadHint {
            given: given.map(str::to_string),
            header_session: Some("h1".into()),
        };
        let fields = RequestFields::read(body).unwrap();
        assert_eq!(fields.thread(&hint(Some("t9"))).as_deref(), Some("t9"));
        assert_eq!(fields.thread(&hint(None)).as_deref(), Some("t8"));
        let fields = RequestFields::read(r#"{"prompt_cache_key":"s1"}"#).unwrap();
        assert_eq!(fields.thread(&hint(None)).as_deref(), Some("session:s1"));
        let fields = RequestFields::read(r#"{"model":"m"}"#).unwrap();
        assert_eq!(fields.thread(&hint(None)).as_deref(), Some("session:h1"));
        assert_eq!(fields.model.as_deref(), Some("m"));
        assert_eq!(fields.server_side(), None);
        let continuing = RequestFields::read(r#"{"previous_response_id":"resp_1"}"#).unwrap();
        assert_eq!(continuing.server_side(), Some("previous_response_id"));
        let null = RequestFields::read(r#"{"previous_response_id":null,"conversation":null}"#);
        assert_eq!(null.unwrap().server_side(), None);
        assert!(RequestFields::read(r#"{"thread_id":7}"#).is_none());
    }

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
