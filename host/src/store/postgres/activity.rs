//! The activity record on PostgreSQL (see [`crate::store::activity`]): every replica records
//! its requests in the same tables, so the console of any one shows the threads of all.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{bind, read_all, PostgresStore};
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
        seq            BIGSERIAL PRIMARY KEY,
        at_ms          BIGINT NOT NULL,
        server         TEXT NOT NULL,
        route          TEXT NOT NULL,
        status         BIGINT NOT NULL,
        duration_ms    BIGINT NOT NULL,
        thread         TEXT,
        model          TEXT,
        outcome        TEXT,
        tokens_in      BIGINT,
        tokens_out     BIGINT,
        tokens_at_most BIGINT,
        pages          BIGINT NOT NULL,
        prefix_kept    BIGINT,
        max_tokens     BIGINT,
        high_tokens    BIGINT,
        low_tokens     BIGINT,
        llm_input      BIGINT NOT NULL,
        llm_output     BIGINT NOT NULL,
        llm_cost_micro BIGINT,
        error          TEXT
    );
    CREATE INDEX activity_requests_by_thread ON activity_requests (thread, at_ms);
    CREATE INDEX activity_requests_by_time ON activity_requests (at_ms);
    CREATE INDEX activity_requests_failed ON activity_requests (at_ms)
        WHERE status >= 400 OR error IS NOT NULL;
    CREATE TABLE activity_compactions (
        request_seq       BIGINT PRIMARY KEY,
        thread            TEXT,
        at_ms             BIGINT NOT NULL,
        report_json       TEXT NOT NULL,
        replacements_json TEXT NOT NULL
    );
    CREATE INDEX activity_compactions_by_time ON activity_compactions (at_ms);
    CREATE TABLE activity_threads (
        thread         TEXT PRIMARY KEY,
        server         TEXT NOT NULL,
        model          TEXT,
        first_ms       BIGINT NOT NULL,
        last_ms        BIGINT NOT NULL,
        requests       BIGINT NOT NULL,
        counted        BIGINT NOT NULL,
        tokens_in      BIGINT NOT NULL,
        tokens_out     BIGINT NOT NULL,
        in_cached      BIGINT NOT NULL,
        out_cached     BIGINT NOT NULL,
        last_in        BIGINT NOT NULL,
        last_out       BIGINT NOT NULL,
        compactions    BIGINT NOT NULL,
        pages          BIGINT NOT NULL,
        llm_input      BIGINT NOT NULL,
        llm_output     BIGINT NOT NULL,
        llm_cost_micro BIGINT NOT NULL
    );
    CREATE INDEX activity_threads_by_last ON activity_threads (last_ms);";

/// Adds one request to its thread's totals (parameters: `rows::thread_values`,
/// typed, since tokio-postgres binds exactly the type the server infers). Unqualified
/// columns in `SET` read the row as it was, so `last_in` and `last_out` are the previous
/// request's; two replicas adding to one thread at once are serialized by the row's lock.
const THREAD_UPSERT: &str = "INSERT INTO activity_threads AS t (thread, server, model, first_ms,
        last_ms, requests, counted, tokens_in, tokens_out, in_cached, out_cached, last_in,
        last_out, compactions, pages, llm_input, llm_output, llm_cost_micro)
    VALUES ($1::text, $2::text, $3::text, $4::bigint, $4::bigint, 1, $5::bigint, $6::bigint,
        $7::bigint, 0, coalesce($8::bigint, 0), $6::bigint, $7::bigint, $9::bigint,
        $10::bigint, $11::bigint, $12::bigint, $13::bigint)
    ON CONFLICT (thread) DO UPDATE SET
        model = coalesce($3::text, t.model),
        first_ms = least(t.first_ms, $4::bigint),
        last_ms = greatest(t.last_ms, $4::bigint),
        requests = t.requests + 1,
        counted = t.counted + $5::bigint,
        tokens_in = t.tokens_in + $6::bigint,
        tokens_out = t.tokens_out + $7::bigint,
        in_cached = t.in_cached
            + CASE WHEN $5::bigint = 1 THEN least(t.last_in, $6::bigint) ELSE 0 END,
        out_cached = t.out_cached + CASE WHEN $5::bigint = 1
            THEN coalesce($8::bigint, least(t.last_out, $7::bigint)) ELSE 0 END,
        last_in = CASE WHEN $5::bigint = 1 THEN $6::bigint ELSE t.last_in END,
        last_out = CASE WHEN $5::bigint = 1 THEN $7::bigint ELSE t.last_out END,
        compactions = t.compactions + $9::bigint,
        pages = t.pages + $10::bigint,
        llm_input = t.llm_input + $11::bigint,
        llm_output = t.llm_output + $12::bigint,
        llm_cost_micro = t.llm_cost_micro + $13::bigint";

/// A usize bound as PostgreSQL takes it.
fn bigint(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl ActivityStore for PostgresStore {
    fn record_requests(
        &self,
        requests: Vec<RequestRecord>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.run("record requests".to_owned(), move |mut client| async move {
            let tx = client.transaction().await?;
            let insert = tx
                .prepare_cached(&format!(
                    "INSERT INTO activity_requests ({REQUEST_INSERT_COLUMNS}) VALUES ({})
                         RETURNING seq",
                    placeholders('$', 1, REQUEST_INSERT_VALUES)
                ))
                .await?;
            let compaction = tx
                .prepare_cached(
                    "INSERT INTO activity_compactions (request_seq, thread, at_ms,
                             report_json, replacements_json) VALUES ($1, $2, $3, $4, $5)",
                )
                .await?;
            let thread = tx.prepare_cached(THREAD_UPSERT).await?;
            for request in &requests {
                let values = rows::request_values(request);
                let seq: i64 = tx.query_one(&insert, &bind(&values)).await?.get(0);
                if let Some(c) = &request.compaction {
                    let at = i64::try_from(request.at_ms).unwrap_or(i64::MAX);
                    tx.execute(
                        &compaction,
                        &[
                            &seq,
                            &request.thread,
                            &at,
                            &c.report_json,
                            &c.replacements_json,
                        ],
                    )
                    .await?;
                }
                if let Some(values) = rows::thread_values(request) {
                    tx.execute(&thread, &bind(&values)).await?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
        .boxed()
    }

    fn threads(&self, query: ThreadQuery) -> BoxFuture<'_, Result<Vec<ThreadTotals>, StoreError>> {
        self.run("list threads".to_owned(), move |client| async move {
            let text = query.text.as_deref().map(like_anywhere);
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {THREAD_TOTALS_COLUMNS} FROM activity_threads
                     WHERE ($1::text IS NULL OR lower(thread) LIKE $1 ESCAPE '\\'
                            OR lower(coalesce(model, '')) LIKE $1 ESCAPE '\\')
                       AND (NOT $2::boolean OR compactions > 0)
                     ORDER BY last_ms DESC, thread LIMIT $3"
                ))
                .await?;
            let answer = client
                .query(&stmt, &[&text, &query.compacted_only, &bigint(query.limit)])
                .await?;
            Ok(read_all(&answer, rows::read_thread_totals)?)
        })
        .boxed()
    }

    fn thread(&self, thread: &str) -> BoxFuture<'_, Result<Option<ThreadTotals>, StoreError>> {
        let thread = thread.to_owned();
        self.run("read a thread".to_owned(), move |client| async move {
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {THREAD_TOTALS_COLUMNS} FROM activity_threads WHERE thread = $1"
                ))
                .await?;
            let answer = client.query(&stmt, &[&thread]).await?;
            Ok(read_all(&answer, rows::read_thread_totals)?.pop())
        })
        .boxed()
    }

    fn thread_requests(
        &self,
        thread: &str,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<RequestRow>, StoreError>> {
        let thread = thread.to_owned();
        self.run(
            "read a thread's requests".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&rows::latest_requests("r.thread = $1", "$2"))
                    .await?;
                let answer = client.query(&stmt, &[&thread, &bigint(limit)]).await?;
                let mut rows = read_all(&answer, rows::read_request_row)?;
                rows.reverse();
                Ok(rows)
            },
        )
        .boxed()
    }

    fn compaction(&self, seq: i64) -> BoxFuture<'_, Result<Option<CompactionRow>, StoreError>> {
        self.run("read a compaction".to_owned(), move |client| async move {
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {REQUEST_COLUMNS}, c.report_json, c.replacements_json
                     FROM activity_compactions c JOIN activity_requests r ON r.seq = c.request_seq
                     WHERE c.request_seq = $1"
                ))
                .await?;
            let answer = client.query(&stmt, &[&seq]).await?;
            let mut rows = read_all(&answer, |row| {
                Ok(CompactionRow {
                    request: rows::read_request_row(row)?,
                    report_json: row.text("report_json")?,
                    replacements_json: row.text("replacements_json")?,
                })
            })?;
            Ok(rows.pop())
        })
        .boxed()
    }

    fn failed_requests(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RequestRow>, StoreError>> {
        self.run(
            "read the failed requests".to_owned(),
            move |client| async move {
                let stmt = client
                    .prepare_cached(&rows::latest_requests(rows::FAILED, "$1"))
                    .await?;
                let answer = client.query(&stmt, &[&bigint(limit)]).await?;
                Ok(read_all(&answer, rows::read_request_row)?)
            },
        )
        .boxed()
    }

    fn prune(
        &self,
        before_ms: u64,
        max_requests: u64,
    ) -> BoxFuture<'_, Result<Pruned, StoreError>> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        let keep = i64::try_from(max_requests).unwrap_or(i64::MAX);
        self.run(
            "delete old requests".to_owned(),
            move |mut client| async move {
                let tx = client.transaction().await?;
                let mut requests = tx
                    .execute("DELETE FROM activity_requests WHERE at_ms < $1", &[&before])
                    .await?;
                tx.execute(
                    "DELETE FROM activity_compactions WHERE at_ms < $1",
                    &[&before],
                )
                .await?;
                let threads = tx
                    .execute(
                        "DELETE FROM activity_threads WHERE last_ms < $1",
                        &[&before],
                    )
                    .await?;
                let newest_dropped = tx
                    .query_opt(
                        "SELECT seq FROM activity_requests ORDER BY seq DESC LIMIT 1 OFFSET $1",
                        &[&keep],
                    )
                    .await?
                    .map(|row| row.get::<_, i64>(0));
                if let Some(seq) = newest_dropped {
                    requests += tx
                        .execute("DELETE FROM activity_requests WHERE seq <= $1", &[&seq])
                        .await?;
                    tx.execute(
                        "DELETE FROM activity_compactions WHERE request_seq <= $1",
                        &[&seq],
                    )
                    .await?;
                }
                tx.commit().await?;
                Ok(Pruned { requests, threads })
            },
        )
        .boxed()
    }
}
