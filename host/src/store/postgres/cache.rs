//! The summary cache on PostgreSQL: an answer cached by one host is a hit on every host.

use futures::future::BoxFuture;
use futures::FutureExt;
use tamp_plugin_api::LlmResponse;

use super::{read_all, Failure, PostgresStore, NOW_SECS};
use crate::digest::CacheKey;
use crate::store::cache::{self, SummaryCache};
use crate::store::rows::{self, ANSWER_COLUMNS, RANGE_COLUMNS};
use crate::store::{RecordCheck, StoreError};

impl SummaryCache for PostgresStore {
    fn get_answer(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<LlmResponse>, StoreError>> {
        let location = self.location().to_owned();
        self.run(
            "read the summary cache".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {ANSWER_COLUMNS} FROM llm_answers WHERE key = $1"
                    ))
                    .await?;
                let Some(row) = client.query_opt(&stmt, &[&&key[..]]).await? else {
                    return Ok(None);
                };
                Ok(cache::checked(&location, rows::read_answer(&row, true)?).flatten())
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
                let seal = rows::answer_seal(&key, &json);
                // The first answer stands, whichever host wrote it.
                let stmt = client
                    .prepare_cached(&format!(
                        "INSERT INTO llm_answers (key, answer_json, created_at, seal)
                         VALUES ($1, $2, {NOW_SECS}, $3) ON CONFLICT (key) DO NOTHING"
                    ))
                    .await?;
                client.execute(&stmt, &[&&key[..], &json, &seal]).await?;
                Ok(())
            },
        )
        .boxed()
    }

    fn longest_range(
        &self,
        range_keys: Vec<CacheKey>,
    ) -> BoxFuture<'_, Result<Option<(usize, String)>, StoreError>> {
        let location = self.location().to_owned();
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
                         WHERE key = ANY($1) ORDER BY message_count DESC"
                    ))
                    .await?;
                // A damaged entry is a miss: the next longer one counts.
                let answer = client.query(&stmt, &[&keys]).await?;
                let read = read_all(&answer, |row| rows::read_range(row, true))?;
                Ok(read
                    .into_iter()
                    .find_map(|read| cache::checked(&location, read)))
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
                let count = rows::range_len(len);
                let seal = rows::range_seal(&key, count, &summary);
                let stmt = client
                    .prepare_cached(&format!(
                        "INSERT INTO range_summaries (key, message_count, summary, created_at, seal)
                         VALUES ($1, $2, $3, {NOW_SECS}, $4)
                         ON CONFLICT (key) DO UPDATE SET message_count = EXCLUDED.message_count,
                             summary = EXCLUDED.summary, created_at = EXCLUDED.created_at,
                             seal = EXCLUDED.seal"
                    ))
                    .await?;
                client
                    .execute(&stmt, &[&&key[..], &count, &summary, &seal])
                    .await?;
                Ok(())
            },
        )
        .boxed()
    }

    fn verify_cache(&self) -> BoxFuture<'_, Result<RecordCheck, StoreError>> {
        self.run(
            "check the summary cache".to_owned(),
            move |client| async move {
                let answers = client
                    .query(
                        &format!("SELECT {ANSWER_COLUMNS} FROM llm_answers ORDER BY key"),
                        &[],
                    )
                    .await?;
                let ranges = client
                    .query(
                        &format!("SELECT {RANGE_COLUMNS} FROM range_summaries ORDER BY key"),
                        &[],
                    )
                    .await?;
                let answers =
                    read_all(&answers, |row| Ok(rows::read_answer(row, true)?.map(drop)))?;
                let ranges = read_all(&ranges, |row| Ok(rows::read_range(row, true)?.map(drop)))?;
                Ok(cache::record_check(answers.into_iter().chain(ranges)))
            },
        )
        .boxed()
    }
}
