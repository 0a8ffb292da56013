//! Plugins that panic, hang, fail or break invariants are contained: the stage is rolled
//! back, the conversation comes back unchanged, the host goes on.

use std::time::{Duration, Instant};

use tamp_e2e::rt;
use tamp_e2e::{corpus_conversation, plugin, scratch_dir, write_chain};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides, StageStatus};

fn chain_with(dir_tag: &str, stages: &str) -> Chain {
    let dir = scratch_dir(dir_tag);
    let toml = format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n[store]\npath = \"pages.sqlite3\"\n{stages}"
    );
    Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).expect("chain builds")
}

fn stage(name: &str, mode: &str, extra: &str) -> String {
    format!(
        "[[stage]]\nname = \"{name}\"\nplugin = \"{}\"\n{extra}\n[stage.config]\nmode = \"{mode}\"\n",
        plugin("tamp_test_misbehaving").display()
    )
}

/// Runs `mode` as the only stage on a real conversation and checks it was rolled back.
fn rolled_back(mode: &str, extra: &str, expect_kind: &str) -> String {
    let chain = chain_with(mode, &stage(mode, mode, extra));
    let input = corpus_conversation("anthropic", "taubench_gpt4o_airline_task2_trial2");
    let out = rt()
        .block_on(chain.compact(input.clone(), &CompactOptions::default()))
        .expect("compacts");
    assert_eq!(
        out.conversation, input,
        "{mode}: the conversation must come back unchanged"
    );
    let run = &out.report.stages[0];
    assert_eq!(run.status, StageStatus::RolledBack, "{mode}: {run:?}");
    let failure = run.error.as_ref().expect("failure recorded");
    assert_eq!(failure.kind.as_str(), expect_kind, "{mode}: {failure:?}");
    failure.message.clone()
}

#[test]
fn a_panic_inside_the_future_is_contained() {
    let msg = rolled_back("panic_in_compact", "", "panicked");
    assert!(msg.contains("panic inside the future"), "{msg}");
}

#[test]
fn a_stage_that_never_finishes_times_out() {
    let started = Instant::now();
    let msg = rolled_back("hang", "timeout_secs = 0.3", "timeout");
    assert!(msg.contains("0.3s"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn an_error_is_reported() {
    let msg = rolled_back("error", "", "error");
    assert!(msg.contains("asked to fail"), "{msg}");
}

#[test]
fn invariant_breakers_are_rolled_back_with_the_rule() {
    for (mode, rule) in [
        ("drop_message", "TAMP-INV-01"),
        ("split_exchange", "TAMP-INV-02"),
        ("touch_recent", "TAMP-INV-03"),
    ] {
        let msg = rolled_back(mode, "", "invariant");
        assert!(msg.starts_with(rule), "{mode}: {msg}");
    }
}

#[test]
fn a_panicking_constructor_fails_the_chain_build_naming_the_stage() {
    let dir = scratch_dir("ctor");
    let path = write_chain(&dir, &stage("boom", "panic_in_new", ""));
    let err = Chain::from_file(&path, FileOverrides::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("stage \"boom\"") && err.contains("panic in constructor"),
        "{err}"
    );
    assert!(err.contains("chain.toml:"), "{err}");
}

#[test]
fn after_a_failed_stage_the_chain_goes_on() {
    let stages = format!(
        "{}{}",
        stage("bad", "panic_in_compact", ""),
        stage("good", "ok", "")
    );
    let chain = chain_with("goes-on", &stages);
    let input = corpus_conversation("openai", "taubench_gpt4o_airline_task2_trial2");
    let out = rt()
        .block_on(chain.compact(input.clone(), &CompactOptions::default()))
        .unwrap();
    assert_eq!(out.report.stages[0].status, StageStatus::RolledBack);
    assert_eq!(out.report.stages[1].status, StageStatus::Acted);
    assert_ne!(out.conversation, input);
    assert!(out.report.tokens_after < out.report.tokens_before);
}
