//! Pages on PostgreSQL: content-addressed and immutable, as in the SQLite store.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::search::insert_indexed;
use super::{bind, read_all, Failure, PostgresStore, NOW_SECS};
use crate::store::rows::Columns as _;
use crate::store::rows::{
    self, encode_messages, NewPageRow, PageRecord, ENCODE_INLINE_MAX, PAGE_COLUMNS,
    PAGE_INSERT_COLUMNS, PAGE_INSERT_VALUES, SUMMARY_COLUMNS,
};
use crate::store::search::searchable_text;
use crate::store::{one_page, prefix_ref, NewPage, PageStore, PageSummary, StoreError, StoredPage};

impl PageStore for PostgresStore {
    fn put_page(&self, page: NewPage) -> BoxFuture<'_, Result<String, StoreError>> {
        async move {
            let encode = |messages: &[tamp_plugin_api::Message]| {
                (encode_messages(messages), searchable_text(messages))
            };
            let ((id, json), text) = if page.messages.len() > ENCODE_INLINE_MAX {
                match tokio::runtime::Handle::try_current() {
                    Ok(handle) => {
                        let messages = page.messages.clone();
                        handle
                            .spawn_blocking(move || encode(&messages))
                            .await
                            .map_err(|e| {
                                StoreError::backend(&self.inner.location, "encode a page", e)
                            })?
                    }
                    Err(_) => encode(&page.messages),
                }
            } else {
                encode(&page.messages)
            };
            let operation = format!("write page {id}");
            self.run(operation, move |client| async move {
                // Immutable: an existing page (from this host or another) stays as it is, and
                // so does its text in the index.
                let insert = format!(
                    "INSERT INTO pages ({PAGE_INSERT_COLUMNS}, created_at)
                     VALUES ({}, {NOW_SECS})
                     ON CONFLICT (id) DO NOTHING",
                    rows::placeholders('$', 1, PAGE_INSERT_VALUES)
                );
                let sql = insert_indexed(&insert, PAGE_INSERT_VALUES + 1);
                let row = NewPageRow::new(&id, &json, &page);
                let values = row.values();
                let mut params = bind(&values);
                params.push(&text);
                let stmt = client.prepare_cached(&sql).await?;
                client.execute(&stmt, &params).await?;
                Ok(id)
            })
            .await
        }
        .boxed()
    }

    fn get_page(&self, id: &str) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        let id = id.to_owned();
        self.run(format!("read page {id}"), move |client| async move {
            let record = match prefix_ref(&id) {
                // A short ref: the one page whose id starts with it.
                Some(prefix) => {
                    let stmt = client
                        .prepare_cached(&format!(
                            "SELECT {PAGE_COLUMNS}, seal FROM pages
                             WHERE substr(id, 1, length($1)) = $1 LIMIT 2"
                        ))
                        .await?;
                    let rows = client.query(&stmt, &[&prefix]).await?;
                    let records = rows
                        .iter()
                        .map(|row| PageRecord::read(row))
                        .collect::<Result<_, _>>()?;
                    one_page(records, &id).map_err(Failure::Store)?
                }
                None => {
                    let stmt = client
                        .prepare_cached(&format!(
                            "SELECT {PAGE_COLUMNS}, seal FROM pages WHERE id = $1"
                        ))
                        .await?;
                    match client.query_opt(&stmt, &[&id]).await? {
                        Some(row) => Some(PageRecord::read(&row)?),
                        None => None,
                    }
                }
            };
            let Some(record) = record else {
                return Err(Failure::Store(StoreError::NotFound(id)));
            };
            // The database was migrated when it was opened: every page has a seal.
            record
                .into_page(true)
                .map_err(|detail| Failure::Corrupt { id, detail })
        })
        .boxed()
    }

    fn list_pages(&self, limit: usize) -> BoxFuture<'_, Result<Vec<PageSummary>, StoreError>> {
        self.run("list pages".to_owned(), move |client| async move {
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {SUMMARY_COLUMNS} FROM pages
                     ORDER BY created_at DESC, seq DESC LIMIT $1"
                ))
                .await?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let summaries = client.query(&stmt, &[&limit]).await?;
            Ok(read_all(&summaries, rows::read_summary)?)
        })
        .boxed()
    }

    fn describe(&self) -> String {
        self.inner.location.clone()
    }

    fn summary_key(&self) -> Option<crate::summary_mac::SummaryKey> {
        PostgresStore::summary_key(self)
    }

    /// With the `amcheck` extension installed in the database, `bt_index_check` of every
    /// B-tree index of tamp's tables (each failure a problem); without it, `None`: PostgreSQL
    /// has no check of its own to run.
    fn check_integrity(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, StoreError>> {
        self.run(
            "check the database's integrity".to_owned(),
            |client| async move {
                let installed = client
                    .query_opt("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'", &[])
                    .await?
                    .is_some();
                if !installed {
                    return Ok(None);
                }
                let indexes = client
                    .query(
                        "SELECT c.relname::text AS name FROM pg_index i
                         JOIN pg_class c ON c.oid = i.indexrelid
                         JOIN pg_class t ON t.oid = i.indrelid
                         JOIN pg_am a ON a.oid = c.relam
                         WHERE a.amname = 'btree' AND t.relname = ANY($1)
                           AND t.relnamespace = pg_my_temp_schema() IS NOT TRUE
                           AND pg_table_is_visible(t.oid)",
                        &[&TABLES.to_vec()],
                    )
                    .await?;
                let mut problems = Vec::new();
                for index in indexes {
                    let name = index.text("name")?;
                    if let Err(e) = client
                        .execute("SELECT bt_index_check($1::regclass)", &[&name])
                        .await
                    {
                        problems.push(format!(
                            "index {name}: {}",
                            crate::error_text::error_chain(&e)
                        ));
                    }
                }
                Ok(Some(problems))
            },
        )
        .boxed()
    }
}

/// tamp's tables, whose indexes [`PageStore::check_integrity`] checks.
const TABLES: [&str; 7] = [
    "pages",
    "llm_answers",
    "range_summaries",
    "deferred_items",
    "deferred_events",
    "threads",
    "tamp_secrets",
];
