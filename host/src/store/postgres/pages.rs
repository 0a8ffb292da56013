//! Pages on PostgreSQL: content-addressed and immutable, as in the SQLite store.

use futures::future::BoxFuture;
use futures::FutureExt;
use tamp_plugin_api::{FfiOption, Message, Page};

use super::{Failure, PostgresStore, NOW_SECS};
use crate::store::seal::PageRow;
use crate::store::{
    canonical_json, page_id_of_json, NewPage, PageStore, PageSummary, StoreError, StoredPage,
};

/// Pages with more messages than this are encoded off the caller's executor thread.
const ENCODE_INLINE_MAX: usize = 64;

/// A page's id and canonical JSON.
fn encode(messages: &[Message]) -> (String, String) {
    let json = canonical_json(messages);
    let id = page_id_of_json(&json);
    (
        id,
        String::from_utf8(json).expect("serde_json output is UTF-8"),
    )
}

impl PageStore for PostgresStore {
    fn put_page(&self, page: NewPage) -> BoxFuture<'_, Result<String, StoreError>> {
        async move {
            let (id, json) = if page.messages.len() > ENCODE_INLINE_MAX {
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
                // Immutable: an existing page (from this host or another) stays as it is.
                let sql = format!(
                    "INSERT INTO pages (id, thread_id, strategy, source_format, messages_json,
                     metadata_json, message_count, created_at, seal)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, {NOW_SECS}, $8)
                     ON CONFLICT (id) DO NOTHING"
                );
                let row = PageRow::of_new(&id, &page);
                let (count, seal) = (row.message_count, row.seal());
                let stmt = client.prepare_cached(&sql).await?;
                client
                    .execute(
                        &stmt,
                        &[
                            &id,
                            &page.thread_id,
                            &page.strategy,
                            &page.source_format,
                            &json,
                            &page.metadata_json,
                            &count,
                            &seal,
                        ],
                    )
                    .await?;
                Ok(id)
            })
            .await
        }
        .boxed()
    }

    fn get_page(&self, id: &str) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        let id = id.to_owned();
        self.run(format!("read page {id}"), move |client| async move {
            let stmt = client
                .prepare_cached(
                    "SELECT thread_id, strategy, source_format, messages_json, metadata_json,
                     created_at, message_count, seal FROM pages WHERE id = $1",
                )
                .await?;
            let Some(row) = client.query_opt(&stmt, &[&id]).await? else {
                return Err(Failure::Store(StoreError::NotFound(id)));
            };
            let thread_id: Option<String> = row.try_get(0)?;
            let strategy: String = row.try_get(1)?;
            let source_format: Option<String> = row.try_get(2)?;
            let messages_json: String = row.try_get(3)?;
            let metadata_json: String = row.try_get(4)?;
            let created_at: i64 = row.try_get(5)?;
            let message_count: i64 = row.try_get(6)?;
            let seal: Option<String> = row.try_get(7)?;
            let fields = PageRow {
                id: &id,
                thread_id: thread_id.as_deref(),
                strategy: &strategy,
                source_format: source_format.as_deref(),
                metadata_json: &metadata_json,
                message_count,
            };
            // The database was migrated when it was opened: every page has a seal.
            let messages = fields
                .check(&messages_json, Some(seal.as_deref()))
                .map_err(|detail| Failure::Corrupt {
                    id: id.clone(),
                    detail,
                })?;
            Ok(StoredPage {
                page: Page {
                    id: id.into(),
                    thread_id: FfiOption::from(thread_id.map(Into::into)),
                    strategy: strategy.into(),
                    messages: messages.into(),
                    metadata_json: metadata_json.into(),
                    created_at: u64::try_from(created_at).unwrap_or(0),
                },
                source_format,
            })
        })
        .boxed()
    }

    fn list_pages(&self, limit: usize) -> BoxFuture<'_, Result<Vec<PageSummary>, StoreError>> {
        self.run("list pages".to_owned(), move |client| async move {
            let stmt = client
                .prepare_cached(
                    "SELECT id, thread_id, strategy, message_count, created_at, source_format
                     FROM pages ORDER BY created_at DESC, seq DESC LIMIT $1",
                )
                .await?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            client
                .query(&stmt, &[&limit])
                .await?
                .iter()
                .map(|r| {
                    Ok(PageSummary {
                        id: r.try_get(0)?,
                        thread_id: r.try_get(1)?,
                        strategy: r.try_get(2)?,
                        message_count: u64::try_from(r.try_get::<_, i64>(3)?).unwrap_or(0),
                        created_at: u64::try_from(r.try_get::<_, i64>(4)?).unwrap_or(0),
                        source_format: r.try_get(5)?,
                    })
                })
                .collect()
        })
        .boxed()
    }

    fn describe(&self) -> String {
        self.inner.location.clone()
    }
}
