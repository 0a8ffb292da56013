//! The ledger (`sdk::ledger`, docs/ledger.md) through the real plugins: on the planted-fact
//! session with a summarizer that answers a fixed text, the facts survive by the ledger alone;
//! a folded summary carries every entry as it was written; decisions are read in the
//! assistant's language, and one it cannot read is counted, not guessed; anchored-structured
//! asks its model for a bounded answer without the lists the ledger holds; batch-deferred's
//! pending summary carries its page's ledger, and its final summary keeps it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use tamp_e2e::{ensure_built, rt, scratch_dir, workspace_root, StageChain};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides, StageStatus};
use tamp_host::eval::{model_calls, EvalOptions, Mode, Plan, Run};
use tamp_host::providers::ScriptedProvider;
use tamp_host::store::{short_ref, SqliteStore};
use tamp_host::wire;
use tamp_plugin_api::sdk::ledger::{self, Kind};
use tamp_plugin_api::{ContentBlock, Conversation, FfiOption, Message, Role};

const PLANTED: &str = "examples/eval/planted.anthropic.json";
const PLANTED_FACTS: &str = "examples/eval/planted.facts.json";
/// The planted session's budget (its chain files').
const BUDGET: u64 = 8_000;

fn example(path: &str) -> PathBuf {
    workspace_root().join(path)
}

/// `tamp eval --replay-only` of `chains` on the planted session.
fn replay(chains: &[&str]) -> Vec<Run> {
    ensure_built();
    let plan = Plan::read(&EvalOptions {
        chains: chains.iter().map(|c| example(c)).collect(),
        facts: vec![example(PLANTED_FACTS)],
        conversations: vec![example(PLANTED)],
        replay_only: true,
        ..EvalOptions::default()
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    let runs = rt().block_on(plan.run(&|_: &str| {})).unwrap();
    assert!(runs.iter().all(|r| r.mode == Mode::Replay));
    runs
}

/// How many facts of a kind (their ids' prefix) the run kept, of how many.
fn kept(run: &Run, prefix: &str) -> (usize, usize) {
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(example(PLANTED_FACTS)).unwrap()).unwrap();
    let total = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"].as_str().unwrap().starts_with(prefix))
        .count();
    let retention = run.retention.as_ref().unwrap();
    let lost = retention
        .lost
        .iter()
        .filter(|id| id.starts_with(prefix))
        .count();
    (total - lost, total)
}

#[test]
fn with_a_summarizer_that_answers_a_fixed_text_the_ledger_alone_keeps_the_planted_facts() {
    let runs = replay(&[
        "examples/eval/planted/map-reduce-fixed.toml",
        "examples/eval/planted/hybrid-fixed.toml",
        "examples/eval/planted/anchored-fixed.toml",
    ]);
    assert_eq!(runs.len(), 3, "one replay per chain file");
    for run in &runs {
        let name = &run.chain;
        assert_eq!(run.rolled_back, 0, "{name}");
        assert!(run.llm_calls > 0, "{name}: the summarizer was asked");
        assert!(run.tokens_after <= BUDGET, "{name}: {}", run.tokens_after);
        // The fixed text names no decision: what is kept, the ledger kept.
        let (decisions, of) = kept(run, "decision-");
        assert!(
            decisions * 10 >= of * 8,
            "{name}: {decisions}/{of} decisions"
        );
        for kind in ["task", "constraint", "instruction-"] {
            let (found, total) = kept(run, kind);
            assert_eq!(found, total, "{name}: {kind}");
        }
    }
}

/// The recorded real-model runs (`examples/eval/recorded/planted-*-qwen*.toml`): a local
/// Qwen2.5-Coder-1.5B's answers on the planted session, each chain beside its twin without
/// the ledger, replayed from the recordings. What issue 35 asks of the hybrid chain: at least
/// 90% of the decisions and every instruction, the final context within the budget, and the
/// summarizer's tokens within 10% of the same chain's without the ledger. A changed prompt
/// would miss its recorded answer: the stage rolls back or falls back, and fewer calls are
/// answered than the recording holds.
#[test]
fn a_small_real_models_recorded_summaries_keep_the_planted_facts_with_the_ledger() {
    const PAIRS: [&str; 4] = [
        "planted-hybrid-qwen",
        "planted-map-reduce-qwen",
        "planted-cleared-anchored-qwen",
        "planted-anchored-qwen",
    ];
    let recorded = |name: &str, ext: &str| format!("examples/eval/recorded/{name}.{ext}");
    // Every chain with the ledger is recorded; a twin without it, where recorded.
    let mut chains = Vec::new();
    for pair in PAIRS {
        for name in [pair.to_string(), format!("{pair}-no-ledger")] {
            if example(&recorded(&name, "answers.jsonl")).is_file() {
                chains.push(recorded(&name, "toml"));
            }
        }
    }
    let chains: Vec<&str> = chains.iter().map(String::as_str).collect();
    let runs = replay(&chains);
    let run = |name: &str| runs.iter().find(|r| r.chain == name);
    for run in &runs {
        let name = &run.chain;
        assert_eq!(
            run.rolled_back, 0,
            "{name}: a request missing from its recording"
        );
        assert!(run.llm_calls > 0, "{name}: the summarizer was asked");
        // Every recorded answer is asked for again. A stage that falls back when its call
        // fails (anchored-structured, down to a summary without the LLM) rolls nothing back
        // on a request its recording lacks, so a stale recording shows only here.
        let answers = std::fs::read_to_string(example(&recorded(name, "answers.jsonl"))).unwrap();
        let answered = run.llm_calls - run.failed_llm_calls;
        assert!(
            answered as usize >= answers.lines().count(),
            "{name}: {answered} calls answered from its {} recorded answers ({} failed)",
            answers.lines().count(),
            run.failed_llm_calls
        );
        assert!(run.tokens_after <= BUDGET, "{name}: {}", run.tokens_after);
    }
    let hybrid = run("planted-hybrid-qwen").expect("the hybrid chain's recording is in the repo");
    let twin = run("planted-hybrid-qwen-no-ledger").expect("and its twin's");
    let (decisions, of) = kept(hybrid, "decision-");
    assert!(decisions * 10 >= of * 9, "{decisions}/{of} decisions");
    for kind in ["task", "constraint", "instruction-"] {
        let (found, total) = kept(hybrid, kind);
        assert_eq!(found, total, "{kind}");
    }
    assert!(
        hybrid.tokens_sent * 10 <= twin.tokens_sent * 11,
        "summarizer tokens with the ledger {} against {} without",
        hybrid.tokens_sent,
        twin.tokens_sent
    );
    // The model's words alone lose most decisions: what the hybrid chain keeps, the ledger kept.
    let (without, _) = kept(twin, "decision-");
    assert!(
        without < decisions,
        "{without} decisions kept without the ledger"
    );
    // Every recorded twin without the ledger keeps fewer decisions than its chain with it.
    for pair in PAIRS {
        if let (Some(with), Some(without)) = (run(pair), run(&format!("{pair}-no-ledger"))) {
            let (with, of) = kept(with, "decision-");
            let (without, _) = kept(without, "decision-");
            assert!(
                without < with,
                "{pair}: {with}/{of} decisions with the ledger, {without} without"
            );
        }
    }
    // The other recorded chains keep every decision and instruction too.
    for name in [
        "planted-map-reduce-qwen",
        "planted-cleared-anchored-qwen",
        "planted-anchored-qwen",
    ] {
        let run = run(name).unwrap_or_else(|| panic!("{name}: its recording is in the repo"));
        for kind in ["task", "constraint", "instruction-", "decision-"] {
            let (found, total) = kept(run, kind);
            assert_eq!(found, total, "{name}: {kind}");
        }
    }
}

/// The planted session replayed request by request through a chain file, as `tamp eval`
/// does; the text of the stage's summary after every compaction that wrote one.
fn summaries_over_a_replay(chain_file: &Path, messages: usize) -> Vec<(String, String)> {
    ensure_built();
    let dir = scratch_dir("ledger-replay");
    let chain = Chain::from_file(
        chain_file,
        FileOverrides {
            store_path: Some(dir.join("store.sqlite3")),
            ..FileOverrides::default()
        },
    )
    .unwrap();
    let text = std::fs::read_to_string(example(PLANTED)).unwrap();
    let (conversation, format) = wire::parse_str(&text, None).unwrap();
    let all = &conversation.messages[..messages];
    let options = CompactOptions {
        format: Some(format),
        thread_continuity: true,
        ..CompactOptions::default()
    };
    let mut written = Vec::new();
    for cut in model_calls(all) {
        let mut posted = conversation.with_messages(all[..cut].to_vec());
        posted.thread_id = FfiOption::RSome("ledger-replay".into());
        let out = rt().block_on(chain.compact(posted, &options)).unwrap();
        let acted = out
            .report
            .stages
            .iter()
            .any(|s| s.status == StageStatus::Acted && !s.pages.is_empty());
        for m in out.conversation.messages.iter() {
            let Some(info) = m.summary_info() else {
                continue;
            };
            let page = info.page_ref.to_string();
            if acted && !written.iter().any(|(p, _)| *p == page) {
                written.push((page, m.joined_text()));
            }
        }
    }
    written
}

#[test]
fn a_folded_summary_carries_every_entry_as_it_was_written() {
    // anchored-structured folds its prior on every compaction; map-reduce-adaptive does with
    // keep_summaries_share = 0.
    let planted = example("examples/eval/planted");
    let dir = scratch_dir("ledger-fold");
    let chain = std::fs::read_to_string(planted.join("map-reduce-fixed.toml"))
        .unwrap()
        .replace(
            "script = \"fixed-text.json\"",
            &format!("script = {:?}", planted.join("fixed-text.json")),
        )
        .replace(
            "content_type = \"conversation\"",
            "content_type = \"conversation\"\nkeep_summaries_share = 0.0",
        );
    let folding = dir.join("map-reduce-folding.toml");
    std::fs::write(&folding, chain).unwrap();
    for file in [
        example("examples/eval/planted/anchored-fixed.toml"),
        folding,
    ] {
        assert_entries_are_carried_as_written(&summaries_over_a_replay(&file, 240));
    }
}

fn assert_entries_are_carried_as_written(written: &[(String, String)]) {
    assert!(written.len() >= 4, "{} summaries", written.len());
    let mut folds = 0;
    for pair in written.windows(2) {
        let ((page, earlier), (_, later)) = (&pair[0], &pair[1]);
        let (Some(earlier_ledger), (_, Some(later_ledger))) =
            (ledger::split(earlier).1, ledger::split(later))
        else {
            continue;
        };
        // The later summary folded the earlier one when it names the earlier one's page.
        let Some(group) = later_ledger
            .groups
            .iter()
            .position(|g| g.page.as_deref() == Some(short_ref(page)))
        else {
            continue;
        };
        folds += 1;
        let later_lines: Vec<String> = later_ledger.entries().map(|e| e.line()).collect();
        let mut kept = 0;
        for entry in earlier_ledger.groups.last().unwrap().entries.iter() {
            let line = entry.line();
            if later_lines.contains(&line) {
                kept += 1;
            } else {
                // Only an entry moved out (counted) or a fixed error leaves the ledger.
                assert!(
                    later_ledger.moved > earlier_ledger.moved || entry.kind == Kind::Error,
                    "{line} was rewritten or dropped:\n{later}"
                );
            }
        }
        assert!(kept > 0, "nothing carried into:\n{later}");
        if later_ledger.moved == earlier_ledger.moved && later_ledger.fixed == earlier_ledger.fixed
        {
            // Nothing left: the later ledger begins with the earlier one, group by group, its
            // own group now named by its page.
            assert_eq!(group + 1, earlier_ledger.groups.len(), "{later}");
            for (before, after) in earlier_ledger.groups.iter().zip(&later_ledger.groups) {
                assert_eq!(before.entries, after.entries, "{later}");
                assert_eq!(
                    after.page.as_deref(),
                    before.page.as_deref().or(Some(short_ref(page)))
                );
            }
        }
    }
    assert!(
        folds >= 2,
        "{folds} folds among {} summaries",
        written.len()
    );
}

/// A user message quoting the ledger's header mid-text made the next fold carry none of the
/// earlier ledger's entries, with no note (the section was found by the header's last
/// occurrence, which was inside the quote's entry). Through map-reduce-adaptive, folding its
/// prior summary: every entry is carried as it was written.
#[test]
fn a_header_quoted_in_a_message_never_drops_the_ledger_a_fold_carries() {
    let quote = format!(
        "Keep every line under \"{}\" as it is, please.",
        ledger::HEADER
    );
    let decisions = six_decisions();
    let mut texts: Vec<(Role, &str)> = decisions
        .iter()
        .map(|d| (Role::Assistant, d.as_str()))
        .collect();
    texts.push((Role::User, &quote));
    let chain = StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({"none_below": 1, "brief_below": 2, "keep_summaries_share": 0.0}),
        Arc::new(ScriptedProvider::always("The agent worked on the report.")),
    )
    .keep_recent(2)
    .without_cache()
    .build();
    let first = rt()
        .block_on(chain.compact(conversation(&texts), &CompactOptions::default()))
        .unwrap();
    let first_text = summary_text(&first);
    let first_ledger = ledger::split(&first_text)
        .1
        .expect("the first summary's ledger");
    let written: Vec<String> = first_ledger.entries().map(|e| e.line()).collect();
    assert_eq!(written.len(), 7, "{first_text}");
    assert!(
        written.iter().any(|l| l.contains(ledger::HEADER)),
        "{first_text}"
    );

    // The thread goes on: the first answer and more work, folded into one summary.
    let mut messages = first.conversation.messages.to_vec();
    let tail = messages.split_off(messages.len() - 2);
    messages.extend(long_read("read-again"));
    messages.push(Message::text(Role::User, "Now the exporter."));
    messages.extend(tail);
    let second = rt()
        .block_on(chain.compact(Conversation::new(messages), &CompactOptions::default()))
        .unwrap();
    assert_eq!(
        second.report.stages[0].status,
        StageStatus::Acted,
        "{second:?}"
    );
    let second_text = summary_text(&second);
    let second_ledger = ledger::split(&second_text).1.expect("the fold's ledger");
    let carried: Vec<String> = second_ledger.entries().map(|e| e.line()).collect();
    for line in &written {
        assert!(carried.contains(line), "{line} not carried:\n{second_text}");
    }
    assert_eq!(second_ledger.moved, 0, "{second_text}");
}

/// A tool call reading a long file, and its output: what makes a span worth summarizing (a
/// ledger has room in a summary only when the span is larger than it).
fn long_read(id: &str) -> [Message; 2] {
    let file = "def total(rows):\n    return sum(row.amount for row in rows)\n".repeat(60);
    [
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                id,
                "bash",
                json!({"command": "cat src/reports/totals.py"}).to_string(),
            )],
        ),
        Message::new(Role::User, vec![ContentBlock::tool_result(id, file, false)]),
    ]
}

fn conversation(texts: &[(Role, &str)]) -> Conversation {
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Fix the report totals."),
    ];
    messages.extend(long_read("read"));
    messages.extend(texts.iter().map(|(role, text)| Message::text(*role, *text)));
    messages.push(Message::text(Role::User, "Continue."));
    messages.push(Message::text(Role::Assistant, "Continuing."));
    Conversation::new(messages)
}

/// The text of the summary in a compacted conversation.
fn summary_text(out: &tamp_host::chain::Compacted) -> String {
    out.conversation
        .messages
        .iter()
        .find(|m| m.is_summary())
        .expect("a summary")
        .joined_text()
}

/// Map-reduce-adaptive summarizing all but the last two messages (no summary cache), its
/// model answering a fixed text.
fn map_reduce_chain() -> StageChain {
    StageChain::new(
        "tamp_map_reduce_adaptive",
        json!({"none_below": 1, "brief_below": 2}),
        Arc::new(ScriptedProvider::always("The agent worked on the report.")),
    )
    .keep_recent(2)
    .without_cache()
}

/// The summary map-reduce-adaptive writes of `input`, its model answering a fixed text.
fn map_reduce_summary(input: Conversation) -> String {
    let chain = map_reduce_chain().build();
    let out = rt()
        .block_on(chain.compact(input, &CompactOptions::default()))
        .unwrap();
    assert_eq!(out.report.stages[0].status, StageStatus::Acted, "{out:?}");
    let summary = summary_text(&out);
    assert!(
        summary.starts_with("The agent worked on the report."),
        "{summary}"
    );
    summary
}

/// The ledger of the map-reduce summary of `texts`.
fn ledger_of(texts: &[(Role, &str)]) -> ledger::Ledger {
    ledger::split(&map_reduce_summary(conversation(texts)))
        .1
        .unwrap_or_default()
}

/// Six decisions the ledger carries word for word, each of about 25 tokens.
fn six_decisions() -> Vec<String> {
    (1..=6)
        .map(|n| {
            format!(
                "Decision D-{n:03}: we will keep the exporter's column order {n}, because \
                 consumers depend on it."
            )
        })
        .collect()
}

/// The output limits of the first request `plugin` (configured by `config` plus the ledger
/// on or off) makes to summarize `texts`, with the ledger and without it.
fn output_limits_with_and_without_the_ledger(
    plugin: &'static str,
    config: Value,
    texts: &[(Role, &str)],
) -> (u32, u32) {
    let asked = |ledger: bool| {
        let mut config = config.clone();
        config["ledger"] = json!({ "enabled": ledger });
        let provider = Arc::new(ScriptedProvider::always("The agent worked on the report."));
        let chain = StageChain::new(plugin, config, provider.clone())
            .keep_recent(2)
            .without_cache()
            .build();
        let out = rt()
            .block_on(chain.compact(conversation(texts), &CompactOptions::default()))
            .unwrap();
        assert_eq!(out.report.stages[0].status, StageStatus::Acted, "{out:?}");
        let requests = provider.requests();
        assert!(!requests.is_empty(), "{requests:?}");
        requests[0].clone()
    };
    let (with, without) = (asked(true), asked(false));
    // The same request but for its length.
    assert_eq!(
        with.response_schema_json.is_some(),
        without.response_schema_json.is_some()
    );
    (with.max_output_tokens, without.max_output_tokens)
}

#[test]
fn map_reduce_asks_a_narrative_shorter_by_what_its_ledger_says_word_for_word() {
    let decisions = six_decisions();
    let texts: Vec<(Role, &str)> = decisions
        .iter()
        .map(|d| (Role::Assistant, d.as_str()))
        .collect();
    let (with, without) = output_limits_with_and_without_the_ledger(
        "tamp_map_reduce_adaptive",
        json!({"none_below": 1, "brief_below": 2}),
        &texts,
    );
    // The narrative is asked for less, never under half of what it would be without the
    // ledger.
    assert_less_but_at_least_half(with, without);
}

/// The output limit asked for with the ledger is below the one without, and never under half
/// of it.
#[track_caller]
fn assert_less_but_at_least_half(with: u32, without: u32) {
    assert!(with < without, "with the ledger {with}, without {without}");
    assert!(
        with >= without / 2,
        "with the ledger {with}, without {without}"
    );
}

#[test]
fn anchored_asks_a_structured_summary_shorter_by_what_its_ledger_says_word_for_word() {
    // Enough material that a tenth of it is above the structured answer's floor, then the
    // decisions.
    let notes: Vec<String> = (1..=40)
        .map(|n| {
            format!(
                "Line {n} of src/report.py adds the rows of table {n} to the running total, \
                 then the loop moves to the next table of the nightly report and reads its \
                 header, its rows and its footer before the totals are printed."
            )
        })
        .collect();
    let decisions = six_decisions();
    let texts: Vec<(Role, &str)> = notes
        .iter()
        .chain(&decisions)
        .map(|t| (Role::Assistant, t.as_str()))
        .collect();
    // The first request is the structured one (the scripted prose answer then takes the
    // fallback's).
    let (with, without) =
        output_limits_with_and_without_the_ledger("tamp_anchored_structured", json!({}), &texts);
    assert_less_but_at_least_half(with, without);
}

#[test]
fn decisions_are_read_in_the_assistant_s_language_and_the_unreadable_are_counted() {
    let read = ledger_of(&[
        (
            Role::User,
            "Utilise Decimal pour chaque montant, jamais float.",
        ),
        (
            Role::Assistant,
            "Nous avons décidé de garder l'ancien ordre des colonnes, parce que les \
             exports en dépendent. Je regarde le fichier.",
        ),
        (
            Role::Assistant,
            "我们决定使用缓存读取器，因为数据会漂移。然后运行测试。",
        ),
        (
            Role::Assistant,
            "キャッシュを使うことに決めました。ファイルを読みます。",
        ),
        (
            Role::Assistant,
            "Önbelleği kullanmaya karar verdik çünkü veriler kayıyor.",
        ),
    ]);
    let entries: Vec<(Kind, &str)> = read.entries().map(|e| (e.kind, e.text.as_str())).collect();
    assert_eq!(
        entries,
        [
            (
                Kind::User,
                "Utilise Decimal pour chaque montant, jamais float."
            ),
            (
                Kind::Decision,
                "Nous avons décidé de garder l'ancien ordre des colonnes, parce que les \
                 exports en dépendent."
            ),
            (Kind::Decision, "我们决定使用缓存读取器，因为数据会漂移。"),
            (Kind::Decision, "キャッシュを使うことに決めました。"),
        ]
    );
    // The Turkish decision is not guessed at: it is counted, and in the page.
    assert_eq!(read.unread, 1);
    // Nothing to read: nothing added.
    let none = ledger_of(&[
        (Role::Assistant, "Let me look at the file."),
        (Role::Assistant, "Now the tests."),
    ]);
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn anchored_structured_asks_a_bounded_answer_without_the_lists_the_ledger_holds() {
    let provider = Arc::new(ScriptedProvider::always("unused"));
    let chain = StageChain::new("tamp_anchored_structured", json!({}), provider.clone())
        .keep_recent(2)
        .without_cache()
        .build();
    let long = "The exporter writes the report rows in account order. ".repeat(200);
    let input = conversation(&[
        (Role::User, long.as_str()),
        (
            Role::Assistant,
            "Decision D-001: we will keep the exporter's column order, because consumers \
             depend on it.",
        ),
    ]);
    let out = rt()
        .block_on(chain.compact(input, &CompactOptions::default()))
        .unwrap();
    let requests = provider.requests();
    let structured = requests
        .iter()
        .find(|r| r.response_schema_json.is_some())
        .expect("a structured call");
    let schema: Value =
        serde_json::from_str(structured.response_schema_json.as_ref().unwrap()).unwrap();
    let properties = schema["properties"].as_object().unwrap();
    assert!(!properties.contains_key("files_modified"), "{schema:#}");
    assert!(!properties.contains_key("decisions_made"), "{schema:#}");
    assert_eq!(schema["properties"]["next_steps"]["maxItems"], 10);
    // About a tenth of the material, as prose is asked, and said in the prompt.
    assert!(
        (300..=1_500).contains(&structured.max_output_tokens),
        "{}",
        structured.max_output_tokens
    );
    assert!(
        structured.prompt.contains("the whole answer about"),
        "{}",
        structured.prompt
    );
    assert!(!structured.prompt.contains("decisions_made"));
    // The scripted answer is no JSON: the prose fallback, then the ledger after it.
    let summary = summary_text(&out);
    let (narrative, ledger) = ledger::split(&summary);
    assert!(narrative.starts_with("# Anchored summary"), "{summary}");
    let ledger = ledger.expect("a ledger");
    assert!(ledger.entries().any(|e| e.kind == Kind::Decision
        && e.text
            .starts_with("Decision D-001: we will keep the exporter's column order")));
}

#[test]
fn batch_deferred_carries_the_page_s_ledger_from_the_pending_summary_on() {
    let dir = scratch_dir("ledger-batch");
    let store = Arc::new(SqliteStore::open(&dir.join("store.sqlite3")).unwrap());
    let chain = StageChain::new(
        "tamp_batch_deferred",
        json!({"compact_when": "always", "min_messages": 2}),
        Arc::new(ScriptedProvider::always("never called")),
    )
    .keep_recent(2)
    .store(store.clone())
    .queue_in(store)
    .build();
    let input = conversation(&[
        (
            Role::User,
            "Keep new helpers private, with a leading underscore.",
        ),
        (
            Role::Assistant,
            "Decision D-002: we will store amounts as integer cents, because the ledger \
             rounds that way.",
        ),
        (
            Role::Assistant,
            "Looking at the rounding code now, step by step.",
        ),
    ]);
    let out = rt()
        .block_on(chain.compact(input, &CompactOptions::default()))
        .unwrap();
    let pending = summary_text(&out);
    assert!(pending.starts_with("[Pending summary: "), "{pending}");
    let ledger = ledger::split(&pending).1.expect("a ledger");
    let kinds: Vec<Kind> = ledger.entries().map(|e| e.kind).collect();
    assert_eq!(kinds, [Kind::User, Kind::Decision], "{pending}");
}

#[test]
fn batch_deferred_pages_placed_at_once_share_the_ledger_cap() {
    // Four pages of ten messages in one compaction, each message a decision among other
    // sentences; a budget whose ledger cap (a quarter) is half what their ledgers would
    // take, each within its share of its page.
    let max_tokens = 2_400;
    let dir = scratch_dir("ledger-batch-cap");
    let store = Arc::new(SqliteStore::open(&dir.join("store.sqlite3")).unwrap());
    let chain = StageChain::new(
        "tamp_batch_deferred",
        json!({"compact_when": "always", "min_messages": 2, "max_page_messages": 10}),
        Arc::new(ScriptedProvider::always("never called")),
    )
    .max_tokens(max_tokens)
    .keep_recent(2)
    .store(store.clone())
    .queue_in(store)
    .build();
    let narration = "I am reading the rest of the module to see how the totals flow. ".repeat(12);
    let mut messages = vec![Message::text(Role::System, "You are a coding agent.")];
    for n in 1..=40 {
        messages.push(Message::text(
            Role::Assistant,
            format!(
                "{narration}Decision D-{n:03}: we will keep the exporter's column order {n} in \
                 the reporting code, because downstream consumers depend on it."
            ),
        ));
    }
    messages.push(Message::text(Role::User, "Continue."));
    messages.push(Message::text(Role::Assistant, "Continuing."));
    let out = rt()
        .block_on(chain.compact(Conversation::new(messages), &CompactOptions::default()))
        .unwrap();
    let tokens =
        tamp_host::tokens::TokenCounter::new(tamp_host::tokens::Encoding::O200kBase).unwrap();
    let pending = tamp_e2e::compacted::summary_texts(&out.conversation);
    assert!(pending.len() >= 3, "{} pages", pending.len());
    let ledgers: Vec<ledger::Ledger> = pending
        .iter()
        .filter_map(|text| ledger::split(text).1)
        .collect();
    let spent: u64 = ledgers.iter().map(|l| tokens.count_text(&l.render())).sum();
    assert!(
        spent <= max_tokens / 4,
        "{spent} tokens of ledgers in {} pages",
        ledgers.len()
    );
    // The first page's ledger lists its decisions; what moved out is counted, in the note
    // line or, for a page left no room for one, in its header.
    assert!(!ledgers.is_empty(), "{pending:#?}");
    assert!(ledgers[0].entries().any(|e| e.kind == Kind::Decision));
    assert!(
        ledgers.len() < pending.len(),
        "no page ran out of cap: {pending:#?}"
    );
    for text in &pending {
        let header = text.lines().next().unwrap_or_default();
        assert!(
            ledger::split(text).1.is_some()
                || header.contains("10 ledger entries only in its page"),
            "a page's entries left without a word: {text}"
        );
    }
}

#[test]
fn a_tool_call_that_writes_a_file_is_listed_and_one_that_failed_is_an_open_error() {
    let call = |id: &str, command: &str| {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                id,
                "bash",
                json!({ "command": command }).to_string(),
            )],
        )
    };
    let result = |id: &str, text: &str| {
        Message::new(Role::User, vec![ContentBlock::tool_result(id, text, false)])
    };
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Fix the report totals."),
    ];
    messages.extend(long_read("read"));
    messages.extend([
        call("c1", "cd /repo && sed -i 's/round(/_round_half_even(/' src/reports/totals.py"),
        result("c1", "<returncode>0</returncode>\n<output>\n</output>"),
        call("c2", "python -m pytest tests/test_reports.py"),
        result(
            "c2",
            "<returncode>1</returncode>\n<output>\nFAILED tests/test_reports.py::test_totals\n</output>",
        ),
    ]);
    messages.push(Message::text(Role::User, "Continue."));
    messages.push(Message::text(Role::Assistant, "Continuing."));
    let summary = map_reduce_summary(Conversation::new(messages));
    let ledger = ledger::split(&summary).1.expect("a ledger");
    let lines: Vec<String> = ledger.entries().map(|e| e.line()).collect();
    assert_eq!(
        lines,
        [
            "- m2 file: src/reports/totals.py (sed -i)".to_string(),
            "- m5 error: bash({\"command\":\"python -m pytest tests/test_reports.py\"}) failed: \
             FAILED tests/test_reports.py::test_totals"
                .to_string(),
        ],
        "{summary}"
    );
}

#[test]
fn with_ledgers_outside_the_watermarks_a_context_over_them_by_its_ledger_alone_is_left_as_it_is() {
    use tamp_host::budget::BudgetConfig;
    use tamp_host::tokens::{Encoding, TokenCounter};
    let chain = map_reduce_chain().over_budget().build();
    let decisions = six_decisions();
    let texts: Vec<(Role, &str)> = decisions
        .iter()
        .map(|d| (Role::Assistant, d.as_str()))
        .collect();
    let first = rt()
        .block_on(chain.compact(
            conversation(&texts),
            &CompactOptions {
                budget: Some(BudgetConfig {
                    max_tokens: 400,
                    keep_recent: 2,
                    ..BudgetConfig::default()
                }),
                ..CompactOptions::default()
            },
        ))
        .unwrap();
    // The answer, and a new turn before its tail: something the stage could fold.
    let mut messages = first.conversation.messages.to_vec();
    let at = messages.len() - 2;
    messages.splice(at..at, long_read("again"));
    let counter = TokenCounter::new(Encoding::O200kBase).unwrap();
    let tokens = counter.count_messages(&messages);
    let text = summary_text(&first);
    let ledger_tokens = counter.count_text(&text) - counter.count_text(ledger::narrative(&text));
    assert!(ledger_tokens > 20, "a ledger of the six decisions: {text}");
    // A budget whose high watermark sits just under the context: over it by a token or two,
    // far less than the ledger.
    let budget = |ledgers_outside| BudgetConfig {
        max_tokens: (tokens - 1) * 4 / 3,
        keep_recent: 2,
        ledgers_outside,
        ..BudgetConfig::default()
    };
    assert!(budget(false).high_tokens() < tokens);
    let run = |ledgers_outside| {
        let options = CompactOptions {
            budget: Some(budget(ledgers_outside)),
            ..CompactOptions::default()
        };
        let input = Conversation::new(messages.clone());
        rt().block_on(chain.compact(input, &options)).unwrap()
    };
    let inside = run(false);
    assert_eq!(
        inside.report.stages[0].status,
        StageStatus::Acted,
        "{inside:?}"
    );
    let outside = run(true);
    assert_eq!(
        outside.report.stages[0].status,
        StageStatus::NotRun,
        "{outside:?}"
    );
    assert_eq!(outside.conversation.messages.to_vec(), messages);
}
