//! Pages: immutable archives of the original messages a stage replaced, and how a page is
//! named.
//!
//! A page's id is its content address, made here rather than in the host because both sides
//! name pages: a `Replace` edit names the page its span makes, and a clearing's placeholder
//! names the page of the message it cleared before the host has archived it. Changing how ids
//! are made is therefore an ABI change, and the loader's version check covers it.

use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::conversation::Message;

/// What a plugin hands the host to archive.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageDraft {
    /// The original messages, in conversation order.
    pub messages: RVec<Message>,
    /// The strategy archiving them.
    pub strategy: RString,
    /// Plugin-defined JSON object stored with the page (e.g. a structured summary), or empty.
    pub metadata_json: RString,
}

/// An archived page, as loaded back from the store.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Content-addressed id (`pg_` + hex digest): the same messages give the same id.
    pub id: RString,
    pub thread_id: ROption<RString>,
    pub strategy: RString,
    pub messages: RVec<Message>,
    pub metadata_json: RString,
    /// Seconds since the Unix epoch when the page was first written.
    pub created_at: u64,
}

impl Page {
    /// The JSON object the strategy stored with the page, or an empty string.
    pub fn metadata(&self) -> &str {
        &self.metadata_json
    }
}

/// Length of the hex digest in a page id: 32 hex characters, the first 128 bits of SHA-256.
pub const PAGE_ID_HEX_LEN: usize = 32;

/// The content address of `messages`: `pg_` + the first 32 hex characters of the SHA-256 of
/// their canonical JSON ([`canonical_json`]). The same messages always make the same id.
pub fn page_id(messages: &[Message]) -> String {
    page_id_of_json(&canonical_json(messages))
}

/// The canonical JSON of a page's messages (`serde_json::to_vec` of the slice): what
/// [`page_id`] hashes and what stores keep.
pub fn canonical_json(messages: &[Message]) -> Vec<u8> {
    // Serializing plain data types to a Vec cannot fail: every map key is a string.
    serde_json::to_vec(messages).expect("messages serialize to JSON")
}

/// The id of a page whose canonical JSON is `json`.
pub fn page_id_of_json(json: &[u8]) -> String {
    let digest = Sha256::digest(json);
    let mut id = String::with_capacity(3 + PAGE_ID_HEX_LEN);
    id.push_str("pg_");
    id.push_str(&hex::encode(&digest[..PAGE_ID_HEX_LEN / 2]));
    id
}

/// Hex digits in a page's short ref: `pg_` and the first 12 of its id's 32 (48 bits, so two
/// pages of one store are told apart in all but about one store in ten thousand of a hundred
/// thousand pages; a store that holds two says so). A ledger names the earlier pages it points
/// into by their short refs: full ids took a quarter of its tokens.
pub const SHORT_REF_HEX_LEN: usize = 12;

/// The short ref of the page id `id`; any other ref (a test's `pg_1`) as it is.
pub fn short_ref(id: &str) -> &str {
    if prefix_ref(id).is_some() || id.len() == 3 + PAGE_ID_HEX_LEN && is_hex_ref(id) {
        &id[..(3 + SHORT_REF_HEX_LEN).min(id.len())]
    } else {
        id
    }
}

/// `reference` when it is a short ref (`pg_` and [`SHORT_REF_HEX_LEN`] to 31 lowercase hex
/// digits): a start of a page id, for a store to look the page up by.
pub fn prefix_ref(reference: &str) -> Option<&str> {
    let hex = reference.len().checked_sub(3)?;
    ((SHORT_REF_HEX_LEN..PAGE_ID_HEX_LEN).contains(&hex) && is_hex_ref(reference))
        .then_some(reference)
}

/// `pg_` and lowercase hex digits.
fn is_hex_ref(reference: &str) -> bool {
    reference.strip_prefix("pg_").is_some_and(|hex| {
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Role;

    #[test]
    fn a_short_ref_is_the_start_of_a_page_id() {
        let id = page_id(&[]);
        assert_eq!(short_ref(&id), "pg_4f53cda18c2b");
        assert_eq!(prefix_ref(short_ref(&id)), Some("pg_4f53cda18c2b"));
        assert_eq!(short_ref(short_ref(&id)), "pg_4f53cda18c2b");
        // Longer starts are prefixes too; a whole id, a shorter start or other refs are not.
        assert!(prefix_ref(&id[..30]).is_some());
        assert_eq!(prefix_ref(&id), None);
        assert_eq!(prefix_ref("pg_4f53cda18c2"), None);
        assert_eq!(prefix_ref("pg_4F53CDA18C2B"), None);
        assert_eq!(prefix_ref("pg_4f53cda18c2_"), None);
        assert_eq!(short_ref("pg_1"), "pg_1");
        assert_eq!(
            short_ref("pg_4F53CDA18C2BAA0C0354BB5F9A3ECBE5"),
            "pg_4F53CDA18C2BAA0C0354BB5F9A3ECBE5"
        );
    }

    #[test]
    fn page_id_is_prefixed_hex_and_content_addressed() {
        let a = vec![Message::text(Role::User, "hello")];
        let b = vec![Message::text(Role::User, "hello!")];
        let id = page_id(&a);
        assert!(id.starts_with("pg_"));
        assert_eq!(id.len(), 3 + PAGE_ID_HEX_LEN);
        assert!(id[3..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(id, page_id(&a.clone()));
        assert_ne!(id, page_id(&b));
        // The documented form, pinned: stores and built plugins depend on it.
        assert_eq!(page_id_of_json(b"[]"), page_id(&[]));
        assert_eq!(page_id(&[]), "pg_4f53cda18c2baa0c0354bb5f9a3ecbe5");
    }
}
