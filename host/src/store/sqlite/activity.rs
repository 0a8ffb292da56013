//! The activity record in the SQLite file (see [`crate::store::activity`]).

use futures::future::BoxFuture;
use futures::FutureExt;
use rusqlite::{params, params_from_iter};

use super::{select, select_first, to_i64, SqliteStore};
use crate::store::activity::{
    like_anywhere, ActivityStore, CompactionRow, Pruned, RequestRecord, RequestRow, ThreadQuery,
    ThreadTotals,
};
use crate::store::rows::{
    self, placeholders, REQUEST_COLUMNS, REQUEST_INSERT_COLUMNS, REQUEST_INSERT_VALUES,
    THREAD_TOTALS_COLUMNS,
};
use crate::store::StoreError;

/// 8 -> 9: requests, compactions and threads' totals.
pub(super) const MIGRATION: &str = "CREATE TABLE activity_requests (
        seq            INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms          INTEGER NOT NULL,
        server         TEXT NOT NULL,
        route          TEXT NOT NULL,
        status         INTEGER NOT NULL,
        duration_ms    INTEGER NOT NULL,
        thread         TEXT,
        model          TEXT,
        outcome        TEXT,
        tokens_in      INTEGER,
        tokens_out     INTEGER,
        tokens_at_most INTEGER,
        pages          INTEGER NOT NULL,
        prefix_kept    INTEGER,
        max_tokens     INTEGER,
        high_tokens    INTEGER,
        low_tokens     INTEGER,
        llm_input      INTEGER NOT NULL,
        llm_output     INTEGER NOT NULL,
        llm_cost_micro INTEGER,
        error          TEXT
    );
    CREATE INDEX activity_requests_by_thread ON activity_requests (thread, at_ms);
    CREATE INDEX activity_requests_by_time ON activity_requests (at_ms);
    CREATE INDEX activity_requests_failed ON activity_requests (at_ms)
        WHERE status >= 400 OR error IS NOT NULL;
    CREATE TABLE activity_compactions (
        request_seq       INTEGER PRIMARY KEY NOT NULL,
        thread            TEXT,
        at_ms             INTEGER NOT NULL,
        report_json       TEXT NOT NULL,
        replacements_json TEXT NOT NULL
    );
    CREATE INDEX activity_compactions_by_time ON activity_compactions (at_ms);
    CREATE TABLE activity_threads (
        thread         TEXT PRIMARY KEY NOT NULL,
        server         TEXT NOT NULL,
        model          TEXT,
        first_ms       INTEGER NOT NULL,
        last_ms        INTEGER NOT NULL,
        requests       INTEGER NOT NULL,
        counted        INTEGER NOT NULL,
        tokens_in      INTEGER NOT NULL,
        tokens_out     INTEGER NOT NULL,
        in_cached      INTEGER NOT NULL,
        out_cached     INTEGER NOT NULL,
        last_in        INTEGER NOT NULL,
        last_out       INTEGER NOT NULL,
        compactions    INTEGER NOT NULL,
        pages          INTEGER NOT NULL,
        llm_input      INTEGER NOT NULL,
        llm_output     INTEGER NOT NULL,
        llm_cost_micro INTEGER NOT NULL
    );
    CREATE INDEX activity_threads_by_last ON activity_threads (last_ms);";

/// Adds one request to its thread's totals (parameters: `rows::thread_values`).
/// Every `SET` expression reads the row as it was, so `last_in` and `last_out` are the
/// previous request's when a prefix is reckoned.
const THREAD_UPSERT: &str = "INSERT INTO activity_threads (thread, server, model, first_ms,
        last_ms, requests, counted, tokens_in, tokens_out, in_cached, out_cached, last_in,
        last_out, compactions, pages, llm_input, llm_output, llm_cost_micro)
    VALUES (?1, ?2, ?3, ?4, ?4, 1, ?5, ?6, ?7, 0, coalesce(?8, 0), ?6, ?7, ?9, ?10, ?11, ?12, ?13)
    ON CONFLICT (thread) DO UPDATE SET
        model = coalesce(?3, model),
        first_ms = min(first_ms, ?4),
        last_ms = max(last_ms, ?4),
        requests = requests + 1,
        counted = counted + ?5,
        tokens_in = tokens_in + ?6,
        tokens_out = tokens_out + ?7,
        in_cached = in_cached + CASE WHEN ?5 = 1 THEN min(last_in, ?6) ELSE 0 END,
        out_cached = out_cached
            + CASE WHEN ?5 = 1 THEN coalesce(?8, min(last_out, ?7)) ELSE 0 END,
        last_in = CASE WHEN ?5 = 1 THEN ?6 ELSE last_in END,
        last_out = CASE WHEN ?5 = 1 THEN ?7 ELSE last_out END,
        compactions = compactions + ?9,
        pages = pages + ?10,
        llm_input = llm_input + ?11,
        llm_output = llm_output + ?12,
        llm_cost_micro = llm_cost_micro + ?13";

impl ActivityStore for SqliteStore {
    fn record_requests(
        &self,
        requests: Vec<RequestRecord>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.run("record requests".to_owned(), move |inner| {
            let fail = |e| StoreError::backend(&inner.location, "record requests", e);
            let mut conn = inner.activity("record requests", true)?;
            let tx = conn.transaction().map_err(fail)?;
            {
                let mut insert = tx
                    .prepare_cached(&format!(
                        "INSERT INTO activity_requests ({REQUEST_INSERT_COLUMNS}) VALUES ({})",
                        placeholders('?', 1, REQUEST_INSERT_VALUES)
                    ))
                    .map_err(fail)?;
                let mut compaction = tx
                    .prepare_cached(
                        "INSERT INTO activity_compactions (request_seq, thread, at_ms,
                             report_json, replacements_json) VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .map_err(fail)?;
                let mut thread = tx.prepare_cached(THREAD_UPSERT).map_err(fail)?;
                for request in &requests {
                    insert
                        .execute(params_from_iter(rows::request_values(request)))
                        .map_err(fail)?;
                    let seq = tx.last_insert_rowid();
                    if let Some(c) = &request.compaction {
                        compaction
                            .execute(params![
                                seq,
                                request.thread,
                                to_i64(request.at_ms),
                                c.report_json,
                                c.replacements_json
                            ])
                            .map_err(fail)?;
                    }
                    if let Some(values) = rows::thread_values(request) {
                        thread.execute(params_from_iter(values)).map_err(fail)?;
                    }
                }
            }
            tx.commit().map_err(fail)
        })
        .boxed()
    }

    fn threads(&self, query: ThreadQuery) -> BoxFuture<'_, Result<Vec<ThreadTotals>, StoreError>> {
        self.run("list threads".to_owned(), move |inner| {
            let conn = inner.activity("read the activity record", false)?;
            let text = query.text.as_deref().map(like_anywhere);
            select(
                &conn,
                &format!(
                    "SELECT {THREAD_TOTALS_COLUMNS} FROM activity_threads
                     WHERE (?1 IS NULL OR lower(thread) LIKE ?1 ESCAPE '\\'
                            OR lower(coalesce(model, '')) LIKE ?1 ESCAPE '\\')
                       AND (?2 = 0 OR compactions > 0)
                     ORDER BY last_ms DESC, thread LIMIT ?3"
                ),
                params![
                    text,
                    i64::from(query.compacted_only),
                    to_i64(query.limit as u64)
                ],
                rows::read_thread_totals,
            )
            .map_err(|e| StoreError::backend(&inner.location, "list threads", e))
        })
        .boxed()
    }

    fn thread(&self, thread: &str) -> BoxFuture<'_, Result<Option<ThreadTotals>, StoreError>> {
        let thread = thread.to_owned();
        self.run("read a thread".to_owned(), move |inner| {
            let conn = inner.activity("read the activity record", false)?;
            select_first(
                &conn,
                &format!("SELECT {THREAD_TOTALS_COLUMNS} FROM activity_threads WHERE thread = ?1"),
                params![thread],
                rows::read_thread_totals,
            )
            .map_err(|e| StoreError::backend(&inner.location, "read a thread", e))
        })
        .boxed()
    }

    fn thread_requests(
        &self,
        thread: &str,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<RequestRow>, StoreError>> {
        let thread = thread.to_owned();
        self.run("read a thread's requests".to_owned(), move |inner| {
            let conn = inner.activity("read the activity record", false)?;
            let mut rows = select(
                &conn,
                &rows::latest_requests("r.thread = ?1", "?2"),
                params![thread, to_i64(limit as u64)],
                rows::read_request_row,
            )
            .map_err(|e| StoreError::backend(&inner.location, "read a thread's requests", e))?;
            rows.reverse();
            Ok(rows)
        })
        .boxed()
    }

    fn compaction(&self, seq: i64) -> BoxFuture<'_, Result<Option<CompactionRow>, StoreError>> {
        self.run("read a compaction".to_owned(), move |inner| {
            let conn = inner.activity("read the activity record", false)?;
            select_first(
                &conn,
                &format!(
                    "SELECT {REQUEST_COLUMNS}, c.report_json, c.replacements_json
                     FROM activity_compactions c JOIN activity_requests r ON r.seq = c.request_seq
                     WHERE c.request_seq = ?1"
                ),
                params![seq],
                |row| {
                    Ok(CompactionRow {
                        request: rows::read_request_row(row)?,
                        report_json: row.text("report_json")?,
                        replacements_json: row.text("replacements_json")?,
                    })
                },
            )
            .map_err(|e| StoreError::backend(&inner.location, "read a compaction", e))
        })
        .boxed()
    }

    fn failed_requests(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RequestRow>, StoreError>> {
        self.run("read the failed requests".to_owned(), move |inner| {
            let conn = inner.activity("read the activity record", false)?;
            select(
                &conn,
                &rows::latest_requests(rows::FAILED, "?1"),
                params![to_i64(limit as u64)],
                rows::read_request_row,
            )
            .map_err(|e| StoreError::backend(&inner.location, "read the failed requests", e))
        })
        .boxed()
    }

    fn prune(
        &self,
        before_ms: u64,
        max_requests: u64,
    ) -> BoxFuture<'_, Result<Pruned, StoreError>> {
        self.run("delete old requests".to_owned(), move |inner| {
            let fail = |e| StoreError::backend(&inner.location, "delete old requests", e);
            let mut conn = inner.activity("delete old requests", true)?;
            let tx = conn.transaction().map_err(fail)?;
            let before = to_i64(before_ms);
            let mut requests = tx
                .execute("DELETE FROM activity_requests WHERE at_ms < ?1", [before])
                .map_err(fail)? as u64;
            tx.execute(
                "DELETE FROM activity_compactions WHERE at_ms < ?1",
                [before],
            )
            .map_err(fail)?;
            let threads = tx
                .execute("DELETE FROM activity_threads WHERE last_ms < ?1", [before])
                .map_err(fail)? as u64;
            let newest_dropped: Option<i64> = tx
                .query_row(
                    "SELECT seq FROM activity_requests ORDER BY seq DESC LIMIT 1 OFFSET ?1",
                    [to_i64(max_requests)],
                    |row| row.get(0),
                )
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })
                .map_err(fail)?;
            if let Some(seq) = newest_dropped {
                requests += tx
                    .execute("DELETE FROM activity_requests WHERE seq <= ?1", [seq])
                    .map_err(fail)? as u64;
                tx.execute(
                    "DELETE FROM activity_compactions WHERE request_seq <= ?1",
                    [seq],
                )
                .map_err(fail)?;
            }
            tx.commit().map_err(fail)?;
            Ok(Pruned { requests, threads })
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::activity::CompactionRecord;

    fn request(thread: &str, at_ms: u64, tokens: Option<(u64, u64)>) -> RequestRecord {
        let mut r = RequestRecord {
            at_ms,
            server: "proxy".into(),
            route: "POST /v1/messages".into(),
            status: 200,
            duration_ms: 12,
            thread: Some(thread.into()),
            model: Some("claude-opus-5-5".into()),
            outcome: Some("unchanged".into()),
            ..RequestRecord::default()
        };
        r.set_tokens(tokens);
        r.set_budget(Some((10_000, 8_000, 5_000)));
        r
    }

    #[tokio::test]
    async fn a_thread_s_totals_reckon_the_prefix_each_request_shares_with_the_one_before() {
        let store = SqliteStore::in_memory().unwrap();
        let mut compacted = request("session:a", 4_000, Some((9_000, 3_000)));
        compacted.outcome = Some("compacted".into());
        compacted.pages = 2;
        compacted.prefix_kept = Some(1_000);
        (compacted.llm_input_tokens, compacted.llm_output_tokens) = (500, 80);
        compacted.llm_cost_micro_usd = Some(1_250);
        compacted.compaction = Some(CompactionRecord {
            report_json: "{\"stages\":[]}".into(),
            replacements_json: "[]".into(),
        });
        let mut unread = request("session:a", 2_000, None);
        unread.tokens_at_most = Some(7_000);
        store
            .record_requests(vec![
                request("session:a", 1_000, Some((5_000, 5_000))),
                unread,
                request("session:a", 3_000, Some((6_000, 6_000))),
                compacted,
                request("session:a", 5_000, Some((9_500, 3_500))),
                request("session:b", 6_000, Some((100, 100))),
            ])
            .await
            .unwrap();
        let a = store.thread("session:a").await.unwrap().unwrap();
        assert_eq!((a.requests, a.counted), (5, 4));
        assert_eq!((a.tokens_in, a.tokens_out), (29_500, 17_500));
        // Sent: each counted request reads the one before it from the cache.
        assert_eq!(a.in_cached, 5_000 + 6_000 + 9_000);
        // Forwarded: the compaction kept 1,000 tokens; the next request extends its answer.
        assert_eq!(a.out_cached, 5_000 + 1_000 + 3_000);
        assert_eq!((a.compactions, a.pages), (1, 2));
        assert_eq!((a.llm_input_tokens, a.llm_cost_micro_usd), (500, 1_250));
        assert_eq!((a.first_seen, a.last_seen), (1, 5));

        let list = store
            .threads(ThreadQuery {
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            list.iter().map(|t| t.thread.as_str()).collect::<Vec<_>>(),
            ["session:b", "session:a"]
        );
        let only = |text: &str, compacted_only| ThreadQuery {
            text: Some(text.into()),
            compacted_only,
            limit: 10,
        };
        assert_eq!(store.threads(only("SION:B", false)).await.unwrap().len(), 1);
        assert_eq!(store.threads(only("opus", true)).await.unwrap().len(), 1);
        assert_eq!(store.threads(only("%", false)).await.unwrap().len(), 0);

        let timeline = store.thread_requests("session:a", 100).await.unwrap();
        assert_eq!(timeline.len(), 5);
        assert_eq!(timeline[1].request.tokens_at_most, Some(7_000));
        assert_eq!(timeline[1].request.tokens_in, None);
        let marked: Vec<i64> = timeline
            .iter()
            .filter(|r| r.compacted)
            .map(|r| r.seq)
            .collect();
        assert_eq!(marked.len(), 1);
        let compaction = store.compaction(marked[0]).await.unwrap().unwrap();
        assert_eq!(compaction.request.request.pages, 2);
        assert_eq!(compaction.report_json, "{\"stages\":[]}");
        assert!(store.compaction(marked[0] + 100).await.unwrap().is_none());
        // Only the latest requests, oldest first.
        let last_two = store.thread_requests("session:a", 2).await.unwrap();
        assert_eq!(
            last_two.iter().map(|r| r.request.at_ms).collect::<Vec<_>>(),
            [4_000, 5_000]
        );
    }

    #[tokio::test]
    async fn old_requests_go_and_so_do_those_past_the_cap() {
        let store = SqliteStore::in_memory().unwrap();
        let mut failed = request("session:c", 9_000, None);
        failed.status = 502;
        failed.error = Some("upstream_unreachable".into());
        store
            .record_requests(vec![
                request("session:old", 1_000, Some((10, 10))),
                request("session:c", 5_000, Some((10, 10))),
                request("session:c", 6_000, Some((10, 10))),
                request("session:c", 7_000, Some((10, 10))),
                failed,
            ])
            .await
            .unwrap();
        let failures = store.failed_requests(10).await.unwrap();
        assert_eq!(failures.len(), 1);
        assert_eq!(
            failures[0].request.error.as_deref(),
            Some("upstream_unreachable")
        );
        let pruned = store.prune(2_000, 3).await.unwrap();
        assert_eq!(
            pruned,
            Pruned {
                requests: 2,
                threads: 1
            }
        );
        assert!(store.thread("session:old").await.unwrap().is_none());
        let left = store.thread_requests("session:c", 10).await.unwrap();
        assert_eq!(
            left.iter().map(|r| r.request.at_ms).collect::<Vec<_>>(),
            [6_000, 7_000, 9_000]
        );
        // The thread's totals still count every request it had.
        assert_eq!(
            store.thread("session:c").await.unwrap().unwrap().requests,
            4
        );
    }
}
