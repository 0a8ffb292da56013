//! Strategies as WebAssembly components, end to end: guests built from source with the pinned
//! componentize-py and componentize-js (`tamp_e2e::guests`), loaded through the real loader,
//! run by the real chain, the real `tamp conformance` and the real `tamp serve`.
//!
//! - the Python and JavaScript templates conform, and archive exactly what the Rust example
//!   (`examples/custom-strategy`, the same strategy) archives, byte for byte, prompts included;
//! - a guest's clearing, made through the host's placeholders, is the native one;
//! - each broken guest (an endless loop, a memory bomb, a trap, a rule breaker) fails exactly
//!   its rule, and the host stays up through all of them while it serves requests;
//! - an endless loop is stopped at its stage's timeout with its memory returned; a memory bomb
//!   stops at the cap;
//! - a component for another WIT world, or that imports WASI, is refused naming why; pins and
//!   `allow_dirs` hold for components as for libraries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tamp_conformance::Status;
use tamp_e2e::assert_contains;
use tamp_e2e::guests::{component, Guest};
use tamp_e2e::serve_support::{chain_stage_names, write_atomically, ScratchDir, Server};
use tamp_e2e::{corpus, corpus_conversation, corpus_names, plugin, tamp_bin, write_chain};
use tamp_host::chain::{Chain, CompactOptions, StageStatus};
use tamp_host::loader::{load_plugin, LoadedPlugin};
use tamp_host::providers::ExtractiveSummarizer;
use tamp_host::services::{HostContext, StageIdentity, StageServices};
use tamp_host::store::SqliteStore;
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_plugin_api::rules::clearing::{is_cleared, Clearing};
use tamp_plugin_api::{Budget, CompactRequest, Conversation, Edit, Message, Role, Shared};

use crate::conformance::{assert_conforms_on_the_quick_checks, kit_json, ALL_BUT_SLOW};

#[test]
fn the_python_and_javascript_templates_conform() {
    for guest in [Guest::PythonTemplate, Guest::JsTemplate] {
        let wasm = component(guest);
        // Every rule, a generous time limit (the guests are interpreters, and CI machines are
        // shared), fewer cases than for the native plugins.
        let (code, report) = kit_json(&wasm, &["--timeout", "60", "--cases", "4"]);
        assert!(
            report.passed && code == 0,
            "{guest:?} does not conform (exit {code}):\n{}",
            report.to_text()
        );
        assert!(
            report.rules.iter().all(|r| r.status != Status::Skipped),
            "{guest:?}: {}",
            report.to_text()
        );
        let meta = report.meta.as_ref().expect("metadata");
        assert!(meta.name.ends_with("custom-strategy"), "{meta:?}");
        assert_eq!(meta.plugin_api_version, tamp_plugin_api::ABI_VERSION);
        let changed = &report.rule("TAMP-INV-01").unwrap().notes;
        assert!(
            changed.iter().any(|n| !n.contains("changed 0 of")),
            "{guest:?} never acted on the generated conversations: {changed:?}"
        );
        let perf = report.perf.as_ref().expect("a performance line");
        assert!(perf.messages >= 1000 && perf.plugin_ms > 0.0, "{perf:?}");
    }
}

/// One compaction by `plugin` (`config`) of `conversation` over a small budget, through the
/// host's real services, the offline summarizer answering (its answers are drawn from each
/// prompt's material, so two strategies answer alike only when they asked alike): its edits
/// and its report's reason and warnings.
fn edits_of(
    rt: &tokio::runtime::Runtime,
    plugin: &LoadedPlugin,
    config: &Value,
    conversation: &Conversation,
) -> (Vec<Edit>, String, Vec<String>) {
    let tokens = Arc::new(TokenCounter::new(Encoding::O200kBase).unwrap());
    let current = tokens.count_messages(&conversation.messages);
    let ctx = Arc::new(HostContext {
        provider: Arc::new(ExtractiveSummarizer::default()),
        store: Arc::new(SqliteStore::in_memory().unwrap()),
        cache: None,
        queue: None,
        tokens,
        llm_permits: Arc::new(tokio::sync::Semaphore::new(4)),
        llm_timeout: Duration::from_secs(10),
        progress: None,
    });
    let strategy = plugin.instantiate(config).expect("a valid config");
    let services = StageServices::new(
        ctx,
        StageIdentity {
            stage: "same".into(),
            strategy: plugin.meta().name.clone(),
            config_hash: String::new(),
        },
        None,
        None,
    );
    let request = CompactRequest {
        conversation: Shared::new(conversation.clone()),
        budget: Budget {
            max_tokens: 4000,
            high_watermark: 3000,
            low_watermark: 2000,
            keep_recent: 4,
            current_tokens: current,
        },
        host: services.to_ffi(),
        stage: "same".into(),
    };
    let outcome = rt
        .block_on(strategy.compact(request))
        .into_result()
        .unwrap_or_else(|e| panic!("{}: {e}", plugin.meta().name));
    let edits = outcome
        .edits
        .into_iter()
        .map(|e| e.into_enum().expect("a known edit"))
        .collect();
    let warnings = outcome
        .report
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect();
    (edits, outcome.report.reason.into(), warnings)
}

#[test]
fn the_templates_archive_what_the_rust_example_archives() {
    let rt = tamp_e2e::rt();
    let native = load_plugin(&plugin("tamp_custom_strategy")).unwrap();
    let guests: Vec<_> = [Guest::PythonTemplate, Guest::JsTemplate]
        .into_iter()
        .map(|g| load_plugin(&component(g)).unwrap())
        .collect();
    // The defaults (LLM summaries), plain notes, and summaries cut short (then longer than
    // some runs they replace: those keep their plain note, with a warning).
    let configs = [
        json!({}),
        json!({"summarize": false, "keep_exchanges": 1}),
        json!({"max_summary_chars": 40, "keep_exchanges": 0, "min_exchanges": 2}),
    ];
    let (mut acted, mut summarized) = (0, 0);
    for name in corpus_names() {
        for format in ["anthropic", "openai"] {
            let conversation = corpus_conversation(format, &name);
            for config in &configs {
                let expected = edits_of(&rt, &native, config, &conversation);
                acted += usize::from(!expected.0.is_empty());
                summarized += expected
                    .0
                    .iter()
                    .filter(|e| matches!(e, Edit::Summarize { text, .. } if text.contains('\n')))
                    .count();
                for guest in &guests {
                    let got = edits_of(&rt, guest, config, &conversation);
                    assert_eq!(
                        got,
                        expected,
                        "{} on {format}/{name} with {config}",
                        guest.meta().name
                    );
                }
            }
        }
    }
    assert!(acted >= 10, "the Rust example acted {acted} times only");
    assert!(
        summarized >= 10,
        "{summarized} notes carried an LLM summary"
    );
}

/// The first tool result of `conversation`'s compactable range (its message and block), as
/// the native rules clear it with `note`: the `Clear` edit they make.
fn native_clearing(conversation: &Conversation, keep_recent: usize, note: &str) -> Option<Edit> {
    let messages = &conversation.messages;
    let range = tamp_plugin_api::rules::protect::compactable_range(messages, keep_recent);
    range.into_iter().find_map(|index| {
        let block = messages[index]
            .content
            .iter()
            .position(|b| matches!(b, tamp_plugin_api::ContentBlock::ToolResult { .. }))?;
        let mut clearing = Clearing::new(&messages[index], index);
        assert!(clearing.clear_result(block, note));
        clearing.into_edit()
    })
}

#[test]
fn a_guests_clearing_through_the_hosts_placeholders_is_the_native_one() {
    let rt = tamp_e2e::rt();
    let guest = load_plugin(&component(Guest::Misbehaving)).unwrap();
    let config = json!({"misbehave": "clear"});
    let mut compared = 0;
    for name in corpus_names() {
        let conversation = corpus_conversation("anthropic", &name);
        // The guest's note is rendered by the host from "cleared by {who} {{once}}".
        let Some(expected) = native_clearing(&conversation, 4, "cleared by the fixture {once}")
        else {
            continue;
        };
        let (edits, _, _) = edits_of(&rt, &guest, &config, &conversation);
        assert_eq!(edits, [expected], "on {name}");
        compared += 1;
        // Applied, the result reads as cleared to the guest (the host's `cleared-page`): the
        // next clearing leaves every placeholder as it is and takes another result.
        let mut cleared = conversation.clone();
        let Edit::Clear { index, message } = &edits[0] else {
            unreachable!()
        };
        cleared.messages[*index as usize] = message.clone();
        let (again, _, _) = edits_of(&rt, &guest, &config, &cleared);
        for edit in &again {
            let Edit::Clear { index, message } = edit else {
                panic!("{name}: {edit:?}")
            };
            let before = &cleared.messages[*index as usize];
            for (block, (was, now)) in before
                .content
                .iter()
                .zip(message.content.iter())
                .enumerate()
            {
                assert!(
                    !is_cleared(was) || was == now,
                    "{name}: message {index} block {block}, cleared already, was cleared again"
                );
            }
        }
    }
    assert!(compared >= 5, "{compared} corpus conversations compared");
}

#[test]
fn each_broken_guest_fails_exactly_its_rule() {
    let wasm = component(Guest::Misbehaving);
    // Unbroken, it conforms on the same checks.
    assert_conforms_on_the_quick_checks(&wasm);
    for (misbehave, rule, checks, says) in [
        (
            "loop",
            "TAMP-EDGE-01",
            ALL_BUT_SLOW,
            "returned nothing within 2.0s",
        ),
        ("trap", "TAMP-ERR-01", ALL_BUT_SLOW, "the guest trapped"),
        ("break", "TAMP-INV-03", ALL_BUT_SLOW, "TAMP-INV-03"),
        (
            "bomb",
            "TAMP-EDGE-02",
            "TAMP-EDGE-01,TAMP-EDGE-02,TAMP-ERR-01,TAMP-INV-01",
            "out of memory",
        ),
    ] {
        let config = format!("{{\"misbehave\": \"{misbehave}\"}}");
        let (code, report) = kit_json(
            &wasm,
            &[
                "--config",
                &config,
                "--only",
                checks,
                "--cases",
                "3",
                "--timeout",
                "2",
            ],
        );
        assert_eq!(code, 1, "{misbehave}: {}", report.to_text());
        assert_eq!(
            report.failed_rules(),
            [rule],
            "{misbehave}: {}",
            report.to_text()
        );
        let finding = &report.rule(rule).unwrap().findings[0];
        assert!(finding.message.contains(says), "{misbehave}: {finding:?}");
    }
}

/// A chain of one stage of the misbehaving guest at `wasm`, misbehaving as `misbehave`, with
/// the stage's `timeout_secs` and `[plugins.wasm]` memory cap.
fn broken_chain(
    dir: &Path,
    wasm: &Path,
    misbehave: &str,
    timeout_secs: f64,
    memory_mib: u64,
) -> PathBuf {
    write_chain(
        dir,
        &format!(
            "[budget]\nmax_tokens = 1000\nkeep_recent = 1\n\n[plugins.wasm]\nmemory_mib = {memory_mib}\n\n\
             [[stage]]\nname = \"broken\"\nplugin = \"{}\"\ntrigger = \"always\"\ntimeout_secs = {timeout_secs}\n\
             [stage.config]\nmisbehave = \"{misbehave}\"\n",
            wasm.display()
        ),
    )
}

fn two_messages() -> Conversation {
    Conversation::new(vec![
        Message::text(Role::System, "You are terse."),
        Message::text(Role::User, "hi"),
    ])
}

#[test]
fn an_endless_loop_is_stopped_at_the_stage_timeout_and_its_memory_returned() {
    let rt = tamp_e2e::rt();
    let dir = ScratchDir::new("wasm-loop");
    let (plugin, chain) = own_broken_chain(&dir, "loop", 1.0, 256);
    let options = CompactOptions::default();
    // The stage's first instance, built with its config, waits idle.
    let idle = plugin.sandbox_memory_in_use().unwrap();
    assert!(idle > 0);
    for _ in 0..3 {
        let started = Instant::now();
        let out = rt
            .block_on(chain.compact(two_messages(), &options))
            .unwrap();
        let took = started.elapsed();
        let stage = &out.report.stages[0];
        assert_eq!(stage.status, StageStatus::RolledBack, "{stage:?}");
        let failure = stage.error.as_ref().expect("a failure");
        assert_eq!(failure.kind.as_str(), "timeout", "{failure:?}");
        assert!(
            took >= Duration::from_secs(1) && took <= Duration::from_millis(1200),
            "stopped after {took:?}, not within 1.2x its 1 s timeout"
        );
        assert_eq!(out.conversation.messages, two_messages().messages);
    }
    // Each looping instance (48 MiB and more) was dropped with its memory, the first one too.
    assert_eq!(plugin.sandbox_memory_in_use(), Some(0));
}

/// [`broken_chain`] of this test's [`own_copy`] of the misbehaving guest, built: the loaded
/// plugin (for its memory gauge) and the chain.
fn own_broken_chain(
    dir: &Path,
    misbehave: &str,
    timeout_secs: f64,
    memory_mib: u64,
) -> (Arc<LoadedPlugin>, Chain) {
    let (wasm, plugin) = own_copy(dir, Guest::Misbehaving);
    let path = broken_chain(dir, &wasm, misbehave, timeout_secs, memory_mib);
    (plugin, Chain::from_file(&path, Default::default()).unwrap())
}

/// A copy of `guest` in `dir`, and the component loaded from it: a plugin of its own (the
/// loader keeps one per file), so that its memory gauge counts this test's instances alone.
fn own_copy(dir: &Path, guest: Guest) -> (PathBuf, Arc<LoadedPlugin>) {
    let wasm = dir.join("guest.wasm");
    std::fs::copy(component(guest), &wasm).unwrap();
    let plugin = load_plugin(&wasm).unwrap();
    (wasm, plugin)
}

#[test]
fn a_memory_bomb_stops_at_the_cap() {
    let rt = tamp_e2e::rt();
    let dir = ScratchDir::new("wasm-bomb");
    let (plugin, chain) = own_broken_chain(&dir, "bomb", 60.0, 96);
    assert!(plugin.sandbox_memory_in_use().unwrap() > 0);
    let mut conversation = two_messages();
    conversation
        .messages
        .push(Message::text(Role::Assistant, "x".repeat(1_200_000)));
    let started = Instant::now();
    let out = rt
        .block_on(chain.compact(conversation.clone(), &CompactOptions::default()))
        .unwrap();
    let stage = &out.report.stages[0];
    assert_eq!(stage.status, StageStatus::RolledBack, "{stage:?}");
    let failure = stage.error.as_ref().expect("a failure");
    assert_eq!(failure.kind.as_str(), "panicked", "{failure:?}");
    assert!(
        failure.message.contains("out of memory") && failure.message.contains("cap of 96 MiB"),
        "{failure:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.conversation.messages, conversation.messages);
    // The instance that hit the cap is gone with its memory.
    assert_eq!(plugin.sandbox_memory_in_use(), Some(0));
}

/// `bytes` with every `from` replaced by `to` (the same length).
fn patched(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let found = tamp_e2e::replace_all(&mut out, from.as_bytes(), to.as_bytes());
    assert!(found > 0, "{from} not found");
    out
}

/// `component` with its tamp interfaces renamed from version `from` to `to` (of equal
/// length): the same guest as if built against another version of the world.
fn in_world(component: &[u8], from: &str, to: &str) -> Vec<u8> {
    let mut bytes = component.to_vec();
    for interface in ["types", "host", "strategy"] {
        bytes = patched(
            &bytes,
            &format!("tamp:strategy/{interface}@{from}"),
            &format!("tamp:strategy/{interface}@{to}"),
        );
    }
    bytes
}

#[test]
fn a_component_for_another_world_or_with_other_imports_is_refused_naming_why() {
    let dir = ScratchDir::new("wasm-refused");
    let built = std::fs::read(component(Guest::Misbehaving)).unwrap();
    let version = tamp_plugin_api::ABI_VERSION;
    let (major, minor) = {
        let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    };
    // The same guest, its interfaces renamed to an older world: refused naming both.
    let older = format!("{major}.{}.0", minor.saturating_sub(1));
    assert_eq!(older.len(), version.len());
    let old_world = dir.join("old-world.wasm");
    std::fs::write(&old_world, in_world(&built, version, &older)).unwrap();
    let err = LoadedPlugin::load(&old_world).unwrap_err().to_string();
    assert!(
        err.contains(&format!("tamp:strategy@{older}"))
            && err.contains(&format!("tamp:strategy@{version}")),
        "{err}"
    );
    // Built against an earlier patch release of the same world (one that imports fewer host
    // functions): loaded and run, its imports matched to this host's.
    let patch: u64 = version.rsplit('.').next().unwrap().parse().unwrap();
    if patch > 0 {
        let earlier = format!("{major}.{minor}.0");
        let earlier_world = dir.join("earlier-patch.wasm");
        std::fs::write(&earlier_world, in_world(&built, version, &earlier)).unwrap();
        let loaded = LoadedPlugin::load(&earlier_world).unwrap();
        assert_eq!(loaded.meta().plugin_api_version, earlier);
        let conversation = corpus_conversation("anthropic", &corpus_names()[0]);
        let rt = tamp_e2e::rt();
        let (edits, reason, _) = edits_of(&rt, &loaded, &json!({}), &conversation);
        assert!(edits.is_empty(), "{reason}");
        assert_eq!(reason, "a guest that returns no edits");
    }
    // Its host interface renamed to a WASI one: refused before anything is compiled.
    let wasi = dir.join("wasi.wasm");
    let host = format!("tamp:strategy/host@{version}");
    let random = format!("wasi:random/random@{version}");
    assert_eq!(host.len(), random.len());
    std::fs::write(&wasi, patched(&built, &host, &random)).unwrap();
    let err = LoadedPlugin::load(&wasi).unwrap_err().to_string();
    assert_contains(
        &err,
        &format!("imports {random}, which tamp gives no guest"),
    );
    // Not a component at all, and through the CLI the same words.
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x01\0\0\0").unwrap();
    let out = Command::new(tamp_bin())
        .args(["plugins", "describe"])
        .arg(&garbage)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("garbage.wasm") && stderr.contains("a core WebAssembly module"),
        "{stderr}"
    );
}

#[test]
fn pins_allow_dirs_and_the_plugins_commands_hold_for_components() {
    let dir = ScratchDir::new("wasm-trust");
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let wasm = plugins.join("archive.wasm");
    std::fs::copy(component(Guest::PythonTemplate), &wasm).unwrap();
    let tamp = |args: &[&str]| {
        let out = Command::new(tamp_bin()).args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let wasm_arg = wasm.to_str().unwrap();
    let (ok, hash_line, _) = tamp(&["plugins", "hash", wasm_arg]);
    assert!(ok && hash_line.starts_with("sha256 = \""), "{hash_line}");
    let (ok, described, err) = tamp(&["plugins", "describe", wasm_arg]);
    assert!(ok, "{err}");
    assert_contains(&described, "py-custom-strategy");
    assert_contains(&described, "WebAssembly component");
    let (ok, listed, err) = tamp(&["plugins", "list", "--dir", plugins.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        listed.contains("py-custom-strategy") && listed.contains("archive.wasm"),
        "{listed}"
    );

    let chain = |pin: &str, allow: &str| {
        write_chain(
            &dir,
            &format!(
                "{allow}[[stage]]\nname = \"archive\"\nplugin = \"plugins/archive.wasm\"\n{pin}\
                 wasm = {{ memory_mib = 128 }}\n"
            ),
        )
    };
    let check = |path: &Path| tamp(&["check-config", "--config", path.to_str().unwrap()]);
    // Pinned to its own hash, inside allow_dirs: accepted.
    let good = chain(&hash_line, "[plugins]\nallow_dirs = [\"plugins\"]\n\n");
    let (ok, _, err) = check(&good);
    assert!(ok, "{err}");
    // Another pin: refused, naming both hashes.
    let wrong = "0".repeat(64);
    let (ok, _, err) = check(&chain(&format!("sha256 = \"{wrong}\"\n"), ""));
    assert!(
        !ok && err.contains(&wrong) && err.contains("refused, not loaded"),
        "{err}"
    );
    // Outside allow_dirs: refused.
    std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
    let (ok, _, err) = check(&chain("", "[plugins]\nallow_dirs = [\"elsewhere\"]\n\n"));
    assert!(!ok && err.contains("outside [plugins] allow_dirs"), "{err}");
    // Limits out of range, or on a stage whose plugin is not a component: refused at the key.
    for (toml, says) in [
        (
            "[plugins.wasm]\nmemory_mib = 0\n\n[[stage]]\nname = \"archive\"\nplugin = \"plugins/archive.wasm\"\n",
            ":2: plugins.wasm.memory_mib: 0 is out of range",
        ),
        (
            "[[stage]]\nname = \"native\"\nplugin = \"custom-strategy\"\nwasm = { max_instances = 2 }\n",
            "limits for a WebAssembly component",
        ),
    ] {
        let (ok, _, err) = check(&write_chain(&dir, toml));
        assert!(!ok && err.contains(says), "{err}");
    }
}

/// A conversation of `n` plain ASCII user and assistant turns after a system prompt.
fn ascii_turns(n: usize) -> Value {
    let messages: Vec<Value> = (0..n)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("turn {i}: {}", "plain words ".repeat(20))})
        })
        .collect();
    json!({"model": "m", "max_tokens": 64, "system": "You are terse.", "messages": messages})
}

/// The broken stage's part of an answer: its status and its failure's kind and message.
fn broken_stage(answer: &Value) -> (String, String, String) {
    let stage = &answer["report"]["stages"][0];
    assert_eq!(stage["stage"], "broken", "{answer:#}");
    (
        stage["status"].as_str().unwrap_or_default().to_string(),
        stage["error"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        stage["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// `tamp serve` runs a chain of a broken guest and a template guest while a client sends
/// requests throughout: every misbehaviour (a trap, a rule broken, an endless loop, a memory
/// bomb) rolls its stage back and nothing else, every request is answered, and the template
/// is hot-reloaded when its file is rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_guests_reloads_them_and_stays_up_through_their_failures() {
    let dir = ScratchDir::new("wasm-serve");
    std::fs::copy(component(Guest::Misbehaving), dir.join("broken.wasm")).unwrap();
    std::fs::copy(component(Guest::PythonTemplate), dir.join("archive.wasm")).unwrap();
    let js_template = component(Guest::JsTemplate);
    let chain = |misbehave: &str| {
        // The loop is stopped at 1 s; the other failures must come from the guest, not from
        // a timeout on a busy machine (a bomb reads 1.2 MB and fills 128 MiB first).
        let timeout = if misbehave == "loop" { 1 } else { 30 };
        format!(
            "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
             [plugins.wasm]\nmemory_mib = 128\n\n\
             [[stage]]\nname = \"broken\"\nplugin = \"broken.wasm\"\ntrigger = \"always\"\n\
             timeout_secs = {timeout}\n[stage.config]\nmisbehave = \"{misbehave}\"\n\n\
             [[stage]]\nname = \"archive\"\nplugin = \"archive.wasm\"\n[stage.config]\nkeep_exchanges = 1\n"
        )
    };
    let config = write_chain(&dir, &chain("trap"));
    let server = Arc::new(Server::start(&config, &[]));

    // The client: the corpus conversation over and over, each answered with the template's
    // archived tool runs, whatever the broken stage does meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let client = {
        let (server, stop, answered) = (
            Arc::clone(&server),
            Arc::clone(&stop),
            Arc::clone(&answered),
        );
        let conversation: Value =
            serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2"))
                .unwrap();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let body = json!({"conversation": conversation, "thread_continuity": false});
                let (status, answer) = server.compact(&body).await;
                assert_eq!(status, 200, "{answer:#}");
                let archive = &answer["report"]["stages"][1];
                assert_eq!(archive["status"], "acted", "{answer:#}");
                answered.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let reload_to = |misbehave: &'static str| {
        let (server, config, text) = (Arc::clone(&server), config.clone(), chain(misbehave));
        async move {
            write_atomically(&config, text.as_bytes());
            server
                .wait_for_chain(misbehave, Duration::from_secs(60), |c| {
                    c["stages"][0]["config"]["misbehave"] == misbehave
                })
                .await;
        }
    };
    let send = |conversation: Value| {
        let server = Arc::clone(&server);
        async move {
            let (status, answer) = server
                .compact(&json!({"conversation": conversation, "thread_continuity": false}))
                .await;
            assert_eq!(status, 200, "{answer:#}");
            answer
        }
    };

    // A trap: rolled back as a panic.
    let (status, kind, message) = broken_stage(&send(ascii_turns(12)).await);
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("rolled_back", "panicked"),
        "{message}"
    );
    assert_contains(&message, "the guest trapped");
    // A rule broken: rolled back by the invariant check.
    reload_to("break").await;
    let answer = send(ascii_turns(12)).await;
    let (status, kind, _) = broken_stage(&answer);
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("rolled_back", "invariant"),
        "{answer:#}"
    );
    let rule = answer["report"]["stages"][0]["error"]["rule"].as_str();
    assert!(
        rule.is_some_and(|r| r.starts_with("TAMP-INV-03 ")),
        "{answer:#}"
    );
    // An endless loop: stopped at its 1 s timeout.
    reload_to("loop").await;
    let started = Instant::now();
    let two = json!({"model": "m", "max_tokens": 64, "system": "s", "messages": [{"role": "user", "content": "hi"}]});
    let (status, kind, message) = broken_stage(&send(two).await);
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("rolled_back", "timeout"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A memory bomb: stopped at the 128 MiB cap.
    reload_to("bomb").await;
    let mut big = ascii_turns(4);
    big["messages"][1]["content"] = json!("y".repeat(1_200_000));
    let (status, kind, message) = broken_stage(&send(big).await);
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("rolled_back", "panicked"),
        "{message}"
    );
    assert_contains(&message, "cap of 128 MiB");

    // The template rebuilt (here: replaced by the JavaScript one): hot-reloaded.
    write_atomically(
        &dir.join("archive.wasm"),
        &std::fs::read(&js_template).unwrap(),
    );
    server
        .wait_for_chain("the rebuilt template", Duration::from_secs(120), |c| {
            c["stages"][1]["plugin"] == "js-custom-strategy"
        })
        .await;
    let before = answered.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while answered.load(Ordering::Relaxed) < before + 2 {
        assert!(
            Instant::now() < deadline,
            "the client stalled after the reload"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    client.await.expect("every request was answered");
    assert!(answered.load(Ordering::Relaxed) >= 4);
    let health = server.get_json("/healthz").await;
    assert_eq!(health["status"], "ok", "{health:#}");
    assert_eq!(
        chain_stage_names(&server.get_json("/v1/chain").await),
        ["broken", "archive"]
    );
}
