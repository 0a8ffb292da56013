//! The summary cache on PostgreSQL: an answer cached by one host is a hit on every host.

use futures::future::BoxFuture;
use futures::FutureExt;
use tamp_plugin_api::LlmResponse;

use super::{Failure, PostgresStore, NOW_SECS};
use crate::digest::CacheKey;
use crate::store::cache::SummaryCache;
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
                let json: String = row.try_get(0)?;
                // An entry this build cannot read is a miss, not an error: the call is made.
                Ok(serde_json::from_str(&json).ok())
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
                let json = serde_json::to_string(&answer)
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
                    .prepare_cached(
                        "SELECT message_count, summary FROM range_summaries
                         WHERE key = ANY($1) ORDER BY message_count DESC LIMIT 1",
                    )
                    .await?;
                let Some(row) = client.query_opt(&stmt, &[&keys]).await? else {
                    return Ok(None);
                };
                let count: i64 = row.try_get(0)?;
                Ok(Some((usize::try_from(count).unwrap_or(0), row.try_get(1)?)))
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
                    .execute(&stmt, &[&&key[..], &(len as i64), &summary])
                    .await?;
                Ok(())
            },
        )
        .boxed()
    }
}
