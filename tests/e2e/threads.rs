//! Thread continuity end to end (issue 16, part 1): a client that posts its whole history on
//! every call, through the real `tamp serve` and `tamp compact`, on the SQLite file store and
//! on PostgreSQL shared by two replicas.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::postgres::PgServer;
use tamp_e2e::serve_support::Server;
use tamp_e2e::{corpus_mix, scratch_dir, tamp_bin};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{ContentBlock, Conversation, Role};

const URL_VAR: &str = "TAMP_DATABASE_URL";

/// map-reduce-adaptive over a 12,000-token budget, every LLM call answered by the scripted
/// provider, pages, cache and thread states in `store`.
fn chain(dir: &Path, store: &str) -> PathBuf {
    tamp_e2e::scripted_summary_chain(dir, store, 12_000)
}

/// The first `n` messages of a long agent session, as the client sends them.
fn history(session: &Conversation, n: usize) -> Value {
    let prefix = Conversation::new(session.messages[..n].to_vec());
    wire::to_value(&prefix, WireFormat::Anthropic)
}

fn body(history: Value, thread: Option<&str>, continuity: bool) -> Value {
    let mut body = json!({"conversation": history, "thread_continuity": continuity});
    if let Some(thread) = thread {
        body["thread_id"] = json!(thread);
    }
    body
}

fn messages(answer: &Value) -> &Vec<Value> {
    answer["conversation"]["messages"]
        .as_array()
        .expect("messages")
}

fn acted(answer: &Value) -> bool {
    answer["report"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["status"] == "acted")
}

/// What one replay of the growing session cost.
#[derive(Debug, Default)]
struct Replay {
    requests: u32,
    llm_calls: u64,
    compactions: u32,
    continued: u32,
    /// Requests after the first compaction whose answer started with the previous answer.
    prefix_kept: u32,
}

/// Posts the session's history after every turn (4 messages at a time), from 40 messages on.
async fn replay(server: &Server, session: &Conversation, thread: Option<&str>, on: bool) -> Replay {
    let mut out = Replay::default();
    let mut previous: Option<Vec<Value>> = None;
    let mut n = 40;
    while n <= session.messages.len() {
        let (status, answer) = server.compact(&body(history(session, n), thread, on)).await;
        assert_eq!(status, 200, "{answer:#}");
        out.requests += 1;
        out.llm_calls += answer["report"]["llm_calls"].as_u64().unwrap();
        let thread_report = &answer["report"]["thread"];
        if acted(&answer) {
            out.compactions += 1;
        }
        if thread_report["continued"] == true {
            out.continued += 1;
            let kept = thread_report["prefix_kept_tokens"].as_u64().unwrap();
            assert!(kept > 0, "{thread_report}");
        }
        let now = messages(&answer).clone();
        if let Some(prev) = &previous {
            if !acted(&answer) && thread_report["continued"] == true {
                // No stage ran: the answer is the previous answer byte for byte, then what is new.
                assert_eq!(&now[..prev.len()], &prev[..], "the prefix changed at {n}");
                out.prefix_kept += 1;
            }
        }
        if acted(&answer) || previous.is_some() {
            previous = Some(now);
        }
        n += 4;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_thread_pays_for_what_is_new_and_keeps_its_prefix() {
    let dir = scratch_dir("threads-serve");
    let config = chain(&dir, r#"{ path = "store.sqlite3" }"#);
    let server = Server::start(&config, &[]);
    let session = corpus_mix(200);

    let with = replay(&server, &session, Some("t-continuity"), true).await;
    let without = replay(&server, &session, Some("t-raw"), false).await;
    eprintln!("with continuity: {with:?}\nwithout: {without:?}");
    assert!(with.compactions >= 2, "{with:?}");
    assert!(with.continued >= with.requests / 2, "{with:?}");
    assert!(with.prefix_kept >= with.requests / 2, "{with:?}");
    // Measured: 6 compactions and 25 LLM calls against 40 and 73 (the summary cache already
    // spares the raw client many calls).
    assert!(
        with.compactions * 4 <= without.compactions && with.llm_calls * 2 <= without.llm_calls,
        "continuity should cut compactions and LLM calls: {with:?} vs {without:?}"
    );
    assert_eq!(without.continued, 0);

    // Without a thread id the thread is named by its leading messages: a third client with
    // the same history continues where the first left off.
    let (_, answer) = server
        .compact(&body(history(&session, 200), None, true))
        .await;
    assert_eq!(answer["report"]["thread"]["key"], "derived");

    // An edited history does not extend the stored messages: compacted from scratch.
    let mut edited = session.clone();
    let first_user = edited
        .messages
        .iter_mut()
        .find(|m| m.role == Role::User)
        .unwrap();
    first_user.content.push(ContentBlock::text("(edited)"));
    let edited = wire::to_value(&edited, WireFormat::Anthropic);
    let (_, answer) = server
        .compact(&body(edited, Some("t-continuity"), true))
        .await;
    assert_eq!(answer["report"]["thread"]["continued"], false, "{answer:#}");
    assert!(acted(&answer));

    let metrics = server.metrics().await;
    assert_contains(&metrics, "tamp_threads_continued_total");
    assert!(
        !metrics.contains("tamp_prefix_kept_tokens_total 0\n"),
        "{metrics}"
    );
}

#[test]
fn tamp_compact_continues_a_thread_across_invocations() {
    let dir = scratch_dir("threads-cli");
    let config = chain(&dir, r#"{ path = "store.sqlite3" }"#);
    let session = corpus_mix(160);
    let run = |n: usize, extra: &[&str]| -> Value {
        std::fs::write(
            dir.join("in.json"),
            serde_json::to_string(&history(&session, n)).unwrap(),
        )
        .unwrap();
        let out = Command::new(tamp_bin())
            .args(["compact", "in.json", "--config"])
            .arg(&config)
            .args(["--thread-id", "cli-thread", "--report-json", "report.json"])
            .args(extra)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_ok(&out, "");
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
    };
    let first = run(150, &[]);
    assert_eq!(first["thread"]["stored"], true, "{first:#}");
    let second = run(154, &[]);
    assert_eq!(second["thread"]["continued"], true, "{second:#}");
    assert_eq!(second["llm_calls"], 0, "{second:#}");
    let opted_out = run(158, &["--no-thread-continuity"]);
    assert!(opted_out.get("thread").is_none(), "{opted_out:#}");
    assert!(opted_out["llm_calls"].as_u64().unwrap() > 0);
}

#[test]
fn a_replica_continues_a_thread_another_replica_compacted() {
    let url = PgServer::shared().create_database("threads_replicas");
    let dir = scratch_dir("threads-replicas");
    let config = chain(
        &dir,
        &format!(r#"{{ kind = "postgres", url_env = "{URL_VAR}", pool_size = 4 }}"#),
    );
    let env = [(URL_VAR, url.as_str())];
    let a = Server::start_with_env(&config, &[], &env);
    let b = Server::start_with_env(&config, &[], &env);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let session = corpus_mix(160);

    let (status, first) = rt.block_on(a.compact(&body(history(&session, 150), Some("r"), true)));
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["report"]["thread"]["stored"], true, "{first:#}");
    let (status, second) = rt.block_on(b.compact(&body(history(&session, 154), Some("r"), true)));
    assert_eq!(status, 200, "{second:#}");
    assert_eq!(second["report"]["thread"]["continued"], true, "{second:#}");
    assert_eq!(second["report"]["llm_calls"], 0);
    let before = messages(&first);
    assert_eq!(&messages(&second)[..before.len()], &before[..]);
}

/// A thread's stored state altered in the store (`update threads set state_json =
/// replace(state_json, …, 'INJECTED…')`) passed `tamp pages verify`, and every later request of
/// the thread was "continued from its last answer" with the injected text in it. The state is
/// sealed now: `pages verify` names it, and the thread's next request is compacted from its raw
/// history instead, with a warning, `thread.state_refused` and
/// `tamp_thread_states_refused_total`; its answer replaces the state, which the request after
/// it continues from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_state_altered_in_the_store_is_refused_and_verify_names_it() {
    const WORD: &str = "ZEBRA-TAIL-42";
    const INJECTED: &str = "INJECTED-TAIL";
    let dir = scratch_dir("threads-sealed");
    let config = chain(&dir, r#"{ path = "store.sqlite3" }"#);
    let session = corpus_mix(170);
    let cut = |at: usize| {
        tamp_plugin_api::sdk::units(&session.messages)
            .iter()
            .map(|u| u.range.end)
            .find(|&end| end >= at)
            .unwrap()
    };
    // The word is in the newest message only: in the thread's state, in no page.
    let (first, second, third) = (cut(150), cut(154), cut(158));
    let mut messages = session.messages[..first].to_vec();
    messages.push(tamp_plugin_api::Message::text(
        Role::User,
        format!("Keep the {WORD} setting as it is."),
    ));
    let request = |extra: std::ops::Range<usize>| {
        let mut all = messages.clone();
        all.extend_from_slice(&session.messages[extra]);
        body(
            wire::to_value(&Conversation::new(all), WireFormat::Anthropic),
            Some("t1"),
            true,
        )
    };

    let mut server = Server::start(&config, &[]);
    let (status, answer) = server.compact(&request(first..first)).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["report"]["thread"]["stored"], true, "{answer:#}");
    server.sigterm();
    server.wait_exit(std::time::Duration::from_secs(30));

    let store = dir.join("store.sqlite3");
    assert!(tamp_e2e::patch_bytes(&store, WORD.as_bytes(), INJECTED.as_bytes()) > 0);
    let verify = Command::new(tamp_bin())
        .args(["pages", "verify", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "{stdout}");
    assert_contains(
        &stdout,
        "the thread state of id:t1: it no longer matches its seal",
    );

    let server = Server::start(&config, &[]);
    let (status, answer) = server.compact(&request(first..second)).await;
    assert_eq!(status, 200, "{answer:#}");
    let thread = &answer["report"]["thread"];
    assert_eq!(thread["state_refused"], true, "{thread:#}");
    assert_eq!(thread["continued"], false, "{thread:#}");
    assert!(
        thread["error"].as_str().unwrap().contains("is damaged"),
        "{thread:#}"
    );
    assert!(!answer.to_string().contains(INJECTED), "{answer:#}");
    let log = server.log_containing(&["thread state refused"]);
    assert_contains(&log, "thread state refused");
    assert!(
        server
            .metrics()
            .await
            .contains("tamp_thread_states_refused_total 1"),
        "{}",
        server.metrics().await
    );
    // Its answer was stored: the next request continues from it.
    let (status, answer) = server.compact(&request(first..third)).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["report"]["thread"]["continued"], true, "{answer:#}");
    assert!(answer["report"]["thread"].get("state_refused").is_none());
}

/// The same on PostgreSQL, with the summary cache: a state altered in the database is
/// refused, a cached answer altered is a miss, and `store::verify` names both.
#[test]
fn a_state_and_a_cache_entry_altered_in_postgres_are_refused_and_verify_names_them() {
    use tamp_host::store::{self, StoreSpec, ThreadLimits, ThreadState};
    use tamp_plugin_api::{LlmRequest, LlmResponse, Message};
    let server = PgServer::shared();
    let db = "threads_sealed";
    let url = server.create_database(db);
    let store = store::open(&StoreSpec::Postgres {
        url,
        pool_size: 2,
        ca_file: None,
    })
    .unwrap();
    let state = ThreadState {
        covered: 3,
        prefix_hash: "h3".into(),
        output: vec![Message::text(Role::User, "keep ponyc on 0.58")],
        chain: String::new(),
    };
    let key = tamp_host::store::CacheScope::new(Some("t"), "s", "c")
        .request_key("p", &LlmRequest::new("", "summarize", 10));
    let answer = LlmResponse {
        text: "ponyc stays".into(),
        structured_json: tamp_plugin_api::FfiOption::RNone,
        usage: Default::default(),
        model: "m".into(),
        stop_reason: "end_turn".into(),
    };
    tamp_e2e::rt().block_on(async {
        let limits = ThreadLimits {
            ttl_secs: 3600,
            max_threads: 10,
        };
        store
            .threads
            .put_thread("id:t", &state, limits)
            .await
            .unwrap();
        store.cache.put_answer(key, answer.clone()).await.unwrap();
        assert_eq!(
            store.threads.get_thread("id:t", 3600).await.unwrap(),
            Some(state)
        );
        assert_eq!(store.cache.get_answer(key).await.unwrap(), Some(answer));
        let clean = store::verify(&store).await.unwrap();
        assert!(clean.problems().is_empty(), "{clean:?}");
        server.psql(
            db,
            "UPDATE threads SET state_json = replace(state_json, 'ponyc', 'INJECTED');
             UPDATE llm_answers SET answer_json = replace(answer_json, 'ponyc', 'INJECTED')",
        );
        let e = store.threads.get_thread("id:t", 3600).await.unwrap_err();
        assert!(e.is_damaged(), "{e}");
        assert_eq!(store.cache.get_answer(key).await.unwrap(), None);
        let check = store::verify(&store).await.unwrap();
        assert_eq!(check.threads.damaged.len(), 1, "{check:?}");
        assert_eq!(check.cache.damaged.len(), 1, "{check:?}");
        assert_eq!(check.threads.damaged[0].what, "the thread state of id:t");
    });
}
