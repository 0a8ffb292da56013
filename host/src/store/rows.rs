//! One row mapping per stored type, shared by both stores: which columns hold a page, a
//! cached answer or range, a thread state and a queue item, and how a row reads back as the
//! type. The SQL around them may differ between SQLite and PostgreSQL (placeholders, upserts,
//! whose clock stamps a row); the mapping may not, so it is written here once.
//!
//! Columns are read by name ([`Columns`], implemented for each backend's row type), so a
//! `SELECT` may list them in any order and no column index is kept in step by hand. Values are
//! written as [`Value`]s, which both backends bind. The tables themselves are the migrations
//! of `store::sqlite` and `store::postgres`.

use std::fmt;

use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Message, Page, Usage};

use super::activity::{RequestRecord, RequestRow, ThreadTotals};
use super::queue::{
    Billing, NewDeferred, OpenBatch, QueueEvent, QueueItem, QueueState, QueueStatus,
};
use super::seal::{PageRow, Record};
use super::search::SearchHit;
use super::threads::ThreadState;
use super::DamagedRecord;
use super::{canonical_json, page_id_of_json, NewPage, PageSummary, StoredPage};

/// A row as a backend answered it, its columns read by name.
pub(crate) trait Columns {
    fn text(&self, column: &str) -> Result<String, RowError>;
    fn optional_text(&self, column: &str) -> Result<Option<String>, RowError>;
    fn int(&self, column: &str) -> Result<i64, RowError>;
    fn optional_int(&self, column: &str) -> Result<Option<i64>, RowError>;
    fn bytes(&self, column: &str) -> Result<Vec<u8>, RowError>;

    /// A count or a time, stored signed: a negative one reads as 0.
    fn unsigned(&self, column: &str) -> Result<u64, RowError> {
        Ok(unsigned(self.int(column)?))
    }

    fn optional_unsigned(&self, column: &str) -> Result<Option<u64>, RowError> {
        Ok(self.optional_int(column)?.map(unsigned))
    }
}

fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Why a row does not read as its type: a column missing or of another type, or a value that
/// does not decode. The backend names the store and the operation around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowError(pub String);

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value to write, of a type both backends bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Text(&'a str),
    OptionalText(Option<&'a str>),
    Int(i64),
    OptionalInt(Option<i64>),
}

/// A count as stored (the columns are signed).
fn stored_count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `count` numbered placeholders from `first`: `?1, ?2` (SQLite) or `$1, $2` (PostgreSQL).
pub(crate) fn placeholders(sigil: char, first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("{sigil}{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `column = ?n, …` for each of `columns` (comma-separated), numbered from `first`.
pub(crate) fn assignments(columns: &str, sigil: char, first: usize) -> String {
    columns
        .split(',')
        .enumerate()
        .map(|(i, column)| format!("{} = {sigil}{}", column.trim(), first + i))
        .collect::<Vec<_>>()
        .join(", ")
}

// Pages.

/// Pages with more messages than this are encoded off the caller's executor thread.
pub(crate) const ENCODE_INLINE_MAX: usize = 64;

/// A page's id and the canonical JSON of its messages: the text the id hashes, kept as it is
/// in `messages_json`.
pub(crate) fn encode_messages(messages: &[Message]) -> (String, String) {
    let json = canonical_json(messages);
    let id = page_id_of_json(&json);
    (
        id,
        String::from_utf8(json).expect("serde_json output is UTF-8"),
    )
}

/// The columns a new page is written to, in the order of [`NewPageRow::values`]; the backend
/// adds `created_at` from its clock.
pub(crate) const PAGE_INSERT_COLUMNS: &str = "id, thread_id, strategy, source_format, \
    messages_json, metadata_json, message_count, seal";

/// How many values [`NewPageRow::values`] gives: one per [`PAGE_INSERT_COLUMNS`].
pub(crate) const PAGE_INSERT_VALUES: usize = 8;

/// A new page as the row it is written as.
pub(crate) struct NewPageRow<'a> {
    fields: PageRow<'a>,
    messages_json: &'a str,
    seal: String,
}

impl<'a> NewPageRow<'a> {
    /// `id` and `messages_json` as [`encode_messages`] made them.
    pub fn new(id: &'a str, messages_json: &'a str, page: &'a NewPage) -> Self {
        let fields = PageRow::of_new(id, page);
        NewPageRow {
            seal: fields.seal(),
            fields,
            messages_json,
        }
    }

    /// The values of [`PAGE_INSERT_COLUMNS`].
    pub fn values(&self) -> [Value<'_>; PAGE_INSERT_VALUES] {
        let f = &self.fields;
        [
            Value::Text(f.id),
            Value::OptionalText(f.thread_id),
            Value::Text(f.strategy),
            Value::OptionalText(f.source_format),
            Value::Text(self.messages_json),
            Value::Text(f.metadata_json),
            Value::Int(f.message_count),
            Value::Text(&self.seal),
        ]
    }
}

/// The columns a page reads back from ([`PageRecord::read`]), but for `seal`: a SQLite file
/// from before seals, read without migrating it, has none and selects `NULL AS seal`.
pub(crate) const PAGE_COLUMNS: &str = "id, thread_id, strategy, source_format, messages_json, \
    metadata_json, message_count, created_at";

/// The columns a page's seal covers (see `store::seal`).
pub(crate) const SEALED_COLUMNS: &str =
    "id, thread_id, strategy, source_format, metadata_json, message_count";

/// A page's [`SEALED_COLUMNS`] as read.
struct SealedFields {
    id: String,
    thread_id: Option<String>,
    strategy: String,
    source_format: Option<String>,
    metadata_json: String,
    message_count: i64,
}

impl SealedFields {
    fn read(row: &dyn Columns) -> Result<Self, RowError> {
        Ok(SealedFields {
            id: row.text("id")?,
            thread_id: row.optional_text("thread_id")?,
            strategy: row.text("strategy")?,
            source_format: row.optional_text("source_format")?,
            metadata_json: row.text("metadata_json")?,
            message_count: row.int("message_count")?,
        })
    }

    fn row(&self) -> PageRow<'_> {
        PageRow {
            id: &self.id,
            thread_id: self.thread_id.as_deref(),
            strategy: &self.strategy,
            source_format: self.source_format.as_deref(),
            metadata_json: &self.metadata_json,
            message_count: self.message_count,
        }
    }
}

/// A page's row as read, before anything in it is checked.
pub(crate) struct PageRecord {
    fields: SealedFields,
    messages_json: String,
    created_at: i64,
    seal: Option<String>,
}

impl PageRecord {
    /// [`PAGE_COLUMNS`] and `seal`.
    pub fn read(row: &dyn Columns) -> Result<Self, RowError> {
        Ok(PageRecord {
            fields: SealedFields::read(row)?,
            messages_json: row.text("messages_json")?,
            created_at: row.int("created_at")?,
            seal: row.optional_text("seal")?,
        })
    }

    /// The stored page, every field checked (see [`PageRow::check`]); `sealed` says whether
    /// the schema has seals. The error is the [`StoreError::Corrupt`](super::StoreError)
    /// detail. Parsing a large page takes a while: callers hold no connection meanwhile.
    pub fn into_page(self, sealed: bool) -> Result<StoredPage, String> {
        let seal = sealed.then_some(self.seal.as_deref());
        let messages = self.fields.row().check(&self.messages_json, seal)?;
        let f = self.fields;
        Ok(StoredPage {
            page: Page {
                id: f.id.into(),
                thread_id: FfiOption::from(f.thread_id.map(Into::into)),
                strategy: f.strategy.into(),
                messages: messages.into(),
                metadata_json: f.metadata_json.into(),
                created_at: unsigned(self.created_at),
            },
            source_format: f.source_format,
        })
    }
}

/// The columns of a [`PageSummary`].
pub(crate) const SUMMARY_COLUMNS: &str =
    "id, thread_id, strategy, message_count, created_at, source_format";

pub(crate) fn read_summary(row: &dyn Columns) -> Result<PageSummary, RowError> {
    Ok(PageSummary {
        id: row.text("id")?,
        thread_id: row.optional_text("thread_id")?,
        strategy: row.text("strategy")?,
        message_count: row.unsigned("message_count")?,
        created_at: row.unsigned("created_at")?,
        source_format: row.optional_text("source_format")?,
    })
}

/// A page written before seals, sealed as it is: its id and its seal.
pub(crate) fn seal_of(row: &dyn Columns) -> Result<(String, String), RowError> {
    let fields = SealedFields::read(row)?;
    let seal = fields.row().seal();
    Ok((fields.id, seal))
}

// The summary cache: `llm_answers (key, answer_json, created_at)` and
// `range_summaries (key, message_count, summary, created_at)`, keyed by `digest::CacheKey`.

/// An answer as `answer_json` keeps it.
pub(crate) fn encode_answer(answer: &LlmResponse) -> Result<String, serde_json::Error> {
    serde_json::to_string(answer)
}

/// The columns of a cached answer ([`read_answer`]).
pub(crate) const ANSWER_COLUMNS: &str = "key, answer_json, seal";

/// The answer in `answer_json`, checked against its seal when `sealed` (the schema has
/// seals). One this build cannot read is a miss, not an error: the call is made. One that no
/// longer matches its seal is the reason why (`Err`), for the caller to log as a miss.
pub(crate) fn read_answer(
    row: &dyn Columns,
    sealed: bool,
) -> Result<Result<Option<LlmResponse>, DamagedRecord>, RowError> {
    let (key, json) = (row.bytes("key")?, row.text("answer_json")?);
    let record = Record::Answer {
        key: &key,
        answer_json: &json,
    };
    Ok(checked(record, row, sealed)?.map(|()| serde_json::from_str(&json).ok()))
}

/// The columns of a cached range ([`read_range`]).
pub(crate) const RANGE_COLUMNS: &str = "key, message_count, summary, seal";

/// `(messages covered, summary)`, checked as [`read_answer`] checks an answer.
pub(crate) fn read_range(
    row: &dyn Columns,
    sealed: bool,
) -> Result<Result<(usize, String), DamagedRecord>, RowError> {
    let (key, count, summary) = (
        row.bytes("key")?,
        row.int("message_count")?,
        row.text("summary")?,
    );
    let record = Record::Range {
        key: &key,
        message_count: count,
        summary: &summary,
    };
    let checked = checked(record, row, sealed)?;
    Ok(checked.map(|()| (usize::try_from(count).unwrap_or(0), summary)))
}

/// A range's length as `message_count` keeps it.
pub(crate) fn range_len(len: usize) -> i64 {
    stored_count(len as u64)
}

// Thread states: `threads (key, state_json, updated_at)`.

/// A state as `state_json` keeps it.
pub(crate) fn encode_thread_state(state: &ThreadState) -> String {
    serde_json::to_string(state).expect("thread states serialize to JSON")
}

/// The columns of a thread state ([`read_thread_state`]).
pub(crate) const THREAD_COLUMNS: &str = "key, state_json, seal";

/// The state in `state_json`, checked against its seal when `sealed` (the schema has seals).
/// One this build cannot read is no state: the request is compacted from its raw history, as
/// if the thread were new. One that no longer matches its seal is the reason why (`Err`).
pub(crate) fn read_thread_state(
    row: &dyn Columns,
    sealed: bool,
) -> Result<Result<Option<ThreadState>, DamagedRecord>, RowError> {
    let (key, json) = (row.text("key")?, row.text("state_json")?);
    let record = Record::Thread {
        key: &key,
        state_json: &json,
    };
    Ok(checked(record, row, sealed)?.map(|()| serde_json::from_str(&json).ok()))
}

/// `record`, read from `row`, against the row's seal when `sealed` (the schema has seals): `Err`
/// names it and what is wrong.
fn checked(
    record: Record<'_>,
    row: &dyn Columns,
    sealed: bool,
) -> Result<Result<(), DamagedRecord>, RowError> {
    if !sealed {
        return Ok(Ok(()));
    }
    let seal = row.optional_text("seal")?;
    Ok(record
        .check(seal.as_deref())
        .map_err(|detail| DamagedRecord {
            what: record.describe(),
            detail,
        }))
}

/// A thread state, an answer or a range of the summary cache: its key, its content and the
/// seal to write beside them (see [`Record`]).
pub(crate) fn thread_seal(key: &str, state_json: &str) -> String {
    Record::Thread { key, state_json }.seal()
}

pub(crate) fn answer_seal(key: &[u8], answer_json: &str) -> String {
    Record::Answer { key, answer_json }.seal()
}

pub(crate) fn range_seal(key: &[u8], message_count: i64, summary: &str) -> String {
    Record::Range {
        key,
        message_count,
        summary,
    }
    .seal()
}

/// A row's key: `threads` keys are text, the summary cache's bytes.
pub(crate) enum RecordKey {
    Text(String),
    Bytes(Vec<u8>),
}

/// A row's key and the seal of what it holds.
type SealOf = fn(&dyn Columns) -> Result<(RecordKey, String), RowError>;

/// The tables whose rows [`Record`] seals, with the columns each seal reads: what migrating
/// to schema 7 seals, as it is, in a store written before.
pub(crate) const SEALED_TABLES: [(&str, &str, SealOf); 3] = [
    ("threads", "key, state_json", |row| {
        let key = row.text("key")?;
        let seal = thread_seal(&key, &row.text("state_json")?);
        Ok((RecordKey::Text(key), seal))
    }),
    ("llm_answers", "key, answer_json", |row| {
        let key = row.bytes("key")?;
        let seal = answer_seal(&key, &row.text("answer_json")?);
        Ok((RecordKey::Bytes(key), seal))
    }),
    ("range_summaries", "key, message_count, summary", |row| {
        let key = row.bytes("key")?;
        let seal = range_seal(&key, row.int("message_count")?, &row.text("summary")?);
        Ok((RecordKey::Bytes(key), seal))
    }),
];

// The deferred queue: `deferred_items` and `deferred_events`.

/// The columns of a [`QueueItem`] ([`read_item`]).
pub(crate) const ITEM_COLUMNS: &str = "id, page_id, strategy, thread_id, request_json, state, \
    batch_id, attempts, requeues, text, reason, billing, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, created_ms, updated_ms, submitted_ms, lease_owner, \
    lease_until_ms";

/// Whether a queue item's row reads back as an item (its request, state, result), for the
/// store's check: `Err` names the item and what is wrong.
pub(crate) fn check_item(row: &dyn Columns) -> Result<Result<(), DamagedRecord>, RowError> {
    let id = row.int("id")?;
    Ok(read_item(row).map(drop).map_err(|e| DamagedRecord {
        what: format!("deferred item {id}"),
        detail: e.0,
    }))
}

pub(crate) fn read_item(row: &dyn Columns) -> Result<QueueItem, RowError> {
    let id = row.int("id")?;
    let unreadable = |what: String| RowError(format!("deferred item {id} is unreadable: {what}"));
    let request: LlmRequest = serde_json::from_str(&row.text("request_json")?)
        .map_err(|e| unreadable(format!("the stored request does not parse: {e}")))?;
    let state = row.text("state")?;
    let state = QueueState::parse(&state)
        .ok_or_else(|| unreadable(format!("unknown state \"{state}\"")))?;
    Ok(QueueItem {
        id,
        page_id: row.text("page_id")?,
        strategy: row.text("strategy")?,
        thread_id: row.optional_text("thread_id")?,
        request,
        state,
        batch_id: row.optional_text("batch_id")?,
        attempts: row.unsigned("attempts")? as u32,
        requeues: row.unsigned("requeues")? as u32,
        text: row.optional_text("text")?,
        reason: row.optional_text("reason")?,
        billing: row
            .optional_text("billing")?
            .as_deref()
            .and_then(Billing::parse),
        usage: read_usage(row)?,
        created_ms: row.unsigned("created_ms")?,
        updated_ms: row.unsigned("updated_ms")?,
        submitted_ms: row.optional_unsigned("submitted_ms")?,
        lease_owner: row.optional_text("lease_owner")?,
        lease_until_ms: row.optional_unsigned("lease_until_ms")?,
    })
}

/// A request as `request_json` keeps it.
pub(crate) fn encode_request(request: &LlmRequest) -> Result<String, serde_json::Error> {
    serde_json::to_string(request)
}

/// The columns a new item is written to, in the order of [`new_item_values`]; the backend sets
/// `state` to `queued` and the times from its clock.
pub(crate) const NEW_ITEM_COLUMNS: &str = "page_id, strategy, thread_id, request_json";

/// `request_json` is [`encode_request`] of the item's request.
pub(crate) fn new_item_values<'a>(item: &'a NewDeferred, request_json: &'a str) -> [Value<'a>; 4] {
    [
        Value::Text(&item.page_id),
        Value::Text(&item.strategy),
        Value::OptionalText(item.thread_id.as_deref()),
        Value::Text(request_json),
    ]
}

/// The columns a finished item's answer is written to, in the order of [`done_values`].
pub(crate) const DONE_COLUMNS: &str =
    "text, billing, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens";

pub(crate) fn done_values<'a>(text: &'a str, usage: &Usage, billing: Billing) -> [Value<'a>; 6] {
    [
        Value::Text(text),
        Value::Text(billing.as_str()),
        Value::Int(stored_count(usage.input_tokens)),
        Value::Int(stored_count(usage.output_tokens)),
        Value::Int(stored_count(usage.cache_read_tokens)),
        Value::Int(stored_count(usage.cache_write_tokens)),
    ]
}

/// The token columns of an item, or of a sum of items named alike.
fn read_usage(row: &dyn Columns) -> Result<Usage, RowError> {
    // A sum over no rows is NULL.
    let n = |column| Ok::<_, RowError>(row.optional_unsigned(column)?.unwrap_or(0));
    Ok(Usage {
        input_tokens: n("input_tokens")?,
        output_tokens: n("output_tokens")?,
        cache_read_tokens: n("cache_read_tokens")?,
        cache_write_tokens: n("cache_write_tokens")?,
    })
}

/// The columns of a [`QueueEvent`].
pub(crate) const EVENT_COLUMNS: &str = "at_ms, state, batch_id, detail";

pub(crate) fn read_event(row: &dyn Columns) -> Result<QueueEvent, RowError> {
    Ok(QueueEvent {
        at_ms: row.unsigned("at_ms")?,
        state: QueueState::parse(&row.text("state")?).unwrap_or(QueueState::Failed),
        batch_id: row.optional_text("batch_id")?,
        detail: row.text("detail")?,
    })
}

/// An [`OpenBatch`] from a query grouped by `batch_id` that names its item count `items` and
/// its first submission `submitted_ms`.
pub(crate) fn read_open_batch(row: &dyn Columns) -> Result<OpenBatch, RowError> {
    Ok(OpenBatch {
        batch_id: row.optional_text("batch_id")?.unwrap_or_default(),
        items: row.unsigned("items")?,
        submitted_ms: row.optional_unsigned("submitted_ms")?.unwrap_or(0),
    })
}

/// Adds to `status` one row of the item count per state (`state`, `items`).
pub(crate) fn count_state(status: &mut QueueStatus, row: &dyn Columns) -> Result<(), RowError> {
    let n = row.unsigned("items")?;
    match QueueState::parse(&row.text("state")?) {
        Some(QueueState::Queued) => status.queued = n,
        Some(QueueState::Submitted) => status.submitted = n,
        Some(QueueState::Done) => status.done = n,
        Some(QueueState::Failed) => status.failed = n,
        None => {}
    }
    Ok(())
}

/// The oldest unfinished item of [`QueueStatus`], from its `id`, `created_ms` and `state`.
pub(crate) fn read_oldest(
    row: &dyn Columns,
) -> Result<Option<(String, u64, QueueState)>, RowError> {
    let (id, created_ms) = (row.int("id")?, row.unsigned("created_ms")?);
    Ok(QueueState::parse(&row.text("state")?).map(|state| {
        (
            format!("{}{id}", super::queue::CUSTOM_ID_PREFIX),
            created_ms,
            state,
        )
    }))
}

/// Adds to `status` one row of the usage billed one way (`billing` and the token columns,
/// summed over the finished items).
pub(crate) fn add_billed_usage(
    status: &mut QueueStatus,
    row: &dyn Columns,
) -> Result<(), RowError> {
    let usage = read_usage(row)?;
    match row
        .optional_text("billing")?
        .as_deref()
        .and_then(Billing::parse)
    {
        Some(Billing::Batch) => status.batch_usage = usage,
        Some(Billing::Sync) => status.sync_usage = usage,
        None => {}
    }
    Ok(())
}

/// A page a search found: the columns `id`, `thread_id`, `strategy`, `created_at` and
/// `snippet` (both backends select these).
pub(crate) fn read_search_hit(row: &dyn Columns) -> Result<SearchHit, RowError> {
    Ok(SearchHit {
        page_id: row.text("id")?,
        thread_id: row.optional_text("thread_id")?,
        strategy: row.text("strategy")?,
        created_at: row.unsigned("created_at")?,
        snippet: row.text("snippet")?,
    })
}

// The activity record: `activity_requests`, `activity_compactions` and `activity_threads`
// (see `store::activity`).

/// The columns a request is written to, in the order of [`request_values`]; the backend adds
/// `seq`.
pub(crate) const REQUEST_INSERT_COLUMNS: &str = "at_ms, server, route, status, duration_ms, \
    thread, model, outcome, tokens_in, tokens_out, tokens_at_most, pages, prefix_kept, \
    max_tokens, high_tokens, low_tokens, llm_input, llm_output, llm_cost_micro, error";

/// How many values [`request_values`] gives.
pub(crate) const REQUEST_INSERT_VALUES: usize = 20;

/// The columns a request is read from ([`read_request_row`]), on `activity_requests r` and
/// `activity_compactions c` joined on its `seq`.
pub(crate) const REQUEST_COLUMNS: &str = "r.seq, r.at_ms, r.server, r.route, r.status, \
    r.duration_ms, r.thread, r.model, r.outcome, r.tokens_in, r.tokens_out, r.tokens_at_most, \
    r.pages, r.prefix_kept, r.max_tokens, r.high_tokens, r.low_tokens, r.llm_input, \
    r.llm_output, r.llm_cost_micro, r.error, \
    CASE WHEN c.request_seq IS NULL THEN CAST(0 AS BIGINT) ELSE CAST(1 AS BIGINT) END \
    AS compacted";

/// The statement both backends read requests with: the latest that `condition` (on `r`)
/// keeps, newest first, at most `limit` (a placeholder).
pub(crate) fn latest_requests(condition: &str, limit: &str) -> String {
    format!(
        "SELECT {REQUEST_COLUMNS} FROM activity_requests r
         LEFT JOIN activity_compactions c ON c.request_seq = r.seq
         WHERE {condition} ORDER BY r.at_ms DESC, r.seq DESC LIMIT {limit}"
    )
}

/// The requests that failed: an upstream error, or an answer of status 400 and above.
pub(crate) const FAILED: &str = "r.status >= 400 OR r.error IS NOT NULL";

/// The columns of a thread's totals ([`read_thread_totals`]).
pub(crate) const THREAD_TOTALS_COLUMNS: &str = "thread, server, model, first_ms, last_ms, \
    requests, counted, tokens_in, tokens_out, in_cached, out_cached, compactions, pages, \
    llm_input, llm_output, llm_cost_micro";

fn optional_count(n: Option<u64>) -> Value<'static> {
    Value::OptionalInt(n.map(stored_count))
}

/// A request as the row it is written as.
pub(crate) fn request_values(r: &RequestRecord) -> Vec<Value<'_>> {
    vec![
        Value::Int(stored_count(r.at_ms)),
        Value::Text(&r.server),
        Value::Text(&r.route),
        Value::Int(i64::from(r.status)),
        Value::Int(stored_count(r.duration_ms)),
        Value::OptionalText(r.thread.as_deref()),
        Value::OptionalText(r.model.as_deref()),
        Value::OptionalText(r.outcome.as_deref()),
        optional_count(r.tokens_in),
        optional_count(r.tokens_out),
        optional_count(r.tokens_at_most),
        Value::Int(i64::from(r.pages)),
        optional_count(r.prefix_kept),
        optional_count(r.max_tokens),
        optional_count(r.high_tokens),
        optional_count(r.low_tokens),
        Value::Int(stored_count(r.llm_input_tokens)),
        Value::Int(stored_count(r.llm_output_tokens)),
        optional_count(r.llm_cost_micro_usd),
        Value::OptionalText(r.error.as_deref()),
    ]
}

/// The values a request adds to its thread's totals, the parameters of both backends'
/// upserts in this order: thread, server, model, at_ms, counted (0 or 1), tokens_in,
/// tokens_out, prefix_kept (at most tokens_out), compacted (0 or 1), pages, llm_input,
/// llm_output, llm_cost_micro. `None` for a request without a thread.
pub(crate) fn thread_values(r: &RequestRecord) -> Option<Vec<Value<'_>>> {
    let thread = r.thread.as_deref()?;
    let counted = r.tokens_in.is_some() && r.tokens_out.is_some();
    let (tokens_in, tokens_out) = (r.tokens_in.unwrap_or(0), r.tokens_out.unwrap_or(0));
    Some(vec![
        Value::Text(thread),
        Value::Text(&r.server),
        Value::OptionalText(r.model.as_deref()),
        Value::Int(stored_count(r.at_ms)),
        Value::Int(i64::from(counted)),
        Value::Int(stored_count(tokens_in)),
        Value::Int(stored_count(tokens_out)),
        optional_count(r.prefix_kept.map(|kept| kept.min(tokens_out))),
        Value::Int(i64::from(r.pages > 0)),
        Value::Int(i64::from(r.pages)),
        Value::Int(stored_count(r.llm_input_tokens)),
        Value::Int(stored_count(r.llm_output_tokens)),
        Value::Int(stored_count(r.llm_cost_micro_usd.unwrap_or(0))),
    ])
}

/// A request as [`REQUEST_COLUMNS`] read it.
pub(crate) fn read_request_row(row: &dyn Columns) -> Result<RequestRow, RowError> {
    Ok(RequestRow {
        seq: row.int("seq")?,
        compacted: row.int("compacted")? != 0,
        request: RequestRecord {
            at_ms: row.unsigned("at_ms")?,
            server: row.text("server")?,
            route: row.text("route")?,
            status: u16::try_from(row.int("status")?).unwrap_or(0),
            duration_ms: row.unsigned("duration_ms")?,
            thread: row.optional_text("thread")?,
            model: row.optional_text("model")?,
            outcome: row.optional_text("outcome")?,
            tokens_in: row.optional_unsigned("tokens_in")?,
            tokens_out: row.optional_unsigned("tokens_out")?,
            tokens_at_most: row.optional_unsigned("tokens_at_most")?,
            pages: u32::try_from(row.int("pages")?).unwrap_or(0),
            prefix_kept: row.optional_unsigned("prefix_kept")?,
            max_tokens: row.optional_unsigned("max_tokens")?,
            high_tokens: row.optional_unsigned("high_tokens")?,
            low_tokens: row.optional_unsigned("low_tokens")?,
            llm_input_tokens: row.unsigned("llm_input")?,
            llm_output_tokens: row.unsigned("llm_output")?,
            llm_cost_micro_usd: row.optional_unsigned("llm_cost_micro")?,
            error: row.optional_text("error")?,
            compaction: None,
        },
    })
}

/// A thread's totals as [`THREAD_TOTALS_COLUMNS`] read them.
pub(crate) fn read_thread_totals(row: &dyn Columns) -> Result<ThreadTotals, RowError> {
    Ok(ThreadTotals {
        thread: row.text("thread")?,
        server: row.text("server")?,
        model: row.optional_text("model")?,
        first_seen: row.unsigned("first_ms")? / 1000,
        last_seen: row.unsigned("last_ms")? / 1000,
        requests: row.unsigned("requests")?,
        counted: row.unsigned("counted")?,
        tokens_in: row.unsigned("tokens_in")?,
        tokens_out: row.unsigned("tokens_out")?,
        in_cached: row.unsigned("in_cached")?,
        out_cached: row.unsigned("out_cached")?,
        compactions: row.unsigned("compactions")?,
        pages: row.unsigned("pages")?,
        llm_input_tokens: row.unsigned("llm_input")?,
        llm_output_tokens: row.unsigned("llm_output")?,
        llm_cost_micro_usd: row.unsigned("llm_cost_micro")?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A row of named columns, as either backend would answer it.
    #[derive(Default)]
    struct Row(HashMap<&'static str, Option<Cell>>);

    enum Cell {
        Text(String),
        Int(i64),
    }

    impl Row {
        fn text(mut self, column: &'static str, value: &str) -> Self {
            self.0.insert(column, Some(Cell::Text(value.into())));
            self
        }
        fn int(mut self, column: &'static str, value: i64) -> Self {
            self.0.insert(column, Some(Cell::Int(value)));
            self
        }
        fn null(mut self, column: &'static str) -> Self {
            self.0.insert(column, None);
            self
        }
        fn cell(&self, column: &str) -> Result<&Option<Cell>, RowError> {
            self.0
                .get(column)
                .ok_or_else(|| RowError(format!("no column {column}")))
        }
    }

    impl Columns for Row {
        fn text(&self, column: &str) -> Result<String, RowError> {
            self.optional_text(column)?
                .ok_or_else(|| RowError(format!("{column} is NULL")))
        }
        fn optional_text(&self, column: &str) -> Result<Option<String>, RowError> {
            match self.cell(column)? {
                Some(Cell::Text(s)) => Ok(Some(s.clone())),
                Some(Cell::Int(_)) => Err(RowError(format!("{column} is not text"))),
                None => Ok(None),
            }
        }
        fn int(&self, column: &str) -> Result<i64, RowError> {
            self.optional_int(column)?
                .ok_or_else(|| RowError(format!("{column} is NULL")))
        }
        fn optional_int(&self, column: &str) -> Result<Option<i64>, RowError> {
            match self.cell(column)? {
                Some(Cell::Int(n)) => Ok(Some(*n)),
                Some(Cell::Text(_)) => Err(RowError(format!("{column} is not an integer"))),
                None => Ok(None),
            }
        }
        fn bytes(&self, column: &str) -> Result<Vec<u8>, RowError> {
            self.text(column).map(String::into_bytes)
        }
    }

    /// Every column of [`ITEM_COLUMNS`], as a freshly queued item.
    fn queued_item_row() -> Row {
        let request = encode_request(&LlmRequest::new("sys", "summarize", 100)).unwrap();
        let mut row = Row::default()
            .int("id", 7)
            .text("page_id", "pg_a")
            .text("strategy", "batch-deferred")
            .null("thread_id")
            .text("request_json", &request)
            .text("state", "queued");
        for column in ["batch_id", "text", "reason", "billing", "submitted_ms"] {
            row = row.null(column);
        }
        for column in ["attempts", "requeues", "input_tokens", "output_tokens"] {
            row = row.int(column, 0);
        }
        row.int("cache_read_tokens", 0)
            .int("cache_write_tokens", 0)
            .int("created_ms", 1_000)
            .int("updated_ms", -5)
            .null("lease_owner")
            .null("lease_until_ms")
    }

    #[test]
    fn every_item_column_is_listed_and_read() {
        let listed: Vec<&str> = ITEM_COLUMNS.split(',').map(str::trim).collect();
        let row = queued_item_row();
        let mut read: Vec<&str> = row.0.keys().copied().collect();
        read.sort();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(sorted, read);
        let item = read_item(&row).unwrap();
        assert_eq!((item.id, item.page_id.as_str()), (7, "pg_a"));
        assert_eq!(item.request.prompt.as_str(), "summarize");
        assert_eq!(item.state, QueueState::Queued);
        assert_eq!((item.created_ms, item.updated_ms), (1_000, 0));
        // A column the SELECT left out is an error naming it.
        let mut short = queued_item_row();
        short.0.remove("lease_until_ms");
        assert_eq!(read_item(&short).unwrap_err().0, "no column lease_until_ms");
    }

    #[test]
    fn an_unreadable_item_names_itself_and_what_is_wrong() {
        let bad_state = queued_item_row().text("state", "lost");
        let e = read_item(&bad_state).unwrap_err().0;
        assert_eq!(e, "deferred item 7 is unreadable: unknown state \"lost\"");
        let bad_request = queued_item_row().text("request_json", "{");
        let e = read_item(&bad_request).unwrap_err().0;
        assert!(
            e.starts_with("deferred item 7 is unreadable: the stored request does not parse"),
            "{e}"
        );
    }

    #[test]
    fn the_written_columns_match_the_values() {
        let page = NewPage {
            thread_id: None,
            strategy: "s".into(),
            messages: vec![Message::text(tamp_plugin_api::Role::User, "m")],
            metadata_json: String::new(),
            source_format: Some("openai".into()),
        };
        let (id, json) = encode_messages(&page.messages);
        let row = NewPageRow::new(&id, &json, &page);
        assert_eq!(PAGE_INSERT_COLUMNS.split(',').count(), PAGE_INSERT_VALUES);
        assert_eq!(row.values()[1], Value::OptionalText(None));
        assert_eq!(row.values()[6], Value::Int(1));
        let item = NewDeferred {
            page_id: id.clone(),
            strategy: "s".into(),
            thread_id: None,
            request: LlmRequest::new("", "p", 1),
        };
        assert_eq!(
            new_item_values(&item, "{}").len(),
            NEW_ITEM_COLUMNS.split(',').count()
        );
        let done = done_values("t", &Usage::default(), Billing::Sync);
        assert_eq!(done.len(), DONE_COLUMNS.split(',').count());
        assert_eq!(
            assignments(DONE_COLUMNS, '$', 6),
            "text = $6, billing = $7, input_tokens = $8, output_tokens = $9, \
             cache_read_tokens = $10, cache_write_tokens = $11"
        );
        assert_eq!(placeholders('?', 1, 3), "?1, ?2, ?3");
    }

    #[test]
    fn a_page_reads_back_checked() {
        let page = NewPage {
            thread_id: Some("t".into()),
            strategy: "s".into(),
            messages: vec![Message::text(tamp_plugin_api::Role::User, "m")],
            metadata_json: "{}".into(),
            source_format: None,
        };
        let (id, json) = encode_messages(&page.messages);
        let written = NewPageRow::new(&id, &json, &page);
        let row = Row::default()
            .text("id", &id)
            .text("thread_id", "t")
            .text("strategy", "s")
            .null("source_format")
            .text("messages_json", &json)
            .text("metadata_json", "{}")
            .int("message_count", 1)
            .int("created_at", 42)
            .text("seal", &written.seal);
        let stored = PageRecord::read(&row).unwrap().into_page(true).unwrap();
        assert_eq!(stored.page.messages.as_slice(), page.messages.as_slice());
        assert_eq!(stored.page.created_at, 42);
        assert_eq!(seal_of(&row).unwrap(), (id.clone(), written.seal.clone()));
        let moved = row.text("thread_id", "u");
        let e = PageRecord::read(&moved)
            .unwrap()
            .into_page(true)
            .unwrap_err();
        assert!(e.contains("no longer match its seal"), "{e}");
        assert!(PageRecord::read(&moved).unwrap().into_page(false).is_ok());
    }
}
