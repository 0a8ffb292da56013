//! Retention on the planted-fact session (issues 21 and 35): what a long agent session's
//! compactions keep of its task, constraint, decisions, files and the user's corrections.
//!
//! The session is the thread-economy replay's (500 turns of real corpus tool exchanges, an
//! assistant text and a user text every tenth turn, about 165k tokens), with a task and a
//! constraint in the first user message, a numbered decision planted every sixth turn (the
//! assistant says it, `Decision D-017: ...`, in a text block before that turn's tool call, as
//! agents narrate before they act), a file of the reporting code written every twelfth turn
//! (a second bash call), and a correction opening every fourth user message. The conversation
//! and its facts file are written to `target/bench-retention/`, and `tamp eval` (its library,
//! the real built plugins) runs the planted session's chain files (`examples/eval/planted/`:
//! map-reduce-adaptive, the hybrid chain and anchored-structured, each with the offline
//! extractive summarizer and with one that answers a fixed text, where only the ledger can
//! keep a fact) at the thread-economy budget (8,000 tokens, 16 recent messages kept):
//! one-shot, and replayed as a growing thread compacted before every model call, each beside
//! its twin with the ledger turned off (`ledger = { enabled = false }`, written to
//! `target/bench-retention/chains/`). The first table gives the final context's size, the
//! summarizer's bill and what of each kind of fact the final context still holds; the second
//! sets each chain beside its twin: the bill's ratios (the summarizer's, and the main
//! model's with prompt caching, as `tamp eval` reckons it), and the facts kept with the ledger
//! and without. Then, where `examples/eval/recorded/` holds a real model's recorded answers for
//! the examples' planted session, the same two tables for their replays.
//!
//! Run: `cargo bench -p tamp-e2e --bench retention` (`TAMP_BENCH_TURNS=100` for a quick run;
//! `TAMP_BENCH_ONE_SHOT=1` skips the replays; `TAMP_BENCH_SESSION_ONLY=1` writes the session
//! and stops: `examples/eval/planted.*` are its 150-turn files). The written files can be
//! given to `tamp eval` as they are.

mod replay;

use replay::{session, KEEP_RECENT, LEDGER_PLUGINS, MAX_TOKENS, TURNS};
use std::path::{Path, PathBuf};
use tamp_e2e::{ensure_built, workspace_root};

use tamp_host::eval::{EvalOptions, Plan, Run};
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{ContentBlock, Conversation, Message, Role};

/// A decision every this many turns.
const DECISION_EVERY: usize = 6;

const WHAT: [&str; 11] = [
    "round the report totals half-even",
    "read the ledger through the cached reader",
    "keep the CSV exporter on the old column order",
    "parse dates with the strict ISO parser",
    "batch the aggregation queries per month",
    "store amounts as integer cents",
    "retry the nightly upload three times",
    "sort report rows by account id",
    "log skipped rows at warning level",
    "pin the timezone of the report job to UTC",
    "compute the running balance in the SQL view",
];
const WHY: [&str; 7] = [
    "the ledger rounds that way",
    "the fixture data showed drift otherwise",
    "downstream consumers depend on it",
    "the failing test pins this behaviour",
    "it keeps the billing module untouched",
    "the nightly job timed out without it",
    "the reviewers asked for it in the last round",
];

/// A file of the reporting code changed every this many turns (offset by [`FILE_OFFSET`], so
/// it is not a decision's turn), by a second tool call in that turn's assistant message, as an
/// agent that edits and inspects at once does.
const FILE_EVERY: usize = 12;
const FILE_OFFSET: usize = 3;
const FILES: [&str; 8] = [
    "src/reports/totals.py",
    "src/reports/rounding.py",
    "src/reports/export_csv.py",
    "src/reports/dates.py",
    "tests/test_report_rounding.py",
    "src/reports/queries.sql",
    "src/reports/upload.py",
    "src/reports/balance_view.sql",
];

/// The user corrects course in every this many of its messages (after the first, offset
/// by one), before what it says there.
const INSTRUCTION_EVERY: usize = 4;
/// An instruction, and the keywords that show it survived.
const INSTRUCTIONS: [(&str, &[&str]); 5] = [
    (
        "Correction: the totals are computed in src/reports/totals.py, not in the exporter, so \
         start there.",
        &["totals.py", "not in the exporter"],
    ),
    (
        "From now on run the tests with -p no:cacheprovider, the cache directory is read-only \
         on this machine.",
        &["no:cacheprovider"],
    ),
    (
        "Please use Decimal for every amount you touch, never float.",
        &["Decimal", "never float"],
    ),
    (
        "Do not add dependencies to setup.cfg; the nightly image is frozen.",
        &["setup.cfg", "dependencies"],
    ),
    (
        "Keep new helper functions private, with a leading underscore.",
        &["helper", "underscore"],
    ),
];

fn decision_id(n: usize) -> String {
    format!("D-{n:03}")
}

/// The n-th planted file (0-based): the list, then the list again with a round number, so
/// that no two are the same.
fn planted_file(n: usize) -> String {
    let path = FILES[n % FILES.len()];
    match n / FILES.len() {
        0 => path.to_string(),
        round => {
            let (stem, ext) = path
                .rsplit_once('.')
                .expect("a file name with an extension");
            format!("{stem}_{round}.{ext}")
        }
    }
}

/// A shell command that writes `path`: a `sed -i` edit or a here-document, in turn.
fn file_change(n: usize, path: &str) -> String {
    if n % 2 == 1 {
        format!("cd /testbed && sed -i 's/round(total, 2)/_round_half_even(total)/' {path}")
    } else {
        format!(
            "cd /testbed && cat > {path} << 'EOF'\n# Report helper rewritten for the totals fix.\n\
             from decimal import Decimal, ROUND_HALF_EVEN\nEOF"
        )
    }
}

/// The indices of the messages `keep` accepts.
fn positions(messages: &[Message], keep: impl Fn(&Message) -> bool) -> Vec<usize> {
    (0..messages.len())
        .filter(|&i| keep(&messages[i]))
        .collect()
}

/// The planted session and its facts file (JSON).
fn planted(turns: usize, tokens: &TokenCounter) -> (Conversation, serde_json::Value, Planted) {
    let mut s = session(turns, tokens);
    let mut facts = vec![
        serde_json::json!({"id": "task", "kind": "task",
            "all": ["test_report_totals", "wrong total"], "message": 1}),
        serde_json::json!({"id": "constraint", "kind": "constraint",
            "text": replay::CONSTRAINT, "message": 1}),
    ];
    let mut count = Planted::default();
    // The n-th decision goes into the assistant message of the (n·6 - 1)-th tool exchange:
    // every assistant message that makes a tool call starts one.
    let calls = positions(&s.messages, |m| {
        m.role == Role::Assistant
            && m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    });
    for (turn, &at) in calls.iter().enumerate() {
        if (turn + 1) % FILE_EVERY == FILE_OFFSET {
            let path = planted_file(count.files);
            count.files += 1;
            let id = format!("planted_file_{}", count.files);
            let input = serde_json::json!({"command": file_change(count.files, &path)});
            s.messages[at]
                .content
                .push(ContentBlock::tool_use(&*id, "bash", input.to_string()));
            // The call's result goes with the turn's other results, in the next message.
            s.messages[at + 1].content.push(ContentBlock::tool_result(
                id,
                "<returncode>0</returncode>\n<output>\n</output>",
                false,
            ));
            facts.push(serde_json::json!({
                "id": format!("file-{}", count.files), "kind": "file", "text": path,
                "message": at
            }));
        }
        if (turn + 1) % DECISION_EVERY != 0 {
            continue;
        }
        count.decisions += 1;
        let id = decision_id(count.decisions);
        let what = WHAT[count.decisions % WHAT.len()];
        let why = WHY[count.decisions % WHY.len()];
        let text = format!(
            "Decision {id}: we will {what} in the reporting code, because {why}. Now back to \
             the investigation."
        );
        let message: &mut Message = &mut s.messages[at];
        message.content.insert(0, ContentBlock::text(text));
        // The key words of `what`: its verb and its object's last word.
        let words: Vec<&str> = what.split(' ').collect();
        facts.push(serde_json::json!({
            "id": format!("decision-{id}"), "kind": "decision",
            "all": [id, words[0], words[words.len() - 1]], "message": at
        }));
    }
    // The user's own messages after the task (its tool results aside).
    let said = positions(&s.messages[..], |m| {
        m.role == Role::User
            && m.content
                .iter()
                .all(|b| matches!(b, ContentBlock::Text { .. }))
    });
    // The task is the first of them: corrections come after it.
    let said = &said[1..];
    for (k, &at) in said.iter().enumerate() {
        if k % INSTRUCTION_EVERY != 1 {
            continue;
        }
        let (text, keywords) = INSTRUCTIONS[count.instructions % INSTRUCTIONS.len()];
        count.instructions += 1;
        s.messages[at].content.insert(0, ContentBlock::text(text));
        facts.push(serde_json::json!({
            "id": format!("instruction-{}", count.instructions), "kind": "instruction",
            "all": keywords, "message": at
        }));
    }
    tamp_host::wire::check_tool_pairing(&s.messages, WireFormat::Anthropic)
        .expect("the planted session's tool calls pair up");
    let facts = serde_json::json!({"conversation": "planted", "facts": facts});
    (Conversation::new(s.messages), facts, count)
}

/// How many of each kind of fact were planted.
#[derive(Default)]
struct Planted {
    decisions: usize,
    files: usize,
    instructions: usize,
}

/// The planted session's chain files: three chains, each offline and with a fixed text, and
/// anchored-structured behind tool-result clearing, offline.
const CHAINS: [&str; 7] = [
    "map-reduce",
    "hybrid",
    "anchored",
    "cleared-anchored",
    "map-reduce-fixed",
    "hybrid-fixed",
    "anchored-fixed",
];

/// `found/total` of the facts whose id starts with `prefix`.
fn kept(run: &Run, prefix: &str, total: usize) -> String {
    let r = run.retention.as_ref().expect("the session has facts");
    let lost = r.lost.iter().filter(|id| id.starts_with(prefix)).count();
    format!("{}/{total}", total - lost)
}

/// The recorded real-model chains (`examples/eval/recorded/`): answers recorded from a local
/// model on the examples' 150-turn planted session, each with the ledger and without.
const RECORDED: [&str; 4] = [
    "planted-map-reduce-qwen",
    "planted-hybrid-qwen",
    "planted-anchored-qwen",
    "planted-cleared-anchored-qwen",
];

/// The suffix of a chain's twin with the ledger turned off.
const NO_LEDGER: &str = "-no-ledger";

/// `chain`'s text with `ledger = { enabled = false }` in the config of every stage that
/// appends one, and its provider's script file made absolute (the twin is written elsewhere).
fn without_ledger(chain: &Path) -> String {
    let mut off = toml::Table::new();
    off.insert("enabled".into(), false.into());
    with_ledger(chain, off)
}

/// `chain`'s text with `ledger` as the ledger's config of every stage that has one.
fn with_ledger(chain: &Path, ledger: toml::Table) -> String {
    let text = std::fs::read_to_string(chain).unwrap();
    let mut file: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", chain.display()));
    for stage in file["stage"].as_array_mut().unwrap() {
        let stage = stage.as_table_mut().unwrap();
        if !LEDGER_PLUGINS.contains(&stage["plugin"].as_str().unwrap()) {
            continue;
        }
        let config = stage
            .entry("config")
            .or_insert_with(|| toml::Table::new().into());
        config
            .as_table_mut()
            .unwrap()
            .insert("ledger".into(), ledger.clone().into());
    }
    if let Some(script) = file.get_mut("provider").and_then(|p| p.get_mut("script")) {
        let path = chain.parent().unwrap().join(script.as_str().unwrap());
        *script = path.display().to_string().into();
    }
    toml::to_string(&file).unwrap()
}

/// Runs `chains` (all of them, then their twins without the ledger) on `conversation`.
fn run_side_by_side(
    chains: Vec<PathBuf>,
    conversation: PathBuf,
    facts: PathBuf,
    one_shot_only: bool,
    replay_only: bool,
) -> Vec<Run> {
    let args = EvalOptions {
        chains,
        facts: vec![facts],
        conversations: vec![conversation],
        one_shot_only,
        replay_only,
        ..EvalOptions::default()
    };
    let plan = Plan::read(&args).unwrap_or_else(|e| panic!("{e:#}"));
    let rt = tamp_e2e::rt();
    rt.block_on(plan.run(&|line: &str| eprintln!("{line}")))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Every run's row, then each chain beside its twin without the ledger: what the ledger
/// keeps and what it costs, as ratios measured in this one run.
fn print_tables(runs: &[Run], planted: &Planted) {
    println!(
        "\n{:<30} {:<9} {:>12} {:>10} {:>11} {:>11} {:>5} {:>10} {:>12} {:>10} {:>7}",
        "chain",
        "mode",
        "tokens after",
        "LLM calls",
        "tokens sent",
        "rolled back",
        "task",
        "constraint",
        "instructions",
        "decisions",
        "files"
    );
    for run in runs {
        println!(
            "{:<30} {:<9} {:>12} {:>10} {:>11} {:>11} {:>5} {:>10} {:>12} {:>10} {:>7}",
            run.chain,
            run.mode.label(),
            run.tokens_after,
            run.llm_calls,
            run.tokens_sent,
            run.rolled_back,
            kept(run, "task", 1),
            kept(run, "constraint", 1),
            kept(run, "instruction-", planted.instructions),
            kept(run, "decision-", planted.decisions),
            kept(run, "file-", planted.files),
        );
    }
    println!(
        "\nwith the ledger : without (ratios are with / without; main model: its cost with prompt \
         caching, replays only)\n{:<24} {:<9} {:>11} {:>9} {:>12} {:>10} {:>13} {:>15} {:>13}",
        "chain",
        "mode",
        "tokens sent",
        "LLM calls",
        "tokens after",
        "main model",
        "instructions",
        "decisions",
        "files"
    );
    let ratio = |a: u64, b: u64| {
        if b == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", a as f64 / b as f64)
        }
    };
    for with in runs.iter().filter(|r| !r.chain.ends_with(NO_LEDGER)) {
        let Some(without) = runs.iter().find(|r| {
            r.mode == with.mode
                && r.conversation == with.conversation
                && r.chain == format!("{}{NO_LEDGER}", with.chain)
        }) else {
            continue;
        };
        let both = |prefix: &str, total: usize| {
            format!(
                "{} : {}",
                kept(with, prefix, total),
                kept(without, prefix, total)
            )
        };
        let main_model = match (with.main_model_cost, without.main_model_cost) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".to_string(),
        };
        println!(
            "{:<24} {:<9} {:>11} {:>9} {:>12} {:>10} {:>13} {:>15} {:>13}",
            with.chain,
            with.mode.label(),
            ratio(with.tokens_sent, without.tokens_sent),
            ratio(with.llm_calls, without.llm_calls),
            ratio(with.tokens_after, without.tokens_after),
            main_model,
            both("instruction-", planted.instructions),
            both("decision-", planted.decisions),
            both("file-", planted.files),
        );
    }
}

fn main() {
    let turns: usize = std::env::var("TAMP_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TURNS);
    let one_shot_only = std::env::var_os("TAMP_BENCH_ONE_SHOT").is_some();
    let tokens = TokenCounter::new(Encoding::O200kBase).unwrap();
    let (conversation, facts, planted) = planted(turns, &tokens);
    let dir = workspace_root().join("target/bench-retention");
    std::fs::create_dir_all(&dir).unwrap();
    let conversation_path = dir.join("planted.anthropic.json");
    std::fs::write(
        &conversation_path,
        wire::to_string(&conversation, WireFormat::Anthropic),
    )
    .unwrap();
    let facts_path = dir.join("planted.facts.json");
    std::fs::write(&facts_path, serde_json::to_string_pretty(&facts).unwrap()).unwrap();
    println!(
        "planted session: {turns} turns, {} messages, {} tokens; planted: {} decisions, {} files \
         changed, {} instructions after the task; budget {MAX_TOKENS} tokens, {KEEP_RECENT} \
         recent messages kept\nwritten to {}",
        conversation.messages.len(),
        tokens.count_messages(&conversation.messages),
        planted.decisions,
        planted.files,
        planted.instructions,
        dir.display()
    );
    if std::env::var_os("TAMP_BENCH_SESSION_ONLY").is_some() {
        return;
    }
    ensure_built();
    let twins = dir.join("chains");
    std::fs::create_dir_all(&twins).unwrap();
    let mut chains: Vec<PathBuf> = CHAINS
        .iter()
        .map(|c| workspace_root().join(format!("examples/eval/planted/{c}.toml")))
        .collect();
    // `TAMP_BENCH_LEDGER_SHARE=0.1`: the chains with that cap instead of the default, to weigh
    // a cap against what it keeps.
    if let Ok(share) = std::env::var("TAMP_BENCH_LEDGER_SHARE") {
        let share: f64 = share
            .parse()
            .unwrap_or_else(|_| panic!("TAMP_BENCH_LEDGER_SHARE: not a number: {share}"));
        let mut capped = toml::Table::new();
        capped.insert("max_share".into(), share.into());
        for chain in &mut chains {
            let twin = twins.join(chain.file_name().unwrap());
            std::fs::write(&twin, with_ledger(chain, capped.clone())).unwrap();
            *chain = twin;
        }
    }
    for c in CHAINS {
        let twin = twins.join(format!("{c}{NO_LEDGER}.toml"));
        std::fs::write(
            &twin,
            without_ledger(&chains[0].with_file_name(format!("{c}.toml"))),
        )
        .unwrap();
        chains.push(twin);
    }
    let runs = run_side_by_side(chains, conversation_path, facts_path, one_shot_only, false);
    print_tables(&runs, &planted);

    // A real model's answers, recorded on the examples' planted session (150 turns): replayed.
    let recorded = workspace_root().join("examples/eval/recorded");
    let mut chains = Vec::new();
    for c in RECORDED {
        for name in [c.to_string(), format!("{c}{NO_LEDGER}")] {
            if recorded.join(format!("{name}.answers.jsonl")).is_file() {
                chains.push(recorded.join(format!("{name}.toml")));
            }
        }
    }
    if one_shot_only || chains.is_empty() {
        return;
    }
    let examples = workspace_root().join("examples/eval");
    let facts: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(examples.join("planted.facts.json")).unwrap(),
    )
    .unwrap();
    let count = |kind: &str| {
        facts["facts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == kind)
            .count()
    };
    let planted = Planted {
        decisions: count("decision"),
        files: count("file"),
        instructions: count("instruction"),
    };
    println!(
        "\nrecorded answers of a real model (examples/eval/recorded/), replayed on \
         examples/eval/planted.anthropic.json"
    );
    // The recordings hold the replay's answers only.
    let runs = run_side_by_side(
        chains,
        examples.join("planted.anthropic.json"),
        examples.join("planted.facts.json"),
        false,
        true,
    );
    print_tables(&runs, &planted);
}
