//! Finding archived messages again, and whose they are.
//!
//! Every page is indexed for full-text search when it is written: its messages rendered as the
//! text a reader would search ([`searchable_text`]), in SQLite's FTS5 or PostgreSQL's full-text
//! search. A page is content-addressed, so two users whose agents archived the same messages
//! share one page: who may read a page is therefore recorded beside it, not in it. The proxy
//! records the *owner* of each page a request's compaction wrote (a keyed hash of the
//! credential the request carried, [`owner_of_credential`], never the credential), and the MCP
//! server over HTTP finds and reads only the pages of the credential its client presents. A
//! local server (`tamp mcp` over stdio) reads its own store whole ([`Scope::All`]).

use futures::future::BoxFuture;
use hmac::{KeyInit, Mac};
use serde::Serialize;
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};
use tamp_plugin_api::Message;

use super::StoreError;

/// The most text of one page that is indexed: past it a page is searchable by its beginning.
pub const MAX_INDEXED_CHARS: usize = 1 << 20;

/// The first schema version with the search index and page owners.
pub(crate) const INDEXED_SINCE: i64 = 8;

/// The `tamp_secrets` row of the owner key (made by the migration that made the index).
pub(crate) const OWNER_KEY: &str = "owner_hmac";

/// Whose pages a search or a read may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every page of the store (a local server reading its own store).
    All,
    /// The pages recorded for this owner ([`owner_of_credential`]).
    Owner(&'a str),
}

/// One page a search found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SearchHit {
    pub page_id: String,
    pub thread_id: Option<String>,
    /// The strategy that archived it.
    pub strategy: String,
    /// Seconds since the Unix epoch when the page was first written.
    pub created_at: u64,
    /// The matching text around the words found, which are between `[` and `]`.
    pub snippet: String,
}

/// The search index and the pages' owners. Implemented by both stores.
pub trait PageSearch: Send + Sync {
    /// The pages whose text matches every word of `query` (case and accents aside), best
    /// first, at most `limit`, among those `scope` may see. A query with no word finds
    /// nothing.
    fn search_pages(
        &self,
        query: &str,
        scope: Scope<'_>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SearchHit>, StoreError>>;

    /// Records `owner` as an owner of `pages` (written while compacting its thread `thread`).
    fn record_owner(
        &self,
        owner: &str,
        pages: &[String],
        thread: Option<&str>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Whether `scope` may read page `id` (a full id).
    fn may_read(&self, id: &str, scope: Scope<'_>) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// The store's key for owner hashes, made (random) when the store gained its index and
    /// kept in it, so that every host sharing the store derives the same owner from the same
    /// credential.
    fn owner_key(&self) -> BoxFuture<'_, Result<Vec<u8>, StoreError>>;
}

/// The owner a credential stands for: HMAC-SHA-256 of the credential under the store's
/// [`PageSearch::owner_key`], in hex. The credential itself is never stored.
pub fn owner_of_credential(key: &[u8], credential: &str) -> String {
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(credential.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The owner key as its `tamp_secrets` row holds it (hex), read back.
pub(crate) fn owner_key_of(hex_text: &str) -> Result<Vec<u8>, String> {
    hex::decode(hex_text.trim())
        .ok()
        .filter(|key| key.len() == 32)
        .ok_or_else(|| "tamp_secrets holds no owner key (the row was removed or altered)".into())
}

/// A new random key for [`PageSearch::owner_key`].
pub(crate) fn new_owner_key() -> Vec<u8> {
    let mut key = vec![0u8; 32];
    getrandom::fill(&mut key).expect("the operating system's random source");
    key
}

/// The text a page is searched by: its messages rendered whole (roles, tool calls and their
/// inputs, tool results), at most [`MAX_INDEXED_CHARS`].
pub fn searchable_text(messages: &[Message]) -> String {
    let mut text = render_messages(messages, &RenderOptions::cut_at(0));
    if text.len() > MAX_INDEXED_CHARS {
        let mut cut = MAX_INDEXED_CHARS;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// The words of a user's query (letters, digits and the characters that join them in
/// identifiers and codes: `_`, `-`, `.`, `:`, `/`), each at least one letter or digit; at
/// most 16. Both backends search for these words, never for the query's own syntax.
pub fn query_words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !(c.is_alphanumeric() || "_-.:/".contains(c)))
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .take(16)
        .collect()
}

/// `words` as an FTS5 query: each a quoted phrase (so `-` or `:` inside one is text, not
/// syntax), all of them required.
pub(crate) fn fts5_query(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" AND ")
}

#[cfg(test)]
mod tests {
    use tamp_plugin_api::{ContentBlock, Role};

    use super::*;

    #[test]
    fn a_query_is_words_never_syntax() {
        assert_eq!(
            query_words("deploy code: K7-4481-QX"),
            ["deploy", "code", "k7-4481-qx"]
        );
        assert_eq!(
            query_words("\"a\" OR b* NEAR(c)"),
            ["a", "or", "b", "near", "c"]
        );
        assert_eq!(query_words("  -- ::: "), Vec::<String>::new());
        assert_eq!(fts5_query(&query_words("x\"y")), "\"x\" AND \"y\"");
        assert_eq!(query_words(&"w ".repeat(40)).len(), 16);
    }

    #[test]
    fn an_owner_is_a_keyed_hash_of_the_credential() {
        let a = owner_of_credential(b"key one", "sk-ant-123");
        assert_eq!(a.len(), 64);
        assert!(!a.contains("sk-ant"));
        assert_eq!(a, owner_of_credential(b"key one", "sk-ant-123"));
        assert_ne!(a, owner_of_credential(b"key two", "sk-ant-123"));
        assert_ne!(a, owner_of_credential(b"key one", "sk-ant-124"));
        assert_ne!(new_owner_key(), new_owner_key());
    }

    #[test]
    fn the_searchable_text_holds_calls_inputs_and_outputs_whole() {
        let long = "x".repeat(10_000);
        let messages = vec![
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "t1",
                    "Bash",
                    r#"{"command":"make"}"#,
                )],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result(
                    "t1",
                    format!("deploy code: K7-4481-QX\n{long}"),
                    false,
                )],
            ),
        ];
        let text = searchable_text(&messages);
        assert!(text.contains("Bash"), "{text}");
        assert!(text.contains("make"), "{text}");
        assert!(text.contains("deploy code: K7-4481-QX"), "{text}");
        assert!(text.contains(&long));
    }
}
