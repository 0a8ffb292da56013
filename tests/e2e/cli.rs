//! The `tamp` binary, as a user runs it.

use std::process::{Command, Output};

use tamp_e2e::{plugin, scratch_dir, tamp_bin, workspace_root, write_chain};

fn tamp(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(tamp_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tamp")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

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
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("stage archive-old-tool-calls (custom-strategy 0.1.0): acted"),
        "{stderr}"
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
    assert!(shown.status.success(), "{}", text(&shown.stderr));
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
    assert!(short.status.success(), "{}", text(&short.stderr));
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
    assert!(out.status.success(), "{}", text(&out.stderr));
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
    assert!(shown.status.success(), "{}", text(&shown.stderr));
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
    assert!(out.status.success(), "{}", text(&out.stderr));
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
    assert!(err.contains("line"), "{err}");

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
    assert!(err.contains("chain.toml:2: budget.max_tokens"), "{err}");
}

#[test]
fn plugins_describe_prints_metadata_and_schema() {
    let dir = scratch_dir("cli-describe");
    let p = plugin("tamp_custom_strategy");
    let out = tamp(&["plugins", "describe", p.to_str().unwrap()], &dir);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("name:        custom-strategy"), "{s}");
    assert!(s.contains("version:     0.1.0"), "{s}");
    assert!(s.contains("\"keep_exchanges\""), "{s}");

    let out = tamp(
        &["plugins", "describe", "tamp_custom_strategy", "--json"],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "custom-strategy");

    let out = tamp(&["plugins", "describe", "no_such_plugin"], &dir);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("libno_such_plugin.so"),
        "{}",
        text(&out.stderr)
    );
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
        assert!(s.contains("Usage:"), "{s}");
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
        assert!(out.status.success(), "{}", text(&out.stderr));
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
