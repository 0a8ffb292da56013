//! The search index and the pages' owners on PostgreSQL (see [`crate::store::search`]): each
//! page's text with a generated `tsvector` under a GIN index, written with the page; every
//! replica finds what any replica archived, for the same owners.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{read_all, Failure, PostgresStore, NOW_SECS};
use crate::store::rows::{self, RowError};
use crate::store::search::{
    owner_key_of, query_words, searchable_text, PageSearch, Scope, OWNER_KEY,
};
use crate::store::{decode_page_messages, SearchHit, StoreError};

/// 7 -> 8: the owners of pages and the search index (the owner key is a `tamp_secrets` row).
/// The `simple`
/// configuration: no stemming and no stop words, so codes, paths and identifiers are found as
/// they are written, in every language.
pub(super) const MIGRATION: &str = "CREATE TABLE page_owners (
        owner       TEXT NOT NULL,
        page_id     TEXT NOT NULL,
        thread_id   TEXT,
        created_at  BIGINT NOT NULL,
        PRIMARY KEY (owner, page_id)
    );
    CREATE INDEX page_owners_by_page ON page_owners (page_id);
    CREATE TABLE page_text (
        page_id  TEXT PRIMARY KEY,
        body     TEXT NOT NULL,
        tsv      tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED
    );
    CREATE INDEX page_text_search ON page_text USING GIN (tsv);";

/// The statement that writes a page (its `pages` insert, `$1…$n`) and, when it is new, its
/// text (`$text`) in one statement: a page is never stored unindexed.
pub(super) fn insert_indexed(insert_page: &str, text_param: usize) -> String {
    format!(
        "WITH written AS ({insert_page} RETURNING id)
         INSERT INTO page_text (page_id, body) SELECT id, ${text_param} FROM written"
    )
}

/// Indexes the pages stored before the index existed (a migration step).
pub(super) async fn index_existing_pages(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<(), RowError> {
    let error = |e: tokio_postgres::Error| RowError(e.to_string());
    let pages = tx
        .query("SELECT id, messages_json FROM pages", &[])
        .await
        .map_err(error)?;
    let insert = tx
        .prepare("INSERT INTO page_text (page_id, body) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .await
        .map_err(error)?;
    for row in &pages {
        let (id, json): (String, String) = (row.get(0), row.get(1));
        // A page that no longer reads is left out of the index; `tamp pages verify` names it.
        if let Ok(messages) = decode_page_messages(&id, &json) {
            tx.execute(&insert, &[&id, &searchable_text(&messages)])
                .await
                .map_err(error)?;
        }
    }
    Ok(())
}

impl PageSearch for PostgresStore {
    fn search_pages(
        &self,
        query: &str,
        scope: Scope<'_>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SearchHit>, StoreError>> {
        let words = query_words(query).join(" ");
        let owner = match scope {
            Scope::All => None,
            Scope::Owner(owner) => Some(owner.to_owned()),
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run("search pages".to_owned(), move |client| async move {
            if words.is_empty() {
                return Ok(Vec::new());
            }
            // `plainto_tsquery`: every word required, none read as an operator.
            let stmt = client
                .prepare_cached(
                    "WITH q AS (SELECT plainto_tsquery('simple', $1) AS query)
                     SELECT p.id, p.thread_id, p.strategy, p.created_at,
                            ts_headline('simple', t.body, q.query,
                                'StartSel=[, StopSel=], MaxWords=24, MinWords=8, \
                                 ShortWord=1, FragmentDelimiter=…, MaxFragments=2') AS snippet
                     FROM q, page_text t JOIN pages p ON p.id = t.page_id
                     WHERE t.tsv @@ q.query
                       AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM page_owners o
                            WHERE o.page_id = p.id AND o.owner = $2))
                     ORDER BY ts_rank(t.tsv, q.query) DESC, p.created_at DESC
                     LIMIT $3",
                )
                .await?;
            let answer = client.query(&stmt, &[&words, &owner, &limit]).await?;
            Ok(read_all(&answer, rows::read_search_hit)?)
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
        self.run(
            "record the owner of pages".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&format!(
                        "INSERT INTO page_owners (owner, page_id, thread_id, created_at)
                         SELECT $1, unnest($2::text[]), $3, {NOW_SECS}
                         ON CONFLICT DO NOTHING"
                    ))
                    .await?;
                client.execute(&stmt, &[&owner, &pages, &thread]).await?;
                Ok(())
            },
        )
        .boxed()
    }

    fn may_read(&self, id: &str, scope: Scope<'_>) -> BoxFuture<'_, Result<bool, StoreError>> {
        let owner = match scope {
            Scope::All => return futures::future::ready(Ok(true)).boxed(),
            Scope::Owner(owner) => owner.to_owned(),
        };
        let id = id.to_owned();
        self.run(
            "read the owners of a page".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached("SELECT 1 FROM page_owners WHERE owner = $1 AND page_id = $2")
                    .await?;
                Ok(client.query_opt(&stmt, &[&owner, &id]).await?.is_some())
            },
        )
        .boxed()
    }

    fn owner_key(&self) -> BoxFuture<'_, Result<Vec<u8>, StoreError>> {
        self.run(
            "read the store's owner key".to_owned(),
            move |client| async move {
                let row = client
                    .query_opt(
                        "SELECT value FROM tamp_secrets WHERE name = $1",
                        &[&OWNER_KEY],
                    )
                    .await?;
                let hex_text: String = row.map(|r| r.get(0)).unwrap_or_default();
                owner_key_of(&hex_text).map_err(Failure::Other)
            },
        )
        .boxed()
    }
}
