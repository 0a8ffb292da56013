//! Thread states on PostgreSQL: a thread compacted by one replica continues on any other.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{read_all, Failure, PostgresStore, NOW_SECS};
use crate::store::rows::{self, THREAD_COLUMNS};
use crate::store::threads::{ThreadLimits, ThreadState, ThreadStore};
use crate::store::{RecordCheck, StoreError};

impl ThreadStore for PostgresStore {
    fn get_thread(
        &self,
        key: &str,
        ttl_secs: u64,
    ) -> BoxFuture<'_, Result<Option<ThreadState>, StoreError>> {
        let key = key.to_owned();
        let ttl = i64::try_from(ttl_secs).unwrap_or(i64::MAX);
        self.run("read a thread state".to_owned(), move |client| async move {
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {THREAD_COLUMNS} FROM threads
                         WHERE key = $1 AND updated_at >= {NOW_SECS} - $2"
                ))
                .await?;
            let Some(row) = client.query_opt(&stmt, &[&key, &ttl]).await? else {
                return Ok(None);
            };
            rows::read_thread_state(&row, true)?.map_err(Failure::Damaged)
        })
        .boxed()
    }

    fn put_thread(
        &self,
        key: &str,
        state: &ThreadState,
        limits: ThreadLimits,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let key = key.to_owned();
        let json = rows::encode_thread_state(state);
        let seal = rows::thread_seal(&key, &json);
        let ttl = i64::try_from(limits.ttl_secs).unwrap_or(i64::MAX);
        let max = i64::try_from(limits.max_threads.max(1)).unwrap_or(i64::MAX);
        self.run(
            "write a thread state".to_owned(),
            move |mut client| async move {
                let tx = client.transaction().await?;
                tx.execute(
                    &format!(
                        "INSERT INTO threads (key, state_json, updated_at, seal)
                         VALUES ($1, $2, {NOW_SECS}, $3)
                         ON CONFLICT (key) DO UPDATE SET state_json = EXCLUDED.state_json,
                         updated_at = EXCLUDED.updated_at, seal = EXCLUDED.seal"
                    ),
                    &[&key, &json, &seal],
                )
                .await?;
                tx.execute(
                    &format!("DELETE FROM threads WHERE updated_at < {NOW_SECS} - $1"),
                    &[&ttl],
                )
                .await?;
                tx.execute(
                    "DELETE FROM threads WHERE key IN (SELECT key FROM threads
                     ORDER BY updated_at DESC, key OFFSET $1)",
                    &[&max],
                )
                .await?;
                tx.commit().await?;
                Ok(())
            },
        )
        .boxed()
    }

    fn verify_threads(&self) -> BoxFuture<'_, Result<RecordCheck, StoreError>> {
        self.run(
            "check the thread states".to_owned(),
            move |client| async move {
                let answer = client
                    .query(
                        &format!("SELECT {THREAD_COLUMNS} FROM threads ORDER BY key"),
                        &[],
                    )
                    .await?;
                let read = read_all(&answer, |row| {
                    Ok((row.text("key")?, rows::read_thread_state(row, true)?))
                })?;
                Ok(crate::store::threads::thread_check(read))
            },
        )
        .boxed()
    }
}
