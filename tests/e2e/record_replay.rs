//! Record and replay of real answers (`[provider] record`, `kind = "replay"`), through the
//! real `tamp` binary and the real map-reduce-adaptive plugin.
//!
//! `tests/fixtures/recorded/airline-task33.map-reduce.jsonl` holds the answers a real model
//! (Qwen2.5-Coder-0.5B-Instruct, llama.cpp) gave to the chain `record.toml` in that folder on
//! `examples/conversations/airline-task33.openai.json`; its README says how to re-record them.
//! These tests never need the model: they replay the file. A change to the plugin's prompts,
//! chunking or token limits changes the requests, and shows up here as a missing answer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::{scratch_dir, tamp_bin, workspace_root, write_chain};
use tamp_host::providers::record::RecordedAnswer;

const RECORDING: &str = "airline-task33.map-reduce.jsonl";

fn fixtures() -> PathBuf {
    workspace_root().join("tests/fixtures/recorded")
}

fn recording() -> Vec<RecordedAnswer> {
    let path = fixtures().join(RECORDING);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a recorded answer"))
        .collect()
}

/// The recording chain file with its `[provider]` section replaced by a replay of the
/// recording, and `edit` applied to the rest.
fn replay_chain(dir: &Path, edit: impl Fn(&str) -> String) -> PathBuf {
    let source = std::fs::read_to_string(fixtures().join("record.toml")).unwrap();
    let (stages, _provider) = source
        .split_once("\n[provider]\n")
        .expect("record.toml ends with its [provider] section");
    let answers = fixtures().join(RECORDING);
    let toml = format!(
        "{}\n[provider]\nkind = \"replay\"\nanswers = {:?}\n",
        edit(stages),
        answers.to_str().unwrap()
    );
    write_chain(dir, &toml)
}

struct Run {
    out: Output,
    report: Value,
    input: Value,
    output: Value,
}

fn compact(dir: &Path, chain: &Path) -> Run {
    let input_path = workspace_root().join("examples/conversations/airline-task33.openai.json");
    let report_path = dir.join("report.json");
    let out = Command::new(tamp_bin())
        .args([
            "compact",
            input_path.to_str().unwrap(),
            "--force",
            "--config",
        ])
        .arg(chain)
        .arg("--store")
        .arg(dir.join("store.sqlite3"))
        .arg("--report-json")
        .arg(&report_path)
        .current_dir(dir)
        .output()
        .expect("run tamp");
    assert_ok(&out, "");
    let report = serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    let input = serde_json::from_str(&std::fs::read_to_string(&input_path).unwrap()).unwrap();
    let output = serde_json::from_slice(&out.stdout).expect("the output is JSON");
    Run {
        out,
        report,
        input,
        output,
    }
}

#[test]
fn a_replayed_run_makes_the_recorded_calls_and_uses_the_recorded_answers() {
    let recorded = recording();
    assert!(
        (2..=8).contains(&recorded.len()),
        "{} answers",
        recorded.len()
    );
    // Every answer is a real model's, not the offline or scripted providers'.
    for r in &recorded {
        assert!(r.provider.starts_with("openai/"), "{}", r.provider);
        assert!(!r.answer.text.trim().is_empty(), "{:?}", r.request.label);
    }

    let dir = scratch_dir("replay");
    let chain = replay_chain(&dir, |s| s.to_string());
    let run = compact(&dir, &chain);
    let stage = &run.report["stages"][0];
    assert_eq!(stage["status"], "acted", "{}", run.report);
    assert_eq!(stage["details"]["level"], "map-reduce", "{stage}");
    // One call per recorded answer, none failed, none from the cache.
    assert_eq!(stage["llm_calls"], recorded.len() as u64, "{stage}");
    assert_eq!(stage["failed_llm_calls"], 0, "{stage}");
    assert_eq!(stage["cache_hits"], 0, "{stage}");
    // The usage is the recorded usage: the answers came from the file.
    let recorded_output: u64 = recorded.iter().map(|r| r.answer.usage.output_tokens).sum();
    let recorded_input: u64 = recorded.iter().map(|r| r.answer.usage.input_tokens).sum();
    assert_eq!(stage["usage"]["output_tokens"], recorded_output, "{stage}");
    assert_eq!(stage["usage"]["input_tokens"], recorded_input, "{stage}");

    // The summary in the output is the model's final answer (the synthesis, or the single
    // chunk's summary), as recorded.
    let last = recorded
        .iter()
        .find(|r| r.request.label == "synthesis")
        .or_else(|| recorded.last())
        .unwrap();
    let output = serde_json::to_string(&run.output).unwrap();
    let first_line = last.answer.text.trim().lines().next().unwrap().trim();
    let first_line: String = first_line.chars().take(80).collect();
    let opening = serde_json::to_string(&first_line).unwrap();
    let opening = opening.trim_matches('"');
    assert!(
        output.contains(opening),
        "the output does not contain the recorded summary's opening {opening:?}:\n{output}"
    );
    assert!(
        run.output["messages"].as_array().unwrap().len()
            < run.input["messages"].as_array().unwrap().len()
    );

    // Replaying again gives the same conversation (nothing depends on the model now), but for
    // the MAC each store puts on the summaries it writes (another scratch store, another key).
    let again = compact(&scratch_dir("replay-again"), &chain);
    let without_macs = |output: &serde_json::Value| {
        let text = output.to_string();
        let mut out = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(" mac=\\\"") {
            out.push_str(&rest[..at]);
            rest = &rest[at + " mac=\\\"".len() + 32 + 2..];
        }
        out + rest
    };
    assert_ne!(again.output, run.output, "two stores, two keys");
    assert_eq!(without_macs(&again.output), without_macs(&run.output));
}

#[test]
fn a_changed_prompt_is_a_missing_answer_and_the_stage_rolls_back() {
    let dir = scratch_dir("replay-changed");
    // Smaller chunks: other map requests than the ones recorded.
    let chain = replay_chain(&dir, |s| {
        let changed = s.replace("chunk_size = 1500", "chunk_size = 1200");
        assert_ne!(changed, s, "record.toml sets chunk_size = 1500");
        changed
    });
    let run = compact(&dir, &chain);
    let stage = &run.report["stages"][0];
    assert_eq!(stage["status"], "rolled_back", "{}", run.report);
    assert_eq!(run.output, run.input, "a rolled-back stage changes nothing");
    // Every failed call is a request the recording lacks (a chunk whose text and limits
    // happen to be the same as a recorded one's is still answered), each tried once.
    let errors = stage["llm_errors"].as_array().unwrap();
    assert!(!errors.is_empty(), "{stage}");
    assert_eq!(stage["failed_llm_calls"], errors.len() as u64, "{stage}");
    for error in errors {
        let error = error.as_str().unwrap();
        assert!(
            error.starts_with("replay: invalid_request: no recorded answer for this request (key "),
            "{error}"
        );
        assert_contains(error, "label \"map ");
        assert!(error.contains(RECORDING), "{error}");
    }
    // `tamp compact` says so on stderr.
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert!(
        stderr.contains("warning: stage \"fold-old-turns\"")
            && stderr.contains("no recorded answer for this request"),
        "{stderr}"
    );
}

#[test]
fn a_malformed_recording_is_refused_when_the_chain_is_built() {
    let dir = scratch_dir("replay-malformed");
    let mut lines = std::fs::read_to_string(fixtures().join(RECORDING)).unwrap();
    lines.push_str("{\"key\": \"abc\"}\n");
    let answers = dir.join("broken.jsonl");
    std::fs::write(&answers, &lines).unwrap();
    let chain = write_chain(
        &dir,
        "[provider]\nkind = \"replay\"\nanswers = \"broken.jsonl\"\n",
    );
    let out = Command::new(tamp_bin())
        .args(["check-config", "--config"])
        .arg(&chain)
        .current_dir(&dir)
        .output()
        .expect("run tamp");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let line = lines.lines().count();
    assert!(
        stderr.contains(&format!(
            "provider.answers: {}:{line}: not a recorded answer",
            answers.display()
        )),
        "{stderr}"
    );
}
