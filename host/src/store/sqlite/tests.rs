use tamp_plugin_api::{ContentBlock, FfiOption, LlmResponse, Message, Role, ToolResultPart};

use super::*;
use crate::store::{NewPage, PageStore, SummaryCache};

/// A unique directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tamp-store-test-{tag}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn conversation(tag: &str) -> Vec<Message> {
    let mut tool_use = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text(format!("let me look {tag}")),
            ContentBlock::ToolUse {
                id: "toolu_1".into(),
                name: "read_file".into(),
                input_json: r#"{"path":"/etc/hosts"}"#.into(),
                extra_json: r#"{"cache_control":{"type":"ephemeral"}}"#.into(),
            },
        ],
    );
    tool_use.extra_json = r#"{"name":"bot"}"#.into();
    vec![
        Message::text(Role::User, format!("question {tag} — ünïcødé 👋")),
        tool_use,
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "toolu_1".into(),
                content: vec![
                    ToolResultPart::Text {
                        text: "127.0.0.1 localhost".into(),
                    },
                    ToolResultPart::Opaque {
                        json: r#"{"type":"image","source":{"data":"AAAA"}}"#.into(),
                    },
                ]
                .into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        ),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::Opaque {
                json: r#"{"type":"thinking","thinking":"hmm"}"#.into(),
            }],
        ),
    ]
}

/// A store at `path` holding one page of `messages`, taken back to schema version 1 (the
/// pages table alone); returns the page's id.
pub(crate) async fn version_one_store(path: &std::path::Path, messages: Vec<Message>) -> String {
    let id = {
        let store = SqliteStore::open(path).unwrap();
        store.put_page(new_page(messages)).await.unwrap()
    };
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "DROP TABLE llm_answers; DROP TABLE range_summaries;
         DROP TABLE deferred_items; DROP TABLE deferred_events; DROP TABLE threads;
         DROP TABLE tamp_secrets; ALTER TABLE pages DROP COLUMN seal;
         DROP TABLE page_owners; DROP TABLE page_text;
         DROP TABLE activity_requests; DROP TABLE activity_compactions;
         DROP TABLE activity_threads;",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    id
}

pub(crate) fn new_page(messages: Vec<Message>) -> NewPage {
    NewPage {
        thread_id: Some("thread-1".into()),
        strategy: "anchored-structured".into(),
        messages,
        metadata_json: r#"{"k":1}"#.into(),
        source_format: Some("anthropic".into()),
    }
}

pub(crate) fn count_rows(store: &SqliteStore) -> i64 {
    let conn = store.inner.conn.lock().unwrap();
    conn.query_row("SELECT count(*) FROM pages", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn checkpoints_run_in_the_background_not_in_commits() {
    let dir = TempDir::new("checkpoint");
    let path = dir.0.join("store.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    // About 6 MB in 60 commits: past the log size that asks for a checkpoint (1,000
    // pages, ~4 MB), far below the one at which a commit would checkpoint by itself.
    for i in 0..60 {
        let text = format!("{i} {}", "x".repeat(100_000));
        store
            .put_page(new_page(vec![Message::text(Role::User, text)]))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.background_checkpoints() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no background checkpoint after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The checkpoint moved the pages from the log into the database file.
    let file_len = std::fs::metadata(&path).unwrap().len();
    assert!(file_len > 3_000_000, "database file is {file_len} bytes");
    // And the store reads them back, from a new connection too.
    drop(store);
    let again = SqliteStore::open(&path).unwrap();
    assert_eq!(count_rows(&again), 60);
}

#[tokio::test]
async fn persists_across_reopen() {
    let dir = TempDir::new("reopen");
    let path = dir.0.join("nested").join("store.sqlite3");
    let messages = conversation("persist");
    let id = {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.describe(), format!("sqlite:{}", path.display()));
        store.put_page(new_page(messages.clone())).await.unwrap()
    };
    assert!(path.exists());
    let store = SqliteStore::open(&path).unwrap();
    let stored = store.get_page(&id).await.unwrap();
    assert_eq!(stored.page.messages.as_slice(), messages.as_slice());
    let conn = store.inner.conn.lock().unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode.to_ascii_lowercase(), "wal");
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let dir = TempDir::new("schema");
    let path = dir.0.join("store.sqlite3");
    drop(SqliteStore::open(&path).unwrap());
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::UnsupportedSchema { .. }), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn unwritable_path_names_the_path() {
    let dir = TempDir::new("unwritable");
    std::fs::create_dir_all(&dir.0).unwrap();
    // A regular file where a directory should be: fails even for root.
    let blocker = dir.0.join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let path = blocker.join("sub").join("store.sqlite3");
    let err = SqliteStore::open(&path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.starts_with("page store "), "{text}");
    assert!(text.contains("cannot create directory"), "{text}");

    // A directory where the file should be.
    let err = SqliteStore::open(&dir.0).unwrap_err();
    assert!(
        err.to_string().contains(&dir.0.display().to_string()),
        "{err}"
    );
}

#[tokio::test]
async fn a_store_file_deleted_or_replaced_while_open_fails_writes_and_health() {
    let dir = TempDir::new("deleted");
    let path = dir.0.join("store.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    store
        .put_page(new_page(conversation("before")))
        .await
        .unwrap();
    store.check_alive().unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    // Without the check, this write is acknowledged into the unlinked file.
    let err = store
        .put_page(new_page(conversation("after")))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(
        text.contains("was deleted or replaced while open"),
        "{text}"
    );
    assert!(text.contains("no file is at its path"), "{text}");
    let health = store.check_alive().unwrap_err().to_string();
    assert!(
        health.contains("was deleted or replaced while open"),
        "{health}"
    );
    let key = crate::store::cache::CacheScope::new(None, "s", "c")
        .request_key("p", &tamp_plugin_api::LlmRequest::new("", "x", 1));
    let cache = store
        .put_answer(
            key,
            LlmResponse {
                text: "t".into(),
                structured_json: FfiOption::RNone,
                usage: Default::default(),
                model: "m".into(),
                stop_reason: "end_turn".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(
        cache.to_string().contains("was deleted or replaced"),
        "{cache}"
    );

    // Replaced: another file renamed over the path.
    let path = dir.0.join("replaced.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    let other = dir.0.join("other.sqlite3");
    drop(SqliteStore::open(&other).unwrap());
    std::fs::rename(&other, &path).unwrap();
    let err = store
        .put_page(new_page(conversation("replaced")))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("another file is at its path"),
        "{err}"
    );
    assert!(store.check_alive().is_err());
}

/// The pages in the store file itself, read as a crash would leave it: without the log.
fn pages_in_the_file(path: &Path) -> i64 {
    let uri = format!("file:{}?immutable=1", uri_path(path));
    let conn = Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    // Before a first checkpoint even the tables are in the log alone.
    conn.query_row("SELECT count(*) FROM pages", [], |r| r.get(0))
        .unwrap_or(0)
}

#[tokio::test]
async fn a_log_removed_while_open_is_copied_into_the_file_and_writes_are_refused() {
    let dir = TempDir::new("log-removed");
    let path = dir.0.join("store.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    for tag in ["a", "b", "c"] {
        store.put_page(new_page(conversation(tag))).await.unwrap();
    }
    // Committed to the log, not yet to the file (no checkpoint before 1,000 log pages).
    assert_eq!(pages_in_the_file(&path), 0);
    for suffix in ["-wal", "-shm"] {
        std::fs::remove_file(format!("{}{suffix}", path.display())).unwrap();
    }
    let health = store.check_alive().unwrap_err().to_string();
    assert!(
        health.contains("write-ahead log") && health.contains("store.sqlite3-wal (no file"),
        "{health}"
    );
    let err = store
        .put_page(new_page(conversation("after")))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("writes are refused"), "{err}");
    // What the log held is in the file: a crash now loses nothing acknowledged.
    assert_eq!(pages_in_the_file(&path), 3);
    assert!(crate::store::ThreadStore::put_thread(
        &store,
        "t",
        &crate::store::ThreadState {
            covered: 1,
            prefix_hash: "h".into(),
            output: Vec::new(),
            chain: String::new(),
        },
        crate::store::ThreadLimits {
            ttl_secs: 60,
            max_threads: 1,
        },
    )
    .await
    .is_err());

    // With no write after the removal, the checkpoint thread copies it within moments.
    let path = dir.0.join("quiet.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    store.put_page(new_page(conversation("q"))).await.unwrap();
    assert_eq!(pages_in_the_file(&path), 0);
    std::fs::remove_file(format!("{}-wal", path.display())).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pages_in_the_file(&path) == 0 {
        assert!(std::time::Instant::now() < deadline, "not copied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_store_from_before_seals_is_sealed_when_it_migrates() {
    let dir = TempDir::new("seal-migrate");
    let path = dir.0.join("store.sqlite3");
    let id = version_one_store(&path, conversation("old")).await;
    // Read without migrating: nothing to check the seal against, the rest still checked.
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert!(reader.get_page(&id).await.is_ok());
    assert_eq!(reader.verify_pages().await.unwrap().damaged, []);
    drop(reader);
    // Migrated by a writer: sealed as it is, so a later change is seen.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.verify_pages().await.unwrap().damaged, []);
    store
        .inner
        .conn()
        .execute(
            "UPDATE pages SET thread_id = 'elsewhere' WHERE id = ?1",
            [&id],
        )
        .unwrap();
    let check = store.verify_pages().await.unwrap();
    assert_eq!(check.damaged.len(), 1, "{check:?}");
    assert!(check.damaged[0].detail.contains("seal"), "{check:?}");
}

#[tokio::test]
async fn a_read_only_open_neither_creates_migrates_nor_writes() {
    let dir = TempDir::new("read-only");
    let missing = dir.0.join("missing").join("store.sqlite3");
    let err = SqliteStore::open_read_only(&missing).unwrap_err();
    assert!(err.to_string().contains("no such file"), "{err}");
    assert!(!missing.parent().unwrap().exists());

    let path = dir.0.join("store.sqlite3");
    let messages = conversation("ro");
    // An older schema: a writer would migrate it.
    let id = version_one_store(&path, messages.clone()).await;
    let store = SqliteStore::open_read_only(&path).unwrap();
    assert_eq!(
        store.get_page(&id).await.unwrap().page.messages.as_slice(),
        messages.as_slice()
    );
    assert_eq!(store.list_pages(10).await.unwrap().len(), 1);
    assert!(store.put_page(new_page(conversation("no"))).await.is_err());
    drop(store);
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1, "a read-only open migrated the file");
}

#[test]
fn works_without_a_tokio_runtime() {
    let store = SqliteStore::in_memory().unwrap();
    let messages = conversation("sync");
    let id = futures::executor::block_on(store.put_page(new_page(messages.clone()))).unwrap();
    let back = futures::executor::block_on(store.get_page(&id)).unwrap();
    assert_eq!(back.page.messages.as_slice(), messages.as_slice());
}

#[test]
fn store_is_object_safe_and_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SqliteStore>();
    let store: Arc<dyn PageStore> = Arc::new(SqliteStore::in_memory().unwrap());
    assert_eq!(store.describe(), "sqlite::memory:");
}
