//! The search index and the pages' owners in the SQLite file (see [`crate::store::search`]):
//! an FTS5 table of each page's text, written with the page.

use futures::future::BoxFuture;
use futures::FutureExt;
use rusqlite::{params, OptionalExtension};

use super::{now_secs, select, to_i64, SqliteStore};
use crate::store::rows::{self, RowError};
use crate::store::search::{
    fts5_query, owner_key_of, query_words, searchable_text, PageSearch, Scope, SearchHit, OWNER_KEY,
};
use crate::store::{decode_page_messages, StoreError};

/// 7 -> 8: the owners of pages and the search index (the owner key is a `tamp_secrets` row).
pub(super) const MIGRATION: &str = "CREATE TABLE page_owners (
        owner       TEXT NOT NULL,
        page_id     TEXT NOT NULL,
        thread_id   TEXT,
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (owner, page_id)
    ) WITHOUT ROWID;
    CREATE INDEX page_owners_by_page ON page_owners (page_id);
    CREATE VIRTUAL TABLE page_text USING fts5(
        page_id UNINDEXED,
        body,
        tokenize = 'unicode61 remove_diacritics 2'
    );";

/// Indexes the pages stored before the index existed (a migration step).
pub(super) fn index_existing_pages(tx: &rusqlite::Transaction<'_>) -> Result<(), RowError> {
    let pages = select(tx, "SELECT id, messages_json FROM pages", [], |row| {
        Ok((row.text("id")?, row.text("messages_json")?))
    })?;
    let mut insert = tx.prepare("INSERT INTO page_text (page_id, body) VALUES (?1, ?2)")?;
    for (id, json) in pages {
        // A page that no longer reads is left out of the index; `tamp pages verify` names it.
        if let Ok(messages) = decode_page_messages(&id, &json) {
            insert.execute(params![id, searchable_text(&messages)])?;
        }
    }
    Ok(())
}

/// The clause that keeps the pages `scope` may see, on `pages p` (its owner the query's `?2`).
fn scope_clause(scope: Scope<'_>) -> &'static str {
    match scope {
        Scope::All => "",
        Scope::Owner(_) => {
            "AND EXISTS (SELECT 1 FROM page_owners o WHERE o.page_id = p.id AND o.owner = ?2)"
        }
    }
}

fn owner_of(scope: Scope<'_>) -> String {
    match scope {
        Scope::All => String::new(),
        Scope::Owner(owner) => owner.to_owned(),
    }
}

impl PageSearch for SqliteStore {
    fn search_pages(
        &self,
        query: &str,
        scope: Scope<'_>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SearchHit>, StoreError>> {
        let words = query_words(query);
        let clause = scope_clause(scope);
        let owner = owner_of(scope);
        let limit = to_i64(limit as u64);
        self.run("search pages".to_owned(), move |inner| {
            if words.is_empty() {
                return Ok(Vec::new());
            }
            let sql = format!(
                "SELECT p.id, p.thread_id, p.strategy, p.created_at,
                        snippet(page_text, 1, '[', ']', '…', 24) AS snippet
                 FROM page_text JOIN pages p ON p.id = page_text.page_id
                 WHERE page_text MATCH ?1 {clause}
                 ORDER BY rank LIMIT ?3"
            );
            let conn = inner.conn();
            let query = fts5_query(&words);
            select(
                &conn,
                &sql,
                params![query, owner, limit],
                rows::read_search_hit,
            )
            .map_err(|e| StoreError::backend(&inner.location, "search pages", e))
        })
        .boxed()
    }

    fn record_owner(
        &self,
        owner: &str,
        pages: &[String],
        thread: Option<&str>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let owner = owner.to_owned();
        let pages = pages.to_vec();
        let thread = thread.map(str::to_owned);
        self.run("record the owner of pages".to_owned(), move |inner| {
            let fail = |e| StoreError::backend(&inner.location, "record the owner of pages", e);
            let mut conn = inner.writer("record the owner of pages")?;
            let tx = conn.transaction().map_err(fail)?;
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT OR IGNORE INTO page_owners (owner, page_id, thread_id, created_at)
                         VALUES (?1, ?2, ?3, ?4)",
                    )
                    .map_err(fail)?;
                for page in &pages {
                    insert
                        .execute(params![owner, page, thread, to_i64(now_secs())])
                        .map_err(fail)?;
                }
            }
            tx.commit().map_err(fail)
        })
        .boxed()
    }

    fn may_read(&self, id: &str, scope: Scope<'_>) -> BoxFuture<'_, Result<bool, StoreError>> {
        let owner = match scope {
            Scope::All => return futures::future::ready(Ok(true)).boxed(),
            Scope::Owner(owner) => owner.to_owned(),
        };
        let id = id.to_owned();
        self.run("read the owners of a page".to_owned(), move |inner| {
            inner
                .conn()
                .query_row(
                    "SELECT 1 FROM page_owners WHERE owner = ?1 AND page_id = ?2",
                    params![owner, id],
                    |_| Ok(()),
                )
                .optional()
                .map(|found| found.is_some())
                .map_err(|e| StoreError::backend(&inner.location, "read the owners of a page", e))
        })
        .boxed()
    }

    fn owner_key(&self) -> BoxFuture<'_, Result<Vec<u8>, StoreError>> {
        self.run("read the store's owner key".to_owned(), move |inner| {
            let fail =
                |e: String| StoreError::backend(&inner.location, "read the store's owner key", e);
            let hex_text: String = inner
                .conn()
                .query_row(
                    "SELECT value FROM tamp_secrets WHERE name = ?1",
                    params![OWNER_KEY],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| fail(e.to_string()))?
                .unwrap_or_default();
            owner_key_of(&hex_text).map_err(fail)
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use tamp_plugin_api::{ContentBlock, Message, Role};

    use super::*;
    use crate::store::{NewPage, PageStore};

    fn page(output: &str) -> NewPage {
        NewPage {
            thread_id: Some("session:a".into()),
            strategy: "tool-result-clearing".into(),
            messages: vec![Message::new(
                Role::User,
                vec![ContentBlock::tool_result("t1", output, false)],
            )],
            metadata_json: String::new(),
            source_format: Some("anthropic".into()),
        }
    }

    #[tokio::test]
    async fn a_page_is_found_by_its_words_and_only_by_its_owners() {
        let store = SqliteStore::in_memory().unwrap();
        let fact = store
            .put_page(page("step 1\ndeploy code: K7-4481-QX\nbuild ok"))
            .await
            .unwrap();
        let other = store.put_page(page("nothing to see")).await.unwrap();
        let hits = store
            .search_pages("Deploy K7-4481-QX", Scope::All, 10)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0].page_id, fact);
        assert_eq!(hits[0].thread_id.as_deref(), Some("session:a"));
        assert!(
            hits[0].snippet.contains("[deploy]"),
            "{:?}",
            hits[0].snippet
        );
        // FTS5 syntax in a query is text.
        for odd in ["\"", "NEAR(", "a OR", "*", "code:"] {
            store.search_pages(odd, Scope::All, 10).await.unwrap();
        }
        assert!(store
            .search_pages("", Scope::All, 10)
            .await
            .unwrap()
            .is_empty());

        // Owners: one credential's pages, not another's.
        let key = store.owner_key().await.unwrap();
        assert_eq!(key, store.owner_key().await.unwrap());
        let alice = crate::store::search::owner_of_credential(&key, "sk-alice");
        let bob = crate::store::search::owner_of_credential(&key, "sk-bob");
        store
            .record_owner(&alice, std::slice::from_ref(&fact), Some("session:a"))
            .await
            .unwrap();
        store
            .record_owner(&bob, std::slice::from_ref(&other), None)
            .await
            .unwrap();
        let found = |owner: String| {
            let store = store.clone();
            async move {
                store
                    .search_pages("deploy code", Scope::Owner(&owner), 10)
                    .await
                    .unwrap()
                    .len()
            }
        };
        assert_eq!(found(alice.clone()).await, 1);
        assert_eq!(found(bob.clone()).await, 0);
        assert!(store.may_read(&fact, Scope::Owner(&alice)).await.unwrap());
        assert!(!store.may_read(&fact, Scope::Owner(&bob)).await.unwrap());
        assert!(store.may_read(&fact, Scope::All).await.unwrap());

        // The same messages again: one page, indexed once.
        let again = store
            .put_page(page("step 1\ndeploy code: K7-4481-QX\nbuild ok"))
            .await
            .unwrap();
        assert_eq!(again, fact);
        let hits = store.search_pages("K7", Scope::All, 10).await.unwrap();
        assert_eq!(hits.len(), 1, "{hits:?}");
    }
}
