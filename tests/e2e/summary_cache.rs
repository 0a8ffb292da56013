//! The summary cache end to end: answers reused across compactions and processes, a growing
//! thread summarized only in its new part (merge and append), scoping by thread and config,
//! the cache switched off, and the cost estimate in the report.

use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use tamp_e2e::assert_ok;
use tamp_e2e::chain_run::{compact, stage};
use tamp_e2e::{corpus_mix, plugin, rt, scratch_dir, tamp_bin, write_chain, StageChain};
use tamp_host::chain::{Chain, Compacted};
use tamp_host::providers::ScriptedProvider;
use tamp_plugin_api::{Conversation, FfiOption, LlmRequest};

fn map_reduce(reuse: &str, provider: Arc<ScriptedProvider>) -> Chain {
    StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({ "reuse": reuse }),
        provider,
    )
    .keep_recent(4)
    .build()
}

fn with_thread(mut conversation: Conversation, thread: &str) -> Conversation {
    conversation.thread_id = FfiOption::RSome(thread.into());
    conversation
}

fn prompt_chars(requests: &[LlmRequest]) -> usize {
    requests.iter().map(|r| r.prompt.len()).sum()
}

/// The model's part of a summary (without the ledger the host carries; `tests/e2e/ledger.rs`
/// covers that part).
fn narrative(summary: &str) -> String {
    tamp_plugin_api::sdk::ledger::narrative(summary).to_string()
}

/// The summary text the stage put in the conversation.
fn summary_text(out: &Compacted) -> String {
    out.conversation
        .messages
        .iter()
        .find(|m| m.summary_info().is_some())
        .expect("a summary")
        .joined_text()
}

/// A thread whose client resends the whole history: 120 messages, then 160.
fn growing() -> (Conversation, Conversation) {
    let first = with_thread(corpus_mix(120), "thread-1");
    let second = with_thread(corpus_mix(160), "thread-1");
    assert_eq!(
        first.messages.as_slice(),
        &second.messages[..first.messages.len()],
        "the later conversation only grows at its end"
    );
    (first, second)
}

#[test]
fn a_growing_thread_is_summarized_only_in_its_new_part_when_merging() {
    let (first, second) = growing();
    let provider = Arc::new(ScriptedProvider::always("summary number {n}"));
    let chain = map_reduce("merge", provider.clone());
    let out1 = compact(&chain, &first);
    assert_eq!(stage(&out1).details["reused_messages"], 0);
    let calls1 = provider.request_count();
    let summary1 = narrative(&summary_text(&out1));

    let out2 = compact(&chain, &second);
    let run = stage(&out2);
    let covered = stage(&out1).messages_removed as u64;
    assert_eq!(run.details["reused_messages"], covered, "{:#}", run.details);
    assert_eq!(run.cache_hits, 1, "one range hit");
    let new_requests = provider.requests()[calls1..].to_vec();
    assert!(!new_requests.is_empty());
    // The cached summary is the context of the new summary...
    assert!(
        new_requests
            .iter()
            .any(|r| r.prompt.contains(summary1.as_str())),
        "no request carries the cached summary {summary1:?}"
    );
    // ...and every message of the new summary's span is archived in its page: nothing lost.
    assert_eq!(run.messages_removed as usize, out2_span(&second, &out2));

    // Without the cache, the client pays for the whole history again.
    let uncached = Arc::new(ScriptedProvider::always("summary number {n}"));
    let off = StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({ "reuse": "off" }),
        uncached.clone(),
    )
    .keep_recent(4)
    .without_cache()
    .build();
    compact(&off, &first);
    let before = uncached.request_count();
    let out_off = compact(&off, &second);
    assert_eq!(stage(&out_off).details["reused_messages"], 0);
    let off_chars = prompt_chars(&uncached.requests()[before..]);
    let merge_chars = prompt_chars(&new_requests);
    assert!(
        merge_chars * 2 < off_chars,
        "merging sent {merge_chars} prompt chars, summarizing everything {off_chars}"
    );

    // Asked about exactly the same history again: the whole summary comes from the cache.
    let before = provider.request_count();
    let again = compact(&chain, &second);
    assert_eq!(
        provider.request_count(),
        before,
        "no LLM call on a full hit"
    );
    assert_eq!(stage(&again).llm_calls, 0);
    assert_eq!(stage(&again).details["level"], "cached");
    assert_eq!(summary_text(&again), summary_text(&out2));
}

/// Messages the summary in `out` stands for: input messages not kept verbatim.
fn out2_span(input: &Conversation, out: &Compacted) -> usize {
    input.messages.len() + 1 - out.conversation.messages.len()
}

#[test]
fn appending_keeps_the_cached_summary_word_for_word() {
    let (first, second) = growing();
    let provider = Arc::new(ScriptedProvider::always("part {n}"));
    let chain = map_reduce("append", provider.clone());
    let summary1 = narrative(&summary_text(&compact(&chain, &first)));
    let calls1 = provider.request_count();
    let out2 = compact(&chain, &second);
    let summary2 = narrative(&summary_text(&out2));
    assert!(
        summary2.starts_with(&format!("{summary1}\n\n")),
        "{summary2:?} does not start with {summary1:?}"
    );
    // The new part was summarized alone: no request shows the cached summary.
    assert!(provider.requests()[calls1..]
        .iter()
        .all(|r| !r.prompt.contains(summary1.as_str())));
    // The page holds every message the appended summary stands for.
    let page_ref = tamp_e2e::compacted::first_page_ref(&out2.conversation.messages);
    let page = rt().block_on(chain.store().get_page(&page_ref)).unwrap();
    assert_eq!(page.page.messages.len(), out2_span(&second, &out2));
}

#[test]
fn entries_stay_within_their_thread_and_config_and_without_a_thread_match_by_content() {
    let conversation = corpus_mix(120);
    let provider = Arc::new(ScriptedProvider::always("summary {n}"));
    let chain = map_reduce("merge", provider.clone());
    let calls = |c: &Conversation| {
        let before = provider.request_count();
        compact(&chain, c);
        provider.request_count() - before
    };
    assert!(calls(&with_thread(conversation.clone(), "a")) > 0);
    assert_eq!(calls(&with_thread(conversation.clone(), "a")), 0, "hit");
    assert!(
        calls(&with_thread(conversation.clone(), "b")) > 0,
        "other thread"
    );
    // No thread id: keyed by content alone, so an identical conversation hits.
    assert!(calls(&conversation) > 0);
    assert_eq!(calls(&conversation.clone()), 0, "same content, no thread");

    // Another config of the same plugin never reuses these entries.
    let retuned = StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({ "reuse": "merge", "max_summary_tokens": 400 }),
        provider.clone(),
    )
    .keep_recent(4)
    .store(Arc::clone(chain.store()))
    .build();
    let before = provider.request_count();
    compact(&retuned, &with_thread(conversation, "a"));
    assert!(provider.request_count() > before, "another config misses");
}

fn tamp(dir: &std::path::Path, args: &[&str]) -> (Value, String) {
    let out = Command::new(tamp_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tamp");
    assert_ok(&out, format!("tamp {args:?} failed: "));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    (report, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn cli_chain(dir: &std::path::Path, cache_enabled: bool) -> std::path::PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"default": {"text": "a summary", "usage": {"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 500}}}"#,
    )
    .unwrap();
    write_chain(
        dir,
        &format!(
            r#"
{}

[provider.price]
input_per_mtok = 3.0
output_per_mtok = 15.0

[cache]
enabled = {cache_enabled}

[store]
path = "store.sqlite3"

[[stage]]
name = "summarize"
plugin = "{}"
"#,
            tamp_e2e::SCRIPTED_2000_KEEP_4,
            plugin("tamp_map_reduce_adaptive").display()
        ),
    )
}

#[test]
fn the_cli_reuses_answers_across_processes_per_thread_and_prices_the_calls() {
    let dir = scratch_dir("summary-cache-cli");
    std::fs::write(
        dir.join("conversation.json"),
        tamp_host::wire::to_string_pretty(&corpus_mix(80), tamp_host::wire::WireFormat::Anthropic),
    )
    .unwrap();
    let chain = cli_chain(&dir, true);
    let chain = chain.to_str().unwrap();
    let run = |thread: &str| {
        tamp(
            &dir,
            &[
                "compact",
                "conversation.json",
                "--config",
                chain,
                "--thread-id",
                thread,
                "--report-json",
                "report.json",
                // The cache itself is under test, not thread continuity (which would answer
                // the repeat from the thread's last answer before any cache lookup).
                "--no-thread-continuity",
            ],
        )
    };
    let (first, out1) = run("t1");
    let calls = first["llm_calls"].as_u64().unwrap();
    assert!(calls > 0, "{first:#}");
    assert_eq!(first["cache_hits"], 0);
    // 1000 in at $3, 100 out at $15, 500 cache reads at a tenth of the input price, per call.
    let per_call = (1000.0 * 3.0 + 100.0 * 15.0 + 500.0 * 0.3) / 1e6;
    let cost = first["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - per_call * calls as f64).abs() < 1e-9,
        "cost {cost} for {calls} calls"
    );

    // Another process, same thread: every answer from the store file, nothing to pay.
    let (second, out2) = run("t1");
    assert_eq!(second["llm_calls"], 0, "{second:#}");
    assert!(second["cache_hits"].as_u64().unwrap() >= 1);
    assert_eq!(second["cost_usd"].as_f64().unwrap(), 0.0);
    assert_eq!(out1, out2, "the cached answers give the same conversation");

    // Another thread pays again.
    let (third, _) = run("t2");
    assert_eq!(third["llm_calls"].as_u64().unwrap(), calls);

    // With the cache off, the same thread pays again too.
    let off = cli_chain(&dir, false);
    let (fourth, _) = tamp(
        &dir,
        &[
            "compact",
            "conversation.json",
            "--config",
            off.to_str().unwrap(),
            "--thread-id",
            "t1",
            "--report-json",
            "report.json",
        ],
    );
    assert_eq!(fourth["cache_hits"], 0);
    assert_eq!(fourth["llm_calls"].as_u64().unwrap(), calls);
}
