//! A page's seal: the SHA-256 of everything a page is besides its messages (its id, which
//! hashes the messages, its thread, strategy, wire format, metadata and message count), kept
//! beside it in both backends (schema version 6). A page's id alone covers only its
//! messages: a thread id or metadata altered in the database would still be served as
//! the original, and `tamp pages verify` would say ok. Reading a page checks its messages
//! against its id ([`super::decode_page_messages`]), its message count against its
//! messages, and the rest against its seal.
//!
//! Pages written before seals existed are sealed when the store migrates to version 6, as
//! they are then: from there on, a change to any field is seen.
//!
//! What a chain reads back as its own besides pages is sealed the same way since version 7
//! ([`Record`]): a thread's state (its answer, which the thread's next request starts from),
//! and the summary cache's answers and ranges (which a chain puts in a conversation as a
//! summary). Altered in the database, such a record is not used: a thread starts again from
//! its raw history, a cache entry is a miss. Version 7 also gives the store its summary key
//! ([`crate::summary_mac`]), kept in `tamp_secrets`.

use sha2::{Digest as _, Sha256};

use tamp_plugin_api::Message;

/// The schema version whose pages carry a seal.
pub(crate) const SEALED_SINCE: i64 = 6;

/// The schema version whose thread states and cache entries carry a seal, and whose store
/// keeps a summary key.
pub(crate) const RECORDS_SEALED_SINCE: i64 = 7;

/// The `tamp_secrets` row of the summary key.
pub(crate) const SUMMARY_KEY: &str = "summary_mac";

/// Migration 6 -> 7, the same on both backends.
pub(crate) const MIGRATION_RECORDS: &str = "CREATE TABLE tamp_secrets (
        name  TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    );
    ALTER TABLE threads ADD COLUMN seal TEXT;
    ALTER TABLE llm_answers ADD COLUMN seal TEXT;
    ALTER TABLE range_summaries ADD COLUMN seal TEXT;";

/// A stored record other than a page, as its row holds it: what its seal covers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Record<'a> {
    /// `threads (key, state_json)`.
    Thread { key: &'a str, state_json: &'a str },
    /// `llm_answers (key, answer_json)`.
    Answer { key: &'a [u8], answer_json: &'a str },
    /// `range_summaries (key, message_count, summary)`.
    Range {
        key: &'a [u8],
        message_count: i64,
        summary: &'a str,
    },
}

impl Record<'_> {
    /// The hex SHA-256 of a JSON array of its fields behind a tag naming what it is.
    pub fn seal(&self) -> String {
        let fields = match self {
            Record::Thread { key, state_json } => {
                serde_json::json!(["tamp-thread-seal/1", key, state_json])
            }
            Record::Answer { key, answer_json } => {
                serde_json::json!(["tamp-answer-seal/1", hex::encode(key), answer_json])
            }
            Record::Range {
                key,
                message_count,
                summary,
            } => serde_json::json!([
                "tamp-range-seal/1",
                hex::encode(key),
                message_count,
                summary
            ]),
        };
        hex::encode(Sha256::digest(fields.to_string().as_bytes()))
    }

    /// Checks `seal` (the row's, `None` when it has none); the error is what is wrong.
    pub fn check(&self, seal: Option<&str>) -> Result<(), String> {
        match seal {
            None => Err(
                "it has no seal (every one of this schema has one): it was altered or \
                         damaged after it was written"
                    .into(),
            ),
            Some(seal) if seal != self.seal() => Err("it no longer matches its seal: it was \
                                                       altered or damaged after it was written"
                .into()),
            Some(_) => Ok(()),
        }
    }

    /// What it is, for messages: `the thread state of id:t1`, `a cached answer 3f2a…`.
    pub fn describe(&self) -> String {
        match self {
            Record::Thread { key, .. } => format!("the thread state of {key}"),
            Record::Answer { key, .. } => format!("the cached answer {}", short_hex(key)),
            Record::Range { key, .. } => format!("the cached summary {}", short_hex(key)),
        }
    }
}

/// The first 12 hex digits of a cache key: enough to tell entries apart in a report.
fn short_hex(key: &[u8]) -> String {
    hex::encode(&key[..key.len().min(6)])
}

/// The fields of a stored page the seal covers, as the row holds them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageRow<'a> {
    pub id: &'a str,
    pub thread_id: Option<&'a str>,
    pub strategy: &'a str,
    pub source_format: Option<&'a str>,
    pub metadata_json: &'a str,
    pub message_count: i64,
}

impl<'a> PageRow<'a> {
    /// The row a new page will be written as, under its id.
    pub fn of_new(id: &'a str, page: &'a super::NewPage) -> PageRow<'a> {
        PageRow {
            id,
            thread_id: page.thread_id.as_deref(),
            strategy: &page.strategy,
            source_format: page.source_format.as_deref(),
            metadata_json: &page.metadata_json,
            message_count: i64::try_from(page.messages.len()).unwrap_or(i64::MAX),
        }
    }

    /// The seal of these fields: hex SHA-256 of a JSON array of them (JSON keeps every
    /// field's bounds unambiguous), behind a version tag.
    pub fn seal(&self) -> String {
        let fields = serde_json::json!([
            "tamp-page-seal/1",
            self.id,
            self.thread_id,
            self.strategy,
            self.source_format,
            self.metadata_json,
            self.message_count,
        ]);
        hex::encode(Sha256::digest(fields.to_string().as_bytes()))
    }

    /// The page's messages from its stored text, every field checked: the messages against
    /// the id, their count against the row's, the rest against `seal` (`None` for a store
    /// whose schema predates seals, read without migrating it). The error is the
    /// [`super::StoreError::Corrupt`] detail.
    pub fn check(
        &self,
        messages_json: &str,
        seal: Option<Option<&str>>,
    ) -> Result<Vec<Message>, String> {
        let messages = super::decode_page_messages(self.id, messages_json)?;
        if usize::try_from(self.message_count).ok() != Some(messages.len()) {
            return Err(format!(
                "its message count says {} but it holds {} message(s): the stored page was \
                 altered or damaged after it was written",
                self.message_count,
                messages.len()
            ));
        }
        match seal {
            None => {}
            Some(None) => {
                return Err(
                    "it has no seal (every page of this schema has one): the stored \
                            page was altered or damaged after it was written"
                        .into(),
                )
            }
            Some(Some(seal)) if seal != self.seal() => {
                return Err(
                    "its thread, strategy, wire format or metadata no longer match \
                            its seal: the stored page was altered or damaged after it was \
                            written"
                        .into(),
                )
            }
            Some(Some(_)) => {}
        }
        Ok(messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::page::{canonical_json, page_id};

    #[test]
    fn a_record_s_seal_covers_every_field_and_what_it_is() {
        let thread = Record::Thread {
            key: "id:t",
            state_json: "{\"covered\":1}",
        };
        let seal = thread.seal();
        assert_eq!(thread.check(Some(&seal)), Ok(()));
        assert!(thread.check(None).unwrap_err().contains("no seal"));
        let altered = Record::Thread {
            key: "id:t",
            state_json: "{\"covered\":2}",
        };
        assert!(altered
            .check(Some(&seal))
            .unwrap_err()
            .contains("no longer matches its seal"));
        // Moved to another thread: refused too.
        let moved = Record::Thread {
            key: "id:u",
            state_json: "{\"covered\":1}",
        };
        assert!(moved.check(Some(&seal)).is_err());
        let answer = Record::Answer {
            key: b"k",
            answer_json: "{\"covered\":1}",
        };
        assert_ne!(answer.seal(), seal, "a thread's seal is no answer's");
        let range = |count| Record::Range {
            key: b"k",
            message_count: count,
            summary: "s",
        };
        assert!(range(2).check(Some(&range(3).seal())).is_err());
        assert_eq!(thread.describe(), "the thread state of id:t");
        assert_eq!(answer.describe(), "the cached answer 6b");
    }
    use tamp_plugin_api::Role;

    #[test]
    fn every_field_is_covered_and_the_count_is_checked() {
        let messages = vec![Message::text(Role::User, "hello")];
        let json = String::from_utf8(canonical_json(&messages)).unwrap();
        let id = page_id(&messages);
        let row = PageRow {
            id: &id,
            thread_id: Some("t1"),
            strategy: "s",
            source_format: Some("anthropic"),
            metadata_json: "{\"k\":1}",
            message_count: 1,
        };
        let seal = row.seal();
        assert_eq!(row.check(&json, Some(Some(&seal))).unwrap(), messages);
        assert!(
            row.check(&json, None).is_ok(),
            "an unsealed schema: no seal to check"
        );
        let altered = [
            PageRow {
                thread_id: Some("t2"),
                ..row
            },
            PageRow {
                thread_id: None,
                ..row
            },
            PageRow {
                strategy: "other",
                ..row
            },
            PageRow {
                source_format: Some("openai"),
                ..row
            },
            PageRow {
                metadata_json: "{\"k\":2}",
                ..row
            },
        ];
        for changed in altered {
            assert_ne!(changed.seal(), seal, "{changed:?}");
            let e = changed.check(&json, Some(Some(&seal))).unwrap_err();
            assert!(e.contains("no longer match its seal"), "{e}");
        }
        let counted = PageRow {
            message_count: 2,
            ..row
        };
        let e = counted.check(&json, None).unwrap_err();
        assert!(e.contains("message count says 2 but it holds 1"), "{e}");
        let e = row.check(&json, Some(None)).unwrap_err();
        assert!(e.contains("no seal"), "{e}");
        // A field's bounds cannot move: ("ab", "c") and ("a", "bc") seal differently.
        let a = PageRow {
            strategy: "ab",
            metadata_json: "c",
            ..row
        };
        let b = PageRow {
            strategy: "a",
            metadata_json: "bc",
            ..row
        };
        assert_ne!(a.seal(), b.seal());
    }
}
