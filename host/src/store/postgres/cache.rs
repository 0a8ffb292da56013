//! The summary cache on PostgreSQL: an answer cached by one host is a hit on every host.

use futures::future::BoxFuture;
use futures::FutureExt;
use tamp_plugin_api::LlmResponse;

use super::{Failure, PostgresStore, NOW_SECS};
use crate::digest::CacheKey;
use crate::store::cache::SummaryCache;
use crate::store::rows::{self, RANGE_COLUMNS};
use crate::store::StoreError;

impl SummaryCache for PostgresStore {
    fn get_answer(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<LlmResponse>, StoreError>> {
        self.run(
            "read the summary cache".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached("SELECT answer_json FROM llm_answers WHERE key = $1")
                    .await?;
                let Some(row) = client.query_opt(&stmt, &[&&key[..]]).await? else {
                    return Ok(None);
                };
                Ok(rows::read_answer(&row)?)
            },
        )
        .boxed()
    }

    fn put_answer(
        &self,
        key: CacheKey,
        answer: LlmResponse,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.run(
            "write the summary cache".to_owned(),
            move |client| async move {
                let json = rows::encode_answer(&answer)
                    .map_err(|e| Failure::Other(format!("encode a cached answer: {e}")))?;
                // The first answer stands, whichever host wrote it.
                let stmt = client
                    .prepare_cached(&format!(
                        "INSERT INTO llm_answers (key, answer_json, created_at)
                         VALUES ($1, $2, {NOW_SECS}) ON CONFLICT (key) DO NOTHING"
                    ))
                    .await?;
                client.execute(&stmt, &[&&key[..], &json]).await?;
                Ok(())
            },
        )
        .boxed()
    }

    fn longest_range(
        &self,
        range_keys: Vec<CacheKey>,
    ) -> BoxFuture<'_, Result<Option<(usize, String)>, StoreError>> {
        self.run(
            "read the summary cache".to_owned(),
            move |client| async move {
                if range_keys.is_empty() {
                    return Ok(None);
                }
                // One round trip for any number of keys: they travel as one bytea[].
                let keys: Vec<&[u8]> = range_keys.iter().map(|k| &k[..]).collect();
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {RANGE_COLUMNS} FROM range_summaries
                         WHERE key = ANY($1) ORDER BY message_count DESC LIMIT 1"
                    ))
                    .await?;
                let Some(row) = client.query_opt(&stmt, &[&keys]).await? else {
                    return Ok(None);
                };
                Ok(Some(rows::read_range(&row)?))
            },
        )
        .boxed()
    }

    fn put_range(
        &self,
        key: CacheKey,
        len: usize,
        summary: String,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.run(
            "write the summary cache".to_owned(),
            move |client| async move {
                // As in the SQLite store, the latest summary of a run replaces the one before.
                let stmt = client
                    .prepare_cached(&format!(
                        "INSERT INTO range_summaries (key, message_count, summary, created_at)
                         VALUES ($1, $2, $3, {NOW_SECS})
                         ON CONFLICT (key) DO UPDATE SET message_count = EXCLUDED.message_count,
                             summary = EXCLUDED.summary, created_at = EXCLUDED.created_at"
                    ))
                    .await?;
                client
                    .execute(&stmt, &[&&key[..], &rows::range_len(len), &summary])
                    .await?;
                Ok(())
            },
        )
        .boxed()
    }
}
