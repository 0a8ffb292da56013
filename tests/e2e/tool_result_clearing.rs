//! The tool-result-clearing plugin, built as a `.so` and loaded by the real loader, run through
//! the real chain on the real corpus in both wire formats: old tool outputs are cleared in
//! place (the calls, ids, order and `is_error` kept), each original is in the page its
//! placeholder names in a real SQLite store, the output is a valid request, a growing thread
//! is cleared the same way byte for byte, and the CLI and the hybrid example chain run.

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::rt;
use tamp_e2e::{
    assert_wire_round_trip, corpus_conversation, corpus_names, scratch_dir, tamp_bin,
    workspace_root, StageChain,
};
use tamp_host::chain::{Chain, CompactOptions, Compacted, StageStatus};
use tamp_host::providers::{Provider, ProviderErrorKind, ScriptedProvider};
use tamp_host::store::{PageStore, SqliteStore};
use tamp_host::wire::WireFormat;
use tamp_plugin_api::page::page_id;
use tamp_plugin_api::sdk::clearing::cleared_page;
use tamp_plugin_api::{ContentBlock, Conversation, Message};

/// A chain of the plugin alone with `config`, over `store`; its provider fails every call, and
/// the plugin makes none.
fn chain(config: Value, store: Arc<SqliteStore>, keep_recent: u32) -> Chain {
    let provider: Arc<dyn Provider> = Arc::new(ScriptedProvider::failing(
        ProviderErrorKind::Other,
        "tool-result-clearing makes no LLM call",
    ));
    StageChain::new("tamp_tool_result_clearing", config, provider)
        .store(store as Arc<dyn PageStore>)
        .without_cache()
        .keep_recent(keep_recent)
        .build()
}

fn compact(
    rt: &tokio::runtime::Runtime,
    chain: &Chain,
    c: Conversation,
    format: WireFormat,
) -> Compacted {
    let options = CompactOptions {
        format: Some(format),
        ..Default::default()
    };
    rt.block_on(chain.compact(c, &options)).expect("compacts")
}

fn format_of(name: &str) -> WireFormat {
    match name {
        "anthropic" => WireFormat::Anthropic,
        _ => WireFormat::OpenAi,
    }
}

/// The pages named by the cleared blocks of `message` (one, when it is a clearing).
fn pages_named(message: &Message) -> HashSet<String> {
    message
        .content
        .iter()
        .filter_map(|b| cleared_page(b).map(str::to_string))
        .collect()
}

#[test]
fn corpus_tool_outputs_are_cleared_in_place_and_each_original_is_in_its_page() {
    let rt = rt();
    let dir = scratch_dir("clearing-corpus");
    let mut cleared_in_all = 0;
    for name in corpus_names() {
        for wire in ["anthropic", "openai"] {
            let format = format_of(wire);
            let input = corpus_conversation(wire, &name);
            let store =
                Arc::new(SqliteStore::open(&dir.join(format!("{name}-{wire}.sqlite3"))).unwrap());
            let keep_recent = 4;
            let out = compact(
                &rt,
                &chain(json!({}), Arc::clone(&store), keep_recent),
                input.clone(),
                format,
            );
            let ctx = format!("{name} ({wire})");
            let stage = &out.report.stages[0];
            assert_eq!(stage.llm_calls, 0, "{ctx}: no LLM");
            let (before, after) = (&input.messages, &out.conversation.messages);
            assert_eq!(after.len(), before.len(), "{ctx}: nothing removed");

            let mut cleared = 0;
            for (i, (a, b)) in before.iter().zip(after.iter()).enumerate() {
                // Role, blocks, their kinds, tool ids and names, is_error: all as they were.
                assert_eq!(a.role, b.role, "{ctx} [{i}]");
                assert_eq!(a.content.len(), b.content.len(), "{ctx} [{i}]");
                assert_eq!(
                    a.tool_use_ids().collect::<Vec<_>>(),
                    b.tool_use_ids().collect::<Vec<_>>()
                );
                assert_eq!(
                    a.tool_result_ids().collect::<Vec<_>>(),
                    b.tool_result_ids().collect::<Vec<_>>()
                );
                for (x, y) in a.content.iter().zip(b.content.iter()) {
                    if let (
                        ContentBlock::ToolResult { is_error: e0, .. },
                        ContentBlock::ToolResult { is_error: e1, .. },
                    ) = (x, y)
                    {
                        assert_eq!(e0, e1, "{ctx} [{i}]");
                    }
                }
                if a == b {
                    continue;
                }
                cleared += 1;
                assert!(
                    i >= 2 && i < before.len() - keep_recent as usize,
                    "{ctx}: [{i}] is protected"
                );
                let pages = pages_named(b);
                assert_eq!(pages.len(), 1, "{ctx} [{i}]: one page per clearing");
                let page = pages.into_iter().next().unwrap();
                assert_eq!(page, page_id(std::slice::from_ref(a)));
                let stored = rt
                    .block_on(store.get_page(&page))
                    .expect("the page is in the store");
                assert_eq!(
                    stored.page.messages.to_vec(),
                    vec![a.clone()],
                    "{ctx}: the original, verbatim"
                );
            }
            assert_eq!(stage.messages_cleared as usize, cleared, "{ctx}");
            cleared_in_all += cleared;
            if cleared > 0 {
                assert_eq!(stage.status, StageStatus::Acted, "{ctx}");
                assert!(out.report.tokens_after < out.report.tokens_before, "{ctx}");
                assert_eq!(stage.pages.len(), cleared, "{ctx}");
            }
            assert_wire_round_trip(&out.conversation, format, &ctx);
        }
    }
    assert!(
        cleared_in_all > 20,
        "the corpus had tool output to clear: {cleared_in_all}"
    );
}

#[test]
fn the_plugin_acts_on_most_of_the_corpus() {
    let rt = rt();
    let mut acted = 0;
    let mut total = 0;
    for name in corpus_names() {
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let out = compact(
            &rt,
            &chain(json!({}), store, 4),
            corpus_conversation("anthropic", &name),
            WireFormat::Anthropic,
        );
        total += 1;
        acted += usize::from(out.report.stages[0].status == StageStatus::Acted);
    }
    assert!(acted * 2 > total, "acted on {acted} of {total}");
}

/// A thread replayed call by call: what was cleared stays cleared byte for byte, and each
/// answer's prefix up to the first newly cleared message is the previous answer's.
#[test]
fn a_growing_thread_is_cleared_the_same_way_byte_for_byte() {
    let rt = rt();
    let full = corpus_conversation("openai", "msa_deepseek_django-13964");
    let units = tamp_plugin_api::sdk::units(&full.messages);
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let chain = chain(json!({"keep": 2, "min_result_tokens": 20}), store, 4);
    let mut previous: Option<Vec<Message>> = None;
    let mut acted = 0;
    for unit in units.iter().step_by(3) {
        let cut = unit.range.end;
        let out = compact(
            &rt,
            &chain,
            full.with_messages(full.messages[..cut].to_vec()),
            WireFormat::OpenAi,
        );
        let now = out.conversation.messages.to_vec();
        if let Some(prev) = &previous {
            for (i, (p, n)) in prev.iter().zip(now.iter()).enumerate() {
                if !pages_named(p).is_empty() && pages_named(p).len() == pages_named(n).len() {
                    assert_eq!(p, n, "[{i}] cleared once, cleared the same way");
                }
                if p != n {
                    // Only a newly cleared message may differ from the previous answer.
                    assert!(
                        p == &full.messages[i],
                        "[{i}] changed although it was cleared already"
                    );
                }
            }
        }
        acted += usize::from(out.report.stages[0].messages_cleared > 0);
        previous = Some(now);
    }
    assert!(acted >= 3, "the replay cleared on {acted} calls");
}

/// What one compaction of `input` with `config` cleared, by tool name: (outputs, inputs).
fn cleared_by_tool(
    rt: &tokio::runtime::Runtime,
    input: &Conversation,
    config: Value,
) -> std::collections::BTreeMap<String, (usize, usize)> {
    let names: std::collections::HashMap<String, String> = input
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, .. } => Some((id.to_string(), name.to_string())),
            _ => None,
        })
        .collect();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let out = compact(
        rt,
        &chain(config, store, 4),
        input.clone(),
        WireFormat::Anthropic,
    );
    let mut cleared = std::collections::BTreeMap::<String, (usize, usize)>::new();
    for b in out
        .conversation
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
    {
        match b {
            ContentBlock::ToolResult { tool_use_id, .. } if cleared_page(b).is_some() => {
                cleared
                    .entry(names[tool_use_id.as_str()].clone())
                    .or_default()
                    .0 += 1;
            }
            ContentBlock::ToolUse { name, .. } if cleared_page(b).is_some() => {
                cleared.entry(name.to_string()).or_default().1 += 1;
            }
            _ => {}
        }
    }
    cleared
}

#[test]
fn clear_tool_inputs_and_exclude_tools_are_honoured() {
    let rt = rt();
    let input = corpus_conversation("anthropic", "openhands_llama4_ponyc-4588");
    // Without the exclusion: the tool whose outputs are cleared most (the first by name of
    // those, so the same one on every run) is the one to exclude.
    let config = json!({"clear_tool_inputs": true, "min_result_tokens": 1});
    let all = cleared_by_tool(&rt, &input, config);
    let (excluded, &(outputs, _)) = all
        .iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.0.cmp(a.0)))
        .expect("the conversation's tool outputs are cleared");
    assert!(outputs > 0, "{excluded}'s outputs are cleared: {all:?}");
    assert!(
        all.values().any(|&(_, inputs)| inputs > 0),
        "tool inputs were cleared: {all:?}"
    );

    let config =
        json!({"clear_tool_inputs": true, "exclude_tools": [excluded], "min_result_tokens": 1});
    let with = cleared_by_tool(&rt, &input, config);
    assert_eq!(
        with.get(excluded),
        None,
        "an excluded tool's output or input was cleared: {with:?}"
    );
    assert!(
        with.values().any(|&(outputs, _)| outputs > 0),
        "the other tools' outputs are still cleared: {with:?}"
    );
    assert!(
        with.values().any(|&(_, inputs)| inputs > 0),
        "tool inputs were cleared: {with:?}"
    );
}

#[test]
fn an_invalid_config_names_the_field() {
    let provider: Arc<dyn Provider> = Arc::new(ScriptedProvider::failing(
        ProviderErrorKind::Other,
        "tool-result-clearing makes no LLM call",
    ));
    let plugin =
        tamp_host::loader::load_plugin(&tamp_e2e::plugin("tamp_tool_result_clearing")).unwrap();
    let err = tamp_host::chain::ChainBuilder::new(Default::default())
        .provider(provider)
        .stage(
            "clear",
            plugin,
            json!({"placeholder": "cleared {size}"}),
            tamp_host::config::Trigger::Always,
            std::time::Duration::from_secs(10),
        )
        .err()
        .expect("refused");
    let message = err.to_string();
    assert_contains(&message, "placeholder: unknown placeholder {size}");
}

/// `tamp compact` with the hybrid example chain: clearing acts first with no LLM call, the
/// summarizer then reads the cleared conversation, and `tamp pages show` gives back a cleared
/// original.
#[test]
fn the_hybrid_example_chain_runs_and_pages_show_a_cleared_original() {
    let dir = scratch_dir("clearing-cli");
    let root = workspace_root();
    let sample = root.join("examples/conversations/ponyc-4588.anthropic.json");
    let store = dir.join("store.sqlite3");
    let run = |args: &[&str]| {
        let out = Command::new(tamp_bin())
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run tamp");
        assert_ok(&out, "");
        out
    };
    run(&[
        "compact",
        sample.to_str().unwrap(),
        "--config",
        root.join("examples/chains/hybrid.toml").to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
        "--report-json",
        dir.join("report.json").to_str().unwrap(),
    ]);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(stages[0]["plugin"], "tool-result-clearing");
    assert_eq!(stages[0]["status"], "acted", "{report}");
    assert_eq!(stages[0]["llm_calls"], 0);
    let cleared = stages[0]["messages_cleared"].as_u64().unwrap();
    assert!(cleared > 0);
    let page = stages[0]["pages"][0].as_str().unwrap().to_string();
    let shown = run(&["pages", "show", &page, "--store", store.to_str().unwrap()]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let original: Value = serde_json::from_str(&std::fs::read_to_string(&sample).unwrap()).unwrap();
    let archived = shown["messages"].as_array().unwrap();
    assert_eq!(archived.len(), 1, "a clearing's page holds its one message");
    assert!(
        original["messages"]
            .as_array()
            .unwrap()
            .contains(&archived[0]),
        "the verbatim original"
    );
    // Clearing was not enough here (ponyc-4588 stays above the low watermark after it), so
    // the summarizer ran, on the cleared text.
    assert_eq!(stages[1]["status"], "acted", "{report}");
    assert!(
        stages[1]["usage"]["input_tokens"].as_u64().unwrap()
            < report["tokens_before"].as_u64().unwrap()
    );
}
