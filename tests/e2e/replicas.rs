//! Several `tamp serve` replicas on one PostgreSQL database (issue 10): the real binary, the
//! real plugins, a real PostgreSQL server started by the test (`support/postgres.rs`) and the
//! local Message Batches server. Nothing here mocks the database.
//!
//! - a page archived through one replica is served by the other, and a summary cached by one
//!   is a hit on the other;
//! - 1,000 deferred items worked by both replicas' workers: none submitted twice, none lost;
//! - a replica killed (SIGKILL) with its batches open: the other finishes them once its
//!   leases expire;
//! - the database stopped and started under load: compactions fail with a clear error and
//!   an unchanged conversation while it is down, and succeed again, without a restart of
//!   either replica, once it is back.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::mock_batches::MockBatches;
use tamp_e2e::postgres::PgServer;
use tamp_e2e::serve_support::Server;
use tamp_e2e::{corpus_mix, scratch_dir, write_chain};
use tamp_host::store::{self, NewDeferred, QueueState, StoreSpec};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{Conversation, LlmRequest};

const URL_VAR: &str = "TAMP_DATABASE_URL";
const KEY_VAR: &str = "TAMP_REPLICAS_TEST_KEY";

fn env(url: &str) -> Vec<(&'static str, String)> {
    vec![(URL_VAR, url.to_string()), (KEY_VAR, "sk-ant-test".into())]
}

fn start(chain: &Path, url: &str) -> Server {
    let env = env(url);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_with_env(chain, &[], &pairs)
}

/// The same shared store, opened by the test itself (as a third replica would).
fn open_store(url: &str) -> store::Store {
    store::open(&StoreSpec::Postgres {
        url: url.to_string(),
        pool_size: 4,
        ca_file: None,
    })
    .expect("open the shared store")
}

/// `base` with its first user text changed, so it archives new pages.
fn variant(base: &Conversation, tag: &str) -> Conversation {
    tamp_e2e::variant(base, format!("({tag})"))
}

fn page_refs(conversation: &Value) -> Vec<String> {
    let conv = wire::parse_value(conversation.clone(), Some(WireFormat::Anthropic))
        .expect("the answer is a conversation")
        .0;
    conv.messages
        .iter()
        .filter_map(|m| m.summary_info().map(|i| i.page_ref.to_string()))
        .collect()
}

/// A chain summarizing with the scripted provider, pages and cache in PostgreSQL.
fn summarizing_chain(dir: &Path) -> PathBuf {
    let store = format!("{{ kind = \"postgres\", url_env = \"{URL_VAR}\", pool_size = 4 }}");
    tamp_e2e::scripted_summary_chain(dir, &store, 4000)
}

#[test]
fn a_page_written_by_one_replica_is_served_by_the_other_and_cached_summaries_are_shared() {
    let url = PgServer::shared().create_database("replicas_pages");
    let dir = scratch_dir("replicas-pages");
    let chain = summarizing_chain(&dir);
    let a = start(&chain, &url);
    let b = start(&chain, &url);
    let rt = tokio::runtime::Runtime::new().unwrap();

    let input = wire::to_value(&corpus_mix(80), WireFormat::Anthropic);
    // The shared cache is under test: thread continuity (tests/e2e/threads.rs) would answer
    // B's repeat from the thread's last answer before any cache lookup.
    let body = json!({"conversation": input, "thread_id": "t1", "thread_continuity": false});
    let (status, first) = rt.block_on(a.compact(&body));
    assert_eq!(status, 200, "{first}");
    let calls = first["report"]["llm_calls"].as_u64().unwrap();
    assert!(calls > 0, "{:#}", first["report"]);
    let refs = page_refs(&first["conversation"]);
    assert!(!refs.is_empty(), "replica A archived nothing");

    // Every page A wrote is served by B, with the original messages.
    for id in &refs {
        let page = rt.block_on(b.get_json(&format!("/v1/pages/{id}")));
        assert_eq!(page["id"], json!(id), "{page:#}");
        assert!(!page["messages"].as_array().unwrap().is_empty(), "{page:#}");
    }
    assert!(rt
        .block_on(b.get_json("/v1/chain"))
        .to_string()
        .contains("postgres://"));

    // B answers the same thread from A's cached summaries: no LLM call, same conversation.
    let (status, second) = rt.block_on(b.compact(&body));
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["report"]["llm_calls"], 0, "{:#}", second["report"]);
    assert!(second["report"]["cache_hits"].as_u64().unwrap() >= 1);
    assert_eq!(first["conversation"], second["conversation"]);

    // Both archived the same messages: one page each, stored once.
    let shared = open_store(&url);
    let listed = rt.block_on(shared.pages.list_pages(10_000)).unwrap();
    let listed: HashSet<String> = listed.into_iter().map(|p| p.id).collect();
    let expected: HashSet<String> = refs.iter().cloned().collect();
    assert_eq!(listed, expected, "one stored page per distinct page ref");
}

fn tamp_cli(dir: &Path, url: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(tamp_e2e::tamp_bin());
    cmd.current_dir(dir).args(args).env_remove(URL_VAR);
    if let Some(url) = url {
        cmd.env(URL_VAR, url);
    }
    cmd.output().expect("run tamp")
}

#[test]
fn the_cli_reads_pages_and_the_queue_of_the_shared_store_and_names_a_missing_url() {
    let url = PgServer::shared().create_database("replicas_cli");
    let dir = scratch_dir("replicas-cli");
    summarizing_chain(&dir);
    std::fs::write(
        dir.join("in.json"),
        wire::to_string_pretty(&corpus_mix(80), WireFormat::Anthropic),
    )
    .unwrap();

    // Without the variable: the error names the field, the variable and the file's line.
    let out = tamp_cli(&dir, None, &["check-config", "--config", "chain.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("chain.toml:2: store.url_env") && stderr.contains(URL_VAR),
        "{stderr}"
    );

    let ok = tamp_cli(
        &dir,
        Some(&url),
        &["check-config", "--config", "chain.toml"],
    );
    assert_ok(&ok, "");
    let compacted = tamp_cli(
        &dir,
        Some(&url),
        &["compact", "in.json", "-c", "chain.toml", "-o", "out.json"],
    );
    assert_ok(&compacted, "");
    let out: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap();
    let refs = page_refs(&out);
    assert!(!refs.is_empty());

    // `tamp pages` reads the database the chain file names.
    let listed = tamp_cli(&dir, Some(&url), &["pages", "list", "-c", "chain.toml"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    for id in &refs {
        assert!(listed.contains(id.as_str()), "{id} not in {listed}");
    }
    let shown = tamp_cli(
        &dir,
        Some(&url),
        &["pages", "show", &refs[0], "-c", "chain.toml"],
    );
    assert!(shown.status.success());
    let page: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(page["id"], json!(refs[0]));

    // `tamp batch status` reads the shared queue.
    let shared = open_store(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(
        shared
            .queue
            .enqueue((0..3).map(|i| deferred(i, "cli")).collect()),
    )
    .unwrap();
    let status = tamp_cli(&dir, Some(&url), &["batch", "status", "-c", "chain.toml"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert_contains(&status, "queue: 3 queued, 0 submitted");
}

/// A chain whose only stage defers its summaries; the worker of each replica sends them to
/// the local batch server.
fn deferring_chain(dir: &Path, mock: &MockBatches, batch_extra: &str) -> PathBuf {
    write_chain(
        dir,
        &format!(
            r#"
store = {{ kind = "postgres", url_env = "{URL_VAR}", pool_size = 4 }}

[budget]
max_tokens = 10000000
keep_recent = 4

{provider}

{batch}

{stage}
"#,
            provider = tamp_e2e::mock_batches::provider_table(&mock.url(), KEY_VAR),
            batch = tamp_e2e::mock_batches::batch_table(batch_extra),
            stage = tamp_e2e::mock_batches::defer_stage(),
        ),
    )
}

fn deferred(n: usize, tag: &str) -> NewDeferred {
    NewDeferred {
        page_id: format!("pg_{tag}_{n:05}"),
        strategy: "batch-deferred".into(),
        thread_id: None,
        request: LlmRequest::new(
            "sys",
            format!("Summarize.\n<content>\n{tag} item {n}\n</content>"),
            64,
        ),
    }
}

/// Waits until `done` holds for the shared queue's status.
fn wait_for_queue(
    rt: &tokio::runtime::Runtime,
    shared: &store::Store,
    what: &str,
    timeout: Duration,
    done: impl Fn(&store::QueueStatus) -> bool,
    logs: &[&Server],
) -> store::QueueStatus {
    let deadline = Instant::now() + timeout;
    loop {
        let status = rt.block_on(shared.queue.status()).unwrap();
        if done(&status) {
            return status;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = logs.iter().map(|s| s.log()).collect();
            panic!("timed out waiting for {what}: {status:?}\nlogs:\n{logs:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every custom id the batch server received, with how many times.
fn submissions(mock: &MockBatches) -> Vec<String> {
    mock.batches()
        .into_iter()
        .flat_map(|b| b.custom_ids)
        .collect()
}

fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_thousand_deferred_items_are_worked_by_both_replicas_once_each() {
    let url = PgServer::shared().create_database("replicas_queue");
    let mock = MockBatches::start();
    let dir = scratch_dir("replicas-queue");
    let chain = deferring_chain(&dir, &mock, "max_batch_requests = 40\nlease_secs = 30");
    let a = start(&chain, &url);
    let b = start(&chain, &url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let shared = open_store(&url);

    // Queued while both workers run, a hundred at a time, as compactions would.
    let mut ids = Vec::new();
    for chunk in 0..10 {
        let items = (0..100)
            .map(|i| deferred(chunk * 100 + i, "bulk"))
            .collect();
        ids.extend(rt.block_on(shared.queue.enqueue(items)).unwrap());
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(ids.len(), 1_000);
    let status = wait_for_queue(
        &rt,
        &shared,
        "1,000 items done",
        Duration::from_secs(120),
        |s| s.done == 1_000,
        &[&a, &b],
    );
    assert_eq!((status.queued, status.submitted, status.failed), (0, 0, 0));

    // None submitted twice, none lost.
    let sent = submissions(&mock);
    let unique: HashSet<&String> = sent.iter().collect();
    assert_eq!(unique.len(), 1_000, "every item was submitted");
    assert_eq!(sent.len(), 1_000, "no item was submitted twice");
    // Both replicas did part of the work.
    let created = |s: &Server| {
        counter(
            &rt.block_on(s.metrics()),
            "tamp_batch_batches_created_total",
        )
    };
    let (by_a, by_b) = (created(&a), created(&b));
    assert!(by_a > 0 && by_b > 0, "batches by A: {by_a}, by B: {by_b}");
    assert_eq!(by_a + by_b, mock.creates() as u64);
    // Each result applied exactly once.
    for id in ids {
        let events = rt.block_on(shared.queue.events(id)).unwrap();
        let states: Vec<QueueState> = events.iter().map(|e| e.state).collect();
        assert_eq!(
            states,
            [QueueState::Queued, QueueState::Submitted, QueueState::Done],
            "item {id}"
        );
    }
}

#[test]
fn a_replica_killed_mid_batch_has_its_batches_finished_by_the_other_after_the_lease() {
    let url = PgServer::shared().create_database("replicas_kill");
    let mock = MockBatches::start();
    mock.stall(true);
    let dir = scratch_dir("replicas-kill");
    let lease = Duration::from_secs(3);
    let chain = deferring_chain(
        &dir,
        &mock,
        &format!(
            "max_batch_requests = 25\nlease_secs = {}",
            lease.as_secs_f64()
        ),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let shared = open_store(&url);
    let ids = rt
        .block_on(
            shared
                .queue
                .enqueue((0..100).map(|i| deferred(i, "kill")).collect()),
        )
        .unwrap();

    // Replica A submits everything, then dies by SIGKILL while its batches are open.
    let mut a = start(&chain, &url);
    wait_for_queue(
        &rt,
        &shared,
        "A to submit every item",
        Duration::from_secs(60),
        |s| s.submitted == 100,
        &[&a],
    );
    let killed_at = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    a.wait_exit(Duration::from_secs(10));
    let batches_by_a = mock.creates();
    assert_eq!(batches_by_a, 4, "100 items in batches of 25");

    // B starts; the batches end. B may poll them only once A's lease has expired.
    let b = start(&chain, &url);
    mock.stall(false);
    mock.end_all();
    wait_for_queue(
        &rt,
        &shared,
        "B to finish A's batches",
        Duration::from_secs(60),
        |s| s.done == 100,
        &[&b],
    );
    assert!(
        killed_at.elapsed() >= lease - Duration::from_millis(500),
        "B applied results of batches still leased to A ({:?} after the kill)",
        killed_at.elapsed()
    );
    assert_eq!(mock.creates(), batches_by_a, "nothing was submitted again");
    let sent = submissions(&mock);
    assert_eq!(sent.len(), 100);
    assert_eq!(sent.iter().collect::<HashSet<_>>().len(), 100);
    for id in ids {
        let events = rt.block_on(shared.queue.events(id)).unwrap();
        let done = events
            .iter()
            .filter(|e| e.state == QueueState::Done)
            .count();
        assert_eq!(done, 1, "item {id}: {events:?}");
    }
}

#[test]
fn the_database_restarting_under_load_fails_compactions_clearly_then_they_recover() {
    let mut pg = PgServer::start();
    let url = pg.create_database("replicas_restart");
    let dir = scratch_dir("replicas-restart");
    let chain = summarizing_chain(&dir);
    let servers = Arc::new([start(&chain, &url), start(&chain, &url)]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base = corpus_mix(60);

    let stop = Arc::new(AtomicBool::new(false));
    let acted = Arc::new(AtomicU64::new(0));
    let store_failures = Arc::new(AtomicU64::new(0));
    let last_acted_ms = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // Four clients, two per replica, each compacting new conversations without pause.
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (servers, stop, acted, store_failures, last_acted_ms) = (
                Arc::clone(&servers),
                Arc::clone(&stop),
                Arc::clone(&acted),
                Arc::clone(&store_failures),
                Arc::clone(&last_acted_ms),
            );
            let base = base.clone();
            rt.spawn(async move {
                let server = &servers[client % 2];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let input = variant(&base, &format!("client {client} request {n}"));
                    let sent = wire::to_value(&input, WireFormat::Anthropic);
                    let body = json!({"conversation": sent, "thread_id": format!("c{client}-{n}")});
                    let (status, answer) = server.compact(&body).await;
                    assert_eq!(status, 200, "a replica failed: {answer}");
                    let stage = &answer["report"]["stages"][0];
                    match stage["status"].as_str() {
                        Some("acted") => {
                            acted.fetch_add(1, Ordering::Relaxed);
                            last_acted_ms
                                .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                        }
                        Some("rolled_back") => {
                            // Clear, and the conversation exactly as sent.
                            let error = stage["error"].to_string();
                            assert!(
                                error.contains("postgres://") || error.contains("page store"),
                                "the error does not name the store: {stage:#}"
                            );
                            assert!(!error.contains("password"), "{error}");
                            let back = wire::parse_value(
                                answer["conversation"].clone(),
                                Some(WireFormat::Anthropic),
                            )
                            .expect("the answer is a conversation")
                            .0;
                            // Exactly what the replica received (as read from the wire).
                            let sent = wire::parse_value(sent, Some(WireFormat::Anthropic))
                                .expect("what was sent parses")
                                .0;
                            assert!(
                                back.messages == sent.messages,
                                "a rolled-back compaction changed the conversation"
                            );
                            store_failures.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("unexpected stage status {other:?}: {stage:#}"),
                    }
                }
            })
        })
        .collect();

    let wait_until = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_until("compactions to succeed", &|| {
        acted.load(Ordering::Relaxed) >= 4
    });
    pg.stop();
    wait_until("compactions to fail while the database is down", &|| {
        store_failures.load(Ordering::Relaxed) >= 4
    });
    let failures_while_down = store_failures.load(Ordering::Relaxed);
    pg.start_again();
    let back_at = started.elapsed().as_millis() as u64;
    wait_until("compactions to succeed again", &|| {
        last_acted_ms.load(Ordering::Relaxed) > back_at + 100 && acted.load(Ordering::Relaxed) >= 12
    });
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        rt.block_on(client).expect("a client failed");
    }
    eprintln!(
        "acted {}, failed clearly while down {failures_while_down}",
        acted.load(Ordering::Relaxed)
    );
    // Neither replica restarted, and each serves the other's new pages from the database.
    let body =
        json!({"conversation": wire::to_value(&variant(&base, "after"), WireFormat::Anthropic)});
    let (status, after) = rt.block_on(servers[0].compact(&body));
    assert_eq!(status, 200, "{after}");
    let stage = &after["report"]["stages"][0];
    assert_eq!(stage["status"], "acted", "after the recovery: {stage:#}");
    let refs = page_refs(&after["conversation"]);
    assert!(!refs.is_empty(), "no summary names a page: {after:#}");
    for id in refs {
        let page = rt.block_on(servers[1].get_json(&format!("/v1/pages/{id}")));
        assert_eq!(page["id"], json!(id));
    }
    for server in servers.iter() {
        assert_eq!(rt.block_on(server.get_json("/healthz"))["status"], "ok");
        assert!(!server.log().contains("panicked"), "{}", server.log());
    }
}
