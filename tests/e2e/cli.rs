//! The `tamp` binary, as a user runs it.

use std::process::{Command, Output};

use tamp_e2e::assert_contains;
use tamp_e2e::{assert_ok, assert_stderr_has};
use tamp_e2e::{
    plugin, run_tamp as tamp, scratch_dir, tamp_bin, text, workspace_root, write_chain,
};

#[test]
fn compact_prints_the_conversation_and_pages_show_brings_back_the_originals() {
    let dir = scratch_dir("cli");
    let root = workspace_root();
    let sample = root.join("examples/conversations/ponyc-4588.anthropic.json");
    let chain = root.join("examples/chains/default.toml");
    let store = dir.join("store.sqlite3");
    let out = tamp(
        &[
            "compact",
            sample.to_str().unwrap(),
            "--config",
            chain.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--report",
            "--report-json",
            dir.join("report.json").to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&out, "stderr: ");
    let stderr = text(&out.stderr);
    assert_contains(
        &stderr,
        "stage archive-old-tool-calls (custom-strategy 0.1.0): acted",
    );

    let compacted: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let original: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sample).unwrap()).unwrap();
    assert_eq!(
        compacted["system"], original["system"],
        "the system prompt is untouched"
    );
    let before = original["messages"].as_array().unwrap().len();
    let after = compacted["messages"].as_array().unwrap().len();
    assert!(after < before, "{after} < {before}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let tokens = |key: &str| {
        report[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in the report: {report}"))
    };
    assert!(tokens("tokens_after") < tokens("tokens_before"));
    let page = report["stages"][0]["pages"][0]
        .as_str()
        .expect("a page")
        .to_string();

    // The summary in the output carries the page ref on the wire.
    let wire = serde_json::to_string(&compacted).unwrap();
    assert!(
        wire.contains(&format!("page=\\\"{page}\\\"")),
        "page ref not in output"
    );

    let shown = tamp(
        &["pages", "show", &page, "--store", store.to_str().unwrap()],
        &dir,
    );
    assert_ok(&shown, "");
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["id"], page.as_str());
    assert_eq!(shown["format"], "anthropic");
    let archived = shown["messages"].as_array().unwrap();
    assert!(!archived.is_empty());
    // The archived messages are verbatim originals.
    for m in archived {
        assert!(
            original["messages"].as_array().unwrap().contains(m),
            "not an original: {m}"
        );
    }
    // The short ref a ledger names the page by shows the same page.
    let short = tamp(
        &[
            "pages",
            "show",
            &page[..15],
            "--store",
            store.to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&short, "");
    let short: serde_json::Value = serde_json::from_slice(&short.stdout).unwrap();
    assert_eq!(short["id"], page.as_str());
    assert_eq!(short["messages"].as_array(), Some(archived));
}

/// Values `serde_json::Value` cannot hold (a lone surrogate escape, integers wider than 64 bits
/// and numbers outside f64's range, nesting past 128 levels) in fields tamp passes through:
/// the output and the pages keep their exact text (issue 23's probe).
#[test]
fn values_tamp_passes_through_come_back_as_sent_in_the_output_and_in_pages() {
    let dir = scratch_dir("cli-passthrough");
    let root = workspace_root();
    let sample =
        std::fs::read_to_string(root.join("examples/conversations/ponyc-4588.anthropic.json"))
            .unwrap();
    let compact_text =
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(&sample).unwrap())
            .unwrap();
    let deep = format!("{}\"bottom\"{}", "[".repeat(200), "]".repeat(200));
    let top = format!(
        r#"{{"model":"m","max_tokens":9,"n":123456789012345678901234,"tools":[{{"name":"t","description":"\ud83d","input_schema":{{}}}}],"deep":{deep},"#
    );
    let hostile_input = r#""input":{"huge":1e400,"s":"\ud83d\/","#;
    let first_input = compact_text.find(r#""input":{"#).expect("a tool input");
    let request = format!(
        "{top}{}{hostile_input}{}",
        &compact_text[1..first_input],
        &compact_text[first_input + r#""input":{"#.len()..]
    );
    std::fs::write(dir.join("hostile.json"), &request).unwrap();
    let store = dir.join("store.sqlite3");
    let out = tamp(
        &[
            "compact",
            "hostile.json",
            "--config",
            root.join("examples/chains/default.toml").to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--report-json",
            "report.json",
        ],
        &dir,
    );
    assert_ok(&out, "");
    let stdout = text(&out.stdout);
    for kept in [
        "\"n\": 123456789012345678901234",
        r#"[{"name":"t","description":"\ud83d","input_schema":{}}]"#,
        "\"model\": \"m\"",
        "\"max_tokens\": 9",
        deep.as_str(),
    ] {
        assert!(stdout.contains(kept), "{kept} is not in the output");
    }
    // The tool exchange holding the hostile input was archived; its page has it as sent.
    assert!(
        !stdout.contains(hostile_input),
        "the first exchange was not compacted"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let page = report["stages"][0]["pages"][0].as_str().expect("a page");
    let shown = tamp(
        &["pages", "show", page, "--store", store.to_str().unwrap()],
        &dir,
    );
    assert_ok(&shown, "");
    assert!(
        text(&shown.stdout).contains(r#""huge":1e400,"s":"\ud83d\/""#),
        "the page lost the tool input: {}",
        text(&shown.stdout)
    );
}

#[test]
fn openai_in_openai_out() {
    let dir = scratch_dir("cli-openai");
    let root = workspace_root();
    let sample = root.join("examples/conversations/ponyc-4588.openai.json");
    let out = tamp(
        &[
            "compact",
            sample.to_str().unwrap(),
            "--config",
            root.join("examples/chains/default.toml").to_str().unwrap(),
            "--store",
            dir.join("s.sqlite3").to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&out, "");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("system").is_none());
    assert_eq!(v["messages"][0]["role"], "system");
    assert!(v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "tool"));
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_status() {
    let dir = scratch_dir("cli-bad");
    std::fs::write(
        dir.join("broken.json"),
        "{\"messages\": [ {\"role\": \"user\", ",
    )
    .unwrap();
    let out = tamp(&["compact", "broken.json"], &dir);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.starts_with("error: broken.json: "), "{err}");
    assert_contains(&err, "line");

    std::fs::write(
        dir.join("orphan.json"),
        r#"{"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}]}"#,
    )
    .unwrap();
    let out = tamp(&["compact", "orphan.json"], &dir);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("messages[1].content[0]") && err.contains("toolu_9"),
        "{err}"
    );

    let chain = write_chain(&dir, "[budget]\nmax_tokens = 0\n");
    let out = tamp(
        &[
            "compact",
            "orphan.json",
            "--config",
            chain.to_str().unwrap(),
        ],
        &dir,
    );
    let err = text(&out.stderr);
    assert_contains(&err, "chain.toml:2: budget.max_tokens");
}

#[test]
fn plugins_describe_prints_metadata_and_schema() {
    let dir = scratch_dir("cli-describe");
    let p = plugin("tamp_custom_strategy");
    let out = tamp(&["plugins", "describe", p.to_str().unwrap()], &dir);
    assert_ok(&out, "");
    let s = text(&out.stdout);
    assert_contains(&s, "name:        custom-strategy");
    assert_contains(&s, "version:     0.1.0");
    assert_contains(&s, "\"keep_exchanges\"");

    let out = tamp(
        &["plugins", "describe", "tamp_custom_strategy", "--json"],
        &dir,
    );
    assert_ok(&out, "");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "custom-strategy");

    let out = tamp(&["plugins", "describe", "no_such_plugin"], &dir);
    assert!(!out.status.success());
    assert_stderr_has(&out, "libno_such_plugin.so");
}

#[test]
fn help_explains_each_command() {
    let dir = scratch_dir("cli-help");
    for args in [
        vec!["--help"],
        vec!["compact", "--help"],
        vec!["plugins", "describe", "--help"],
        vec!["pages", "show", "--help"],
    ] {
        let out = tamp(&args, &dir);
        assert!(out.status.success());
        let s = text(&out.stdout);
        assert_contains(&s, "Usage:");
    }
    let s = text(&tamp(&["compact", "--help"], &dir).stdout);
    assert!(s.contains("--config") && s.contains("--report"), "{s}");
}

#[test]
fn the_shipped_strategies_sample_chain_runs_both_plugins() {
    let dir = scratch_dir("cli-shipped");
    let root = workspace_root();
    let chain = root.join("examples/chains/shipped.toml");
    let run = |sample: &str, extra: &[&str]| {
        let report = dir.join(format!("{sample}.report.json"));
        let sample_path = root.join("examples/conversations").join(sample);
        let store = dir.join("s.sqlite3");
        let mut args = vec![
            "compact",
            sample_path.to_str().unwrap(),
            "--config",
            chain.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--report-json",
            report.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = tamp(&args, &dir);
        assert_ok(&out, "");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
        let tokens = |key: &str| {
            report[key]
                .as_u64()
                .unwrap_or_else(|| panic!("no {key} in the report: {report}"))
        };
        assert!(tokens("tokens_after") < tokens("tokens_before"), "{report}");
        report
    };
    // A tool-heavy coding session: the buffered tool-call stage brings it under the watermark.
    let report = run("ponyc-4588.anthropic.json", &[]);
    assert_eq!(report["stages"][0]["plugin"], "buffered-tool-call");
    assert_eq!(report["stages"][0]["status"], "acted", "{report}");
    // A customer-service chat with few tool calls: the map-reduce stage folds the old turns.
    let report = run("airline-task33.openai.json", &["--force"]);
    assert_eq!(report["stages"][1]["plugin"], "map-reduce-adaptive");
    assert_eq!(report["stages"][1]["status"], "acted", "{report}");
}

#[test]
fn a_closed_stdout_pipe_ends_tamp_quietly() {
    use std::io::Read as _;
    let dir = scratch_dir("cli-pipe");
    let sample = workspace_root().join("examples/conversations/ponyc-4588.anthropic.json");
    // Under the high watermark nothing is compacted, so the whole ~95 KB conversation is
    // written back: more than a pipe buffer, so the write hits the closed pipe.
    let mut child = Command::new(tamp_bin())
        .args([
            "compact",
            sample.to_str().unwrap(),
            "--max-tokens",
            "10000000",
            "--store",
        ])
        .arg(dir.join("s.sqlite3"))
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?} {stderr}", out.status);
}

// ---- the CLI audit: flags checked before work, errors naming what to fix ----

fn ponyc() -> std::path::PathBuf {
    workspace_root().join("examples/conversations/ponyc-4588.anthropic.json")
}

fn default_chain() -> std::path::PathBuf {
    workspace_root().join("examples/chains/default.toml")
}

/// `tamp compact <ponyc> --config default.toml --store s.sqlite3 <extra>` in `dir`, stdin
/// closed.
fn compact_ponyc(dir: &std::path::Path, extra: &[&str]) -> Output {
    let (sample, chain) = (ponyc(), default_chain());
    let mut args = vec![
        "compact",
        sample.to_str().unwrap(),
        "--config",
        chain.to_str().unwrap(),
        "--store",
        "s.sqlite3",
    ];
    args.extend_from_slice(extra);
    tamp_e2e::run_tamp(&args, dir)
}

#[test]
fn an_output_that_cannot_be_written_is_refused_before_anything_is_compacted() {
    let dir = scratch_dir("cli-output-first");
    for (flag, path) in [
        ("-o", "nodir/x.json"),
        ("--output", "nodir/x.json"),
        ("--report-json", "nodir/report.json"),
    ] {
        let out = compact_ponyc(&dir, &[flag, path]);
        assert_eq!(out.status.code(), Some(1), "{flag} {path}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("{path}: cannot write")) && err.contains("--"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "compacted anyway: {flag} {path}");
        // Nothing was archived: the store was not even created.
        assert!(!dir.join("s.sqlite3").exists(), "{flag} {path}: {err}");
    }

    // An output made for a run that fails is removed; one that was there is kept as it was.
    std::fs::write(dir.join("broken.json"), "{\"messages\": [").unwrap();
    std::fs::write(dir.join("kept.json"), "before").unwrap();
    let chain = default_chain();
    let out = tamp_e2e::run_tamp(
        &[
            "compact",
            "broken.json",
            "--config",
            chain.to_str().unwrap(),
            "--store",
            "s.sqlite3",
            "-o",
            "new.json",
            "--report-json",
            "kept.json",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!dir.join("new.json").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("kept.json")).unwrap(),
        "before"
    );

    // And a run that works writes both, over what was there.
    let out = compact_ponyc(&dir, &["-o", "new.json", "--report-json", "kept.json"]);
    assert_ok(&out, "");
    let compacted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("new.json")).unwrap()).unwrap();
    assert!(compacted["messages"].is_array());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("kept.json")).unwrap()).unwrap();
    assert!(report["tokens_before"].is_u64(), "{report}");
}

#[test]
fn a_budget_flag_out_of_range_is_named_by_the_flag_before_anything_is_written() {
    let dir = scratch_dir("cli-budget-flag");
    let out = compact_ponyc(&dir, &["--max-tokens", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.trim(), "error: --max-tokens 0: must be greater than 0");
    assert!(!dir.join("s.sqlite3").exists(), "the store was created");
    // In range, the flags are taken.
    let out = compact_ponyc(&dir, &["--max-tokens", "10000000", "--keep-recent", "0"]);
    assert_ok(&out, "");
}

/// A pseudo-terminal: the controlling end, and the path of the end a child reads as its stdin.
#[cfg(target_os = "linux")]
fn pseudo_terminal() -> (std::fs::File, std::path::PathBuf) {
    use std::os::fd::FromRawFd as _;
    // SAFETY: plain libc calls on a descriptor this function owns; the name buffer is large
    // enough (ptsname_r fails rather than overflow) and NUL-terminated on success.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "posix_openpt");
        let master_file = std::fs::File::from_raw_fd(master);
        assert_eq!(libc::grantpt(master), 0, "grantpt");
        assert_eq!(libc::unlockpt(master), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 256];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let name = std::ffi::CStr::from_ptr(name.as_ptr());
        (master_file, name.to_str().unwrap().into())
    }
}

#[cfg(target_os = "linux")]
#[test]
fn compact_reading_stdin_from_a_terminal_says_so_and_piping_still_works() {
    use std::io::{Read as _, Write as _};
    use std::process::Stdio;
    let dir = scratch_dir("cli-stdin-tty");
    let (mut master, slave) = pseudo_terminal();
    let stdin = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slave)
        .unwrap();
    let mut child = Command::new(tamp_bin())
        .args(["compact", "--store", "s.sqlite3"])
        .current_dir(&dir)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stderr.read(&mut buf) {
            all.extend_from_slice(&buf[..n]);
            let _ = tx.send(text(&all));
        }
        text(&all)
    });
    // What tamp says while it waits: before the input ends.
    let waiting = rx.recv_timeout(std::time::Duration::from_secs(30));
    // Ctrl-D on an empty line: the end of the input.
    master.write_all(b"\x04").unwrap();
    let status = child.wait().unwrap();
    let all = reader.join().unwrap();
    let waiting = waiting.unwrap_or_else(|_| panic!("silent while waiting for stdin; then: {all}"));
    assert_contains(
        &waiting,
        "reading the conversation from stdin (end with Ctrl-D)",
    );
    assert!(!status.success(), "an empty input is refused: {all}");
    drop(master);

    // A pipe is read without a word.
    let mut child = Command::new(tamp_bin())
        .args([
            "compact",
            "--max-tokens",
            "10000000",
            "--store",
            "s.sqlite3",
        ])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let body = std::fs::read(ponyc()).unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || pipe.write_all(&body));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert_ok(&out, "");
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["messages"].is_array());
}

#[test]
fn a_format_flag_that_disagrees_with_the_body_is_warned_about_and_still_obeyed() {
    let dir = scratch_dir("cli-format-mismatch");
    let out = compact_ponyc(&dir, &["--format", "openai", "--report"]);
    assert_ok(&out, "");
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "--format openai was given, but without it the conversation would be read as \
             anthropic; reading it as openai"
        ),
        "{err}"
    );
    // Read as told: the Anthropic blocks are opaque to the OpenAI reader.
    assert_contains(&err, "opaque:");
    // The format the body is in: no warning.
    let out = compact_ponyc(&dir, &["--format", "anthropic"]);
    assert_ok(&out, "");
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn compact_with_a_chain_of_no_stage_warns_as_check_config_does() {
    let dir = scratch_dir("cli-no-stage");
    let chain = write_chain(&dir, "[budget]\nmax_tokens = 1000\n");
    let sample = ponyc();
    let checked = tamp_e2e::run_tamp(&["check-config", "--config", chain.to_str().unwrap()], &dir);
    assert_ok(&checked, "");
    let warning = text(&checked.stderr);
    assert_contains(&warning, "compacts nothing");
    let out = tamp_e2e::run_tamp(
        &[
            "compact",
            sample.to_str().unwrap(),
            "--config",
            chain.to_str().unwrap(),
            "--store",
            "s.sqlite3",
        ],
        &dir,
    );
    assert_ok(&out, "");
    assert!(
        text(&out.stderr).contains(warning.trim()),
        "compact said: {}\ncheck-config said: {warning}",
        text(&out.stderr)
    );
}

#[test]
fn a_store_flag_naming_a_directory_is_blamed_on_the_flag() {
    let dir = scratch_dir("cli-store-dir");
    std::fs::create_dir(dir.join("D")).unwrap();
    let chain = default_chain();
    let chain_arg = chain.to_str().unwrap();
    let sample = ponyc();
    for args in [
        vec!["pages", "list", "--store", "D"],
        vec!["pages", "show", "pg_0123456789ab", "--store", "D"],
        vec!["pages", "verify", "--store", "D"],
        vec!["pages", "list", "--config", chain_arg, "--store", "D"],
        vec!["batch", "status", "--store", "D"],
        vec![
            "compact",
            sample.to_str().unwrap(),
            "--config",
            chain_arg,
            "--store",
            "D",
        ],
        vec!["check-config", "--config", chain_arg, "--store", "D"],
        vec!["serve", "--config", chain_arg, "--store", "D"],
    ] {
        let out = tamp_e2e::run_tamp(&args, &dir);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("--store D: is a directory"), "{args:?}: {err}");
        assert!(!err.contains("default.toml"), "{args:?}: {err}");
    }

    // A chain file's [store] that is a directory: the chain file's line, and the same words.
    let own = write_chain(&dir, "[store]\npath = \"D\"\n");
    let out = tamp_e2e::run_tamp(&["pages", "list", "--config", own.to_str().unwrap()], &dir);
    let err = text(&out.stderr);
    assert!(
        err.contains("chain.toml:2: store.path: page store") && err.contains("is a directory"),
        "{err}"
    );
}

/// A store file its reader may not read: `permission denied`, named with `--store`. Run as
/// `nobody` when the tests run as root (root reads anything).
#[cfg(unix)]
#[test]
fn a_store_flag_naming_a_file_the_user_cannot_read_says_permission_denied() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let dir = scratch_dir("cli-store-denied");
    let out = compact_ponyc(&dir, &[]);
    assert_ok(&out, "");
    let store = dir.join("s.sqlite3");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o600)).unwrap();
    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    if !root {
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let store_arg = store.to_str().unwrap();
    // The same file named by a chain file: its line, and the same words (the store's own).
    let chain = write_chain(&dir, "[store]\npath = \"s.sqlite3\"\n");
    let chain_arg = chain.to_str().unwrap();
    let sample = ponyc();
    for (args, said) in [
        (vec!["pages", "list", "--store", store_arg], None),
        (vec!["pages", "verify", "--store", store_arg], None),
        (vec!["batch", "status", "--store", store_arg], None),
        (
            vec!["pages", "list", "--config", chain_arg],
            Some("chain.toml:2: store.path: page store"),
        ),
        (
            vec!["compact", sample.to_str().unwrap(), "--config", chain_arg],
            Some("chain.toml:2: store.path: page store"),
        ),
    ] {
        let mut cmd = tamp_e2e::tamp_command_as_nobody(root);
        let out = cmd
            .args(&args)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        match said {
            None => assert!(
                err.contains(&format!(
                    "--store {store_arg}: cannot open: permission denied"
                )),
                "{args:?}: {err}"
            ),
            Some(said) => assert!(
                err.contains(said) && err.contains("cannot open: permission denied"),
                "{args:?}: {err}"
            ),
        }
    }
}

#[test]
fn pages_commands_on_a_store_not_created_yet_say_so_and_hint_only_without_a_flag() {
    let dir = scratch_dir("cli-store-not-yet");
    let chain = write_chain(&dir, "[store]\npath = \"pages.sqlite3\"\n");
    let with_config = tamp_e2e::run_tamp(
        &["pages", "list", "--config", chain.to_str().unwrap()],
        &dir,
    );
    let with_store = tamp_e2e::run_tamp(&["pages", "verify", "--store", "none.sqlite3"], &dir);
    let bare = tamp_e2e::run_tamp(&["pages", "list"], &dir);
    for (out, names) in [
        (&with_config, "chain.toml:2: store.path: page store"),
        (&with_store, "--store none.sqlite3: page store none.sqlite3"),
        (&bare, "page store .tamp/store.sqlite3"),
    ] {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(names), "{err}");
        assert_contains(
            &err,
            "has not been created yet: no compaction has written to it",
        );
    }
    assert!(!text(&with_config.stderr).contains("pass --store"));
    assert!(!text(&with_store.stderr).contains("pass --store"));
    assert_stderr_has(&bare, "(pass --store or --config to read another store)");
}

#[test]
fn a_page_whose_messages_do_not_parse_is_reported_as_such() {
    let dir = scratch_dir("cli-page-unparsable");
    let out = compact_ponyc(&dir, &["--report-json", "report.json"]);
    assert_ok(&out, "");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let page = report["stages"][0]["pages"][0]
        .as_str()
        .unwrap()
        .to_string();
    // A quote in the middle of a string of the archived messages: no longer JSON.
    assert!(tamp_e2e::patch_bytes(&dir.join("s.sqlite3"), b"ponyc", b"po\"yc") > 0);
    let verify = tamp_e2e::run_tamp(&["pages", "verify", "--store", "s.sqlite3"], &dir);
    assert_eq!(verify.status.code(), Some(1), "{}", text(&verify.stderr));
    let stdout = text(&verify.stdout);
    assert_contains(&stdout, &format!("{page}: its messages do not parse: "));
    assert!(!stdout.contains("no longer match its id"), "{stdout}");
    for id in [page.as_str(), &page[..15]] {
        let show = tamp_e2e::run_tamp(&["pages", "show", id, "--store", "s.sqlite3"], &dir);
        assert_eq!(show.status.code(), Some(1), "{}", text(&show.stdout));
        let err = text(&show.stderr);
        assert_contains(&err, "its messages do not parse: ");
        assert!(!err.contains("no longer match its id"), "{err}");
    }
}

#[test]
fn plugins_list_says_what_a_directory_held_and_why_a_library_was_skipped() {
    let dir = scratch_dir("cli-plugins-list");
    std::fs::write(dir.join("file"), "x").unwrap();
    std::fs::create_dir(dir.join("empty")).unwrap();
    std::fs::create_dir(dir.join("other")).unwrap();
    std::fs::write(dir.join("other/README"), "x").unwrap();
    for (arg, said) in [
        (
            "missing",
            "no tamp plugins found in missing (no such directory)",
        ),
        ("file", "no tamp plugins found in file (not a directory)"),
        ("empty", "no tamp plugins found in empty (empty)"),
        (
            "other",
            "no tamp plugins found in other (no .so or .wasm file in it)",
        ),
    ] {
        let out = tamp_e2e::run_tamp(&["plugins", "list", "--dir", arg], &dir);
        assert_eq!(out.status.code(), Some(1), "{arg}");
        assert_eq!(text(&out.stderr).trim(), format!("error: {said}"), "{arg}");
    }

    // A library that is no plugin is named with why; a plugin with a blank name is shown so.
    std::fs::create_dir(dir.join("libs")).unwrap();
    for lib in [
        "tamp_test_not_a_plugin",
        "tamp_test_bad_metadata",
        "tamp_custom_strategy",
    ] {
        let path = plugin(lib);
        std::fs::copy(&path, dir.join("libs").join(path.file_name().unwrap())).unwrap();
    }
    let out = tamp_e2e::run_tamp(
        &[
            "plugins", "list", "--dir", "libs", "--dir", "missing", "--all",
        ],
        &dir,
    );
    assert_ok(&out, "");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    // A header, then each plugin led by the name a chain file's `plugin =` takes.
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(stdout.starts_with("PLUGIN = \"...\" "), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("tamp_test_bad_metadata ")
                && l.contains(" (no name) ")
                && l.ends_with("libtamp_test_bad_metadata.so")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("tamp_custom_strategy ") && l.contains(" custom-strategy ")),
        "{stdout}"
    );
    assert!(
        stderr.contains("libs/libtamp_test_not_a_plugin.so: not a tamp plugin")
            && stderr.starts_with("skipped: plugin "),
        "{stderr}"
    );
    // Without --all, tamp's own test fixtures are left out, and counted.
    let out = tamp_e2e::run_tamp(&["plugins", "list", "--dir", "libs"], &dir);
    let (stdout, fixtures) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert_contains(
        &fixtures,
        "(2 test fixture(s) of tamp's own tests not listed; --all lists them)",
    );
    // A chain file may name a shipped plugin by its own name, and one it cannot find is
    // answered with the names there are.
    for (name, found) in [
        ("custom-strategy", true),
        ("custom_strategy", true),
        ("nope", false),
    ] {
        std::fs::write(
            dir.join("chain.toml"),
            format!("plugin_dirs = [\"libs\"]\n\n[[stage]]\nname = \"s\"\nplugin = \"{name}\"\n"),
        )
        .unwrap();
        let out = tamp_e2e::run_tamp(&["check-config", "--config", "chain.toml"], &dir);
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        if found {
            assert!(!said.contains("no such file"), "{name}: {said}");
        } else {
            assert!(
                said.contains("the names there: tamp_custom_strategy"),
                "{name}: {said}"
            );
        }
    }
    assert_contains(&stderr, "warning: --dir missing: no such directory");
}

#[test]
fn plugins_hash_refuses_a_file_that_is_no_plugin() {
    let dir = scratch_dir("cli-plugins-hash");
    std::fs::write(dir.join("empty.json"), "{}\n").unwrap();
    std::fs::write(dir.join("nothing.so"), "").unwrap();
    std::fs::write(dir.join("guest.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let out = tamp_e2e::run_tamp(&["plugins", "hash", "./empty.json"], &dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr)
            .contains("not a shared library (no ELF header) nor a WebAssembly component"),
        "{}",
        text(&out.stderr)
    );
    let out = tamp_e2e::run_tamp(&["plugins", "hash", "./nothing.so"], &dir);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "the file is empty, not a plugin");
    for good in [dir.join("guest.wasm"), plugin("tamp_custom_strategy")] {
        let out = tamp_e2e::run_tamp(&["plugins", "hash", good.to_str().unwrap()], &dir);
        assert_ok(&out, "");
        assert!(
            text(&out.stdout).starts_with("sha256 = \""),
            "{}",
            text(&out.stdout)
        );
    }
}

/// Every argument of these commands is described, and each has an example that runs as
/// printed from the root of a fresh clone (here: a copy of its examples, beside the built
/// `target/`, with `tamp` on the PATH).
#[cfg(unix)]
#[test]
fn help_describes_every_argument_and_its_examples_run_as_printed() {
    let dir = scratch_dir("cli-help-examples");
    let root = workspace_root();
    for (args, described) in [
        (vec!["plugins", "schema", "--help"], "<PLUGIN>"),
        (vec!["plugins", "list", "--help"], "--dir <DIR>"),
        (vec!["pages", "list", "--help"], "--limit <LIMIT>"),
    ] {
        let help = text(&tamp_e2e::run_tamp(&args, &dir).stdout);
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(described))
            .unwrap_or_else(|| panic!("{args:?}: no {described}:\n{help}"));
        assert!(
            line.trim_start()[described.len()..].trim().len() > 10,
            "{args:?}: {described} has no description:\n{help}"
        );
    }

    // A fresh clone's root: its examples, and target/ as `cargo build` leaves it.
    let clone = dir.join("clone");
    for sub in ["chains", "conversations"] {
        let to = clone.join("examples").join(sub);
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(root.join("examples").join(sub)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    let bin_dir = tamp_bin().parent().unwrap().to_path_buf();
    // `cargo build` leaves the binary and the plugins in target/debug (here: whichever
    // profile the tests were built in).
    std::fs::create_dir(clone.join("target")).unwrap();
    std::os::unix::fs::symlink(&bin_dir, clone.join("target/debug")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in [
        &["compact"][..],
        &["pages", "list"],
        &["pages", "show"],
        &["pages", "verify"],
        &["plugins", "describe"],
        &["plugins", "schema"],
        &["plugins", "list"],
        &["plugins", "hash"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let help = text(&tamp_e2e::run_tamp(&args, &dir).stdout);
        let example: String = help
            .split_once("\nExample")
            .unwrap_or_else(|| panic!("{command:?} has no example:\n{help}"))
            .1
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(|l| format!("{}\n", l.trim()))
            .collect();
        assert!(example.starts_with("tamp "), "{command:?}: {example}");
        assert!(
            !example.contains("target/release"),
            "{command:?}: {example}"
        );
        // The lines that are commands (not what one prints): `plugins hash` shows its output.
        let script: String = example
            .lines()
            .filter(|l| !l.starts_with("sha256 = "))
            .map(|l| format!("{l}\n"))
            .collect();
        let out = Command::new("sh")
            .args(["-e", "-c", &script])
            .current_dir(&clone)
            .env("PATH", &path)
            .env_remove("TAMP_PLUGIN_PATH")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command:?}'s example failed:\n{script}\n{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_text_report_names_the_pages_and_pages_list_dates_them_as_people_read_them() {
    let dir = scratch_dir("cli-report-pages");
    let out = compact_ponyc(&dir, &["--report", "--report-json", "report.json"]);
    assert_ok(&out, "");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let page = report["stages"][0]["pages"][0]
        .as_str()
        .unwrap()
        .to_string();
    let short = &page[..15];
    let said = text(&out.stderr);
    assert_contains(&said, &format!("\n    pages: {short}\n"));
    // The short ref the report names is what `pages show` takes.
    let show = tamp_e2e::run_tamp(&["pages", "show", short, "--store", "s.sqlite3"], &dir);
    assert_ok(&show, "");

    let list = tamp_e2e::run_tamp(&["pages", "list", "--store", "s.sqlite3"], &dir);
    let table = text(&list.stdout);
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("PAGE "), "{table}");
    let row = lines.next().unwrap();
    assert!(row.starts_with(&format!("{page} ")), "{table}");
    // `YYYY-MM-DD HH:MM UTC`, not seconds since 1970.
    let date = row[page.len()..].trim_start();
    assert!(
        date.len() > 20
            && date.as_bytes()[4] == b'-'
            && date[10..].starts_with(' ')
            && date[16..].starts_with(" UTC"),
        "{row}"
    );
    let json = tamp_e2e::run_tamp(&["pages", "list", "--store", "s.sqlite3", "--json"], &dir);
    let first: serde_json::Value =
        serde_json::from_str(text(&json.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["id"], page);
    assert!(first["created_at"].as_u64().unwrap() > 1_700_000_000);
}

#[test]
fn one_grammar_old_spellings_warn_completions_and_quiet() {
    let dir = scratch_dir("cli-grammar");
    let root = workspace_root();
    let chain = root.join("examples/chains/default.toml");
    let chain = chain.to_str().unwrap();
    let conversation = root.join("examples/conversations/airline-task33.openai.json");
    let conversation = conversation.to_str().unwrap();

    // The chain file is --config everywhere; the old spellings still work, with a warning
    // that names the new one.
    let new = tamp_e2e::run_tamp(&["check-config", "--config", chain], &dir);
    assert_ok(&new, "");
    assert!(text(&new.stderr).is_empty(), "{}", text(&new.stderr));
    let old = tamp_e2e::run_tamp(&["check-config", chain], &dir);
    assert_ok(&old, "");
    assert_stderr_has(&old, "the chain file as an argument is now --config");
    let eval_new = tamp_e2e::run_tamp(
        &[
            "eval",
            "-c",
            chain,
            "--one-shot-only",
            "--output-format",
            "csv",
            "-o",
            "new.csv",
            conversation,
        ],
        &dir,
    );
    assert_ok(&eval_new, "");
    assert!(
        !text(&eval_new.stderr).contains("warning"),
        "{}",
        text(&eval_new.stderr)
    );
    let eval_old = tamp_e2e::run_tamp(
        &[
            "eval",
            "--chain",
            chain,
            "--one-shot-only",
            "--format",
            "csv",
            "--out",
            "old.csv",
            conversation,
        ],
        &dir,
    );
    assert_ok(&eval_old, "");
    let said = text(&eval_old.stderr);
    for warning in [
        "--chain is now --config",
        "--format is now --output-format",
        "--out is now --output",
    ] {
        assert!(said.contains(warning), "{said}");
    }
    let header = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(header("new.csv"), header("old.csv"));
    // -q: errors only.
    let quiet = tamp_e2e::run_tamp(
        &[
            "-q",
            "eval",
            "--chain",
            chain,
            "--one-shot-only",
            conversation,
        ],
        &dir,
    );
    assert!(quiet.status.success());
    assert!(text(&quiet.stderr).is_empty(), "{}", text(&quiet.stderr));

    // Completion scripts, from the same definition as the flags.
    for (shell, needle) in [
        ("bash", "--output-format"),
        ("zsh", "--stage-config"),
        ("fish", "completions"),
    ] {
        let out = tamp_e2e::run_tamp(&["completions", shell], &dir);
        assert!(out.status.success(), "{shell}");
        assert!(text(&out.stdout).contains(needle), "{shell}: no {needle}");
    }
}

/// The README's next step: the same conversation through another chain on the same store.
/// The example chains are copied elsewhere (they keep their store beside them); the second
/// chain does not continue the first's answer, says so, and acts; run again, it continues
/// its own.
#[test]
fn a_thread_another_chain_answered_starts_over_and_the_report_says_why() {
    let dir = scratch_dir("cli-chain-identity");
    for name in ["default.toml", "hybrid.toml"] {
        std::fs::copy(
            workspace_root().join("examples/chains").join(name),
            dir.join(name),
        )
        .unwrap();
    }
    let sample = ponyc();
    let run = |chain: &str, n: u32| {
        let report = format!("report-{n}.json");
        let out = tamp_e2e::run_tamp(
            &[
                "compact",
                sample.to_str().unwrap(),
                "--config",
                chain,
                "--report",
                "--report-json",
                &report,
                "-o",
                "out.json",
            ],
            &dir,
        );
        assert_ok(&out, format!("{chain}: "));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(&report)).unwrap()).unwrap();
        (text(&out.stderr), json)
    };
    let (_, first) = run("default.toml", 1);
    assert!(
        dir.join("tamp-store.sqlite3").is_file(),
        "the store sits beside the copied chain file"
    );
    assert_eq!(first["thread"]["continued"], false);

    let (said, second) = run("hybrid.toml", 2);
    assert_eq!(second["thread"]["continued"], false, "{said}");
    assert!(
        second["thread"]["started_over"]
            .as_str()
            .is_some_and(|why| why.contains("another chain")),
        "{second}"
    );
    assert_contains(&said, "thread started over");
    let acted = second["stages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|stage| stage["pages"].as_array().is_some_and(|p| !p.is_empty()));
    assert!(acted, "hybrid's stages ran on the raw history: {said}");
    assert!(
        second["tokens_after"].as_u64() < second["tokens_before"].as_u64(),
        "{second}"
    );

    let (said, third) = run("hybrid.toml", 3);
    assert_eq!(third["thread"]["continued"], true, "{said}");
    assert!(third["thread"].get("started_over").is_none(), "{third}");
}

/// The errors a new user meets first each say what to do next: a missing plugin on its
/// `plugin =` line, as written and as resolved; an unknown stage key with the keys the plugin
/// takes; an empty file, a bare message list and a saved API response with the shapes tamp
/// reads; an unset key variable with the set one it was likely meant to be.
#[test]
fn first_errors_name_the_line_the_path_the_keys_the_shapes_and_the_near_miss() {
    let dir = scratch_dir("cli-first-errors");
    let default = std::fs::read_to_string(default_chain()).unwrap();
    let line_of =
        |text: &str, needle: &str| text.lines().position(|l| l.starts_with(needle)).unwrap() + 1;

    // A plugin path that names no file.
    let missing = default.replace(
        "plugin = \"tamp_custom_strategy\"",
        "plugin = \"./nope.so\"",
    );
    std::fs::write(dir.join("missing.toml"), &missing).unwrap();
    let out = tamp(&["check-config", "-c", "missing.toml"], &dir);
    let said = text(&out.stderr);
    let at = format!(
        "missing.toml:{}:",
        line_of(&missing, "plugin = \"./nope.so\"")
    );
    assert!(!out.status.success() && said.contains(&at), "{at}: {said}");
    let resolved = dir.canonicalize().unwrap().join("nope.so");
    assert!(
        said.contains("plugin \"./nope.so\": no such file")
            && said.contains(&resolved.display().to_string())
            && said.contains("relative to the chain file's directory")
            && !said.contains("././"),
        "{said}"
    );

    // A key the stage's plugin does not take.
    let typo = default.replace("keep_exchanges = 4", "keep_exchange = 4");
    std::fs::write(dir.join("typo.toml"), &typo).unwrap();
    let out = tamp(&["check-config", "-c", "typo.toml"], &dir);
    let said = text(&out.stderr);
    let at = format!("typo.toml:{}:", line_of(&typo, "keep_exchange = 4"));
    assert!(said.contains(&at), "{at}: {said}");
    assert!(
        said.contains("the keys it takes: ") && said.contains("keep_exchanges"),
        "{said}"
    );

    // Files that are no request.
    let cases = [
        ("empty.json", "\n", "empty (no JSON at all)"),
        (
            "bare.json",
            r#"[{"role": "user", "content": "hi"}]"#,
            "a bare list of messages?",
        ),
        (
            "response.json",
            r#"{"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}"#,
            "this looks like one message or an Anthropic Messages response",
        ),
        (
            "completion.json",
            r#"{"id": "c", "object": "chat.completion", "choices": []}"#,
            "this looks like an OpenAI Chat Completions response",
        ),
    ];
    let chain = default_chain();
    for (file, body, expected) in cases {
        std::fs::write(dir.join(file), body).unwrap();
        let out = tamp(
            &[
                "compact",
                file,
                "-c",
                chain.to_str().unwrap(),
                "--store",
                "s.sqlite3",
            ],
            &dir,
        );
        let said = text(&out.stderr);
        assert!(!out.status.success(), "{file}");
        assert!(
            said.contains(&format!("{file}: ")) && said.contains(expected),
            "{file}: {said}"
        );
        assert!(said.contains("{\"messages\": [...]}"), "{file}: {said}");
    }

    // `api_key_env` naming an unset variable, with a similar one set.
    let keyed = format!(
        "{default}\n[provider]\nkind = \"anthropic\"\nmodel = \"claude-x\"\napi_key_env = \"TAMP_TEST_ANTHROPIC_API_KEY\"\n"
    )
    .replace("[provider]\nkind = \"extractive\"\n", "");
    std::fs::write(dir.join("keyed.toml"), &keyed).unwrap();
    let out = Command::new(tamp_bin())
        .args(["check-config", "-c", "keyed.toml"])
        .current_dir(&dir)
        .env_remove("TAMP_TEST_ANTHROPIC_API_KEY")
        .env("TAMP_TEST_ANTHROPIC_KEY", "sk-ant-secret-value")
        .output()
        .unwrap();
    let said = text(&out.stderr);
    assert!(
        !out.status.success()
            && said
                .contains("TAMP_TEST_ANTHROPIC_API_KEY is not set (but TAMP_TEST_ANTHROPIC_KEY is")
            && !said.contains("sk-ant-secret-value"),
        "{said}"
    );
}
