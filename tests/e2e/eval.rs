//! `tamp eval` through the real binary on the shipped examples (examples/eval/): every chain on
//! every conversation in both modes, in the text, JSON and CSV outputs; retention recomputed
//! from the facts files; the chain files' own stores left alone; mistakes refused before any
//! chain runs, naming the file at fault.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::{ensure_built, rt, scratch_dir, tamp_bin, text, workspace_root};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides};
use tamp_host::eval::facts::{self, Fact, FactsFile};
use tamp_host::eval::model_calls;
use tamp_host::wire;
use tamp_plugin_api::{FfiOption, Message};

const CHAINS: [&str; 2] = [
    "examples/eval/summarize.toml",
    "examples/eval/clear-then-summarize.toml",
];
const CONVERSATIONS: [(&str, &str); 3] = [
    (
        "examples/conversations/ponyc-4588.anthropic.json",
        "examples/eval/ponyc-4588.facts.json",
    ),
    (
        "examples/conversations/airline-task33.openai.json",
        "examples/eval/airline-task33.facts.json",
    ),
    (
        "examples/eval/django-14752.anthropic.json",
        "examples/eval/django-14752.facts.json",
    ),
];

fn eval(extra: &[&str], dir: &Path) -> Output {
    let root = workspace_root();
    let mut cmd = Command::new(tamp_bin());
    cmd.arg("eval").current_dir(dir);
    for chain in CHAINS {
        cmd.arg("--config").arg(root.join(chain));
    }
    for (_, facts) in CONVERSATIONS {
        cmd.arg("--facts").arg(root.join(facts));
    }
    cmd.args(extra);
    for (conversation, _) in CONVERSATIONS {
        cmd.arg(root.join(conversation));
    }
    cmd.output().expect("run tamp eval")
}

/// A file's name without its extensions (`ponyc-4588`), as the report names chains and
/// conversations.
fn short_name(path: &str) -> &str {
    let file = Path::new(path).file_name().unwrap().to_str().unwrap();
    file.split('.').next().unwrap()
}

/// The facts of every facts file that applies to `conversation`, in file order, read by the
/// host's own reader.
fn facts_for(conversation: &str) -> Vec<Fact> {
    let root = workspace_root();
    CONVERSATIONS
        .iter()
        .map(|(_, file)| FactsFile::read(&root.join(file)).unwrap())
        .filter(|file| file.applies_to(&root.join(conversation)))
        .flat_map(|file| file.facts)
        .collect()
}

/// The final context `tamp eval` measures retention on, computed again in the test: the
/// chain (offline, deterministic) on a store of its own, on the whole conversation
/// (one-shot), or request by request on a thread (replay: its last answer). With the tokens
/// the chain counted in it.
fn final_context(chain: &str, conversation: &str, mode: &str) -> (Vec<Message>, u64) {
    ensure_built();
    let root = workspace_root();
    let dir = scratch_dir("eval-context");
    let chain = Chain::from_file(
        &root.join(chain),
        FileOverrides {
            store_path: Some(dir.join("store.sqlite3")),
            ..FileOverrides::default()
        },
    )
    .unwrap_or_else(|e| panic!("{chain}: {e}"));
    let text = std::fs::read_to_string(root.join(conversation)).unwrap();
    let (input, format) = wire::parse_str(&text, None).unwrap();
    let rt = rt();
    let context = match mode {
        "one_shot" => {
            let options = CompactOptions {
                format: Some(format),
                ..CompactOptions::default()
            };
            let out = rt.block_on(chain.compact(input, &options)).unwrap();
            (out.conversation.messages.to_vec(), out.report.tokens_after)
        }
        "replay" => {
            let options = CompactOptions {
                format: Some(format),
                thread_continuity: true,
                ..CompactOptions::default()
            };
            let thread = format!("tamp-eval-{}", short_name(conversation));
            let mut last = None;
            for cut in model_calls(&input.messages) {
                let mut posted = input.with_messages(input.messages[..cut].to_vec());
                posted.thread_id = FfiOption::RSome(thread.as_str().into());
                let out = rt.block_on(chain.compact(posted, &options)).unwrap();
                last = Some((out.conversation.messages.to_vec(), out.report.tokens_after));
            }
            last.expect("the conversation has model calls")
        }
        other => panic!("mode {other}"),
    };
    drop(chain);
    std::fs::remove_dir_all(&dir).ok();
    context
}

/// Checks a run's retention against its facts and its final context: every fact with words
/// counted, every lost id a fact of the conversation, and a fact reported kept is in the
/// final context (by the facts file's own matching rule) while a lost one is not. How many
/// facts were (kept, lost).
fn check_retention(run: &Value, ctx: &str) -> (usize, usize) {
    let name = |key: &str| run[key].as_str().unwrap().to_string();
    let chain = CHAINS
        .iter()
        .find(|c| short_name(c) == name("chain"))
        .unwrap_or_else(|| panic!("{ctx}: no such chain"));
    let conversation = CONVERSATIONS
        .iter()
        .map(|(c, _)| *c)
        .find(|c| short_name(c) == name("conversation"))
        .unwrap_or_else(|| panic!("{ctx}: no such conversation"));
    let listed: Vec<Fact> = facts_for(conversation)
        .into_iter()
        .filter(Fact::has_words)
        .collect();
    let retention = &run["retention"];
    let lost: Vec<&str> = retention["lost"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: no lost facts list: {retention}"))
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    for id in &lost {
        assert!(
            listed.iter().any(|f| f.id == *id),
            "{ctx}: the lost fact {id:?} is no fact of the conversation"
        );
    }
    assert_eq!(retention["total"], listed.len(), "{ctx}");
    assert_eq!(retention["found"], listed.len() - lost.len(), "{ctx}");

    let (messages, tokens) = final_context(chain, conversation, &name("mode"));
    assert_eq!(
        run["tokens_after"], tokens,
        "{ctx}: the final context computed again is not the one eval measured"
    );
    let context = facts::context_text(&messages);
    let mut kept = 0;
    for fact in &listed {
        let reported_lost = lost.contains(&fact.id.as_str());
        let there = facts::found(fact, &context);
        assert_eq!(
            there,
            !reported_lost,
            "{ctx}: the fact {:?} is reported {} but is {} the final context",
            fact.id,
            if reported_lost { "lost" } else { "kept" },
            if there { "in" } else { "not in" }
        );
        kept += usize::from(there);
    }
    // Lost ids in file order, each once.
    let in_order: Vec<&str> = listed
        .iter()
        .map(|f| f.id.as_str())
        .filter(|id| lost.contains(id))
        .collect();
    assert_eq!(lost, in_order, "{ctx}");
    (kept, lost.len())
}

#[test]
fn every_chain_runs_on_every_conversation_in_both_modes_and_the_outputs_agree() {
    let dir = scratch_dir("eval");
    let json_path = dir.join("eval.json");
    let out = eval(
        &[
            "--output-format",
            "json",
            "--output",
            json_path.to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&out, "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("clear-then-summarize on django-14752: replay, 31/31 requests"),
        "progress on stderr: {stderr}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), CHAINS.len() * CONVERSATIONS.len() * 2);

    let (mut kept, mut lost) = (0, 0);
    for run in runs {
        let ctx = format!(
            "{} / {} / {}",
            run["conversation"], run["chain"], run["mode"]
        );
        let before = run["tokens_before"].as_u64().unwrap();
        let after = run["tokens_after"].as_u64().unwrap();
        // At a budget of 6,000 every example conversation is compacted, below its size.
        assert!(
            after < before && after <= 6_000,
            "{ctx}: {before} → {after}"
        );
        let retention = &run["retention"];
        let (found, total) = (
            retention["found"].as_u64().unwrap(),
            retention["total"].as_u64().unwrap(),
        );
        assert!(total >= 7 && found <= total, "{ctx}");
        let (k, l) = check_retention(run, &ctx);
        kept += k;
        lost += l;
        match run["mode"].as_str().unwrap() {
            "one_shot" => {
                assert_eq!(run["requests"], 1, "{ctx}");
                assert!(run["prefix_reuse"].is_null(), "{ctx}");
                assert!(run["main_model_cost"].is_null(), "{ctx}");
            }
            "replay" => {
                let series = run["series"].as_array().unwrap();
                assert_eq!(
                    series.len() as u64,
                    run["requests"].as_u64().unwrap(),
                    "{ctx}"
                );
                assert!(series.len() > 10, "{ctx}: one request per model call");
                // The client posted more and more; some requests compacted.
                let posted: Vec<u64> = series
                    .iter()
                    .map(|p| p["tokens_posted"].as_u64().unwrap())
                    .collect();
                assert!(posted.windows(2).all(|w| w[0] < w[1]), "{ctx}: {posted:?}");
                assert!(series.iter().any(|p| p["compacted"] == true), "{ctx}");
                assert_eq!(
                    series.last().unwrap()["tokens_after"],
                    run["tokens_after"],
                    "{ctx}"
                );
                let reuse = run["prefix_reuse"].as_f64().unwrap();
                assert!(reuse > 0.5 && reuse <= 1.0, "{ctx}: {reuse}");
                // Smaller contexts, mostly cached: the main model pays less than for the
                // history as posted.
                let main_model = run["main_model_cost"].as_f64().unwrap();
                assert!(main_model > 0.0 && main_model < 1.0, "{ctx}: {main_model}");
            }
            other => panic!("{ctx}: mode {other}"),
        }
    }
    // Both sides of the retention check were exercised.
    assert!(kept > 0 && lost > 0, "{kept} facts kept, {lost} lost");
    // The clearing chain sends its summarizer less than summarizing alone, on every
    // conversation, one-shot.
    for (conversation, _) in CONVERSATIONS {
        let name = Path::new(conversation)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap();
        let sent = |chain: &str| {
            runs.iter()
                .find(|r| {
                    r["conversation"] == name && r["chain"] == chain && r["mode"] == "one_shot"
                })
                .unwrap()["tokens_sent"]
                .as_u64()
                .unwrap()
        };
        assert!(sent("clear-then-summarize") < sent("summarize"), "{name}");
    }

    // The text table and the CSV hold the same runs.
    let table = eval(&[], &dir);
    assert!(table.status.success());
    let table = text(&table.stdout);
    assert!(table.starts_with("conversation"), "{table}");
    // The table's rows come before a blank line and the lost facts.
    let rows = table.lines().skip(1).take_while(|l| !l.is_empty()).count();
    assert_eq!(rows, runs.len(), "{table}");
    assert_contains(&table, "facts not found in the final context:");
    let csv = eval(&["--output-format", "csv", "--one-shot-only"], &dir);
    assert!(csv.status.success());
    let csv = text(&csv.stdout);
    assert_eq!(
        csv.lines().count(),
        1 + CHAINS.len() * CONVERSATIONS.len(),
        "{csv}"
    );
    assert!(
        csv.lines().skip(1).all(|l| l.contains(",one-shot,")),
        "{csv}"
    );
}

/// The JSON report's runs of `tamp eval` (both chains, both modes) on `conversation` with the
/// airline facts.
fn airline_runs(conversation: &Path, dir: &Path) -> Vec<Value> {
    let root = workspace_root();
    let json_path = dir.join("eval.json");
    let mut cmd = Command::new(tamp_bin());
    cmd.args(["eval", "--output-format", "json", "--output"])
        .arg(&json_path)
        .current_dir(dir);
    for chain in CHAINS {
        cmd.arg("--config").arg(root.join(chain));
    }
    let out = cmd
        .arg("--facts")
        .arg(root.join(CONVERSATIONS[1].1))
        .arg(conversation)
        .output()
        .expect("run tamp eval");
    assert_ok(&out, "");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    report["runs"].as_array().unwrap().clone()
}

/// The same conversation sent as Responses API items is evaluated as its Chat Completions
/// form is: the same requests and facts kept, chain by chain and mode by mode, and the same
/// tokens but for the few each format's own fields cost.
#[test]
fn a_responses_conversation_is_evaluated_as_its_chat_completions_form() {
    let root = workspace_root();
    let dir = scratch_dir("eval-responses");
    // The facts name the conversation by its file's stem.
    let responses = dir.join("airline-task33.responses.json");
    std::fs::copy(
        root.join("tests/fixtures/corpus/responses/taubench_gpt4o_airline_task33_trial3.json"),
        &responses,
    )
    .unwrap();
    let chat = airline_runs(&root.join(CONVERSATIONS[1].0), &dir);
    let items = airline_runs(&responses, &dir);
    assert_eq!(items.len(), CHAINS.len() * 2);
    assert_eq!(chat.len(), items.len(), "as many runs in either form");
    let figures =
        |run: &Value| ["chain", "mode", "requests", "retention"].map(|key| run[key].clone());
    for (chat, items) in chat.iter().zip(&items) {
        assert_eq!(figures(items), figures(chat));
        let tokens = |run: &Value, key: &str| run[key].as_u64().unwrap();
        for key in ["tokens_before", "tokens_after"] {
            let (items, chat) = (tokens(items, key), tokens(chat, key));
            assert!(
                items.abs_diff(chat) * 100 < chat,
                "{key}: {items} vs {chat}"
            );
        }
        assert!(tokens(items, "tokens_after") < tokens(items, "tokens_before"));
    }
}

/// `CHAINS[0]` as `edit` changes it, written to `dir/name`.
fn first_chain_edited(dir: &Path, name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
    let original = std::fs::read_to_string(workspace_root().join(CHAINS[0])).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(original)).unwrap();
    path
}

/// The main model's cost of a replay whose chain never acts is the history's own: the
/// compacted side and the posted side are the same requests, at any cache prices. A chain
/// that compacts costs less, and what it costs follows the prices given.
#[test]
fn a_chain_that_never_compacts_costs_the_main_model_what_the_history_does() {
    let dir = scratch_dir("eval-main-model");
    let root = workspace_root();
    let roomy = first_chain_edited(&dir, "roomy.toml", |chain| {
        chain.replace("max_tokens = 6000", "max_tokens = 1000000")
    });
    let costs = |prices: &[&str]| {
        let out = Command::new(tamp_bin())
            .args([
                "eval",
                "--replay-only",
                "--output-format",
                "json",
                "--config",
            ])
            .arg(&roomy)
            .arg("--config")
            .arg(root.join(CHAINS[0]))
            .args(prices)
            .arg(root.join(CONVERSATIONS[0].0))
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_ok(&out, "");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let cost = |chain: &str| {
            let run = report["runs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["chain"] == chain)
                .unwrap_or_else(|| panic!("no run of {chain}: {report}"));
            (
                run["llm_calls"].as_u64().unwrap(),
                run["main_model_cost"].as_f64().unwrap(),
                run["main_model_prices"].clone(),
            )
        };
        (cost("roomy"), cost("summarize"))
    };
    let (roomy_cost, (calls, compacted, prices)) = costs(&[]);
    assert_eq!(roomy_cost, (0, 1.0, json!({"read": 0.1, "write": 1.25})));
    assert!(calls > 0 && compacted < 1.0, "{calls} calls, {compacted}");
    assert_eq!(prices, json!({"read": 0.1, "write": 1.25}));

    // OpenAI's automatic caching: cached input at half price, nothing more to write.
    let (roomy_cost, (_, openai, prices)) = costs(&["--cache-prices", "0.5,1"]);
    assert_eq!(roomy_cost, (0, 1.0, json!({"read": 0.5, "write": 1.0})));
    assert_eq!(prices, json!({"read": 0.5, "write": 1.0}));
    assert!(
        openai < 1.0 && openai != compacted,
        "{openai} against {compacted}"
    );
}

#[test]
fn eval_never_writes_the_chain_files_store() {
    let dir = scratch_dir("eval-store");
    let root = workspace_root();
    let chain = first_chain_edited(&dir, "chain.toml", |chain| {
        format!("{chain}\n[store]\npath = \"own-store.sqlite3\"\n")
    });
    let out = Command::new(tamp_bin())
        .args(["eval", "--one-shot-only", "--config"])
        .arg(&chain)
        .arg(root.join(CONVERSATIONS[0].0))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_ok(&out, "");
    assert!(
        !dir.join("own-store.sqlite3").exists(),
        "eval wrote the chain file's store"
    );
}

#[test]
fn mistakes_are_refused_before_any_chain_runs_naming_the_file() {
    let dir = scratch_dir("eval-errors");
    let root = workspace_root();
    let run = |args: &[&str]| {
        let out = Command::new(tamp_bin())
            .arg("eval")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(!out.status.success(), "accepted {args:?}");
        assert!(
            !text(&out.stderr).contains("one-shot"),
            "a chain ran before the error"
        );
        text(&out.stderr)
    };
    let chain = root.join(CHAINS[0]);
    let chain = chain.to_str().unwrap();
    let conversation = root.join(CONVERSATIONS[0].0);
    let conversation = conversation.to_str().unwrap();

    let facts = dir.join("other.facts.json");
    std::fs::write(
        &facts,
        r#"{"conversation": "nowhere", "facts": [{"id": "a", "text": "x"}]}"#,
    )
    .unwrap();
    let err = run(&[
        "--config",
        chain,
        "--facts",
        facts.to_str().unwrap(),
        conversation,
    ]);
    assert!(
        err.contains("other.facts.json") && err.contains("nowhere"),
        "{err}"
    );

    let bad_facts = dir.join("bad.facts.json");
    std::fs::write(&bad_facts, r#"{"facts": [{"id": "a"}]}"#).unwrap();
    let err = run(&[
        "--config",
        chain,
        "--facts",
        bad_facts.to_str().unwrap(),
        conversation,
    ]);
    assert!(
        err.contains("bad.facts.json") && err.contains("facts[0]"),
        "{err}"
    );

    let bad_chain = dir.join("bad.toml");
    std::fs::write(&bad_chain, "[budget]\nmax_tokens = \"many\"\n").unwrap();
    let err = run(&["--config", bad_chain.to_str().unwrap(), conversation]);
    assert!(
        err.contains("bad.toml") && err.contains("max_tokens"),
        "{err}"
    );

    // A judge must be a model; and --probe needs questions.
    let airline = root.join(CONVERSATIONS[1].0);
    let airline_facts = root.join(CONVERSATIONS[1].1);
    let err = run(&[
        "--config",
        chain,
        "--probe",
        chain,
        "--facts",
        airline_facts.to_str().unwrap(),
        airline.to_str().unwrap(),
    ]);
    assert!(
        err.contains("summarize.toml") && err.contains("a judge must be a model"),
        "{err}"
    );
    let err = run(&[
        "--config",
        chain,
        "--probe",
        root.join(RECORDED_JUDGE).to_str().unwrap(),
        conversation,
    ]);
    assert!(err.contains("--probe") && err.contains("question"), "{err}");

    let err = run(&["--config", chain, "--cache-prices", "0.1,x", conversation]);
    assert!(
        err.contains("--cache-prices") && err.contains("the write price \"x\""),
        "{err}"
    );

    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"messages\": [").unwrap();
    let err = run(&["--config", chain, broken.to_str().unwrap()]);
    assert_contains(&err, "broken.json");

    let help = Command::new(tamp_bin())
        .args(["eval", "--help"])
        .output()
        .unwrap();
    let help = text(&help.stdout);
    assert!(
        help.contains("--facts") && help.contains("Example"),
        "{help}"
    );
}

const RECORDED_CHAIN: &str = "examples/eval/recorded/map-reduce-qwen.toml";
const RECORDED_JUDGE: &str = "examples/eval/recorded/judge.toml";

fn recorded_lines(file: &str) -> usize {
    let path = workspace_root().join("examples/eval/recorded").join(file);
    std::fs::read_to_string(path).unwrap().lines().count()
}

/// `tamp eval` of the recorded chain, judged by the recorded judge, on the airline
/// conversation, with `extra` arguments.
fn recorded_eval(extra: &[&str], dir: &Path) -> Output {
    let root = workspace_root();
    Command::new(tamp_bin())
        .arg("eval")
        .arg("--config")
        .arg(root.join(RECORDED_CHAIN))
        .arg("--probe")
        .arg(root.join(RECORDED_JUDGE))
        .arg("--facts")
        .arg(root.join(CONVERSATIONS[1].1))
        .args(extra)
        .arg(root.join(CONVERSATIONS[1].0))
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The recorded run of examples/eval/recorded/: map-reduce-adaptive summarizing with a real
/// model (Qwen2.5-Coder-0.5B) and the same model judging, both replayed from their recorded
/// answers. No request is missing from the recordings (a changed prompt would be, and roll
/// the stage back), every judge answer is asked for again, and the probe's figures add up.
#[test]
fn the_recorded_run_replays_a_real_models_summaries_and_its_judge() {
    let dir = scratch_dir("eval-recorded");
    let root = workspace_root();
    let json_path = dir.join("recorded.json");
    let out = recorded_eval(
        &[
            "--output-format",
            "json",
            "--output",
            json_path.to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&out, "");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "one-shot and replay");
    // A request missing from the recording would roll its stage back. The replay run asks
    // some of the one-shot run's map requests again, which the recording holds once.
    for run in runs {
        assert_eq!(run["rolled_back"], 0, "{run:#}");
    }
    let summaries: u64 = runs.iter().map(|r| r["llm_calls"].as_u64().unwrap()).sum();
    assert!(
        summaries as usize >= recorded_lines("map-reduce-qwen.answers.jsonl"),
        "{summaries} calls"
    );
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(CONVERSATIONS[1].1)).unwrap())
            .unwrap();
    let questions = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["question"].is_string())
        .count();
    let mut judged = questions;
    for run in runs {
        let probe = &run["probe"];
        let (same, answerable) = (
            probe["same"].as_u64().unwrap() as usize,
            probe["answerable"].as_u64().unwrap() as usize,
        );
        let unanswerable = probe["unanswerable"].as_array().unwrap().len();
        assert_eq!(answerable + unanswerable, questions, "{probe:#}");
        assert!(answerable > 0 && same <= answerable, "{probe:#}");
        let differed = probe["differed"].as_array().unwrap();
        assert_eq!(differed.len(), answerable - same, "{probe:#}");
        for d in differed {
            assert!(
                d["reference"].is_string() && d["answer"].is_string(),
                "{d:#}"
            );
        }
        judged += answerable;
    }
    assert_eq!(
        judged,
        recorded_lines("judge-qwen.answers.jsonl"),
        "the judge is asked each question once of the original and once per run"
    );
    // The text table has the probe's column.
    let table = recorded_eval(&[], &dir);
    assert_ok(&table, "");
    let table = text(&table.stdout);
    assert!(table.lines().next().unwrap().contains("probe"), "{table}");
}

/// A page as the headless browser drew it: RGB pixels, row by row.
struct Screenshot {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

impl Screenshot {
    /// `html` opened in a real headless browser, in a window of `width` × `height`.
    fn of(html: &Path, width: u32, height: u32) -> Screenshot {
        let shot = html.with_extension("png");
        // Installed by the test support when the machine has none (support/browser.rs).
        let browser = tamp_e2e::browser::chromium();
        let run = Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(format!("file://{}", html.display()))
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", browser.display()));
        assert!(shot.is_file(), "no screenshot: {}", text(&run.stderr));
        let decoder =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        Screenshot {
            width: info.width as usize,
            height: info.height as usize,
            rgb: buf[..info.buffer_size()]
                .chunks(channels)
                .map(|p| [p[0], p[1], p[2]])
                .collect(),
        }
    }

    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }

    /// Pixels of `rgb`, give or take what anti-aliasing blends in at a line's edge.
    fn count(&self, rgb: [u8; 3]) -> usize {
        self.rgb.iter().filter(|p| near(**p, rgb)).count()
    }
}

fn near(p: [u8; 3], rgb: [u8; 3]) -> bool {
    (0..3).all(|c| p[c].abs_diff(rgb[c]) < 12)
}

/// The colors of the first two chains given (html.rs's palette).
const FIRST_CHAIN: [u8; 3] = [0x1f, 0x77, 0xb4];
const SECOND_CHAIN: [u8; 3] = [0xd6, 0x27, 0x28];

/// The HTML report, opened in a real headless browser: the screenshot is not blank, and it
/// shows the charts, drawn in each chain's color.
#[test]
fn the_html_report_renders_its_charts_in_a_real_browser() {
    let dir = scratch_dir("eval-html");
    let html = dir.join("report.html");
    let out = eval(
        &[
            "--output-format",
            "html",
            "--output",
            html.to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&out, "");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.starts_with("<!DOCTYPE html>") && !page.contains("<script"),
        "self-contained"
    );
    assert!(
        !page.contains(" src=") && !page.contains(" href="),
        "nothing fetched"
    );

    let shot = Screenshot::of(&html, 1100, 2000);
    let white = shot.count([255, 255, 255]);
    assert!(
        white < shot.rgb.len() * 97 / 100,
        "the page is (nearly) blank: {white} of {} white",
        shot.rgb.len()
    );
    // The chains' lines, dots and bars.
    let (first, second) = (shot.count(FIRST_CHAIN), shot.count(SECOND_CHAIN));
    assert!(
        first > 2_000 && second > 2_000,
        "chart colors on screen: {first} and {second} pixels"
    );
}

/// The planted session replayed by two chains (docs/eval.md's command), in the HTML report: its
/// context chart, found in a screenshot by its background, shows each chain's line over more
/// than a tenth of the chart's height. A chart left empty fails, and so does one whose scale
/// is the raw history's: that history grows to 56,490 tokens where the chains stay under
/// their 6,000-token high watermark, and every line lay flat along the axis.
#[test]
fn each_chains_line_uses_its_context_charts_height() {
    let dir = scratch_dir("eval-html-planted");
    let html = dir.join("planted.html");
    let out = Command::new(tamp_bin())
        .args(["eval", "--replay-only"])
        .args(["--config", "planted/hybrid.toml"])
        .args(["--config", "planted/hybrid-fixed.toml"])
        .args(["--facts", "planted.facts.json"])
        .args(["--output-format", "html", "--output"])
        .arg(&html)
        .arg("planted.anthropic.json")
        .current_dir(workspace_root().join("examples/eval"))
        .output()
        .unwrap();
    assert_ok(&out, "");
    let shot = Screenshot::of(&html, 1100, 2200);

    // A chart: rows with the charts' background (html.rs's CHART_BACKGROUND) in its margins,
    // gridlines and axes (rows across the plot) bridged.
    const BACKGROUND: [u8; 3] = [0xfa, 0xfa, 0xfa];
    let mut charts: Vec<(usize, usize)> = Vec::new();
    for y in 0..shot.height {
        let background = (0..shot.width)
            .filter(|&x| shot.at(x, y) == BACKGROUND)
            .count();
        if background < 50 {
            continue;
        }
        match charts.last_mut() {
            Some((_, bottom)) if y - *bottom <= 4 => *bottom = y,
            _ => charts.push((y, y)),
        }
    }
    charts.retain(|(top, bottom)| bottom - top >= 150);
    assert_eq!(charts.len(), 1, "one context chart on screen: {charts:?}");

    for (top, bottom) in charts {
        let height = bottom - top + 1;
        for (chain, rgb) in [("hybrid", FIRST_CHAIN), ("hybrid-fixed", SECOND_CHAIN)] {
            let rows: Vec<usize> = (top..=bottom)
                .filter(|&y| (0..shot.width).any(|x| near(shot.at(x, y), rgb)))
                .collect();
            let pixels: usize = (top..=bottom)
                .map(|y| {
                    (0..shot.width)
                        .filter(|&x| near(shot.at(x, y), rgb))
                        .count()
                })
                .sum();
            assert!(
                pixels > 300,
                "{chain}: its line is not in the chart ({pixels} pixels of its color)"
            );
            // Distinct rows, not the span: a dashed watermark or a dot in the chain's color
            // far from its line must not pass for a line that rises.
            assert!(
                rows.len() * 10 > height,
                "{chain}: its line crosses {} of the chart's {height} rows, within a tenth of \
                 it: squashed against the axis",
                rows.len()
            );
        }
    }
}

/// Into a pipe, `tamp eval`'s progress is its step lines, with no bar and no escape sequence
/// to litter a log; with `-q`, nothing; on a terminal (a pseudo-terminal `script` makes), a
/// bar after the steps, erased before the table is printed.
#[test]
fn the_progress_bar_is_drawn_on_a_terminal_only() {
    let root = workspace_root();
    let dir = scratch_dir("eval-progress");
    let args = [
        "eval".to_string(),
        "--config".into(),
        root.join(CHAINS[0]).display().to_string(),
        root.join(CONVERSATIONS[1].0).display().to_string(),
    ];
    let piped = Command::new(tamp_bin())
        .args(&args)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_ok(&piped, "");
    let err = text(&piped.stderr);
    assert!(
        err.contains("tamp eval: summarize on airline-task33: one-shot\n")
            && err.contains("tamp eval: summarize on airline-task33: replay, 21/21 requests\n"),
        "{err}"
    );
    assert!(
        !err.contains('\x1b') && !err.contains('\r') && !err.contains("LLM call"),
        "a bar drawn into a pipe: {err:?}"
    );

    let quiet = Command::new(tamp_bin())
        .args(&args)
        .arg("-q")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(quiet.status.success());
    assert_eq!(text(&quiet.stderr), "", "-q");
    assert!(text(&quiet.stdout).starts_with("conversation"));

    // `script` runs the command on a pseudo-terminal and copies what it wrote.
    let command = std::iter::once(tamp_bin().display().to_string())
        .chain(args)
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let terminal = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("TERM", "xterm")
        .env("COLUMNS", "100")
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("script (util-linux) runs a command on a terminal: {e}"));
    let screen = text(&terminal.stdout);
    assert!(terminal.status.success(), "{screen}");
    assert!(
        screen.contains("\r\x1b[2K[") && screen.contains(" LLM calls  "),
        "no bar on a terminal: {screen:?}"
    );
    // The bar is erased before the table, which starts its own line.
    let table = screen.rfind("conversation").unwrap();
    assert!(
        screen[..table].ends_with("\r\x1b[2K"),
        "the bar is left before the table: {screen:?}"
    );
}

/// `--output` is checked before anything runs (a run with a real model can take hours): a
/// directory, a missing directory or a file taken for one is refused at once, naming `--output`
/// and the path. A file the check created is removed when the run fails after it; an existing
/// one is left as it was.
#[test]
fn a_bad_out_path_is_refused_before_any_chain_runs() {
    let dir = scratch_dir("eval-out");
    let root = workspace_root();
    let eval_to = |chain: &Path, out: &Path| {
        Command::new(tamp_bin())
            .args(["eval", "--one-shot-only", "--config"])
            .arg(chain)
            .arg("--output")
            .arg(out)
            .arg(root.join(CONVERSATIONS[0].0))
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let chain = root.join(CHAINS[0]);
    let file = dir.join("a-file");
    std::fs::write(&file, "kept").unwrap();
    for (out, why) in [
        (dir.clone(), "is a directory"),
        (dir.join("missing/eval.json"), "does not exist"),
        (file.join("eval.json"), "is not a directory"),
    ] {
        let run = eval_to(&chain, &out);
        let err = text(&run.stderr);
        assert!(!run.status.success(), "accepted --output {}", out.display());
        assert!(
            !err.contains("one-shot"),
            "a chain ran before the error: {err}"
        );
        assert!(
            err.contains(&format!("--output {}", out.display())) && err.contains(why),
            "{err}"
        );
    }
    assert!(!dir.join("missing").exists());

    // The run fails after the check (a chain file that does not validate).
    let bad_chain = dir.join("bad.toml");
    std::fs::write(&bad_chain, "[budget]\nmax_tokens = \"many\"\n").unwrap();
    let new = dir.join("new.json");
    let run = eval_to(&bad_chain, &new);
    assert!(!run.status.success() && text(&run.stderr).contains("bad.toml"));
    assert!(!new.exists(), "a failed run left its empty --out behind");
    let run = eval_to(&bad_chain, &file);
    assert!(!run.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");

    // A good one is written, new or existing.
    for out in [&new, &file] {
        let run = eval_to(&chain, out);
        assert_ok(&run, "");
        let table = std::fs::read_to_string(out).unwrap();
        assert!(table.starts_with("conversation"), "{table}");
    }
}

/// Two chain files or two conversations that share a file stem get names that tell them apart
/// in every output: the chains by their nearest differing directory, the conversations by
/// their wire format. Names that collide with none stay the stem.
#[test]
fn files_sharing_a_stem_are_told_apart_in_every_output() {
    let root = workspace_root();
    let dir = scratch_dir("eval-names");
    const HYBRIDS: [&str; 2] = [
        "examples/chains/hybrid.toml",
        "examples/eval/planted/hybrid.toml",
    ];
    const PONYC: [&str; 2] = [
        "examples/conversations/ponyc-4588.anthropic.json",
        "examples/conversations/ponyc-4588.openai.json",
    ];
    let airline = CONVERSATIONS[1].0;
    // From the repository root, with the paths as a user types them.
    let eval_of = |chains: &[&str], conversations: &[&str], extra: &[&str]| {
        let mut cmd = Command::new(tamp_bin());
        cmd.args(["eval", "--one-shot-only", "--facts", CONVERSATIONS[0].1])
            .current_dir(&root);
        for chain in chains {
            cmd.arg("--config").arg(chain);
        }
        let out = cmd.args(extra).args(conversations).output().unwrap();
        assert_ok(&out, "");
        text(&out.stdout)
    };
    let colliding = |extra: &[&str]| eval_of(&HYBRIDS, &[PONYC[0], PONYC[1], airline], extra);
    let conversations = [
        "ponyc-4588.anthropic",
        "ponyc-4588.openai",
        "airline-task33",
    ];
    let chains = ["chains/hybrid", "planted/hybrid"];
    let expected: Vec<(String, String)> = conversations
        .iter()
        .flat_map(|c| chains.iter().map(move |h| (c.to_string(), h.to_string())))
        .collect();

    // JSON: a run per pair, each pair once.
    let report: Value = serde_json::from_str(&colliding(&["--output-format", "json"])).unwrap();
    let runs = report["runs"].as_array().unwrap();
    let pairs: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            let name = |key: &str| r[key].as_str().unwrap().to_string();
            (name("conversation"), name("chain"))
        })
        .collect();
    assert_eq!(pairs, expected);
    // Each name is its own file's: the same figures as a run of that file alone, where
    // nothing collides and the names are the stems.
    let alone: Value = serde_json::from_str(&eval_of(
        &[HYBRIDS[1]],
        &[PONYC[1], airline],
        &["--output-format", "json"],
    ))
    .unwrap();
    let figures =
        |run: &Value| ["tokens_before", "tokens_after", "retention"].map(|k| run[k].clone());
    for (conversation, named) in [
        ("ponyc-4588", "ponyc-4588.openai"),
        ("airline-task33", "airline-task33"),
    ] {
        let solo = alone["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["conversation"] == conversation && r["chain"] == "hybrid")
            .unwrap_or_else(|| panic!("{conversation} alone: {alone:#}"));
        let run = runs
            .iter()
            .find(|r| r["conversation"] == named && r["chain"] == "planted/hybrid")
            .unwrap();
        assert_eq!(figures(run), figures(solo), "{named}");
    }
    // The two hybrid chains differ on the airline conversation (budgets of 16,000 and 8,000).
    let airline_after = |chain: &str| {
        runs.iter()
            .find(|r| r["conversation"] == "airline-task33" && r["chain"] == chain)
            .unwrap()["tokens_after"]
            .as_u64()
            .unwrap()
    };
    assert!(airline_after("planted/hybrid") < airline_after("chains/hybrid"));

    // The text table's rows and its lost facts.
    let table = colliding(&[]);
    let rows: Vec<(String, String)> = table
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let mut cells = l.split_whitespace();
            let conversation = cells.next().unwrap().to_string();
            (conversation, cells.next().unwrap().to_string())
        })
        .collect();
    assert_eq!(rows, expected, "{table}");
    for conversation in &conversations[..2] {
        for chain in chains {
            assert_contains(
                &table,
                &format!("  {conversation} / {chain} / one-shot: lost "),
            );
        }
    }

    // The CSV's rows.
    let csv = colliding(&["--output-format", "csv"]);
    let rows: Vec<(String, String)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let mut fields = l.split(',');
            let conversation = fields.next().unwrap().to_string();
            (conversation, fields.next().unwrap().to_string())
        })
        .collect();
    assert_eq!(rows, expected, "{csv}");

    // The HTML page: the table's rows, a section per conversation, a legend entry per chain.
    let html = dir.join("report.html");
    colliding(&[
        "--output-format",
        "html",
        "--output",
        html.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    for (conversation, chain) in &expected {
        assert!(
            page.contains(&format!("<tr><td>{conversation}</td><td>{chain}</td>")),
            "{conversation} / {chain}: {page}"
        );
    }
    for conversation in conversations {
        assert_eq!(
            page.matches(&format!("<h2>{conversation}</h2>")).count(),
            1,
            "{page}"
        );
    }
    for chain in chains {
        assert_contains(&page, &format!("</i>{chain}</span>"));
    }
}

/// docs/eval.md's samples are what the commands they follow print now, figure for figure but
/// for ms/compaction (the machine's and the build's), lost facts included: each runnable
/// block (a `tamp eval` command, run as written by `tamp_e2e::docs::run`, from a copy of the
/// repository), and the `text` block after it. (`docs_blocks` leaves docs/eval.md's runnable
/// blocks to this test.)
#[test]
fn the_docs_sample_is_what_its_command_prints() {
    let doc = std::fs::read_to_string(workspace_root().join("docs/eval.md")).unwrap();
    let clone = tamp_e2e::docs::scratch().join("tamp");
    // Each line's words; a row's ms/compaction (its 12th word of 15) left out.
    let words = |output: &str| -> Vec<Vec<String>> {
        output
            .lines()
            .map(|line| {
                let mut words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
                if words.len() == 15 && words[0] != "conversation" {
                    words.remove(11);
                }
                words
            })
            .collect()
    };
    let mut samples = 0;
    for block in tamp_e2e::docs::marked_blocks(&doc) {
        if block.marked != tamp_e2e::docs::Marked::Run {
            continue;
        }
        assert!(
            block.text.contains("tamp eval"),
            "docs/eval.md line {}: a runnable block that is not a sample:\n{}",
            block.line,
            block.text
        );
        let out = tamp_e2e::docs::run(&block.text, &clone);
        assert_ok(&out, "");
        let printed = text(&out.stdout);
        let sample = tamp_e2e::docs::block_after(&doc, block.line, "text");
        assert_eq!(
            words(&sample),
            words(&printed),
            "docs/eval.md line {}: the sample:\n{sample}\nprinted now:\n{printed}",
            block.line
        );
        samples += 1;
    }
    assert!(samples >= 2, "docs/eval.md has {samples} sample(s)");
}
