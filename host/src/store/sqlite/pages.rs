//! Pages in the SQLite file: content-addressed and immutable, written through the group
//! commit ([`group_commit`](super::group_commit)).

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{group_commit, select, select_first, to_i64, SqliteStore};
use crate::store::rows::{self, PageRecord, PAGE_COLUMNS, SUMMARY_COLUMNS};
use crate::store::{
    one_page, prefix_ref, NewPage, PageStore, PageSummary, StoreError, StoredPage, Written,
};

impl PageStore for SqliteStore {
    /// Written through the group commit (see [`group_commit`]): concurrent puts share one
    /// transaction and one fsync, with full durability.
    fn put_page(&self, page: NewPage) -> BoxFuture<'_, Result<String, StoreError>> {
        async move {
            let (id, written) = self.stage_page(page).await?;
            written.await?;
            Ok(id)
        }
        .boxed()
    }

    /// The page waits in the group commit's queue until `written` is awaited or a deferred
    /// request is queued after it (see [`group_commit`]).
    fn stage_page(&self, page: NewPage) -> BoxFuture<'_, Result<(String, Written), StoreError>> {
        async move {
            let (id, answer) = self.queue_page(page).await?;
            let store = self.clone();
            let written: Written = async move {
                store.flush().await?;
                answer
                    .await
                    .unwrap_or_else(|_| Err(store.writer_stopped("write a page")))
            }
            .boxed();
            Ok((id, written))
        }
        .boxed()
    }

    fn get_page(&self, id: &str) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        let id = id.to_owned();
        async move {
            self.run(format!("read page {id}"), move |inner| {
                let conn = inner.conn();
                if let Some(queued) = group_commit::queued_page(&inner.writes, &id) {
                    return Ok(queued);
                }
                // A file of a schema before seals, opened read-only, has no seal column.
                let seal_column = if inner.sealed { "seal" } else { "NULL AS seal" };
                let backend =
                    |e| StoreError::backend(&inner.location, format!("read page {id}"), e);
                let record = match prefix_ref(&id) {
                    // A short ref: the one page whose id starts with it.
                    Some(prefix) => one_page(
                        select(
                            &conn,
                            &format!(
                                "SELECT {PAGE_COLUMNS}, {seal_column} FROM pages
                             WHERE substr(id, 1, length(?1)) = ?1 LIMIT 2"
                            ),
                            [prefix],
                            PageRecord::read,
                        )
                        .map_err(backend)?,
                        &id,
                    )?,
                    None => select_first(
                        &conn,
                        &format!("SELECT {PAGE_COLUMNS}, {seal_column} FROM pages WHERE id = ?1"),
                        [&id],
                        PageRecord::read,
                    )
                    .map_err(backend)?,
                };
                // Checking and parsing the page need no connection.
                drop(conn);
                let Some(record) = record else {
                    return Err(StoreError::NotFound(id));
                };
                record
                    .into_page(inner.sealed)
                    .map_err(|detail| StoreError::Corrupt {
                        location: inner.location.clone(),
                        id,
                        detail,
                    })
            })
            .await
        }
        .boxed()
    }

    fn list_pages(&self, limit: usize) -> BoxFuture<'_, Result<Vec<PageSummary>, StoreError>> {
        async move {
            self.run("list pages".to_owned(), move |inner| {
                select(
                    &inner.conn(),
                    &format!(
                        "SELECT {SUMMARY_COLUMNS} FROM pages
                         ORDER BY created_at DESC, rowid DESC LIMIT ?1"
                    ),
                    [to_i64(limit as u64)],
                    rows::read_summary,
                )
                .map_err(|e| StoreError::backend(&inner.location, "list pages", e))
            })
            .await
        }
        .boxed()
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.inner.location)
    }

    fn check_alive(&self) -> Result<(), StoreError> {
        self.inner.check_file("keep pages")
    }

    fn summary_key(&self) -> Option<crate::summary_mac::SummaryKey> {
        SqliteStore::summary_key(self)
    }

    fn check_integrity(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, StoreError>> {
        async move { self.integrity_problems().await.map(Some) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tamp_plugin_api::{ContentBlock, Message, Role};

    use super::*;
    use crate::store::sqlite::tests::{conversation, count_rows, new_page, TempDir};
    use crate::store::{page_id, short_ref};

    #[tokio::test]
    async fn put_get_round_trip() {
        let store = SqliteStore::in_memory().unwrap();
        let messages = conversation("a");
        let id = store.put_page(new_page(messages.clone())).await.unwrap();
        assert_eq!(id, page_id(&messages));
        let stored = store.get_page(&id).await.unwrap();
        assert_eq!(stored.page.id.as_str(), id);
        assert_eq!(stored.page.messages.as_slice(), messages.as_slice());
        assert_eq!(
            serde_json::to_vec(&stored.page.messages).unwrap(),
            serde_json::to_vec(&messages).unwrap(),
            "messages come back byte-equal"
        );
        assert_eq!(
            stored
                .page
                .thread_id
                .as_ref()
                .map(|s| s.as_str())
                .into_option(),
            Some("thread-1")
        );
        assert_eq!(stored.page.strategy.as_str(), "anchored-structured");
        assert_eq!(stored.page.metadata_json.as_str(), r#"{"k":1}"#);
        assert_eq!(stored.source_format.as_deref(), Some("anthropic"));
        assert!(stored.page.created_at > 1_600_000_000);
    }

    #[tokio::test]
    async fn no_thread_and_no_format_round_trip() {
        let store = SqliteStore::in_memory().unwrap();
        let mut page = new_page(conversation("b"));
        page.thread_id = None;
        page.source_format = None;
        page.metadata_json = String::new();
        let id = store.put_page(page).await.unwrap();
        let stored = store.get_page(&id).await.unwrap();
        assert!(stored.page.thread_id.is_none());
        assert!(stored.source_format.is_none());
        assert_eq!(stored.page.metadata_json.as_str(), "");
    }

    #[tokio::test]
    async fn same_content_same_id_one_row() {
        let store = SqliteStore::in_memory().unwrap();
        let first = store.put_page(new_page(conversation("a"))).await.unwrap();
        let mut again = new_page(conversation("a"));
        again.strategy = "someone-else".into();
        again.thread_id = Some("thread-2".into());
        let second = store.put_page(again).await.unwrap();
        assert_eq!(first, second);
        assert_eq!(count_rows(&store), 1);
        // Immutable: the first write wins.
        let stored = store.get_page(&first).await.unwrap();
        assert_eq!(stored.page.strategy.as_str(), "anchored-structured");
    }

    #[tokio::test]
    async fn a_page_is_found_by_its_short_ref_as_a_ledger_names_it() {
        let store = SqliteStore::in_memory().unwrap();
        let a = store.put_page(new_page(conversation("a"))).await.unwrap();
        let b = store.put_page(new_page(conversation("b"))).await.unwrap();
        for (id, other) in [(&a, &b), (&b, &a)] {
            for reference in [short_ref(id), &id[..20], id.as_str()] {
                let stored = store.get_page(reference).await.unwrap();
                assert_eq!(stored.page.id.as_str(), id.as_str(), "{reference}");
                assert_ne!(stored.page.id.as_str(), other.as_str());
            }
        }
        // A start no page's id has, and one too short to be a short ref, are not found.
        let unknown = if a.starts_with("pg_000000000000") {
            "pg_ffffffffffff"
        } else {
            "pg_000000000000"
        };
        let err = store.get_page(unknown).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(id) if id == unknown),
            "{err}"
        );
        assert!(matches!(
            store.get_page(&a[..10]).await.unwrap_err(),
            StoreError::NotFound(_)
        ));
    }

    #[tokio::test]
    async fn different_content_different_id() {
        let store = SqliteStore::in_memory().unwrap();
        let a = store.put_page(new_page(conversation("a"))).await.unwrap();
        let b = store.put_page(new_page(conversation("b"))).await.unwrap();
        assert_ne!(a, b);
        assert_eq!(count_rows(&store), 2);
    }

    #[tokio::test]
    async fn unknown_id_is_not_found_with_the_id() {
        let store = SqliteStore::in_memory().unwrap();
        let err = store.get_page("pg_0123456789abcdef").await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(ref id) if id == "pg_0123456789abcdef"));
        assert!(err.to_string().contains("pg_0123456789abcdef"), "{err}");
    }

    #[tokio::test]
    async fn list_pages_newest_first_with_limit() {
        let store = SqliteStore::in_memory().unwrap();
        let mut ids = Vec::new();
        for tag in ["1", "2", "3"] {
            ids.push(store.put_page(new_page(conversation(tag))).await.unwrap());
        }
        let listed = store.list_pages(10).await.unwrap();
        let listed_ids: Vec<&str> = listed.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            listed_ids,
            vec![ids[2].as_str(), ids[1].as_str(), ids[0].as_str()]
        );
        assert_eq!(listed[0].message_count, 4);
        assert_eq!(listed[0].thread_id.as_deref(), Some("thread-1"));
        assert_eq!(listed[0].strategy, "anchored-structured");
        assert!(listed[0].created_at > 0);
        assert_eq!(store.list_pages(2).await.unwrap().len(), 2);
        assert!(store.list_pages(0).await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_puts_from_50_tasks() {
        let dir = TempDir::new("concurrent");
        let store: Arc<dyn PageStore> =
            Arc::new(SqliteStore::open(&dir.0.join("store.sqlite3")).unwrap());
        let mut tasks = Vec::new();
        for i in 0..50 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                // Every fifth task repeats an earlier page's content.
                let tag = (i % 40).to_string();
                let messages = conversation(&tag);
                let id = store.put_page(new_page(messages.clone())).await.unwrap();
                assert_eq!(id, page_id(&messages));
                let back = store.get_page(&id).await.unwrap();
                assert_eq!(back.page.messages.as_slice(), messages.as_slice());
                id
            }));
        }
        let mut ids = Vec::new();
        for t in tasks {
            ids.push(t.await.unwrap());
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 40);
        assert_eq!(store.list_pages(1000).await.unwrap().len(), 40);
    }

    #[tokio::test]
    async fn five_megabyte_message_round_trips() {
        let dir = TempDir::new("large");
        let store = SqliteStore::open(&dir.0.join("store.sqlite3")).unwrap();
        let big: String = (0..5 * 1024 * 1024)
            .map(|i: usize| char::from(b'a' + (i % 26) as u8))
            .collect();
        let messages = vec![
            Message::text(Role::User, big),
            Message::new(
                Role::User,
                vec![ContentBlock::Opaque {
                    json: format!(r#"{{"type":"image","data":"{}"}}"#, "QUJD".repeat(1024)).into(),
                }],
            ),
        ];
        let id = store.put_page(new_page(messages.clone())).await.unwrap();
        let stored = store.get_page(&id).await.unwrap();
        assert_eq!(stored.page.messages.as_slice(), messages.as_slice());
    }

    #[tokio::test]
    async fn a_page_whose_text_was_altered_is_refused_and_verify_names_it() {
        let store = SqliteStore::in_memory().unwrap();
        let kept = store
            .put_page(new_page(conversation("kept")))
            .await
            .unwrap();
        let altered = store
            .put_page(new_page(conversation("altered")))
            .await
            .unwrap();
        let clean = store.verify_pages().await.unwrap();
        assert_eq!((clean.checked, clean.damaged.len()), (2, 0));
        store
            .inner
            .conn()
            .execute(
                "UPDATE pages SET messages_json = replace(messages_json, 'question', 'answer')
                 WHERE id = ?1",
                [&altered],
            )
            .unwrap();
        // Still valid JSON of messages: only the hash tells.
        let err = store.get_page(&altered).await.unwrap_err();
        assert!(err.is_corrupt(), "{err}");
        assert!(err.to_string().contains("no longer match its id"), "{err}");
        assert!(store.get_page(&kept).await.is_ok());
        let check = store.verify_pages().await.unwrap();
        assert_eq!(check.checked, 2);
        assert_eq!(check.damaged.len(), 1);
        assert_eq!(check.damaged[0].id, altered);
    }

    #[tokio::test]
    async fn every_field_of_a_page_is_checked_and_verify_names_the_altered_ones() {
        let store = SqliteStore::in_memory().unwrap();
        let mut ids = Vec::new();
        for tag in [
            "kept", "thread", "strategy", "format", "metadata", "count", "seal",
        ] {
            ids.push(store.put_page(new_page(conversation(tag))).await.unwrap());
        }
        let alterations = [
            "UPDATE pages SET thread_id = 'thread-2' WHERE id = ?1",
            "UPDATE pages SET strategy = 'other' WHERE id = ?1",
            "UPDATE pages SET source_format = 'openai' WHERE id = ?1",
            r#"UPDATE pages SET metadata_json = '{"k":2}' WHERE id = ?1"#,
            "UPDATE pages SET message_count = message_count + 1 WHERE id = ?1",
            "UPDATE pages SET seal = NULL WHERE id = ?1",
        ];
        for (sql, id) in alterations.iter().zip(&ids[1..]) {
            store.inner.conn().execute(sql, [id]).unwrap();
        }
        for (id, says) in ids[1..].iter().zip([
            "no longer match its seal",
            "no longer match its seal",
            "no longer match its seal",
            "no longer match its seal",
            "its message count says",
            "it has no seal",
        ]) {
            let err = store.get_page(id).await.unwrap_err();
            assert!(err.is_corrupt() && err.to_string().contains(says), "{err}");
        }
        assert!(store.get_page(&ids[0]).await.is_ok());
        let check = store.verify_pages().await.unwrap();
        assert_eq!(check.checked, 7);
        let mut damaged: Vec<&str> = check.damaged.iter().map(|d| d.id.as_str()).collect();
        damaged.sort();
        let mut altered: Vec<&str> = ids[1..].iter().map(String::as_str).collect();
        altered.sort();
        assert_eq!(damaged, altered);
    }

    /// The probe's largest pages (issue 32): 100,001 messages, and one message of 10 MB,
    /// recovered exactly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_largest_pages_are_recovered_exactly() {
        let store = SqliteStore::in_memory().unwrap();
        let many: Vec<Message> = (0..100_001)
            .map(|i| {
                Message::text(
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    format!("m{i}"),
                )
            })
            .collect();
        let big = vec![Message::text(
            Role::User,
            "é\u{1F600}x".repeat(10 << 20 >> 3),
        )];
        for messages in [many, big] {
            let id = store.put_page(new_page(messages.clone())).await.unwrap();
            let back = store.get_page(&id).await.unwrap().page;
            assert_eq!(back.messages.len(), messages.len());
            assert!(back.messages.as_slice() == messages.as_slice());
        }
        assert_eq!(store.verify_pages().await.unwrap().damaged, []);
    }
}
