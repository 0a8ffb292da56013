//! Thread states in the SQLite file (see [`crate::store::threads`]).

use futures::future::BoxFuture;
use futures::FutureExt;
use rusqlite::params;

use super::{now_secs, select, select_first, to_i64, SqliteStore};
use crate::store::rows::{self, THREAD_COLUMNS};
use crate::store::threads::{self, ThreadLimits, ThreadState, ThreadStore};
use crate::store::{RecordCheck, StoreError};

impl ThreadStore for SqliteStore {
    fn get_thread(
        &self,
        key: &str,
        ttl_secs: u64,
    ) -> BoxFuture<'_, Result<Option<ThreadState>, StoreError>> {
        let key = key.to_owned();
        self.run("read a thread state".to_owned(), move |inner| {
            let oldest = to_i64(now_secs().saturating_sub(ttl_secs));
            let state = select_first(
                &inner.conn(),
                &format!(
                    "SELECT {THREAD_COLUMNS} FROM threads WHERE key = ?1 AND updated_at >= ?2"
                ),
                params![key, oldest],
                |row| rows::read_thread_state(row, inner.records_sealed),
            )
            .map_err(|e| StoreError::backend(&inner.location, "read a thread state", e))?;
            match state {
                None => Ok(None),
                Some(Ok(state)) => Ok(state),
                Some(Err(damaged)) => Err(StoreError::Damaged {
                    location: inner.location.clone(),
                    what: damaged.what,
                    detail: damaged.detail,
                }),
            }
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
        self.run("write a thread state".to_owned(), move |inner| {
            let fail = |e| StoreError::backend(&inner.location, "write a thread state", e);
            let now = now_secs();
            let mut conn = inner.writer("write a thread state")?;
            let tx = conn.transaction().map_err(fail)?;
            tx.execute(
                "INSERT OR REPLACE INTO threads (key, state_json, updated_at, seal)
                 VALUES (?1, ?2, ?3, ?4)",
                params![key, json, to_i64(now), seal],
            )
            .map_err(fail)?;
            tx.execute(
                "DELETE FROM threads WHERE updated_at < ?1",
                params![to_i64(now.saturating_sub(limits.ttl_secs))],
            )
            .map_err(fail)?;
            tx.execute(
                "DELETE FROM threads WHERE key IN (SELECT key FROM threads
                 ORDER BY updated_at DESC, rowid DESC LIMIT -1 OFFSET ?1)",
                params![to_i64(limits.max_threads.max(1))],
            )
            .map_err(fail)?;
            tx.commit().map_err(fail)
        })
        .boxed()
    }

    fn verify_threads(&self) -> BoxFuture<'_, Result<RecordCheck, StoreError>> {
        self.run("check the thread states".to_owned(), move |inner| {
            let sealed = inner.records_sealed;
            let columns = if sealed {
                THREAD_COLUMNS
            } else {
                "key, state_json, NULL AS seal"
            };
            let read = select(
                &inner.conn(),
                &format!("SELECT {columns} FROM threads ORDER BY key"),
                [],
                |row| {
                    let key = rows::Columns::text(row, "key")?;
                    Ok((key, rows::read_thread_state(row, sealed)?))
                },
            )
            .map_err(|e| StoreError::backend(&inner.location, "check the thread states", e))?;
            Ok(threads::thread_check(read))
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use tamp_plugin_api::{Message, Role};

    use super::*;

    fn state(covered: u64, text: &str) -> ThreadState {
        ThreadState {
            covered,
            prefix_hash: format!("h{covered}"),
            output: vec![Message::text(Role::User, text)],
            chain: String::new(),
        }
    }

    const LIMITS: ThreadLimits = ThreadLimits {
        ttl_secs: 3600,
        max_threads: 3,
    };

    #[tokio::test]
    async fn a_state_is_replaced_and_read_back() {
        let store = SqliteStore::in_memory().unwrap();
        assert_eq!(store.get_thread("t", 3600).await.unwrap(), None);
        store.put_thread("t", &state(4, "a"), LIMITS).await.unwrap();
        store.put_thread("t", &state(9, "b"), LIMITS).await.unwrap();
        assert_eq!(
            store.get_thread("t", 3600).await.unwrap(),
            Some(state(9, "b"))
        );
    }

    #[tokio::test]
    async fn a_state_altered_in_the_file_is_refused_and_verify_names_it() {
        let store = SqliteStore::in_memory().unwrap();
        store
            .put_thread("id:t", &state(4, "ponyc"), LIMITS)
            .await
            .unwrap();
        assert_eq!(store.verify_threads().await.unwrap().damaged, []);
        store
            .inner
            .conn()
            .execute(
                "UPDATE threads SET state_json = replace(state_json, 'ponyc', 'INJECTED')",
                [],
            )
            .unwrap();
        let e = store.get_thread("id:t", 3600).await.unwrap_err();
        assert!(e.is_damaged(), "{e}");
        assert!(
            e.to_string()
                .contains("the thread state of id:t is damaged: it no longer matches its seal"),
            "{e}"
        );
        let check = store.verify_threads().await.unwrap();
        assert_eq!(check.checked, 1);
        assert_eq!(check.damaged.len(), 1, "{check:?}");
        assert_eq!(check.damaged[0].what, "the thread state of id:t");
        // Written again, it is sealed again.
        store
            .put_thread("id:t", &state(5, "b"), LIMITS)
            .await
            .unwrap();
        assert_eq!(
            store.get_thread("id:t", 3600).await.unwrap(),
            Some(state(5, "b"))
        );
    }

    #[tokio::test]
    async fn the_oldest_threads_go_beyond_the_bound() {
        let store = SqliteStore::in_memory().unwrap();
        for key in ["a", "b", "c", "d", "e"] {
            store.put_thread(key, &state(1, key), LIMITS).await.unwrap();
        }
        let kept: i64 = store
            .inner
            .conn()
            .query_row("SELECT count(*) FROM threads", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 3);
        assert!(store.get_thread("a", 3600).await.unwrap().is_none());
        assert!(store.get_thread("e", 3600).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn an_expired_state_is_not_read_and_is_dropped_by_the_next_write() {
        let store = SqliteStore::in_memory().unwrap();
        store
            .put_thread("old", &state(1, "x"), LIMITS)
            .await
            .unwrap();
        store
            .inner
            .conn()
            .execute("UPDATE threads SET updated_at = updated_at - 7200", [])
            .unwrap();
        assert!(store.get_thread("old", 3600).await.unwrap().is_none());
        store
            .put_thread("new", &state(1, "y"), LIMITS)
            .await
            .unwrap();
        let keys: Vec<String> = {
            let conn = store.inner.conn();
            let mut stmt = conn.prepare("SELECT key FROM threads").unwrap();
            let rows = stmt.query_map([], |r| r.get(0)).unwrap();
            rows.map(Result::unwrap).collect()
        };
        assert_eq!(keys, ["new"]);
    }
}
