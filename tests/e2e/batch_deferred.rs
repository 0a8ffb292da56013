//! Batch-deferred summarization end to end: the real `batch-deferred` plugin `.so`, the real
//! `tamp` binary and the host's deferred worker against a local Message Batches server that
//! speaks the wire format (`support/mock_batches.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::mock_batches::{MockBatches, Outcome};
use tamp_e2e::{corpus_mix, plugin, scratch_dir, tamp_bin, write_chain};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides, StageStatus};
use tamp_host::config::LoadedChainFile;
use tamp_host::deferred::Worker;
use tamp_host::store::queue::{Billing, DeferredQueue, NewDeferred, QueueState};
use tamp_host::store::{PageStore, SqliteStore};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::deferred::is_page_transcript_prompt;
use tamp_plugin_api::{sdk, Conversation, LlmRequest, Message, Role, SummaryStatus};

const KEY_VAR: &str = "TAMP_BATCH_TEST_KEY";

/// A chain file in `dir`: one `batch-deferred` stage that compacts on every call, the
/// Anthropic provider and the batches API both at `mock`, short intervals.
/// The `[provider]` (the Batches API at `url`), `[store]` and `[batch]` tables of the tests'
/// chains; `batch_extra` goes into `[batch]`.
fn provider_store_batch(url: &str, batch_extra: &str) -> String {
    format!(
        r#"
{provider}

[store]
path = "store.sqlite3"

{batch}
"#,
        provider = tamp_e2e::mock_batches::provider_table(url, KEY_VAR),
        batch = tamp_e2e::mock_batches::batch_table(batch_extra),
    )
}

fn chain_file(dir: &Path, mock: &MockBatches, batch_extra: &str, stage_extra: &str) -> PathBuf {
    std::env::set_var(KEY_VAR, "sk-ant-test-key");
    write_chain(
        dir,
        &format!(
            r#"
[budget]
max_tokens = 10000000
keep_recent = 4
{tables}
{stage}
{stage_extra}
"#,
            tables = provider_store_batch(&mock.url(), batch_extra),
            stage = tamp_e2e::mock_batches::defer_stage(),
        ),
    )
}

fn conversation(turns: usize, tag: &str) -> Conversation {
    let mut messages = vec![
        Message::text(Role::System, "You are a helpful agent."),
        // The task, which stays pinned (`sdk::protected_head`), and the reply that ends the
        // opening turn (a question right after the task would be part of it).
        Message::text(Role::User, format!("{tag}: fix the build failures")),
        Message::text(Role::Assistant, format!("{tag}: on it")),
    ];
    for i in 0..turns {
        messages.push(Message::text(
            Role::User,
            format!("{tag} question {i}: please look into the build failure number {i} in crate alpha-{i}, with all the details you can find about it"),
        ));
        messages.push(Message::text(
            Role::Assistant,
            format!("{tag} answer {i}: the failure {i} came from a missing feature flag in alpha-{i}; I enabled it and the build passed after a clean rebuild"),
        ));
    }
    Conversation::new(messages)
}

fn tamp(dir: &Path, args: &[&str]) -> std::process::Output {
    tamp_e2e::run_tamp_env_ok(args, dir, &[(KEY_VAR, "sk-ant-test-key")])
}

fn summaries(conv: &Conversation) -> Vec<(usize, String, SummaryStatus, String)> {
    conv.messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let info = m.summary_info()?;
            Some((i, info.page_ref.to_string(), info.status, m.joined_text()))
        })
        .collect()
}

/// Writes `input` to `dir/in.json`, compacts it with `tamp compact` into `dir/out1.json`
/// and returns the result.
fn first_compaction(dir: &Path, input: &Conversation) -> Conversation {
    std::fs::write(
        dir.join("in.json"),
        wire::to_string_pretty(input, WireFormat::Anthropic),
    )
    .unwrap();
    tamp(
        dir,
        &["compact", "in.json", "-c", "chain.toml", "-o", "out1.json"],
    );
    read_conv(&dir.join("out1.json"))
}

fn read_conv(path: &Path) -> Conversation {
    wire::parse_str(&std::fs::read_to_string(path).unwrap(), None)
        .unwrap()
        .0
}

#[test]
fn full_loop_compact_submit_poll_apply_finalize_through_the_binary() {
    let mock = MockBatches::start();
    mock.stall(true);
    let dir = scratch_dir("batch-loop");
    chain_file(&dir, &mock, "", "");
    // 1. Compaction: a pending summary at once, no LLM call, no batch yet.
    let out1 = first_compaction(&dir, &conversation(12, "loop"));
    let pending = summaries(&out1);
    assert_eq!(pending.len(), 1, "{pending:?}");
    let (at, page, status, text) = &pending[0];
    assert_eq!((*at, *status), (2, SummaryStatus::Pending));
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("[Pending summary: 21 messages, 10 user and 11 other turns]"),
        "{text}"
    );
    assert_contains(text, "First (assistant): loop: on it");
    assert_contains(text, "Last (assistant): loop answer 9");
    assert_eq!(out1.messages.len(), 1 + 1 + 1 + 4);
    assert_eq!(mock.sync_calls() + mock.creates(), 0);
    let status =
        String::from_utf8(tamp(&dir, &["batch", "status", "-c", "chain.toml"]).stdout).unwrap();
    assert_contains(&status, "1 queued, 0 submitted");

    // 2. run-once submits; the server holds the batch in progress.
    let run =
        String::from_utf8(tamp(&dir, &["batch", "run-once", "-c", "chain.toml"]).stdout).unwrap();
    assert!(
        run.contains("submitted 1 request(s) in 1 new batch(es)"),
        "{run}"
    );
    assert_contains(&run, "1 still running");
    let batches = mock.batches();
    assert_eq!(batches.len(), 1);
    assert!(batches[0].prompts[0].contains("loop question 0"));
    // A compaction meanwhile keeps the placeholder as it is.
    tamp(
        &dir,
        &[
            "compact",
            "out1.json",
            "-c",
            "chain.toml",
            "-o",
            "same.json",
        ],
    );
    assert_eq!(read_conv(&dir.join("same.json")), out1);

    // 3. The batch ends; run-once applies the result.
    mock.end_all();
    let run =
        String::from_utf8(tamp(&dir, &["batch", "run-once", "-c", "chain.toml"]).stdout).unwrap();
    assert_contains(&run, "1 done");
    let status =
        String::from_utf8(tamp(&dir, &["batch", "status", "-c", "chain.toml"]).stdout).unwrap();
    assert_contains(&status, "0 queued, 0 submitted, 1 done, 0 failed");
    assert_contains(&status, "open batches: none");

    // 4. The next compaction shows the final summary at the same place; nothing else moves.
    tamp(
        &dir,
        &[
            "compact",
            "out1.json",
            "-c",
            "chain.toml",
            "-o",
            "out2.json",
        ],
    );
    let out2 = read_conv(&dir.join("out2.json"));
    let finals = summaries(&out2);
    assert_eq!(finals.len(), 1);
    let (at2, page2, status2, text2) = &finals[0];
    assert_eq!((at2, page2, *status2), (at, page, SummaryStatus::Final));
    assert!(
        text2.starts_with("[Summary: 21 messages, 10 user and 11 other turns]\nBatch summary: "),
        "{text2}"
    );
    assert_contains(text2, "loop question 0");
    assert_eq!(out2.messages.len(), out1.messages.len());
    for (i, (a, b)) in out1.messages.iter().zip(&out2.messages).enumerate() {
        if i != *at {
            assert_eq!(a, b, "message {i} changed");
        }
    }
    // The page still holds the originals.
    let shown = String::from_utf8(
        tamp(
            &dir,
            &[
                "pages",
                "show",
                page,
                "-c",
                "chain.toml",
                "--format",
                "internal",
            ],
        )
        .stdout,
    )
    .unwrap();
    assert_contains(&shown, "loop answer 9");
    assert_eq!(mock.creates(), 1);
    assert_eq!(mock.sync_calls(), 0);
}

fn queue_at(dir: &Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(&dir.join("store.sqlite3")).unwrap())
}

fn enqueue(queue: &SqliteStore, page: &str, material: &str) -> i64 {
    futures::executor::block_on(queue.enqueue(vec![NewDeferred {
        page_id: page.into(),
        strategy: "batch-deferred".into(),
        thread_id: None,
        request: LlmRequest::new(
            "sys",
            format!("Summarize.\n<content>\n{material}\n</content>"),
            64,
        ),
    }]))
    .unwrap()[0]
}

/// The worker of `chain` over the store in `dir`, reading pages from it as `tamp serve` does.
fn worker(dir: &Path, chain: &Path) -> Worker {
    worker_without_pages(dir, chain).with_pages(queue_at(dir))
}

fn worker_without_pages(dir: &Path, chain: &Path) -> Worker {
    let file = LoadedChainFile::read(chain).unwrap();
    file.batch_worker(queue_at(dir)).unwrap()
}

/// A template with the transcript twice, literal braces and every placeholder; blocks cut
/// short, so the SDK's cutting is part of what must come out the same.
const ODD_TEMPLATE: &str =
    "{{{count}}} messages, {label}.\n<content>\n{messages}</content>\nOnce more:\n{messages}";

/// What the plugin itself would send for a page: the SDK's rendering of the page's messages in
/// the configured template. `pending` is the pending summary standing for the page.
fn rendered_whole(pending: &str, page: &[Message], max_block_chars: usize) -> String {
    let header = pending.lines().next().unwrap();
    let (count, label) = header
        .strip_prefix("[Pending summary: ")
        .and_then(|h| h.strip_suffix(']'))
        .and_then(|h| h.split_once(" messages, "))
        .unwrap();
    let transcript = sdk::render_messages(page, &sdk::RenderOptions::cut_at(max_block_chars));
    sdk::render_template(
        ODD_TEMPLATE,
        &[
            ("messages", transcript.as_str()),
            ("count", count),
            ("label", label),
        ],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_prompts_hold_no_transcript_and_are_sent_as_the_plugin_would_render_them() {
    let mock = MockBatches::start();
    mock.stall(true);
    let dir = scratch_dir("batch-transcript");
    let template = ODD_TEMPLATE.replace('\n', "\\n");
    let chain = chain_file(
        &dir,
        &mock,
        "max_attempts = 1",
        &format!("max_page_messages = 24\nmax_block_chars = 300\nprompt_template = \"{template}\""),
    );
    let compactor = Chain::from_file(&chain, FileOverrides::default()).unwrap();
    // Real corpus messages: tool calls and results, long texts cut at 300 characters.
    let input = corpus_mix(80);
    let out = compactor
        .compact(input.clone(), &CompactOptions::default())
        .await
        .unwrap();
    let pending = summaries(&out.conversation);
    assert!(pending.len() >= 2, "{:?}", out.report.stages[0]);

    // The queue keeps a page-transcript prompt: none of the page's text is stored twice.
    let queue = queue_at(&dir);
    let ids: Vec<String> = pending.iter().map(|(_, page, _, _)| page.clone()).collect();
    let items: Vec<_> = queue
        .lookup("batch-deferred".into(), ids.clone())
        .await
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    for item in &items {
        let prompt = item.request.prompt.as_str();
        assert!(is_page_transcript_prompt(prompt), "{prompt:?}");
        assert!(prompt.len() < 400, "{prompt:?}");
    }

    // Sent, each prompt is byte for byte the plugin's own rendering of its page.
    let report = worker(&dir, &chain).submit_pass().await.unwrap();
    assert_eq!(report.submitted, pending.len() as u64, "{report}");
    let batch = mock.batches().remove(0);
    for (item, (_, page, _, text)) in items.iter().zip(&pending) {
        let stored = queue.get_page(page).await.unwrap().page.messages;
        let at = batch
            .custom_ids
            .iter()
            .position(|id| *id == item.custom_id())
            .unwrap();
        assert_eq!(
            batch.prompts[at],
            rendered_whole(text, &stored, 300),
            "page {page}"
        );
    }
    // A prompt a request made before page-transcript prompts existed carries its page's
    // text and still goes out as it is (the other tests send only such requests).

    // The sync fallback is handed queued requests as they are: it fills them in too.
    mock.stall(false);
    mock.fail_creates(2, 500);
    let again = compactor
        .compact(corpus_mix(120), &CompactOptions::default())
        .await
        .unwrap();
    let fresh: Vec<String> = summaries(&again.conversation)
        .into_iter()
        .map(|(_, page, _, _)| page)
        .filter(|page| !ids.contains(page))
        .collect();
    assert!(!fresh.is_empty());
    let pass = worker(&dir, &chain).submit_pass().await.unwrap();
    assert_eq!(pass.fallbacks, fresh.len() as u64, "{pass}");
    for item in queue.lookup("batch-deferred".into(), fresh).await.unwrap() {
        let item = item.unwrap();
        assert_eq!(item.state, QueueState::Done);
        let text = item.text.unwrap();
        // The mock answers with the first words inside <content>: the transcript's.
        assert!(text.starts_with("Sync summary: "), "{text}");
        assert!(!text.contains('\u{1}'), "{text}");
        assert!(text.len() > "Sync summary: ".len() + 20, "{text}");
    }

    // A worker with no page store cannot fill them in: the request fails, saying why.
    let third = compactor
        .compact(corpus_mix(160), &CompactOptions::default())
        .await
        .unwrap();
    let before = mock.creates();
    let pass = worker_without_pages(&dir, &chain)
        .submit_pass()
        .await
        .unwrap();
    assert!(pass.failed > 0, "{pass}");
    assert_eq!(mock.creates(), before);
    let page = summaries(&third.conversation).pop().unwrap().1;
    let item = queue
        .lookup("batch-deferred".into(), vec![page])
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(item.state, QueueState::Failed);
    assert!(item.reason.unwrap().contains("no page store"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_result_type_in_one_batch_then_retries_requeues_and_fallbacks() {
    let mock = MockBatches::start();
    let dir = scratch_dir("batch-types");
    let chain = chain_file(&dir, &mock, "max_attempts = 2", "");
    let queue = queue_at(&dir);
    let ok = enqueue(&queue, "pg_ok", "all fine here");
    let overloaded = enqueue(&queue, "pg_over", "overload-me once");
    let invalid = enqueue(&queue, "pg_bad", "invalid-me always");
    let expired = enqueue(&queue, "pg_exp", "expire-me always");
    let canceled = enqueue(&queue, "pg_can", "cancel-me once");
    mock.outcome_when(
        "overload-me",
        Outcome::Error("overloaded_error".into()),
        Some(1),
    );
    mock.outcome_when(
        "invalid-me",
        Outcome::Error("invalid_request_error".into()),
        None,
    );
    mock.outcome_when("expire-me", Outcome::Expire, None);
    mock.outcome_when("cancel-me", Outcome::Cancel, Some(1));
    let worker = worker(&dir, &chain);

    // Pass 1: one batch of five; the results come back in another order, in pieces.
    let first = worker.run_once().await.unwrap();
    assert_eq!((first.submitted, first.batches_created), (5, 1), "{first}");
    assert_eq!(
        (first.done, first.requeued, first.failed),
        (1, 3, 1),
        "{first}"
    );
    let state = |id: i64| {
        let page = ["pg_ok", "pg_over", "pg_bad", "pg_exp", "pg_can"][[
            ok, overloaded, invalid, expired, canceled,
        ]
        .iter()
        .position(|&x| x == id)
        .unwrap()];
        futures::executor::block_on(queue.lookup("batch-deferred".into(), vec![page.into()]))
            .unwrap()
            .remove(0)
            .unwrap()
    };
    assert_eq!(state(ok).state, QueueState::Done);
    assert!(state(ok)
        .text
        .unwrap()
        .starts_with("Batch summary: all fine here"));
    assert_eq!(state(ok).billing, Some(Billing::Batch));
    assert_eq!(
        (state(overloaded).state, state(overloaded).attempts),
        (QueueState::Queued, 1)
    );
    let bad = state(invalid);
    assert_eq!(bad.state, QueueState::Failed);
    assert!(bad.reason.unwrap().contains("invalid_request_error"));
    assert_eq!(
        (state(expired).state, state(expired).requeues),
        (QueueState::Queued, 1)
    );
    assert_eq!(
        (state(canceled).state, state(canceled).requeues),
        (QueueState::Queued, 1)
    );

    // An overloaded API (529) on the next call is retried by the client with backoff.
    mock.fail_next(1, 529);
    // Pass 2: the three re-queued go out together. The overload is gone and the cancel was
    // once: both succeed by batch; the second expiry falls back to a synchronous call.
    let second = worker.run_once().await.unwrap();
    assert_eq!(
        (second.submitted, second.batches_created),
        (3, 1),
        "{second}"
    );
    assert_eq!(
        (second.done, second.fallbacks, second.failed),
        (3, 1, 0),
        "{second}"
    );
    assert_eq!(state(overloaded).billing, Some(Billing::Batch));
    assert_eq!(state(canceled).billing, Some(Billing::Batch));
    let fell_back = state(expired);
    assert_eq!(
        (fell_back.state, fell_back.billing),
        (QueueState::Done, Some(Billing::Sync))
    );
    assert!(fell_back
        .text
        .unwrap()
        .starts_with("Sync summary: expire-me"));
    assert_eq!(mock.sync_calls(), 1);

    let status = queue.status().await.unwrap();
    assert_eq!(
        (status.done, status.failed, status.queued, status.submitted),
        (4, 1, 0, 0)
    );
    assert!(status.batch_usage.input_tokens > 0 && status.sync_usage.input_tokens > 0);
    let metrics = worker.metrics().snapshot();
    assert_eq!(
        (
            metrics.batches_created,
            metrics.submitted,
            metrics.succeeded,
            metrics.failed,
            metrics.fallbacks
        ),
        (2, 8, 3, 1, 1)
    );
    assert_eq!(metrics.batch_usage, status.batch_usage);
    // The client lists batches newest first, page by page.
    let client = tamp_host::providers::batches::BatchesClient::new(
        tamp_host::providers::ClientSettings {
            model: "claude-test".into(),
            base_url: mock.url(),
            key: Some(tamp_host::providers::ApiKey::new("sk-ant-test-key")),
            structured: tamp_host::providers::StructuredMode::Auto,
            timeout: Duration::from_secs(10),
        },
        tamp_host::providers::RetryPolicy {
            max_retries: 0,
            initial: Duration::from_millis(1),
            max: Duration::from_millis(1),
        },
    )
    .unwrap();
    let page = client.list(1, None).await.unwrap();
    let ids: Vec<String> = mock.batches().into_iter().map(|b| b.id).collect();
    assert_eq!(page.data[0].id, ids[1]);
    assert!(page.has_more);
    let next = client.list(1, page.last_id.as_deref()).await.unwrap();
    assert_eq!(next.data[0].id, ids[0]);
    assert!(!next.has_more);
    assert_eq!(next.data[0].request_counts.succeeded, 1);
    assert_eq!(next.data[0].request_counts.errored, 2);
    // A third pass finds nothing to do and downloads nothing again.
    let downloads = mock.results_downloads();
    let third = worker.run_once().await.unwrap();
    assert_eq!(third, Default::default());
    assert_eq!(mock.results_downloads(), downloads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_results_gone_results_and_an_overdue_batch_are_handled_as_expired() {
    let mock = MockBatches::start();
    mock.stall(true);
    let dir = scratch_dir("batch-partial");
    let chain = chain_file(
        &dir,
        &mock,
        "batch_timeout_secs = 0.2\nsync_fallback = false",
        "",
    );
    let queue = queue_at(&dir);
    let a = enqueue(&queue, "pg_a", "first part");
    let worker = worker(&dir, &chain);
    let r = worker.submit_pass().await.unwrap();
    assert_eq!(r.submitted, 1);
    // Overdue: the poll cancels it; the next poll sees it canceled and re-queues the item.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let r = worker.poll_pass().await.unwrap();
    assert_eq!(r.batches_canceled, 1, "{r}");
    let r = worker.poll_pass().await.unwrap();
    assert_eq!(r.requeued, 1, "{r}");
    let item = |id: i64| {
        let all = ["pg_a", "pg_b"];
        futures::executor::block_on(
            queue.lookup("batch-deferred".into(), vec![all[(id - a) as usize].into()]),
        )
        .unwrap()
        .remove(0)
        .unwrap()
    };
    assert_eq!((item(a).state, item(a).requeues), (QueueState::Queued, 1));

    // Results that are gone (past 29 days) count as a second expiry: without the sync
    // fallback the item fails, saying why.
    let b = enqueue(&queue, "pg_b", "second part");
    worker.submit_pass().await.unwrap();
    mock.end_all();
    let batch = mock.batches().last().unwrap().id.clone();
    mock.drop_results(&batch);
    let r = worker.poll_pass().await.unwrap();
    assert_eq!((r.failed, r.requeued), (1, 1), "{r}");
    assert!(item(a).reason.unwrap().contains("no longer available"));
    assert_eq!(item(a).state, QueueState::Failed);
    assert_eq!((item(b).state, item(b).requeues), (QueueState::Queued, 1));
}

#[test]
fn kill_9_between_submit_and_results_loses_nothing_and_doubles_nothing() {
    let mock = MockBatches::start();
    mock.stall(true);
    let dir = scratch_dir("batch-kill");
    // The killed worker's claims stop a new worker only until its lease runs out: long enough
    // that the new worker below surely runs inside it, even on a loaded machine (the test
    // waits it out once).
    let lease = Duration::from_secs(10);
    chain_file(
        &dir,
        &mock,
        &format!("lease_secs = {}", lease.as_secs_f64()),
        "max_page_messages = 6",
    );
    let out1 = first_compaction(&dir, &conversation(15, "kill"));
    let pending = summaries(&out1);
    assert!(pending.len() >= 4, "{pending:?}");

    // A long-running worker submits, then dies by SIGKILL before any result. Its lease runs
    // from its last claim, made after it started.
    let started = Instant::now();
    let mut child = Command::new(tamp_bin())
        .current_dir(&dir)
        .env(KEY_VAR, "sk-ant-test-key")
        .args(["batch", "work", "-c", "chain.toml"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let queue = queue_at(&dir);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = futures::executor::block_on(queue.status()).unwrap();
        if status.submitted == pending.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never submitted: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(mock.creates(), 1);
    let killed_at = Instant::now();

    // Before the lease ends, a new worker leaves the dead one's batch alone.
    mock.end_all();
    let early =
        String::from_utf8(tamp(&dir, &["batch", "run-once", "-c", "chain.toml"]).stdout).unwrap();
    assert!(
        started.elapsed() < lease,
        "the new worker ran {:?} after the killed one started, not surely inside its lease \
         of {lease:?}: a machine this slow needs a longer lease",
        started.elapsed()
    );
    assert_contains(&early, "polled 0 batch(es)");
    // The lease ends at most `lease` after the kill (its last claim came before it).
    std::thread::sleep(lease.saturating_sub(killed_at.elapsed()));

    // After the lease: the results are applied once, nothing resubmitted.
    let run =
        String::from_utf8(tamp(&dir, &["batch", "run-once", "-c", "chain.toml"]).stdout).unwrap();
    assert_contains(&run, &format!("{} done", pending.len()));
    let run =
        String::from_utf8(tamp(&dir, &["batch", "run-once", "-c", "chain.toml"]).stdout).unwrap();
    assert!(
        run.contains("submitted 0 request(s)") && run.contains("0 done"),
        "{run}"
    );
    assert_eq!(mock.creates(), 1);
    assert_eq!(mock.results_downloads(), 1);
    let status = futures::executor::block_on(queue.status()).unwrap();
    assert_eq!(
        (status.done, status.queued, status.submitted),
        (pending.len() as u64, 0, 0)
    );
    let batch_items = mock.batches()[0].custom_ids.clone();
    for custom_id in batch_items {
        let id: i64 = custom_id.trim_start_matches("dq_").parse().unwrap();
        let events = futures::executor::block_on(queue.events(id)).unwrap();
        let states: Vec<QueueState> = events.iter().map(|e| e.state).collect();
        assert_eq!(
            states,
            [QueueState::Queued, QueueState::Submitted, QueueState::Done],
            "{custom_id}"
        );
    }
    tamp(
        &dir,
        &[
            "compact",
            "out1.json",
            "-c",
            "chain.toml",
            "-o",
            "out2.json",
        ],
    );
    let finals = summaries(&read_conv(&dir.join("out2.json")));
    assert_eq!(finals.len(), pending.len());
    for (p, f) in pending.iter().zip(&finals) {
        assert_eq!((p.0, &p.1), (f.0, &f.1));
        assert_eq!(f.2, SummaryStatus::Final);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_pages_queued_at_once_go_out_in_one_batch() {
    let mock = MockBatches::start();
    mock.stall(true);
    let dir = scratch_dir("batch-hundred");
    let chain = chain_file(&dir, &mock, "", "max_page_messages = 8\npreview_chars = 20");
    let compactor = Chain::from_file(&chain, FileOverrides::default()).unwrap();
    // 1 system + 100 pages' worth of 8 messages + the 4 protected ones.
    let input = conversation(402, "bulk");
    let out = compactor
        .compact(input, &CompactOptions::default())
        .await
        .unwrap();
    tamp_e2e::compacted::assert_first_stage_acted(&out.report);
    let pending = summaries(&out.conversation);
    assert_eq!(pending.len(), 100);
    let queue = queue_at(&dir);
    assert_eq!(queue.status().await.unwrap().queued, 100);
    let worker = worker(&dir, &chain);
    let report = worker.submit_pass().await.unwrap();
    // max_batch_requests = 100: the hundred pages go out as one batch.
    assert_eq!(
        (report.batches_created, report.submitted),
        (1, 100),
        "{report}"
    );
    let sizes: Vec<usize> = mock.batches().iter().map(|b| b.custom_ids.len()).collect();
    assert_eq!(sizes, [100]);
    // Compacting the same conversation again defers nothing twice.
    let again = compactor
        .compact(conversation(402, "bulk"), &CompactOptions::default())
        .await
        .unwrap();
    assert_eq!(summaries(&again.conversation).len(), 100);
    assert_eq!(queue.status().await.unwrap().submitted, 100);
    assert_eq!(queue.status().await.unwrap().queued, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_submission_is_retried_then_answered_by_the_sync_fallback() {
    let mock = MockBatches::start();
    let dir = scratch_dir("batch-fail");
    let chain = chain_file(&dir, &mock, "max_attempts = 2", "");
    let queue = queue_at(&dir);
    enqueue(&queue, "pg_f", "submission trouble");
    // Every create fails: 500, then 429 (the client's one retry), then 503 and 500.
    mock.fail_creates(1, 500);
    mock.fail_creates(1, 429);
    mock.fail_creates(2, 503);
    let worker = worker(&dir, &chain);
    let first = worker.run_once().await.unwrap();
    assert_eq!((first.batches_created, first.requeued), (0, 1), "{first}");
    assert!(first.errors[0].contains("HTTP 429"), "{first}");
    let item = queue.queued(10).await.unwrap().remove(0);
    assert_eq!(item.attempts, 1);
    assert!(item.reason.unwrap().contains("submission failed"));
    let second = worker.run_once().await.unwrap();
    assert_eq!((second.fallbacks, second.done), (1, 1), "{second}");
    assert_eq!(mock.creates(), 0);
    assert_eq!(mock.sync_calls(), 1);
    let status = queue.status().await.unwrap();
    assert_eq!((status.done, status.sync_usage.input_tokens > 0), (1, true));
}

#[test]
fn batch_commands_explain_a_missing_model_and_help() {
    let dir = scratch_dir("batch-cli");
    let chain = write_chain(
        &dir,
        "[provider]\nkind = \"extractive\"\n\n[batch]\nmax_attempts = 2\n",
    );
    let out = Command::new(tamp_bin())
        .current_dir(&dir)
        .args(["batch", "run-once", "-c"])
        .arg(&chain)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_contains(
        &err,
        "batch.model: required unless provider.kind = \"anthropic\"",
    );
    assert_contains(&err, "chain.toml");
    let help = Command::new(tamp_bin())
        .args(["batch", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for sub in ["run-once", "status", "work"] {
        assert!(help.contains(sub), "{help}");
    }
    // A status reads the store and never creates one (issue 32): a missing store says so.
    let missing = Command::new(tamp_bin())
        .current_dir(&dir)
        .args(["batch", "status", "--store", "s.sqlite3"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such file"));
    assert!(!dir.join("s.sqlite3").exists());
    // Status of an empty store (one `tamp compact` made).
    let made = Command::new(tamp_bin())
        .current_dir(&dir)
        .args(["compact", "--store", "s.sqlite3"])
        .arg(tamp_e2e::workspace_root().join("examples/conversations/ponyc-4588.anthropic.json"))
        .output()
        .unwrap();
    assert_ok(&made, "");
    let status = Command::new(tamp_bin())
        .current_dir(&dir)
        .args(["batch", "status", "--store", "s.sqlite3"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("0 queued, 0 submitted, 0 done, 0 failed")
    );
}

/// `tamp serve` with a batch-deferred stage runs the worker itself: the placeholder from one
/// request becomes the final summary in a later one, with no `tamp batch` command, and
/// `/metrics` counts the batch.
#[test]
fn tamp_serve_runs_the_worker_and_reports_it_in_metrics() {
    use tamp_e2e::serve_support::Server;
    let mock = MockBatches::start();
    let dir = scratch_dir("batch-serve");
    let chain = chain_file(&dir, &mock, "", "");
    let server = Server::start_with_env(&chain, &[], &[(KEY_VAR, "sk-ant-test-key")]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let input = wire::to_value(&conversation(12, "serve"), WireFormat::Anthropic);
    let (status, first) =
        rt.block_on(server.compact(&serde_json::json!({ "conversation": input })));
    assert_eq!(status, 200, "{first}");
    let out1 = wire::parse_value(first["conversation"].clone(), Some(WireFormat::Anthropic))
        .unwrap()
        .0;
    let pending = summaries(&out1);
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].2, SummaryStatus::Pending);

    // The worker submits, polls and applies on its own intervals.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = rt.block_on(server.metrics());
        if metrics.contains("tamp_batch_requests_succeeded_total 1") {
            assert_contains(&metrics, "tamp_batch_batches_created_total 1");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not finish the batch:\n{metrics}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = "deferred-summary worker started";
    assert!(server.log_containing(&[started]).contains(started));

    let body = serde_json::json!({ "conversation": first["conversation"].clone() });
    let (status, second) = rt.block_on(server.compact(&body));
    assert_eq!(status, 200, "{second}");
    let out2 = wire::parse_value(second["conversation"].clone(), Some(WireFormat::Anthropic))
        .unwrap()
        .0;
    let finals = summaries(&out2);
    assert_eq!(finals.len(), 1, "{finals:?}");
    let (at, page, status, _) = &finals[0];
    assert_eq!(
        (*at, page.as_str(), *status),
        (pending[0].0, pending[0].1.as_str(), SummaryStatus::Final)
    );
    assert_eq!(mock.creates(), 1);
}

/// The deferred stage on a file store and its queue, compacting on every call.
fn deferring_stage(store: Arc<dyn PageStore>, queue: Arc<dyn DeferredQueue>) -> Chain {
    tamp_e2e::StageChain::new(
        "tamp_batch_deferred",
        serde_json::json!({"compact_when": "always"}),
        Arc::new(tamp_host::providers::ScriptedProvider::always(
            "never called",
        )),
    )
    .keep_recent(4)
    .store(store)
    .queue_in(queue)
    .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_writes_its_pages_and_their_requests_in_one_commit_before_it_returns() {
    let dir = scratch_dir("bd-one-commit");
    let path = dir.join("store.sqlite3");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let chain = deferring_stage(store.clone(), store.clone());
    let out = chain
        .compact(conversation(40, "one-commit"), &CompactOptions::default())
        .await
        .unwrap();
    assert_eq!(out.report.stages[0].status, StageStatus::Acted);
    let pages = out.report.stages[0].pages.clone();
    assert!(!pages.is_empty());
    assert_eq!(
        store.commits(),
        1,
        "the pages and their deferred requests share one transaction"
    );
    // Another connection to the file sees every page and request: they were committed
    // before the compaction answered.
    let other = SqliteStore::open(&path).unwrap();
    for id in &pages {
        other.get_page(id).await.unwrap();
    }
    let status = other.status().await.unwrap();
    assert_eq!(status.queued, pages.len() as u64);
}

/// A page store whose writes never become durable: staging answers, the receipt fails.
struct UnwritablePages(SqliteStore);

impl PageStore for UnwritablePages {
    fn put_page(
        &self,
        _page: tamp_host::store::NewPage,
    ) -> futures::future::BoxFuture<'_, Result<String, tamp_host::store::StoreError>> {
        Box::pin(async { Err(disk_full()) })
    }

    fn stage_page(
        &self,
        page: tamp_host::store::NewPage,
    ) -> futures::future::BoxFuture<
        '_,
        Result<(String, tamp_host::store::Written), tamp_host::store::StoreError>,
    > {
        let id = tamp_host::store::page_id(&page.messages);
        Box::pin(async move {
            let written: tamp_host::store::Written = Box::pin(async { Err(disk_full()) });
            Ok((id, written))
        })
    }

    fn get_page(
        &self,
        id: &str,
    ) -> futures::future::BoxFuture<
        '_,
        Result<tamp_host::store::StoredPage, tamp_host::store::StoreError>,
    > {
        self.0.get_page(id)
    }

    fn list_pages(
        &self,
        limit: usize,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Vec<tamp_host::store::PageSummary>, tamp_host::store::StoreError>,
    > {
        self.0.list_pages(limit)
    }

    fn describe(&self) -> String {
        "unwritable test store".into()
    }
}

fn disk_full() -> tamp_host::store::StoreError {
    tamp_host::store::StoreError::Backend {
        location: "unwritable test store".into(),
        operation: "write pages".into(),
        detail: "disk full".into(),
    }
}

#[tokio::test]
async fn a_stage_whose_pages_cannot_be_written_is_rolled_back_and_the_conversation_kept() {
    let store = SqliteStore::in_memory().unwrap();
    let chain = deferring_stage(Arc::new(UnwritablePages(store.clone())), Arc::new(store));
    let input = conversation(40, "unwritable");
    let out = chain
        .compact(input.clone(), &CompactOptions::default())
        .await
        .unwrap();
    let stage = &out.report.stages[0];
    assert_eq!(stage.status, StageStatus::RolledBack);
    assert!(
        stage.reason.contains("pages could not be written") && stage.reason.contains("disk full"),
        "{}",
        stage.reason
    );
    assert_eq!(out.conversation.messages, input.messages);
}

/// A long session compacted before every turn, each deferred summary answered before the
/// next: at `keep_summaries_share` the stage's final summaries fold into one, so the context
/// stays within the budget; at 1 (never folding at this size) the same session passes it.
/// The fold's page holds the summaries it replaced, its pending summary carries their ledgers
/// as they were written, and no request the queue sends holds a ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_s_summaries_fold_and_its_context_stays_within_the_budget() {
    const BUDGET: u64 = 3_000;
    let tokens = tamp_host::tokens::TokenCounter::new(tamp_host::tokens::Encoding::O200kBase)
        .expect("tokenizer");
    let answer = "The agent read the module, ran the tests and patched the rounding step; the \
                  tests pass. ";
    let run = |share: f64, tag: &'static str| {
        let tokens = &tokens;
        async move {
            let dir = scratch_dir(tag);
            let store = Arc::new(SqliteStore::open(&dir.join("store.sqlite3")).unwrap());
            let chain = tamp_e2e::StageChain::new(
                "tamp_batch_deferred",
                serde_json::json!({"min_messages": 4, "keep_summaries_share": share}),
                Arc::new(tamp_host::providers::ScriptedProvider::always(
                    "never called",
                )),
            )
            .max_tokens(BUDGET)
            .keep_recent(4)
            .store(store.clone())
            .queue_in(store.clone())
            .build();
            let mut held = vec![Message::text(Role::User, "Fix the report totals.")];
            let mut largest = 0;
            let mut prompts = Vec::new();
            for turn in 0..150 {
                held.push(Message::text(
                    Role::User,
                    format!("Instruction {turn}: keep the exporter's column order {turn}."),
                ));
                held.push(Message::text(
                    Role::Assistant,
                    format!(
                        "{}I checked step {turn} of the aggregation.",
                        "Reading the module to see how the totals flow. ".repeat(8)
                    ),
                ));
                let out = chain
                    .compact(Conversation::new(held.clone()), &CompactOptions::default())
                    .await
                    .unwrap();
                held = out.conversation.messages.to_vec();
                largest = largest.max(tokens.count_messages(&held));
                // The batch answers every queued request before the next turn.
                for item in store.queued(1_000).await.unwrap() {
                    prompts.push(item.request.prompt.to_string());
                    let done = tamp_host::store::queue::Transition::Done {
                        text: answer.repeat(10),
                        usage: Default::default(),
                        billing: Billing::Batch,
                    };
                    let expect = tamp_host::store::queue::Expect::of(&item);
                    assert!(store.transition(item.id, expect, done).await.unwrap());
                }
            }
            (held, largest, prompts, store)
        }
    };

    let (held, largest, prompts, store) = run(0.2, "bd-fold").await;
    assert!(largest <= BUDGET, "largest context {largest} of {BUDGET}");
    let folds: Vec<&Message> = held
        .iter()
        .filter(|m| {
            m.is_summary()
                && m.joined_text()
                    .lines()
                    .next()
                    .is_some_and(|l| l.contains(" summaries"))
        })
        .collect();
    assert!(!folds.is_empty(), "no fold: {held:#?}");
    for fold in folds {
        let info = fold.summary_info().unwrap();
        let page = store.get_page(&info.page_ref).await.unwrap().page.messages;
        assert!(page.len() >= 2 && page.iter().all(Message::is_summary));
        // Every entry of the folded summaries' ledgers is in the fold's as it was written, or
        // moved out past the cap and counted (the fold brings the ledgers down as one).
        let carried = sdk::ledger::split(&fold.joined_text()).1.expect("a ledger");
        let lines: Vec<String> = carried.entries().map(|e| e.line()).collect();
        let (mut missing, mut moved_before) = (0, 0);
        for folded in &page {
            if let (_, Some(l)) = sdk::ledger::split(&folded.joined_text()) {
                moved_before += l.moved;
                missing += l.entries().filter(|e| !lines.contains(&e.line())).count();
            }
        }
        assert!(
            carried.moved >= moved_before + missing,
            "{missing} entries left without a word: {}",
            fold.joined_text()
        );
        assert!(!lines.is_empty(), "{}", fold.joined_text());
    }
    assert!(
        prompts.iter().any(|p| p.contains(answer.trim())),
        "no fold was asked for"
    );
    for prompt in &prompts {
        assert!(
            !prompt.contains(sdk::ledger::HEADER),
            "a ledger sent: {prompt}"
        );
    }

    let (_, unfolded, _, _) = run(1.0, "bd-no-fold").await;
    assert!(
        unfolded > BUDGET,
        "without folding the context stays at {unfolded}"
    );
}

/// A chain whose provider, and so its Batches API, is at a local port nothing listens on;
/// `batch_extra` goes into `[batch]`.
fn unreachable_chain(dir: &Path, batch_extra: &str) -> PathBuf {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    write_chain(
        dir,
        &provider_store_batch(&format!("http://127.0.0.1:{port}"), batch_extra),
    )
}

/// Runs `tamp args…` in `dir` with the test key set, whatever its exit status.
fn tamp_any(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(tamp_bin())
        .current_dir(dir)
        .env(KEY_VAR, "sk-ant-test-key")
        .env_remove("TAMP_LOG")
        .args(args)
        .output()
        .expect("run tamp");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `run-once` is for cron: a batch it cannot send is an error on stderr and exit status 1,
/// its summary line still on stdout; a pass with nothing failed exits 0.
#[test]
fn run_once_exits_1_with_the_error_on_stderr_when_a_batch_cannot_be_sent() {
    let dir = scratch_dir("batch-refused");
    unreachable_chain(&dir, "");
    enqueue(&queue_at(&dir), "pg_refused", "nobody listens");

    let (code, stdout, stderr) = tamp_any(&dir, &["batch", "run-once", "-c", "chain.toml"]);
    assert_eq!(code, Some(1), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("submitted 0 request(s) in 0 new batch(es)")
            && stdout.contains("1 re-queued"),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().count(),
        1,
        "the summary line alone: {stdout}"
    );
    assert!(!stdout.contains("error"), "{stdout}");
    assert!(
        stderr.contains("error: creating a batch of 1:"),
        "the API error on stderr: {stderr}"
    );
    assert!(
        stderr.contains("1 API call(s) of the pass failed"),
        "{stderr}"
    );

    // --json: the report on stdout, its errors in it, the same status.
    let (code, stdout, stderr) =
        tamp_any(&dir, &["batch", "run-once", "-c", "chain.toml", "--json"]);
    assert_eq!(code, Some(1), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON report");
    assert_eq!(report["requeued"], 1, "{report}");
    assert!(
        report["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("creating a batch of 1:"),
        "{report}"
    );
    assert_contains(&stderr, "error: creating a batch of 1:");

    // Nothing to send, nothing open: no API call failed, exit 0.
    let (code, stdout, stderr) = tamp_any(
        &dir,
        &[
            "batch",
            "run-once",
            "-c",
            "chain.toml",
            "--store",
            "empty.sqlite3",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_contains(&stdout, "submitted 0 request(s)");
    assert!(!stderr.contains("error"), "{stderr}");

    // The exit statuses are documented.
    let (_, help, _) = tamp_any(&dir, &["batch", "run-once", "--help"]);
    assert!(
        help.contains("Exit status: 0 when the pass went well") && help.contains("1 when any"),
        "{help}"
    );
}

/// `tamp batch work` says at the default verbosity why queued items fail (a warning per
/// failed pass on stderr), and `--json` prints one JSON report per pass on stdout.
#[test]
fn batch_work_warns_of_each_failed_pass_and_prints_a_json_report_per_pass() {
    let dir = scratch_dir("batch-work-refused");
    unreachable_chain(&dir, "max_attempts = 1\nsync_fallback = false");
    let queue = queue_at(&dir);
    enqueue(&queue, "pg_work", "nobody listens");
    let child = Command::new(tamp_bin())
        .current_dir(&dir)
        .env(KEY_VAR, "sk-ant-test-key")
        .env_remove("TAMP_LOG")
        .args(["batch", "work", "-c", "chain.toml", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while futures::executor::block_on(queue.status()).unwrap().failed < 1 {
        assert!(Instant::now() < deadline, "the item never failed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A few more (empty) passes, then SIGTERM.
    std::thread::sleep(Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();

    assert!(
        stderr.contains("tamp batch: warning: submit pass: creating a batch of 1:"),
        "the API error as a warning: {stderr}"
    );
    assert_contains(
        &stderr,
        "tamp batch: warning: submit pass: 1 request(s) failed for good",
    );
    assert_contains(&stderr, "stopped; 0 submitted, 0 succeeded, 1 failed");

    // One JSON object per line, a line per pass: both kinds of pass, the failed one among
    // them with the fields of `run-once --json`.
    let passes: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(passes.len() >= 3, "{stdout}");
    for kind in ["submit", "poll"] {
        assert!(passes.iter().any(|p| p["pass"] == kind), "{stdout}");
    }
    let failed: Vec<&serde_json::Value> = passes.iter().filter(|p| p["failed"] == 1).collect();
    assert_eq!(failed.len(), 1, "{stdout}");
    assert_eq!(failed[0]["pass"], "submit");
    assert!(
        failed[0]["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("creating a batch of 1:"),
        "{stdout}"
    );
    for field in [
        "batches_created",
        "submitted",
        "done",
        "requeued",
        "fallbacks",
    ] {
        assert!(failed[0].get(field).is_some(), "{field}: {stdout}");
    }
}

/// A chain that defers nothing and has no `[batch]` section is told so, naming the file and
/// what to add; one with a `batch-deferred` stage but no account names the stage's line. No
/// store file is created for a chain the command cannot run.
#[test]
fn batch_commands_on_a_chain_with_nothing_to_batch_say_what_to_add_and_create_no_store() {
    let dir = scratch_dir("batch-nothing");
    // Like examples/chains/default.toml: an extractive provider, one ordinary stage.
    write_chain(
        &dir,
        &format!(
            "[provider]\nkind = \"extractive\"\n\n[store]\npath = \"store.sqlite3\"\n\n\
             [[stage]]\nname = \"archive\"\nplugin = \"{}\"\n",
            plugin("tamp_custom_strategy").display()
        ),
    );
    for command in ["run-once", "work"] {
        let (code, stdout, stderr) = tamp_any(
            &dir,
            &["batch", command, "-c", "chain.toml", "--store", "b.db"],
        );
        assert_eq!(code, Some(1), "{command}: {stdout}{stderr}");
        assert!(
            stderr.contains(
                "chain.toml: the chain has no batch-deferred stage and no [batch] section"
            ),
            "{command}: {stderr}"
        );
        assert!(
            stderr.contains("plugin = \"tamp_batch_deferred\"")
                && stderr.contains("a [batch] section naming the Message Batches account")
                && stderr.contains("model = ")
                && stderr.contains("api_key_env = "),
            "{command}: {stderr}"
        );
        assert!(
            !dir.join("b.db").exists(),
            "{command} created the --store file"
        );
        assert!(
            !dir.join("store.sqlite3").exists(),
            "{command} created the store"
        );
    }

    // A batch-deferred stage, an extractive provider and no [batch]: the stage's line.
    write_chain(
        &dir,
        &format!(
            "[provider]\nkind = \"extractive\"\n\n[store]\npath = \"store.sqlite3\"\n\n\
             [[stage]]\nname = \"defer\"\nplugin = \"{}\"\ntrigger = \"always\"\n",
            plugin("tamp_batch_deferred").display()
        ),
    );
    let (code, _, stderr) = tamp_any(&dir, &["batch", "run-once", "-c", "chain.toml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_contains(&stderr, "chain.toml:7: stage \"defer\" defers its summaries (plugin batch-deferred), but the chain has no [batch] section");
    assert_contains(&stderr, "api_key_env = ");
    assert!(!dir.join("store.sqlite3").exists());
}
