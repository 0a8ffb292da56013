//! Issue 32, point 2: a half-written plugin file never kills the host. A `.so` cut short (an
//! interrupted `cp`, a full disk) has loadable segments reaching past its end; mapped, it
//! killed the process with SIGBUS the first time a missing page was touched. Through the real
//! `tamp` binary and a real built plugin:
//!
//! - `check-config`, `plugins describe`, `plugins hash` and `compact` refuse a plugin cut at
//!   several points with an error naming the file and the reason, and exit 1;
//! - `tamp serve`, whose unpinned stage's file is overwritten in place by a cut copy while
//!   requests keep coming, refuses each reload with the reason, keeps serving the old chain
//!   and answers every request; the complete file, once written, is loaded;
//! - a device or a directory named as a plugin is called what it is (issue 32, point 7);
//! - a plugin built for another architecture of the same word size is named as such.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_ok;
use tamp_e2e::serve_support::{ScratchDir, Server};
use tamp_e2e::{corpus, plugin, run_tamp as tamp, text, write_chain};

const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);

fn chain_toml(plugin: &str) -> String {
    format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [[stage]]\nname = \"strategy\"\nplugin = \"{plugin}\"\n"
    )
}

/// The points a real plugin is cut at: inside the ELF header, inside the program headers,
/// inside the loadable segments, among the debug sections, and one byte short.
fn cut_points(len: usize) -> Vec<usize> {
    vec![40, 300, len / 10, len / 2, len * 9 / 10, len - 1]
}

/// Overwrites `path` in place (same inode, as `cp` does) with `bytes`.
fn overwrite_in_place(path: &Path, bytes: &[u8]) {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
}

/// Exited with a status code (not killed by a signal), 1, and said why on stderr.
fn assert_refused(out: &Output, what: &str, needles: &[&str]) {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: exit {:?} (a signal?), stderr: {stderr}",
        out.status
    );
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{what}: {needle:?} not in: {stderr}"
        );
    }
}

#[test]
fn every_command_refuses_a_plugin_cut_short_naming_the_file_and_why() {
    let dir = ScratchDir::new("half-written");
    let whole = std::fs::read(plugin("tamp_custom_strategy")).unwrap();
    let file = dir.join("strategy.so");
    let config = write_chain(&dir, &chain_toml("strategy.so"));
    let input = dir.join("input.json");
    std::fs::write(
        &input,
        corpus("anthropic", "taubench_gpt4o_airline_task2_trial2"),
    )
    .unwrap();
    let file_text = file.to_str().unwrap();
    let (config_text, input_text) = (config.to_str().unwrap(), input.to_str().unwrap());

    for cut in cut_points(whole.len()) {
        std::fs::write(&file, &whole[..cut]).unwrap();
        let bytes = format!("the file has {cut} bytes");
        let needles = [file_text, "damaged or incomplete shared library", &bytes];
        let describe = tamp(&["plugins", "describe", file_text], &dir);
        assert_refused(&describe, &format!("describe, cut at {cut}"), &needles);
        let check = tamp(&["check-config", "--config", config_text], &dir);
        assert_refused(&check, &format!("check-config, cut at {cut}"), &needles);
        assert!(
            !text(&check.stdout).contains("ok"),
            "{}",
            text(&check.stdout)
        );
        let compact = tamp(&["compact", input_text, "--config", config_text], &dir);
        assert_refused(&compact, &format!("compact, cut at {cut}"), &needles);
        assert!(compact.stdout.is_empty(), "nothing written on a refusal");
    }
    // The whole file loads: what was refused was the cut, not the plugin.
    std::fs::write(&file, &whole).unwrap();
    let check = tamp(&["check-config", "--config", config_text], &dir);
    assert_ok(&check, "");

    // A device, a directory, a FIFO: named as what they are, never "no such file", and never
    // read (reading /dev/zero would not end; opening a FIFO would block).
    let fifo = dir.join("pipe.so");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    for (path, kind) in [
        ("/dev/zero", "it is a character device"),
        (dir.to_str().unwrap(), "it is a directory"),
        (fifo.to_str().unwrap(), "it is a FIFO"),
    ] {
        for command in [&["plugins", "describe"][..], &["plugins", "hash"][..]] {
            let out = tamp(&[command, &[path]].concat(), &dir);
            assert_refused(&out, &format!("{command:?} {path}"), &[path, kind]);
            assert!(!text(&out.stderr).contains("no such file"));
        }
        std::fs::write(&config, chain_toml(path)).unwrap();
        let out = tamp(&["check-config", "--config", config_text], &dir);
        assert_refused(&out, &format!("check-config of {path}"), &[path, kind]);
    }
}

/// A real plugin with its ELF header's machine patched to AArch64: the same word size and
/// byte order as x86-64, so only the machine tells it apart. The dynamic linker called it
/// "No such file or directory".
#[cfg(target_arch = "x86_64")]
#[test]
fn a_plugin_for_another_architecture_is_named_as_such() {
    let dir = ScratchDir::new("other-machine");
    let mut bytes = std::fs::read(plugin("tamp_custom_strategy")).unwrap();
    bytes[18..20].copy_from_slice(&183u16.to_le_bytes());
    let file = dir.join("arm64.so");
    std::fs::write(&file, &bytes).unwrap();
    let config = write_chain(&dir, &chain_toml("arm64.so"));
    let file_text = file.to_str().unwrap();
    let needles = [
        file_text,
        "for AArch64 (arm64) (machine 183), built for another kind of machine",
    ];
    for args in [
        vec!["plugins", "describe", file_text],
        vec!["check-config", "--config", config.to_str().unwrap()],
    ] {
        let out = tamp(&args, &dir);
        assert_refused(&out, &format!("{args:?}"), &needles);
        assert!(
            !text(&out.stderr).contains("No such file"),
            "{}",
            text(&out.stderr)
        );
    }
}

fn request(thread: &str) -> Value {
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    json!({"conversation": conversation, "thread_id": thread, "thread_continuity": false})
}

fn reload_error(chain: &Value) -> &str {
    chain["last_reload_error"]["message"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_overwritten_in_place_under_load_never_kills_the_server() {
    let dir = ScratchDir::new("half-written-serve");
    let file = dir.join("strategy.so");
    std::fs::copy(plugin("tamp_custom_strategy"), &file).unwrap();
    let config = write_chain(&dir, &chain_toml("strategy.so"));
    let server = Arc::new(Server::start(&config, &[]));
    let first = server.get_json("/v1/chain").await;
    assert_eq!(first["stages"][0]["plugin"], "custom-strategy", "{first:#}");

    // Requests keep coming on four connections for the whole test; every one must be answered.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    for worker in 0..4 {
        let (server, stop, answered) = (server.clone(), stop.clone(), answered.clone());
        load.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 10_000 {
                n += 1;
                let (status, answer) = server.compact(&request(&format!("w{worker}-{n}"))).await;
                if status == 200 {
                    answered.fetch_add(1, Ordering::Relaxed);
                } else {
                    failures.push(format!("{status}: {answer}"));
                }
            }
            failures
        }));
    }

    // Another plugin is copied over the file in place, and the copy stops short at several
    // points before it completes: each reload is refused with the reason, the old chain
    // keeps serving.
    let replacement = std::fs::read(plugin("tamp_buffered_tool_call")).unwrap();
    let len = replacement.len();
    for cut in [len / 10, len / 2, len - 1] {
        let before = answered.load(Ordering::Relaxed);
        overwrite_in_place(&file, &replacement[..cut]);
        let needle = format!("the file has {cut} bytes");
        let chain = server
            .wait_for_chain(
                &format!("the refusal of the cut at {cut}"),
                RELOAD_TIMEOUT,
                |c| reload_error(c).contains(&needle),
            )
            .await;
        let message = reload_error(&chain);
        assert!(
            message.contains("damaged or incomplete shared library")
                && message.contains(file.to_str().unwrap()),
            "{chain:#}"
        );
        assert_eq!(chain["stages"][0]["plugin"], "custom-strategy", "{chain:#}");
        // The log line reaches the test's reader thread in its own time (a loaded CI
        // machine saw the chain's refusal before it).
        let log = tokio::task::block_in_place(|| server.log_containing(&[&needle]));
        assert!(log.contains(&needle), "the refusal is logged: {log}");
        // Still answering after the refusal.
        let deadline = std::time::Instant::now() + RELOAD_TIMEOUT;
        while answered.load(Ordering::Relaxed) < before + 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "no answers after the cut at {cut}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The copy completes: the new plugin is loaded and answers.
    overwrite_in_place(&file, &replacement);
    server
        .wait_for_chain("the complete file", RELOAD_TIMEOUT, |c| {
            c["stages"][0]["plugin"] == "buffered-tool-call"
        })
        .await;
    let (status, answer) = server.compact(&request("after")).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(
        answer["report"]["stages"][0]["plugin"],
        "buffered-tool-call"
    );

    stop.store(true, Ordering::Relaxed);
    for task in load {
        let failures = task.await.unwrap();
        assert!(failures.is_empty(), "{failures:?}");
    }
    assert!(answered.load(Ordering::Relaxed) > 12);
    let mut server = Arc::try_unwrap(server).unwrap_or_else(|_| panic!("server still shared"));
    assert!(
        server.try_exit_status().is_none(),
        "the server died: {}",
        server.log()
    );
}
