//! Issue 22, item 1: only the plugins the operator meant. Through the real `tamp` binary:
//!
//! - `tamp plugins hash` prints the file's SHA-256 (checked against `sha256sum`) as the line
//!   to paste; a stage pinned to it loads, a stage pinned to other bytes is refused with both
//!   hashes, the file and the line;
//! - under `tamp serve`, a library replaced on disk under a pinned stage is refused at the
//!   reload (the old chain keeps answering, no copy of the new bytes is made), and a pin
//!   updated to the new bytes is applied;
//! - `--require-pins` refuses an unpinned stage at start and at reload;
//! - `[plugins] allow_dirs` refuses a plugin outside the directories, symlinks resolved.
//!
//! Waits are polls with deadlines, never fixed sleeps.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::serve_support::{write_atomically, ScratchDir, Server};
use tamp_e2e::{assert_ok, assert_stderr_has};
use tamp_e2e::{corpus, plugin, run_tamp as tamp, tamp_bin, text, write_chain};

const RELOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// The SHA-256 of `file` by coreutils' `sha256sum`: a second opinion on tamp's.
fn sha256sum(file: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(file)
        .output()
        .expect("run sha256sum");
    assert!(out.status.success());
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `tamp plugins hash <file>`'s line.
fn pin_line(file: &Path) -> String {
    let out = tamp(&["plugins", "hash", file.to_str().unwrap()], Path::new("."));
    assert_ok(&out, "");
    text(&out.stdout).trim().to_string()
}

/// One stage (no config: both plugins used here accept their defaults), `extra` lines added
/// to it (a pin), pages in a store beside the file.
fn chain_toml(plugin: &str, extra: &str) -> String {
    format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [[stage]]\nname = \"pinned\"\nplugin = \"{plugin}\"\n{extra}\n"
    )
}

fn request(thread: &str) -> Value {
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    json!({"conversation": conversation, "thread_id": thread, "thread_continuity": false})
}

fn first_stage(chain: &Value) -> &Value {
    &chain["stages"][0]
}

fn reload_error(chain: &Value) -> &str {
    chain["last_reload_error"]["message"].as_str().unwrap_or("")
}

/// The private copies a `tamp serve` process made (`<stem>-<sha256 prefix>.so`).
fn private_copies(pid: u32) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("tamp-plugins-{pid}"));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn plugins_hash_prints_the_pin_and_a_stage_pinned_to_other_bytes_is_refused() {
    let dir = ScratchDir::new("trust-hash");
    let strategy = dir.join("strategy.so");
    std::fs::copy(plugin("tamp_custom_strategy"), &strategy).unwrap();
    let expected = sha256sum(&strategy);
    let line = pin_line(&strategy);
    assert_eq!(line, format!("sha256 = \"{expected}\""));

    // The pasted line loads: `tamp compact` runs the stage.
    let config = write_chain(&dir, &chain_toml("strategy.so", &line));
    let input = dir.join("in.json");
    std::fs::write(
        &input,
        corpus("anthropic", "taubench_gpt4o_airline_task2_trial2"),
    )
    .unwrap();
    let args = [
        "compact",
        input.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--report-json",
        "-",
    ];
    let out = tamp(&args, &dir);
    assert_ok(&out, "");
    assert_stderr_has(&out, "\"stage\": \"pinned\"");

    // Another plugin's bytes under the same name: refused with both hashes, the file and
    // the stage's line, by `tamp compact` and `tamp check-config` alike.
    std::fs::copy(plugin("tamp_buffered_tool_call"), &strategy).unwrap();
    let actual = sha256sum(&strategy);
    assert_ne!(actual, expected);
    for out in [
        tamp(&args, &dir),
        tamp(
            &["check-config", "--config", config.to_str().unwrap()],
            &dir,
        ),
    ] {
        assert!(!out.status.success());
        let err = text(&out.stderr);
        // The pin's own line is the one at fault.
        assert_contains(&err, &format!("{}:11:", config.display()));
        assert_contains(&err, "stage \"pinned\"");
        assert!(err.contains(&expected) && err.contains(&actual), "{err}");
        assert_contains(&err, "strategy.so");
        assert_contains(&err, "refused, not loaded");
    }

    // A pin that is not a SHA-256 is a config error naming the field.
    write_chain(&dir, &chain_toml("strategy.so", "sha256 = \"abc\""));
    let out = tamp(
        &["check-config", "--config", config.to_str().unwrap()],
        &dir,
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_contains(&err, "sha256: expected 64 hex digits");

    // Hashing reads the file and runs none of it: a file that only starts like a library (no
    // loader would take it) hashes too; one that does not even start like one is refused.
    std::fs::write(dir.join("stub.so"), b"\x7fELF").unwrap();
    assert_eq!(
        pin_line(&dir.join("stub.so")),
        // SHA-256 of the four bytes 7f 45 4c 46.
        "sha256 = \"3bdbb4fe8397cd2b842430b39ccff01a8663c751945ef5e9a09e267fb8b1d359\""
    );
    std::fs::write(dir.join("notes.txt"), b"abc").unwrap();
    let out = tamp(&["plugins", "hash", "notes.txt"], &dir);
    assert!(!out.status.success());
    assert_stderr_has(&out, "notes.txt");
    let out = tamp(&["plugins", "hash", "no-such.so"], &dir);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no-such.so"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_library_replaced_under_a_pinned_stage_is_refused_at_reload() {
    let dir = ScratchDir::new("trust-reload");
    let strategy = dir.join("strategy.so");
    std::fs::copy(plugin("tamp_custom_strategy"), &strategy).unwrap();
    let first_hash = sha256sum(&strategy);
    let config = write_chain(&dir, &chain_toml("strategy.so", &pin_line(&strategy)));
    let server = Server::start(&config, &["--require-pins"]);
    let first = server.get_json("/v1/chain").await;
    assert_eq!(first_stage(&first)["plugin"], "custom-strategy");

    // A rebuilt library lands under the pinned stage (renamed over it, as `cargo build` and
    // `install` do): refused, the pinned one keeps answering.
    let staged = dir.join("strategy.so.new");
    std::fs::copy(plugin("tamp_buffered_tool_call"), &staged).unwrap();
    let new_hash = sha256sum(&staged);
    std::fs::rename(&staged, &strategy).unwrap();
    let chain = server
        .wait_for_chain("the replaced library's refusal", RELOAD_TIMEOUT, |c| {
            !reload_error(c).is_empty()
        })
        .await;
    let message = reload_error(&chain);
    assert!(
        message.contains(&first_hash) && message.contains(&new_hash),
        "{chain:#}"
    );
    assert!(
        message.starts_with("stage \"pinned\": plugin "),
        "{chain:#}"
    );
    assert_eq!(chain["last_reload_error"]["line"], 11, "{chain:#}");
    assert_eq!(first_stage(&chain)["plugin"], "custom-strategy");
    assert_eq!(
        first_stage(&chain)["plugin_identity"],
        first_stage(&first)["plugin_identity"]
    );
    let (status, answer) = server.compact(&request("after-refusal")).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["report"]["stages"][0]["plugin"], "custom-strategy");
    // Refused before it was copied, so before the dynamic linker saw it.
    let copies = private_copies(server.pid());
    assert!(
        copies.iter().any(|c| c.contains(&first_hash[..16])),
        "{copies:?}"
    );
    assert!(
        !copies.iter().any(|c| c.contains(&new_hash[..16])),
        "{copies:?}"
    );

    // The operator pins the new build: applied.
    write_atomically(
        &config,
        chain_toml("strategy.so", &pin_line(&strategy)).as_bytes(),
    );
    let chain = server
        .wait_for_chain("the new pin", RELOAD_TIMEOUT, |c| {
            first_stage(c)["plugin"] == "buffered-tool-call"
        })
        .await;
    assert!(chain["last_reload_error"].is_null(), "{chain:#}");
    let (status, answer) = server.compact(&request("after-new-pin")).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(
        answer["report"]["stages"][0]["plugin"],
        "buffered-tool-call"
    );

    // Under --require-pins, a reload adding an unpinned stage is refused.
    let unpinned = format!(
        "{}\n[[stage]]\nname = \"loose\"\nplugin = \"strategy.so\"\n",
        chain_toml("strategy.so", &pin_line(&strategy))
    );
    write_atomically(&config, unpinned.as_bytes());
    let chain = server
        .wait_for_chain("the unpinned stage's refusal", RELOAD_TIMEOUT, |c| {
            reload_error(c).contains("--require-pins")
        })
        .await;
    assert!(
        reload_error(&chain).starts_with("stage \"loose\": sha256: required"),
        "{chain:#}"
    );
    assert_eq!(chain["stages"].as_array().unwrap().len(), 1, "{chain:#}");
}

#[test]
fn require_pins_refuses_an_unpinned_stage_at_start() {
    let dir = ScratchDir::new("trust-require");
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let config = write_chain(&dir, &chain_toml("strategy.so", ""));
    let out = Command::new(tamp_bin())
        .args(["serve", "--require-pins", "--listen", "127.0.0.1:0"])
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("run tamp serve");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}:10: stage \"pinned\": sha256: required (--require-pins)",
            config.display()
        )),
        "{err}"
    );
    assert_contains(&err, "tamp plugins hash");
    assert!(!err.contains("listening"), "{err}");
    // Without the flag the same chain serves; check-config has the flag too.
    let out = tamp(
        &["check-config", "--config", config.to_str().unwrap()],
        &dir,
    );
    assert_ok(&out, "");
    let out = tamp(
        &[
            "check-config",
            "--require-pins",
            "--config",
            config.to_str().unwrap(),
        ],
        &dir,
    );
    assert!(!out.status.success());
}

#[cfg(unix)]
#[test]
fn allow_dirs_refuse_a_plugin_outside_them_symlinks_resolved() {
    let dir = ScratchDir::new("trust-allow");
    for sub in ["allowed", "outside", "allowed-not"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::copy(
            plugin("tamp_custom_strategy"),
            dir.join(sub).join("strategy.so"),
        )
        .unwrap();
    }
    // A link inside the allowed directory to a file outside it, and the reverse.
    std::os::unix::fs::symlink("../outside/strategy.so", dir.join("allowed/link.so")).unwrap();
    std::os::unix::fs::symlink("../allowed/strategy.so", dir.join("outside/link.so")).unwrap();
    let check = |plugin: &str| {
        let toml = format!(
            "[plugins]\nallow_dirs = [\"allowed\"]\n\n{}",
            chain_toml(plugin, "")
        );
        let config = write_chain(&dir, &toml);
        tamp(
            &["check-config", "--config", config.to_str().unwrap()],
            &dir,
        )
    };
    for ok in ["allowed/strategy.so", "outside/link.so"] {
        let out = check(ok);
        assert_ok(&out, format!("{ok}: "));
    }
    let outside = dir.join("outside/strategy.so").canonicalize().unwrap();
    let allowed = dir.join("allowed").canonicalize().unwrap();
    for refused in [
        "allowed/link.so",
        "outside/strategy.so",
        "allowed-not/strategy.so",
    ] {
        let out = check(refused);
        assert!(!out.status.success(), "{refused} was accepted");
        let err = text(&out.stderr);
        assert_contains(&err, ":13: stage \"pinned\": plugin ");
        assert!(err.contains(refused), "{err}");
        assert!(
            err.contains(&format!(
                "outside [plugins] allow_dirs ({})",
                allowed.display()
            )),
            "{err}"
        );
        if refused != "allowed-not/strategy.so" {
            assert_contains(&err, &outside.display().to_string());
        }
    }
    // An allowed directory that does not exist, or an empty list, names the field.
    let config = write_chain(
        &dir,
        &format!(
            "[plugins]\nallow_dirs = [\"allowed\", \"typo\"]\n\n{}",
            chain_toml("allowed/strategy.so", "")
        ),
    );
    let out = tamp(
        &["check-config", "--config", config.to_str().unwrap()],
        &dir,
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_contains(&err, ":2: plugins.allow_dirs[1]: typo: ");
    let config = write_chain(
        &dir,
        &format!(
            "[plugins]\nallow_dirs = []\n\n{}",
            chain_toml("allowed/strategy.so", "")
        ),
    );
    let out = tamp(
        &["check-config", "--config", config.to_str().unwrap()],
        &dir,
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_contains(&err, ":2: plugins.allow_dirs: empty");
}

/// docs/security.md's example chain, with its directory and pin made real, is accepted by
/// `tamp check-config --require-pins`; with the placeholder pin left in, it is refused.
#[test]
fn the_security_docs_example_chain_checks() {
    let doc = std::fs::read_to_string(tamp_e2e::workspace_root().join("docs/security.md"))
        .expect("docs/security.md");
    let example = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in docs/security.md");
    let dir = ScratchDir::new("trust-doc");
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let library = plugins.join("libtamp_custom_strategy.so");
    std::fs::copy(plugin("tamp_custom_strategy"), &library).unwrap();
    let placeholder = example
        .lines()
        .find(|l| l.starts_with("sha256 = "))
        .expect("the example pins its stage");
    let toml = example.replace("/opt/tamp/plugins", plugins.to_str().unwrap());
    let config = write_chain(&dir, &toml);
    let out = tamp(
        &[
            "check-config",
            "--require-pins",
            "--config",
            config.to_str().unwrap(),
        ],
        &dir,
    );
    assert!(!out.status.success());
    assert_stderr_has(&out, "sha256: expected 64 hex digits");
    write_chain(&dir, &toml.replace(placeholder, &pin_line(&library)));
    let out = tamp(
        &[
            "check-config",
            "--require-pins",
            "--config",
            config.to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&out, "");
}
