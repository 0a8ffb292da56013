//! A chain of two real plugins over the real corpus, in both wire formats.

use std::collections::HashSet;
use std::sync::Arc;

use tamp_e2e::assert_contains;
use tamp_e2e::rt;
use tamp_e2e::{assert_wire_round_trip, corpus, corpus_names, plugin, scratch_dir, write_chain};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides, StageStatus};
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire;
use tamp_plugin_api::{Conversation, Message};

/// A chain file's store and the head of its "archive" stage (the custom strategy), up to its
/// `[stage.config]` line: the part two chains here share.
fn archive_stage() -> String {
    format!(
        r#"[store]
path = "pages.sqlite3"

[[stage]]
name = "archive"
plugin = "{}"
[stage.config]"#,
        plugin("tamp_custom_strategy").display()
    )
}

fn two_plugin_chain(tag: &str) -> Chain {
    let dir = scratch_dir(tag);
    let toml = format!(
        r#"
[budget]
max_tokens = 4000
high_watermark = 0.75
low_watermark = 0.5
keep_recent = 6

{archive}
keep_exchanges = 2
summary_tokens = 80

[[stage]]
name = "oldest-unit"
plugin = "{misbehaving}"
trigger = "always"
[stage.config]
mode = "ok"
"#,
        archive = archive_stage(),
        misbehaving = plugin("tamp_test_misbehaving").display(),
    );
    Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).expect("chain builds")
}

/// Every input message is in the output or, through summaries' page refs, in a page.
async fn assert_nothing_lost(chain: &Chain, input: &Conversation, output: &Conversation) {
    let mut reachable: HashSet<Message> = output.messages.iter().cloned().collect();
    let mut pending: Vec<String> = output
        .messages
        .iter()
        .filter_map(|m| m.summary_info().map(|s| s.page_ref.to_string()))
        .collect();
    let mut seen = HashSet::new();
    while let Some(id) = pending.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let page = chain
            .store()
            .get_page(&id)
            .await
            .expect("referenced page exists");
        for m in page.page.messages.iter() {
            if let Some(s) = m.summary_info() {
                pending.push(s.page_ref.to_string());
            }
            reachable.insert(m.clone());
        }
    }
    for (i, m) in input.messages.iter().enumerate() {
        assert!(
            reachable.contains(m),
            "input message {i} is neither in the output nor in a page"
        );
    }
}

#[test]
fn two_plugins_compact_every_corpus_conversation_in_both_formats() {
    let chain = two_plugin_chain("two");
    let rt = rt();
    for name in corpus_names() {
        for format in ["anthropic", "openai"] {
            let text = corpus(format, &name);
            let (input, fmt) = wire::parse_str(&text, None).unwrap();
            let options = CompactOptions {
                format: Some(fmt),
                ..Default::default()
            };
            let out = rt.block_on(chain.compact(input.clone(), &options)).unwrap();
            let report = &out.report;
            let ctx = format!("{name} ({format})");
            assert_eq!(report.stages.len(), 2, "{ctx}");
            assert_eq!(
                report.stages[0].status,
                StageStatus::Acted,
                "{ctx}: {:?}",
                report.stages[0]
            );
            assert!(
                matches!(
                    report.stages[1].status,
                    StageStatus::Acted | StageStatus::Skipped
                ),
                "{ctx}: {:?}",
                report.stages[1]
            );
            assert!(report.tokens_after < report.tokens_before, "{ctx}");
            assert!(
                out.conversation.messages.len() < input.messages.len(),
                "{ctx}"
            );

            // The output is valid in its wire format and reads back to the same conversation.
            assert_wire_round_trip(&out.conversation, fmt, &ctx);

            rt.block_on(assert_nothing_lost(&chain, &input, &out.conversation));
        }
    }
}

#[test]
fn same_input_same_output_even_from_many_tasks_at_once() {
    let chain = Arc::new(two_plugin_chain("det"));
    let (input, fmt) =
        wire::parse_str(&corpus("openai", "msa_deepseek_django-14752"), None).unwrap();
    let rt = rt();
    let first = rt
        .block_on(chain.compact(
            input.clone(),
            &CompactOptions {
                format: Some(fmt),
                ..Default::default()
            },
        ))
        .unwrap();
    let outputs = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let chain = Arc::clone(&chain);
                let input = input.clone();
                tokio::spawn(async move {
                    chain
                        .compact(
                            input,
                            &CompactOptions {
                                format: Some(fmt),
                                ..Default::default()
                            },
                        )
                        .await
                        .unwrap()
                        .conversation
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for o in outputs {
        assert_eq!(o, first.conversation);
    }
}

#[test]
fn under_the_high_watermark_nothing_runs_unless_always() {
    let chain = two_plugin_chain("under");
    let (input, fmt) = wire::parse_str(
        &corpus("anthropic", "taubench_gpt4o_airline_task2_trial2"),
        None,
    )
    .unwrap();
    let mut budget = *chain.budget();
    budget.max_tokens = 1_000_000;
    let options = CompactOptions {
        format: Some(fmt),
        budget: Some(budget),
        ..Default::default()
    };
    let out = rt().block_on(chain.compact(input, &options)).unwrap();
    assert_eq!(out.report.stages[0].status, StageStatus::NotRun);
    assert!(
        out.report.reason.contains("not above the high watermark"),
        "{}",
        out.report.reason
    );
    // The `always` stage still ran.
    assert_ne!(out.report.stages[1].status, StageStatus::NotRun);
}

#[test]
fn a_malformed_conversation_is_refused_with_its_path() {
    let chain = two_plugin_chain("bad-input");
    let mut v: serde_json::Value =
        serde_json::from_str(&corpus("openai", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    // Drop the first tool message: its call is left unanswered.
    let messages = v["messages"].as_array_mut().unwrap();
    let idx = messages.iter().position(|m| m["role"] == "tool").unwrap();
    messages.remove(idx);
    let err = wire::parse_value(v, None).expect_err("refused");
    assert!(err.path.starts_with("messages["), "{err}");
    // A conversation built in Rust that breaks the pairing rules is refused by the chain too.
    let (mut conv, _) = wire::parse_str(
        &corpus("openai", "taubench_gpt4o_airline_task2_trial2"),
        None,
    )
    .unwrap();
    let idx = conv
        .messages
        .iter()
        .position(|m| m.role == tamp_plugin_api::Role::Tool)
        .unwrap();
    conv.messages.remove(idx);
    let err = rt()
        .block_on(chain.compact(conv, &CompactOptions::default()))
        .expect_err("refused");
    assert!(
        err.to_string()
            .starts_with("invalid conversation: messages["),
        "{err}"
    );
}

#[test]
fn an_invalid_stage_config_is_rejected_with_the_field_and_line() {
    let dir = scratch_dir("badcfg");
    let custom = plugin("tamp_custom_strategy");
    for (bad, field) in [
        ("keep_exchanges = \"many\"", "keep_exchanges"),
        ("keep_exchangez = 3", "keep_exchangez"),
    ] {
        let toml = format!(
            "[[stage]]\nname = \"a\"\nplugin = \"{}\"\n[stage.config]\nsummarize = true\n{bad}\n",
            custom.display()
        );
        let path = write_chain(&dir, &toml);
        let err = Chain::from_file(&path, FileOverrides::default())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(field), "{err}");
        assert_contains(&err, "chain.toml:6:");
        assert_contains(&err, "stage \"a\"");
    }
}

#[test]
fn a_scripted_provider_from_the_chain_file_answers_records_and_fails_on_cue() {
    let dir = scratch_dir("scripted");
    // The first summary call fails; the second answers with an over-long text that must be
    // cut; every request is recorded to a file.
    let long = "x".repeat(5_000);
    std::fs::write(
        dir.join("script.json"),
        serde_json::json!({
            "mode": "sequence",
            "responses": [
                {"error": {"kind": "server", "message": "boom"}},
                {"text": long}
            ],
            "default": {"text": "fine"},
            "record_to": "requests.jsonl"
        })
        .to_string(),
    )
    .unwrap();
    let toml = format!(
        r#"
{}
[store]
path = "pages.sqlite3"
[[stage]]
name = "archive"
plugin = "{}"
[stage.config]
keep_exchanges = 0
max_concurrency = 1
max_summary_chars = 100
"#,
        tamp_e2e::SCRIPTED_2000_KEEP_4,
        plugin("tamp_custom_strategy").display()
    );
    let chain = Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).unwrap();
    // A customer-service conversation: tool runs separated by user turns, so several runs.
    let (input, fmt) = wire::parse_str(
        &corpus("openai", "taubench_gpt4o_airline_task23_trial3"),
        None,
    )
    .unwrap();
    let out = rt()
        .block_on(chain.compact(
            input,
            &CompactOptions {
                format: Some(fmt),
                ..Default::default()
            },
        ))
        .unwrap();
    let run = &out.report.stages[0];
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert!(run.llm_calls >= 2, "{run:?}");
    assert_eq!(run.failed_llm_calls, 1, "{run:?}");
    assert!(
        run.warnings.iter().any(|w| w.contains("boom")),
        "{:?}",
        run.warnings
    );

    // The over-long answer was cut to the cap before entering the conversation.
    let summaries = tamp_e2e::compacted::summary_texts(&out.conversation);
    let cut = summaries
        .iter()
        .find(|t| t.contains("xxx"))
        .expect("the long answer is used");
    let answer = cut.lines().last().unwrap();
    assert_eq!(answer.chars().count(), 100, "{answer}");
    assert!(answer.ends_with('…'));

    let recorded = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap();
    assert_eq!(recorded.lines().count() as u32, run.llm_calls);
    let first: serde_json::Value = serde_json::from_str(recorded.lines().next().unwrap()).unwrap();
    assert!(
        first["prompt"].as_str().unwrap().contains("<content>"),
        "{first}"
    );
}

#[test]
fn a_five_megabyte_tool_result_is_compacted_and_kept_whole_in_its_page() {
    use tamp_plugin_api::{ContentBlock, Role, ToolResultPart};
    let chain = two_plugin_chain("huge");
    let (mut conv, fmt) =
        wire::parse_str(&corpus("anthropic", "msa_deepseek_django-14752"), None).unwrap();
    // Blow up the first tool result to 5 MB of log-like text.
    let huge: String = (0..100_000)
        .map(|i| format!("line {i:06}: DEBUG value={}\n", i * 7))
        .collect();
    assert!(huge.len() > 3_000_000);
    let idx = conv
        .messages
        .iter()
        .position(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .unwrap();
    for block in conv.messages[idx].content.iter_mut() {
        if let ContentBlock::ToolResult { content, .. } = block {
            *content = vec![ToolResultPart::Text {
                text: huge.as_str().into(),
            }]
            .into();
        }
    }
    assert_eq!(conv.messages[idx].role, Role::User);
    let out = rt()
        .block_on(chain.compact(
            conv.clone(),
            &CompactOptions {
                format: Some(fmt),
                ..Default::default()
            },
        ))
        .unwrap();
    tamp_e2e::compacted::assert_first_stage_acted(&out.report);
    assert!(
        out.report.tokens_after * 10 < out.report.tokens_before,
        "{:?}",
        out.report
    );
    rt().block_on(assert_nothing_lost(&chain, &conv, &out.conversation));
}

/// A protected tail of 16 messages that are long tool results keeps a compaction above the
/// low watermark; `keep_recent_tokens` bounds the tail in tokens, whole exchanges, so the
/// compaction reaches it, and the report says why when it does not (issue 16, part 2).
#[test]
fn keep_recent_tokens_bounds_the_tail_and_a_missed_low_watermark_is_explained() {
    let dir = scratch_dir("chain-tail-tokens");
    let session = tamp_e2e::corpus_mix(120);
    let chain_with = |extra: &str| {
        let toml = format!(
            r#"
[budget]
max_tokens = 8000
keep_recent = 16
{extra}

{archive}
keep_exchanges = 0
summarize = false
"#,
            archive = archive_stage(),
        );
        Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).expect("chain")
    };
    let rt = rt();
    let options = CompactOptions::default();

    let plain = rt
        .block_on(chain_with("keep_recent_tokens = 0").compact(session.clone(), &options))
        .unwrap();
    assert_eq!(plain.report.budget.protected_tail, 16);
    let missed = plain
        .report
        .low_watermark_missed
        .as_deref()
        .expect("16 long messages keep the compaction above the low watermark");
    assert_contains(missed, "protected messages alone");
    assert_contains(missed, "recent tail");

    let bounded = rt
        .block_on(chain_with("keep_recent_tokens = 1500").compact(session.clone(), &options))
        .unwrap();
    let report = &bounded.report;
    assert!(report.budget.protected_tail < 16, "{:?}", report.budget);
    assert!(report.budget.protected_tail >= 1);
    assert!(
        report.tokens_after <= report.budget.low_watermark,
        "{} > {}: {:?}",
        report.tokens_after,
        report.budget.low_watermark,
        report.low_watermark_missed
    );
    assert_eq!(report.low_watermark_missed, None);
    // The protected tail is the input's last messages, untouched, whole exchanges.
    let tail = report.budget.protected_tail as usize;
    let n = session.messages.len();
    let out = &bounded.conversation.messages;
    assert!(out.ends_with(&session.messages[n - tail..]));
    tamp_plugin_api::sdk::units(&session.messages)
        .iter()
        .for_each(|u| assert!(!u.range.contains(&(n - tail)) || u.range.start == n - tail));

    // Unset, the tail is bounded at an eighth of max_tokens.
    let by_default = rt
        .block_on(chain_with("").compact(session.clone(), &options))
        .unwrap();
    let report = &by_default.report;
    let tail = report.budget.protected_tail as usize;
    assert!((1..16).contains(&tail), "{:?}", report.budget);
    let tail_tokens = TokenCounter::new(Encoding::O200kBase)
        .unwrap()
        .count_messages(&session.messages[n - tail..]);
    let newest_unit = tamp_plugin_api::sdk::units(&session.messages)
        .last()
        .unwrap()
        .len();
    assert!(
        tail_tokens <= 1_000 || tail == newest_unit,
        "{tail_tokens} tokens in the tail"
    );
    assert_eq!(report.low_watermark_missed, None);
}
