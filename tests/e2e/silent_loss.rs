//! Issue 23, items 2, 4 and 5: work that was lost, or errors that said too little, without
//! anyone being told. Each test runs the real `tamp` binary (or the real store) and fails on
//! the code before the fix:
//!
//! - a hot reload of an emptied chain file, or of one naming another store, is refused and
//!   shown in `last_reload_error` (the old chain, its pages and its store stay);
//! - a store file deleted while `tamp serve` runs fails writes (and `/healthz`) loudly;
//! - a page whose stored text no longer hashes to its id is refused, and `tamp pages verify`
//!   names it (SQLite and PostgreSQL);
//! - chain-file errors name the field, the user's plugin file (not the private copy) and the
//!   line of `[store]`; `tamp compact` prints a plugin error once and gives the byte offset
//!   of invalid UTF-8; `tamp pages` reads a store whose directory it cannot write.
//!
//! Waits are polls with deadlines, never fixed sleeps.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::postgres::PgServer;
use tamp_e2e::serve_support::{chain_stage_names, ScratchDir, Server};
use tamp_e2e::{assert_ok, assert_stderr_has, assert_stdout_has};
use tamp_e2e::{corpus, plugin, run_tamp as tamp, tamp_bin, text, workspace_root, write_chain};

const RELOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// A chain of one custom-strategy stage over a 2,000-token budget (the corpus conversation is
/// far above it, so the stage archives pages), pages in `store_path` beside the file.
fn chain_toml(stage: &str, store_path: &str) -> String {
    format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"{store_path}\"\n\n\
         [[stage]]\nname = \"{stage}\"\nplugin = \"strategy.so\"\n\
         [stage.config]\nkeep_exchanges = 1\nsummarize = false\n"
    )
}

/// `dir/chain.toml` with the custom strategy copied beside it (no other build touches the
/// file the server watches).
fn served_chain(dir: &Path, stage: &str) -> PathBuf {
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    write_chain(dir, &chain_toml(stage, "store.sqlite3"))
}

fn request(thread: &str) -> Value {
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    json!({"conversation": conversation, "thread_id": thread, "thread_continuity": false})
}

/// Compacts once and returns the pages the stage archived.
async fn archive(server: &Server, thread: &str) -> Vec<String> {
    let (status, answer) = server.compact(&request(thread)).await;
    assert_eq!(status, 200, "{answer:#}");
    let run = &answer["report"]["stages"][0];
    assert_eq!(run["status"], "acted", "{run:#}");
    let pages: Vec<String> = run["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert!(!pages.is_empty(), "{run:#}");
    pages
}

async fn page_status(server: &Server, id: &str) -> u16 {
    server
        .client
        .get(server.url(&format!("/v1/pages/{id}")))
        .send()
        .await
        .expect("GET /v1/pages")
        .status()
        .as_u16()
}

fn error_message(chain: &Value) -> &str {
    chain["last_reload_error"]["message"].as_str().unwrap_or("")
}

// ---- item 2: a reload must not lose work silently ----

/// `: > chain.toml` while serving (an editor or deploy tool that truncates before it
/// writes): the empty file is refused, the old chain, budget and store keep answering, and
/// the real write that follows lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_emptied_chain_file_is_refused_and_the_write_after_it_lands() {
    let dir = ScratchDir::new("loss-empty");
    let config = served_chain(&dir, "first");
    let server = Server::start(&config, &[]);
    let pages = archive(&server, "t1").await;

    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&config)
        .unwrap();
    let chain = server
        .wait_for_chain("the empty file's refusal", RELOAD_TIMEOUT, |c| {
            error_message(c).contains("the file is empty")
        })
        .await;
    assert_eq!(chain_stage_names(&chain), ["first"], "{chain:#}");
    assert_eq!(chain["budget"]["max_tokens"], 2000, "{chain:#}");
    assert!(
        chain["store"].as_str().unwrap().ends_with("store.sqlite3"),
        "{chain:#}"
    );
    assert!(
        error_message(&chain).contains("restart tamp serve"),
        "{chain:#}"
    );
    assert!(
        server
            .log_containing(&["the file is empty"])
            .contains("the file is empty"),
        "not logged:\n{}",
        server.log()
    );
    // Compaction goes on, and every earlier page is still served.
    for id in &pages {
        assert_eq!(page_status(&server, id).await, 200, "{id}");
    }
    archive(&server, "t2").await;

    // The write that follows the truncation is applied, and clears the error.
    std::fs::write(&config, chain_toml("second", "store.sqlite3")).unwrap();
    let chain = server
        .wait_for_chain("the write after the truncation", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["second"]
        })
        .await;
    assert!(chain["last_reload_error"].is_null(), "{chain:#}");

    // Truncated and written at once (inside one debounce): the written file lands.
    std::fs::write(&config, "").unwrap();
    std::fs::write(&config, chain_toml("third", "store.sqlite3")).unwrap();
    let chain = server
        .wait_for_chain("the truncate-then-write", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["third"] && c["last_reload_error"].is_null()
        })
        .await;
    assert_eq!(chain["budget"]["max_tokens"], 2000);

    // A file that is not empty but has no stage is refused the same way.
    std::fs::write(&config, "[budget]\nmax_tokens = 2000\n").unwrap();
    let chain = server
        .wait_for_chain("the stageless file's refusal", RELOAD_TIMEOUT, |c| {
            error_message(c).contains("no [[stage]]")
        })
        .await;
    assert_eq!(chain_stage_names(&chain), ["third"]);
    // At least the two refusals waited for above (a slow machine may also have read the
    // truncated file between the truncation and the write that followed it).
    let metrics = server.metrics().await;
    let rejected: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tamp_reloads_total{result=\"rejected\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(rejected >= 2, "{metrics}");
}

/// A reload whose file names another store (or none, so the default applies) would answer
/// 404 for every page archived so far: it is refused, with the line of `[store]`, and the
/// new store is not even created.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_that_moves_the_store_is_refused() {
    let dir = ScratchDir::new("loss-store");
    let config = served_chain(&dir, "first");
    let server = Server::start(&config, &[]);
    let pages = archive(&server, "t1").await;

    let moved = chain_toml("moved", "moved.sqlite3");
    let path_line = moved.lines().position(|l| l.starts_with("path =")).unwrap() + 1;
    std::fs::write(&config, &moved).unwrap();
    let chain = server
        .wait_for_chain("the store move's refusal", RELOAD_TIMEOUT, |c| {
            error_message(c).contains("cannot move the page store")
        })
        .await;
    let error = &chain["last_reload_error"];
    assert_eq!(error["line"], path_line, "{error:#}");
    assert!(
        error_message(&chain).starts_with("store.path: "),
        "{error:#}"
    );
    assert!(error_message(&chain).contains("moved.sqlite3"), "{error:#}");
    assert!(
        error_message(&chain).contains("restart tamp serve"),
        "{error:#}"
    );
    assert_eq!(chain_stage_names(&chain), ["first"]);
    assert!(
        !dir.join("moved.sqlite3").exists(),
        "the new store was opened"
    );
    for id in &pages {
        assert_eq!(page_status(&server, id).await, 200, "{id}");
    }

    // `[store]` removed: the default store would apply; refused too.
    let no_store = chain_toml("unstored", "x").replace("[store]\npath = \"x\"\n", "");
    std::fs::write(&config, no_store).unwrap();
    server
        .wait_for_chain("the default store's refusal", RELOAD_TIMEOUT, |c| {
            error_message(c).contains("the file names no store")
        })
        .await;

    // The same store again, another stage: applied.
    std::fs::write(&config, chain_toml("second", "./store.sqlite3")).unwrap();
    let chain = server
        .wait_for_chain("the good config", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["second"]
        })
        .await;
    assert!(chain["last_reload_error"].is_null(), "{chain:#}");
}

// ---- item 4: a deleted store fails loudly ----

fn delete_store(dir: &Path) {
    for name in ["store.sqlite3", "store.sqlite3-wal", "store.sqlite3-shm"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// The store file (and its WAL) deleted under a running server: a compaction's pages can no
/// longer be kept, so its stage is rolled back with an error naming the file, logged at
/// error level; the answer is the conversation uncompacted, never summaries whose pages a
/// restart would lose.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_store_fails_writes_loudly() {
    let dir = ScratchDir::new("loss-deleted");
    let config = served_chain(&dir, "archive");
    let server = Server::start(&config, &[]);
    archive(&server, "t1").await;

    delete_store(&dir);
    let (status, answer) = server.compact(&request("t2")).await;
    assert_eq!(status, 200, "{answer:#}");
    let run = &answer["report"]["stages"][0];
    assert_eq!(run["status"], "rolled_back", "{run:#}");
    let message = run["error"]["message"].as_str().unwrap_or_default();
    let store = dir.join("store.sqlite3").display().to_string();
    assert!(
        message.contains("was deleted or replaced while open"),
        "{run:#}"
    );
    assert!(message.contains(&store), "{run:#}");
    let summaries = answer["conversation"]
        .to_string()
        .matches("<tamp-summary")
        .count();
    assert_eq!(
        summaries, 0,
        "a summary whose page is not kept was answered"
    );
    let log = server.log_containing(&["ERROR", "was deleted or replaced while open"]);
    assert!(
        log.contains("ERROR") && log.contains("was deleted or replaced while open"),
        "not logged at error level:\n{log}"
    );
}

/// `/healthz` answers 503 once the store file is gone (the route asks `ChainSlot::health`,
/// the store's `check_alive`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_store_fails_healthz() {
    let dir = ScratchDir::new("loss-health");
    let config = served_chain(&dir, "archive");
    let server = Server::start(&config, &[]);
    let health = |server: &Server| {
        let url = server.url("/healthz");
        let client = server.client.clone();
        async move {
            let response = client.get(url).send().await.expect("GET /healthz");
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    assert_eq!(health(&server).await.0, 200);
    delete_store(&dir);
    let (status, body) = health(&server).await;
    assert_eq!(status, 503, "{body}");
    assert_contains(&body, "was deleted or replaced while open");
}

/// Removing `store.sqlite3-wal` and `-shm` under `tamp serve` went unseen: compaction went on
/// answering 200, `/healthz` said ok, and after a `kill -9` the pages written after the
/// removal and the one before were gone (`page … not found`). Now the store sees it: what the
/// log held is copied into the store file, `/healthz` answers 503, and writes are refused (a
/// stage that must archive a page is rolled back), so no page a compaction acknowledged is
/// lost to the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_ahead_log_removed_under_load_loses_nothing_acknowledged() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = ScratchDir::new("loss-wal");
    let config = served_chain(&dir, "archive");
    let server = Arc::new(Server::start(&config, &[]));
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let acknowledged = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let (stop, answered) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut load = Vec::new();
    for worker in 0..4 {
        let (server, conversation) = (Arc::clone(&server), conversation.clone());
        let (acknowledged, stop, answered) = (
            Arc::clone(&acknowledged),
            Arc::clone(&stop),
            Arc::clone(&answered),
        );
        load.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // Another tool result each time: another page.
                let mut conversation = conversation.clone();
                let output = &mut conversation["messages"][4]["content"][0]["content"];
                *output = json!(format!("{} (run {worker}-{n})", output.as_str().unwrap()));
                let body = json!({"conversation": conversation, "thread_continuity": false});
                let (status, answer) = server.compact(&body).await;
                assert_eq!(status, 200, "{answer:#}");
                let run = &answer["report"]["stages"][0];
                if run["status"] == "acted" {
                    for page in run["pages"].as_array().unwrap() {
                        acknowledged
                            .lock()
                            .unwrap()
                            .insert(page.as_str().unwrap().to_string());
                    }
                }
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let wait_for = |n: usize| {
        let answered = Arc::clone(&answered);
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while answered.load(Ordering::Relaxed) < n {
                assert!(std::time::Instant::now() < deadline, "the load stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_for(20).await;
    for suffix in ["-wal", "-shm"] {
        std::fs::remove_file(dir.join(format!("store.sqlite3{suffix}"))).unwrap();
    }
    let removed_at = answered.load(Ordering::Relaxed);
    wait_for(removed_at + 20).await;
    let health = server.get("/healthz").await;
    assert_eq!(health.status(), 503);
    let body = health.text().await.unwrap();
    assert!(
        body.contains("write-ahead log") && body.contains("removed or replaced"),
        "{body}"
    );
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    let killed = Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Every page a compaction was answered with is in the store.
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 10, "{acknowledged:?}");
    let listed = tamp(
        &[
            "pages",
            "list",
            "--store",
            "store.sqlite3",
            "--limit",
            "100000",
        ],
        &dir,
    );
    assert_ok(&listed, "");
    let listed = text(&listed.stdout);
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !listed.contains(id.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged page(s) lost: {lost:?}",
        lost.len()
    );
    assert!(
        server.log().contains("write-ahead log")
            || server.log().contains("was removed or replaced"),
        "{}",
        server.log()
    );
}

// ---- item 5: pages checked against their ids ----

/// A store written by `tamp compact` (`tamp` exits, so its pages are in the main file), and
/// the ids of the pages it archived.
fn compacted_store(dir: &Path) -> (PathBuf, Vec<String>) {
    let root = workspace_root();
    let store = dir.join("s.sqlite3");
    let report = dir.join("report.json");
    let out = tamp(
        &[
            "compact",
            root.join("examples/conversations/ponyc-4588.anthropic.json")
                .to_str()
                .unwrap(),
            "--config",
            root.join("examples/chains/default.toml").to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--report-json",
            report.to_str().unwrap(),
        ],
        dir,
    );
    assert_ok(&out, "");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let pages = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["pages"].as_array().unwrap().clone())
        .map(|p| p.as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(
        !pages.is_empty(),
        "the compaction archived no page: {report:#}"
    );
    (store, pages)
}

/// 4 KiB of the deferred queue's index overwritten in place broke no seal, and `tamp pages
/// verify` said ok while SQLite's own `integrity_check` said `database disk image is
/// malformed`. `pages verify` runs that check too, and names what it finds.
#[test]
fn a_store_file_overwritten_in_place_fails_pages_verify() {
    let dir = ScratchDir::new("loss-integrity");
    let (store, pages) = compacted_store(&dir);
    let store_arg = store.to_str().unwrap();
    let out = tamp(&["pages", "verify", "--store", store_arg], &dir);
    let stdout = text(&out.stdout);
    assert_ok(&out, "");
    assert!(
        stdout.starts_with(&format!("ok: {} page(s), ", pages.len()))
            && stdout.contains("the database's integrity check found nothing wrong"),
        "{stdout}"
    );
    let (page_size, root) = {
        let conn = rusqlite::Connection::open(&store).unwrap();
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        let root: i64 = conn
            .query_row(
                "SELECT rootpage FROM sqlite_schema WHERE name = 'deferred_by_state'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (page_size, root)
    };
    {
        use std::io::{Seek as _, Write as _};
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&store)
            .unwrap();
        file.seek(std::io::SeekFrom::Start(((root - 1) * page_size) as u64))
            .unwrap();
        file.write_all(&vec![0xAB; 4096]).unwrap();
    }
    let out = tamp(&["pages", "verify", "--store", store_arg], &dir);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_contains(&stdout, "the database's integrity check: ");
    assert_contains(&stderr, "are damaged; the database's integrity check found");
}

#[test]
fn a_page_altered_on_disk_is_refused_and_pages_verify_names_it() {
    let dir = ScratchDir::new("loss-verify");
    let (store, pages) = compacted_store(&dir);
    let store_arg = store.to_str().unwrap();
    let out = tamp(&["pages", "verify", "--store", store_arg], &dir);
    assert_ok(&out, "");
    assert!(
        text(&out.stdout).starts_with(&format!("ok: {} page(s)", pages.len())),
        "{}",
        text(&out.stdout)
    );

    // The archived messages of ponyc#4588 mention `ponyc`; the summary cache and the thread
    // state may too, which the check does not read.
    assert!(tamp_e2e::patch_bytes(&store, b"ponyc", b"PONYC") > 0);
    let out = tamp(&["pages", "verify", "--store", store_arg], &dir);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert_contains(&stdout, &pages[0]);
    assert_contains(&stdout, "no longer match its id");
    assert_stderr_has(&out, "are damaged");
    let out = tamp(&["pages", "show", &pages[0], "--store", store_arg], &dir);
    assert_eq!(
        out.status.code(),
        Some(1),
        "served as is: {}",
        text(&out.stdout)
    );
    assert_stderr_has(&out, "no longer match its id");
}

/// The same check on the shared store: a page row altered in PostgreSQL is refused, and
/// `tamp pages verify --config` (the store from the chain file) names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_altered_in_postgres_is_refused_and_pages_verify_names_it() {
    use tamp_host::store::{NewPage, PageStore, PostgresStore};
    use tamp_plugin_api::{Message, Role};
    let server = PgServer::shared();
    let url = server.create_database("silent_loss_pages");
    let store = PostgresStore::open_unshared(&url, 2).unwrap();
    let mut ids = Vec::new();
    for tag in ["kept", "altered"] {
        let page = NewPage {
            thread_id: None,
            strategy: "s".into(),
            messages: vec![Message::text(Role::User, format!("the {tag} original"))],
            metadata_json: String::new(),
            source_format: Some("anthropic".into()),
        };
        ids.push(store.put_page(page).await.unwrap());
    }
    server.psql(
        "silent_loss_pages",
        &format!(
            "UPDATE pages SET messages_json = replace(messages_json, 'original', 'forgery!') \
             WHERE id = '{}'",
            ids[1]
        ),
    );
    let err = store.get_page(&ids[1]).await.unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    assert!(err.to_string().contains("no longer match its id"), "{err}");
    assert!(store.get_page(&ids[0]).await.is_ok());

    let dir = ScratchDir::new("loss-verify-pg");
    let config = write_chain(
        &dir,
        "store = { kind = \"postgres\", url_env = \"TAMP_TEST_SILENT_LOSS_URL\" }\n",
    );
    let out = Command::new(tamp_bin())
        .args(["pages", "verify", "--config"])
        .arg(&config)
        .env("TAMP_TEST_SILENT_LOSS_URL", &url)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&ids[1]) && !stdout.contains(&ids[0]),
        "{stdout}"
    );
    assert_stderr_has(&out, "1 of 2 item(s)");
}

/// Issue 32, point 5: a page's id covers its messages only; its seal covers the rest. A
/// strategy name altered on disk (same length, behind SQLite's back) is named by `tamp pages
/// verify`, which said ok before.
#[test]
fn a_page_whose_strategy_was_altered_on_disk_is_named_by_pages_verify() {
    let dir = ScratchDir::new("loss-seal");
    let (store, pages) = compacted_store(&dir);
    let store_arg = store.to_str().unwrap();
    assert!(tamp_e2e::patch_bytes(&store, b"custom-strategy", b"custom-strategz") > 0);
    let out = tamp(&["pages", "verify", "--store", store_arg], &dir);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        pages.iter().all(|p| stdout.contains(p)) && stdout.contains("no longer match its seal"),
        "{stdout}"
    );
}

/// The same on PostgreSQL, one field per page: thread, strategy, wire format, metadata and
/// message count; and a database from before seals is sealed when a host opens it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_of_a_page_in_postgres_is_checked_and_an_old_database_is_sealed() {
    use tamp_host::store::{NewPage, PageStore, PostgresStore};
    use tamp_plugin_api::{Message, Role};
    let server = PgServer::shared();
    let db = "silent_loss_seals";
    let url = server.create_database(db);
    let store = PostgresStore::open_unshared(&url, 2).unwrap();
    let mut ids = Vec::new();
    for tag in [
        "kept", "thread", "strategy", "format", "metadata", "count", "old",
    ] {
        let page = NewPage {
            thread_id: Some("t1".into()),
            strategy: "s".into(),
            messages: vec![Message::text(Role::User, format!("the {tag} original"))],
            metadata_json: "{\"k\":1}".into(),
            source_format: Some("anthropic".into()),
        };
        ids.push(store.put_page(page).await.unwrap());
    }
    drop(store);
    // An older tamp's database: no seal column (nor what came after it), schema version 5.
    // Reopened, it migrates and seals its pages as they are.
    server.psql(
        db,
        "ALTER TABLE pages DROP COLUMN seal; DROP TABLE tamp_secrets;
         ALTER TABLE threads DROP COLUMN seal; ALTER TABLE llm_answers DROP COLUMN seal;
         ALTER TABLE range_summaries DROP COLUMN seal; DROP TABLE page_owners, page_text;
         DROP TABLE activity_requests, activity_compactions, activity_threads;
         DELETE FROM tamp_schema_migrations WHERE version >= 6;",
    );
    let store = PostgresStore::open_unshared(&url, 2).unwrap();
    let check = store.verify_pages().await.unwrap();
    assert_eq!((check.checked, check.damaged.len()), (7, 0), "{check:?}");
    for (sql, id) in [
        "UPDATE pages SET thread_id = 't2'",
        "UPDATE pages SET strategy = 'other'",
        "UPDATE pages SET source_format = 'openai'",
        "UPDATE pages SET metadata_json = '{\"k\":2}'",
        "UPDATE pages SET message_count = 2",
        "UPDATE pages SET thread_id = NULL",
    ]
    .iter()
    .zip(&ids[1..])
    {
        server.psql(db, &format!("{sql} WHERE id = '{id}'"));
    }
    let check = store.verify_pages().await.unwrap();
    let mut damaged: Vec<&str> = check.damaged.iter().map(|d| d.id.as_str()).collect();
    damaged.sort();
    let mut altered: Vec<&str> = ids[1..].iter().map(String::as_str).collect();
    altered.sort();
    assert_eq!(damaged, altered, "{check:?}");
    assert!(store.get_page(&ids[0]).await.is_ok());
    let err = store.get_page(&ids[5]).await.unwrap_err();
    assert!(err.to_string().contains("message count says 2"), "{err}");
}

// ---- item 5: `tamp pages` reads without write access ----

/// The store's directory is not writable by the reader (a file handed over, a read-only
/// volume): `tamp pages list/show/verify` read it anyway, and change nothing. Run as
/// `nobody` with the file its own when the tests run as root (root writes anywhere).
#[cfg(unix)]
#[test]
fn pages_commands_read_a_store_in_a_directory_they_cannot_write() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let dir = ScratchDir::new("loss-read-only");
    let (store, pages) = compacted_store(&dir);
    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    let run = |args: &[&str]| -> Output {
        let mut cmd = tamp_e2e::tamp_command_as_nobody(root);
        cmd.args(args)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .expect("run tamp")
    };
    if root {
        // The file is the reader's, its directory is not.
        std::os::unix::fs::chown(&store, Some(65534), Some(65534)).unwrap();
    } else {
        std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let before = std::fs::read(&store).unwrap();
    let store_arg = store.to_str().unwrap();
    let list = run(&["pages", "list", "--store", store_arg]);
    let show = run(&["pages", "show", &pages[0], "--store", store_arg]);
    let verify = run(&["pages", "verify", "--store", store_arg]);
    if !root {
        std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    assert_ok(&list, "list: ");
    assert_stdout_has(&list, &pages[0]);
    assert_ok(&show, "show: ");
    assert_stdout_has(&show, "\"messages\"");
    assert_ok(&verify, "verify: ");
    assert_eq!(
        std::fs::read(&store).unwrap(),
        before,
        "a reader changed the store"
    );
}

// ---- item 5: what the errors say ----

#[test]
fn check_config_names_the_field_the_users_plugin_file_and_the_store_line() {
    let dir = ScratchDir::new("loss-check");
    let check = |name: &str, toml: &str| -> Output {
        let path = dir.join(name);
        std::fs::write(&path, toml).unwrap();
        tamp(&["check-config", "--config", path.to_str().unwrap()], &dir)
    };

    // A type error names the field, not only the line.
    let out = check(
        "wrong_type.toml",
        "[provider]\nkind = \"extractive\"\n\n[cache]\nenabled = true\n\n[budget]\nmax_tokens = \"lots\"\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "wrong_type.toml:8: budget.max_tokens: invalid type: string \"lots\", expected u64"
        ),
        "{}",
        text(&out.stderr)
    );

    // A plugin that is not one: the file the user named, never the private copy.
    std::fs::write(dir.join("fake.so"), b"not a shared library").unwrap();
    let out = check(
        "fake.toml",
        "[[stage]]\nname = \"x\"\nplugin = \"fake.so\"\n",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("tamp-plugins-"), "{stderr}");
    let fake = dir.join("fake.so").canonicalize().unwrap();
    assert_contains(
        &stderr,
        &format!("plugin {}: not a tamp plugin", fake.display()),
    );

    // A store that cannot be opened: the line of its setting.
    let out = check(
        "store.toml",
        "[budget]\nmax_tokens = 1000\n\n[store]\npath = \"/proc/no-such-dir/s.sqlite3\"\n",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_contains(
        &stderr,
        "store.toml:5: store.path: page store /proc/no-such-dir/s.sqlite3",
    );

    // A chain without stages is valid, with a warning.
    let out = check("empty.toml", "");
    assert_ok(&out, "");
    assert!(
        text(&out.stderr).contains("warning: ") && text(&out.stderr).contains("no [[stage]]"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn compact_prints_a_plugin_error_once_and_invalid_utf8_by_byte_offset() {
    let dir = ScratchDir::new("loss-compact");
    let sample = workspace_root().join("examples/conversations/ponyc-4588.anthropic.json");
    let bad_plugin = plugin("tamp_test_not_a_plugin");
    let config = write_chain(
        &dir,
        &format!(
            "[[stage]]\nname = \"x\"\nplugin = \"{}\"\n",
            bad_plugin.display()
        ),
    );
    let out = tamp(
        &[
            "compact",
            sample.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &dir,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("not a tamp plugin").count(), 1, "{stderr}");

    // Invalid UTF-8 at byte 14, in a file and on stdin.
    let mut bytes = b"{\"messages\": [\"caf".to_vec();
    let offset = bytes.len();
    bytes.extend_from_slice(b"\xe9\"]}");
    std::fs::write(dir.join("latin1.json"), &bytes).unwrap();
    let out = tamp(&["compact", "latin1.json"], &dir);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "latin1.json: invalid UTF-8 at byte offset {offset}"
        )),
        "{stderr}"
    );
    let mut child = Command::new(tamp_bin())
        .args(["compact", "-"])
        .current_dir(&*dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&bytes).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_contains(
        &stderr,
        &format!("<stdin>: invalid UTF-8 at byte offset {offset}"),
    );
}
