//! Thread states on PostgreSQL: a thread compacted by one replica continues on any other.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{PostgresStore, NOW_SECS};
use crate::store::rows;
use crate::store::threads::{ThreadLimits, ThreadState, ThreadStore};
use crate::store::StoreError;

impl ThreadStore for PostgresStore {
    fn get_thread(
        &self,
        key: &str,
        ttl_secs: u64,
    ) -> BoxFuture<'_, Result<Option<ThreadState>, StoreError>> {
        let key = key.to_owned();
        let ttl = i64::try_from(ttl_secs).unwrap_or(i64::MAX);
        self.run(
            "read a thread state".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT state_json FROM threads WHERE key = $1 AND updated_at >= {NOW_SECS} - $2"
                    ))
                    .await?;
                let Some(row) = client.query_opt(&stmt, &[&key, &ttl]).await? else {
                    return Ok(None);
                };
                Ok(rows::read_thread_state(&row)?)
            },
        )
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
        let ttl = i64::try_from(limits.ttl_secs).unwrap_or(i64::MAX);
        let max = i64::try_from(limits.max_threads.max(1)).unwrap_or(i64::MAX);
        self.run(
            "write a thread state".to_owned(),
            move |mut client| async move {
                let tx = client.transaction().await?;
                tx.execute(
                    &format!(
                        "INSERT INTO threads (key, state_json, updated_at) VALUES ($1, $2, {NOW_SECS})
                         ON CONFLICT (key) DO UPDATE SET state_json = EXCLUDED.state_json,
                         updated_at = EXCLUDED.updated_at"
                    ),
                    &[&key, &json],
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
}
