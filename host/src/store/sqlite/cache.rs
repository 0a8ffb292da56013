//! The summary cache in the SQLite file (see [`crate::store::cache`]).

use futures::future::BoxFuture;
use rusqlite::params;
use tamp_plugin_api::LlmResponse;

use super::{now_secs, select, select_first, to_i64, SqliteStore};
use crate::digest::CacheKey;
use crate::store::cache::{self, SummaryCache};
use crate::store::rows::{self, ANSWER_COLUMNS, RANGE_COLUMNS};
use crate::store::{RecordCheck, StoreError};

/// Range keys looked up per query: well under SQLite's bound on parameters.
const RANGE_KEYS_PER_QUERY: usize = 500;

impl SummaryCache for SqliteStore {
    fn get_answer(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<LlmResponse>, StoreError>> {
        Box::pin(self.run("read the summary cache".to_owned(), move |inner| {
            let answer = select_first(
                &inner.conn(),
                &format!("SELECT {ANSWER_COLUMNS} FROM llm_answers WHERE key = ?1"),
                params![&key[..]],
                |row| rows::read_answer(row, inner.records_sealed),
            )
            .map_err(|e| StoreError::backend(&inner.location, "read the summary cache", e))?;
            Ok(answer
                .and_then(|read| cache::checked(&inner.location, read))
                .flatten())
        }))
    }

    fn put_answer(
        &self,
        key: CacheKey,
        answer: LlmResponse,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(
            self.run("write the summary cache".to_owned(), move |inner| {
                let json = rows::encode_answer(&answer).map_err(|e| {
                    StoreError::backend(&inner.location, "encode a cached answer", e)
                })?;
                let seal = rows::answer_seal(&key, &json);
                inner
                    .writer("write the summary cache")?
                    .execute(
                        "INSERT OR IGNORE INTO llm_answers (key, answer_json, created_at, seal)
                     VALUES (?1, ?2, ?3, ?4)",
                        params![&key[..], json, to_i64(now_secs()), seal],
                    )
                    .map_err(|e| {
                        StoreError::backend(&inner.location, "write the summary cache", e)
                    })?;
                Ok(())
            }),
        )
    }

    fn longest_range(
        &self,
        range_keys: Vec<CacheKey>,
    ) -> BoxFuture<'_, Result<Option<(usize, String)>, StoreError>> {
        Box::pin(self.run("read the summary cache".to_owned(), move |inner| {
            let conn = inner.conn();
            // From the longest runs down: the first chunk with a hit holds the longest one
            // (a damaged entry is a miss: the next longer one counts).
            for chunk in range_keys.rchunks(RANGE_KEYS_PER_QUERY) {
                let sql = format!(
                    "SELECT {RANGE_COLUMNS} FROM range_summaries WHERE key IN ({}) \
                     ORDER BY message_count DESC",
                    rows::placeholders('?', 1, chunk.len())
                );
                let found = select(
                    &conn,
                    &sql,
                    rusqlite::params_from_iter(chunk.iter().map(|k| &k[..])),
                    |row| rows::read_range(row, inner.records_sealed),
                )
                .map_err(|e| StoreError::backend(&inner.location, "read the summary cache", e))?
                .into_iter()
                .find_map(|read| cache::checked(&inner.location, read));
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }))
    }

    fn put_range(
        &self,
        key: CacheKey,
        len: usize,
        summary: String,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(
            self.run("write the summary cache".to_owned(), move |inner| {
                let seal = rows::range_seal(&key, rows::range_len(len), &summary);
                inner
                    .writer("write the summary cache")?
                    .execute(
                        "INSERT OR REPLACE INTO range_summaries
                     (key, message_count, summary, created_at, seal) VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![
                            &key[..],
                            rows::range_len(len),
                            summary,
                            to_i64(now_secs()),
                            seal
                        ],
                    )
                    .map_err(|e| {
                        StoreError::backend(&inner.location, "write the summary cache", e)
                    })?;
                Ok(())
            }),
        )
    }

    fn verify_cache(&self) -> BoxFuture<'_, Result<RecordCheck, StoreError>> {
        Box::pin(
            self.run("check the summary cache".to_owned(), move |inner| {
                let conn = inner.conn();
                let sealed = inner.records_sealed;
                let fail = |e| StoreError::backend(&inner.location, "check the summary cache", e);
                let (answers, ranges) = if sealed {
                    (ANSWER_COLUMNS, RANGE_COLUMNS)
                } else {
                    (
                        "key, answer_json, NULL AS seal",
                        "key, message_count, summary, NULL AS seal",
                    )
                };
                let answers = select(
                    &conn,
                    &format!("SELECT {answers} FROM llm_answers ORDER BY key"),
                    [],
                    |row| Ok(rows::read_answer(row, sealed)?.map(drop)),
                )
                .map_err(fail)?;
                let ranges = select(
                    &conn,
                    &format!("SELECT {ranges} FROM range_summaries ORDER BY key"),
                    [],
                    |row| Ok(rows::read_range(row, sealed)?.map(drop)),
                )
                .map_err(fail)?;
                Ok(cache::record_check(answers.into_iter().chain(ranges)))
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use tamp_plugin_api::{FfiOption, LlmRequest, Message, Role, Usage};

    use super::*;
    use crate::store::cache::CacheScope;
    use crate::store::sqlite::tests::{conversation, version_one_store, TempDir};
    use crate::store::PageStore;

    fn answer(text: &str) -> LlmResponse {
        LlmResponse {
            text: text.into(),
            structured_json: FfiOption::RNone,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 2,
                ..Usage::default()
            },
            model: "scripted".into(),
            stop_reason: "end_turn".into(),
        }
    }

    #[tokio::test]
    async fn answers_round_trip_and_the_first_one_stands() {
        let store = SqliteStore::in_memory().unwrap();
        let key = CacheScope::new(Some("t"), "s", "c")
            .request_key("scripted", &LlmRequest::new("", "summarize", 50));
        assert_eq!(store.get_answer(key).await.unwrap(), None);
        store.put_answer(key, answer("first")).await.unwrap();
        store.put_answer(key, answer("second")).await.unwrap();
        assert_eq!(store.get_answer(key).await.unwrap(), Some(answer("first")));
    }

    #[tokio::test]
    async fn the_longest_cached_leading_run_wins_across_query_chunks() {
        let store = SqliteStore::in_memory().unwrap();
        let scope = CacheScope::new(None, "s", "c");
        let messages: Vec<Message> = (0..1_200)
            .map(|i| Message::text(Role::User, format!("message {i}")))
            .collect();
        let keys = scope.range_keys(&messages);
        assert_eq!(store.longest_range(keys.clone()).await.unwrap(), None);
        // Runs of 3, 450 and 700 messages: 700 lies in another query chunk than 3.
        for len in [3, 450, 700] {
            store
                .put_range(keys[len - 1], len, format!("summary of {len}"))
                .await
                .unwrap();
        }
        assert_eq!(
            store.longest_range(keys.clone()).await.unwrap(),
            Some((700, "summary of 700".to_string()))
        );
        assert_eq!(
            store.longest_range(keys[..600].to_vec()).await.unwrap(),
            Some((450, "summary of 450".to_string()))
        );
        // A different second message: only the run of its first message could match.
        let mut changed = messages.clone();
        changed[1] = Message::text(Role::User, "edited");
        assert_eq!(
            store
                .longest_range(scope.range_keys(&changed))
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_version_one_store_is_migrated_and_keeps_its_pages() {
        let dir = TempDir::new("migrate");
        let path = dir.0.join("store.sqlite3");
        let messages = conversation("v1");
        let id = version_one_store(&path, messages.clone()).await;
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.get_page(&id).await.unwrap().page.messages.as_slice(),
            messages.as_slice()
        );
        let key = CacheScope::new(None, "s", "c").request_key("p", &LlmRequest::new("", "x", 1));
        store
            .put_answer(key, answer("after migration"))
            .await
            .unwrap();
        assert_eq!(
            store.get_answer(key).await.unwrap(),
            Some(answer("after migration"))
        );
    }
}
