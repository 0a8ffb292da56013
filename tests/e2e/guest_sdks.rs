//! The guest SDKs as an author uses them, outside this repository:
//!
//! - their own unit tests, and the templates', run in plain CPython and Node against the
//!   SDKs' fake hosts, in well under a second each, where a build and a conformance run take
//!   minutes;
//! - the fake hosts' rules are the host's, byte for byte, for messages of every kind: page
//!   ids, units, the compactable range, the clearing marker, template and prompt rendering;
//! - the WIT package each SDK ships is the host's;
//! - each package builds from source (`python -m build`, `npm pack`), installs from the built
//!   artifact into a directory of its own, builds a copy of its template with its own
//!   `tamp-guest build` from a directory outside the repository, and the component conforms.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tamp_conformance::Status;
use tamp_e2e::guests::{componentize_js, guest_python};
use tamp_e2e::serve_support::ScratchDir;
use tamp_e2e::workspace_root;
use tamp_plugin_api::{ContentBlock, Message, Role};

use crate::conformance::kit_json;

/// Runs `command`, or panics with what it printed; its output and how long it took.
fn run(command: &mut Command, what: &str) -> (Output, Duration) {
    let started = Instant::now();
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {:?}: {e}", command.get_program()));
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, took)
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The number after `prefix` on the line of `text` that starts with it.
fn count_after(text: &str, prefix: &str) -> usize {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
}

#[test]
fn the_sdks_and_templates_unit_tests_run_against_the_fake_hosts_in_milliseconds() {
    let root = workspace_root();
    let python = guest_python();
    for (dir, tests) in [("guests/python", "tests"), ("guests/python/template", ".")] {
        let (out, took) = run(
            Command::new(&python)
                .args(["-m", "unittest", "discover", "-v", "-s", tests])
                .current_dir(root.join(dir))
                .env("PYTHONPATH", root.join("guests/python"))
                .env("PYTHONDONTWRITEBYTECODE", "1"),
            &format!("python -m unittest in {dir}"),
        );
        let text = both(&out);
        let ran = count_after(&text, "Ran ");
        assert!(ran >= 4 && text.contains("\nOK"), "{dir}:\n{text}");
        eprintln!("{dir}: {ran} unit tests in {took:?} (CPython, fake host)");
        assert!(took < Duration::from_secs(20), "{dir}: {took:?}");
    }
    let (out, took) = run(
        Command::new("node")
            .arg("--test")
            .current_dir(root.join("guests/js")),
        "node --test in guests/js",
    );
    let text = both(&out);
    let (passed, failed) = (count_after(&text, "# pass"), count_after(&text, "# fail"));
    assert!(passed >= 11 && failed == 0, "{text}");
    assert!(
        text.contains("the newest exchanges are kept"),
        "the template's tests did not run:\n{text}"
    );
    eprintln!("guests/js: {passed} unit tests in {took:?} (Node, fake host)");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// Messages of every kind, with what JSON escapes (quotes, backslashes, control characters,
/// non-ASCII, an astral character) in every string field.
fn tricky_messages() -> Vec<Message> {
    let odd = "say \"hi\" \\ tab\t nl\n cr\r bell\u{7} nul\u{0} é 漢 🦀 </tamp>";
    let mut with_extra = Message::text(Role::User, odd);
    with_extra.extra_json = r#"{"cache_control":{"type":"ephemeral"}}"#.into();
    let mut summary = Message::text(Role::User, "a summary");
    summary.summary = Some(tamp_plugin_api::SummaryInfo {
        page_ref: "pg_0123456789abcdef0123456789abcdef".into(),
        strategy: "s".into(),
        status: tamp_plugin_api::SummaryStatus::Pending,
    })
    .into();
    vec![
        Message::text(Role::System, "You are terse."),
        with_extra,
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text(odd),
                ContentBlock::tool_use("call_1", "bash", r#"{"cmd":"ls \"a b\""}"#),
                ContentBlock::Opaque {
                    json: r#"{"type":"thinking","thinking":"hm"}"#.into(),
                },
            ],
        ),
        Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                tool_use_id: "call_1".into(),
                content: vec![
                    tamp_plugin_api::ToolResultPart::Text { text: odd.into() },
                    tamp_plugin_api::ToolResultPart::Opaque {
                        json: r#"{"type":"image"}"#.into(),
                    },
                ]
                .into(),
                is_error: true,
                extra_json: r#"{"x":1}"#.into(),
            }],
        ),
        summary,
    ]
}

/// What the host's rules make of `messages`, as the fake hosts print it: each message's page
/// id and then the page id of all of them, the units, the compactable range (keeping the last
/// two), each message's placeholders, the page each block names as a clearing, and a rendered
/// template, a template's error and a wrapped content section.
fn the_hosts_rules(messages: &[Message]) -> serde_json::Value {
    use tamp_plugin_api::rules::{clearing, exchanges, protect};
    use tamp_plugin_api::sdk::prompt::{render_template, wrap_content};
    let mut ids: Vec<String> = messages
        .iter()
        .map(|m| tamp_plugin_api::page::page_id(std::slice::from_ref(m)))
        .collect();
    let placeholders: Vec<(String, String)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            (
                clearing::result_placeholder(id, &format!("note {i}")),
                clearing::input_placeholder(id),
            )
        })
        .collect();
    ids.push(tamp_plugin_api::page::page_id(messages));
    let units: Vec<(usize, usize, &str)> = exchanges::units(messages)
        .iter()
        .map(|u| {
            let kind = match u.kind {
                exchanges::UnitKind::System => "pinned",
                exchanges::UnitKind::Summary => "summary",
                exchanges::UnitKind::ToolExchange => "tool-exchange",
                exchanges::UnitKind::Message => "message",
            };
            (u.range.start, u.range.end, kind)
        })
        .collect();
    let compactable = protect::compactable_range(messages, 2);
    let cleared: Vec<Vec<Option<&str>>> = messages
        .iter()
        .map(|m| m.content.iter().map(clearing::cleared_page).collect())
        .collect();
    let error = |template: &str| {
        render_template(template, &[("x", "1")])
            .unwrap_err()
            .message
    };
    serde_json::json!({
        "page_ids": ids,
        "units": units,
        "compactable": [compactable.start, compactable.end],
        "placeholders": placeholders,
        "cleared": cleared,
        "template": render_template("a {x} {{y}} }}", &[("x", "1 {x}")]).unwrap(),
        "template_errors": [error("{bad}"), error("a } b"), error("a { b")],
        "wrapped": wrap_content("odd <content> and </content> \u{1F980}"),
    })
}

/// `messages` with a clearing of the first tool result (and of its call's input) appended, so
/// that the fakes read a placeholder of each kind.
fn with_clearings(mut messages: Vec<Message>) -> Vec<Message> {
    use tamp_plugin_api::rules::clearing::Clearing;
    for (index, message) in messages.clone().iter().enumerate() {
        for (block, b) in message.content.iter().enumerate() {
            let mut clearing = Clearing::new(message, index);
            let cleared = match b {
                ContentBlock::ToolResult { .. } => clearing.clear_result(block, "a note"),
                ContentBlock::ToolUse { .. } => clearing.clear_input(block),
                _ => false,
            };
            if cleared {
                messages.push(clearing.message().clone());
            }
        }
    }
    messages
}

#[test]
fn the_fake_hosts_rules_are_the_hosts() {
    let root = workspace_root();
    let dir = ScratchDir::new("guest-rules");
    let corpus = tamp_e2e::corpus_conversation("anthropic", &tamp_e2e::corpus_names()[0]);
    for (what, messages) in [
        ("tricky messages", with_clearings(tricky_messages())),
        (
            "a corpus conversation",
            with_clearings(corpus.messages.to_vec()),
        ),
    ] {
        let expected = the_hosts_rules(&messages);
        let input = dir.join("messages.json");
        std::fs::write(&input, serde_json::to_string(&messages).unwrap()).unwrap();

        let (out, _) = run(
            Command::new(guest_python())
                .arg("-c")
                .arg(
                    "import json, sys\n\
                     import tamp_guest as tamp\n\
                     from tamp_guest import testing\n\
                     ms = [testing.message_from_json(m) for m in json.load(open(sys.argv[1]))]\n\
                     def error(t):\n\
                     \x20   try:\n\
                     \x20       tamp.render_template(t, {'x': '1'})\n\
                     \x20   except tamp.PluginError as e:\n\
                     \x20       return e.message\n\
                     ids = [testing.page_id([m]) for m in ms]\n\
                     print(json.dumps({\n\
                     \x20   'page_ids': ids + [testing.page_id(ms)],\n\
                     \x20   'units': [[u.span.start, u.span.end, u.kind.name.lower().replace('_', '-')] for u in testing.units(ms)],\n\
                     \x20   'compactable': list(testing.compactable_range(ms, 2)),\n\
                     \x20   'placeholders': [[tamp.clearing.result_placeholder(p, f'note {i}'), tamp.clearing.input_placeholder(p)] for i, p in enumerate(ids)],\n\
                     \x20   'cleared': [[tamp.clearing.cleared_page(b) for b in m.content] for m in ms],\n\
                     \x20   'template': tamp.render_template('a {x} {{y}} }}', {'x': '1 {x}'}),\n\
                     \x20   'template_errors': [error('{bad}'), error('a } b'), error('a { b')],\n\
                     \x20   'wrapped': tamp.wrap_content('odd <content> and </content> \\U0001F980'),\n\
                     }))",
                )
                .arg(&input)
                .env("PYTHONPATH", root.join("guests/python"))
                .env("PYTHONDONTWRITEBYTECODE", "1"),
            "the Python fake host's rules",
        );
        let python: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", both(&out)));
        assert_eq!(python, expected, "Python, {what}");

        let script = dir.join("rules.mjs");
        std::fs::write(
            &script,
            format!(
                "import {{ readFileSync }} from 'node:fs';\n\
                 import {{ compactableRange, messageFromJson, pageId, units }} from {testing:?};\n\
                 import * as tamp from {sdk:?};\n\
                 const ms = JSON.parse(readFileSync(process.argv[2], 'utf8')).map(messageFromJson);\n\
                 const error = (t) => {{ try {{ tamp.renderTemplate(t, {{ x: '1' }}); }} catch (e) {{ return e.message; }} }};\n\
                 const ids = ms.map((m) => pageId([m]));\n\
                 const range = compactableRange(ms, 2);\n\
                 console.log(JSON.stringify({{\n\
                   page_ids: [...ids, pageId(ms)],\n\
                   units: units(ms).map((u) => [u.span.start, u.span.end, u.kind]),\n\
                   compactable: [range.start, range.end],\n\
                   placeholders: ids.map((p, i) => [tamp.resultPlaceholder(p, `note ${{i}}`), tamp.inputPlaceholder(p)]),\n\
                   cleared: ms.map((m) => m.content.map((b) => tamp.clearedPage(b) ?? null)),\n\
                   template: tamp.renderTemplate('a {{x}} {{{{y}}}} }}}}', {{ x: '1 {{x}}' }}),\n\
                   template_errors: [error('{{bad}}'), error('a }} b'), error('a {{ b')],\n\
                   wrapped: tamp.wrapContent('odd <content> and </content> \\u{{1F980}}'),\n\
                   rendered: tamp.renderMessages(ms),\n\
                 }}));\n",
                testing = root.join("guests/js/testing.js").display().to_string(),
                sdk = root.join("guests/js/tamp-guest.js").display().to_string(),
            ),
        )
        .unwrap();
        let (out, _) = run(
            Command::new("node").arg(&script).arg(&input),
            "the JavaScript fake host's rules",
        );
        let mut js: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", both(&out)));
        // The JavaScript fake renders messages as the host does, byte for byte.
        let rendered = js
            .as_object_mut()
            .and_then(|o| o.remove("rendered"))
            .unwrap();
        assert_eq!(
            rendered.as_str().unwrap(),
            tamp_plugin_api::sdk::render_messages(&messages, &Default::default()),
            "JavaScript's rendering, {what}"
        );
        assert_eq!(js, expected, "JavaScript, {what}");
    }
}

#[test]
fn the_wit_each_sdk_ships_is_the_hosts() {
    let root = workspace_root();
    let wit = std::fs::read_to_string(root.join("plugin-abi/wit/tamp-strategy.wit")).unwrap();
    for shipped in [
        "guests/python/tamp_guest/wit/tamp-strategy.wit",
        "guests/js/wit/tamp-strategy.wit",
    ] {
        let copy = std::fs::read_to_string(root.join(shipped)).unwrap();
        assert!(
            copy == wit,
            "{shipped} differs from plugin-abi/wit/tamp-strategy.wit: copy it over \
             (cp plugin-abi/wit/tamp-strategy.wit {shipped})"
        );
    }
    let versions = [
        std::fs::read_to_string(root.join("guests/python/tamp_guest/cli.py")).unwrap(),
        std::fs::read_to_string(root.join("guests/js/bin/tamp-guest.js")).unwrap(),
    ];
    // The build commands pin the toolchains the tests build with.
    let py = tamp_e2e::guests::COMPONENTIZE_PY
        .split("==")
        .nth(1)
        .unwrap();
    let js = tamp_e2e::guests::COMPONENTIZE_JS
        .rsplit('@')
        .next()
        .unwrap();
    assert!(versions[0].contains(&format!("COMPONENTIZE_PY = \"{py}\"")));
    assert!(versions[1].contains(&format!("COMPONENTIZE_JS = \"{js}\"")));
}

/// `files` of `from` copied into `to`.
fn copy_files(from: &Path, to: &Path, files: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for file in files {
        let (src, dst) = (from.join(file), to.join(file));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "__pycache__" {
            continue;
        }
        let dst = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &dst);
        } else {
            std::fs::copy(entry.path(), dst).unwrap();
        }
    }
}

/// The one file in `dir` whose name ends with `suffix`.
fn built(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{found:?} in {}", dir.display());
    found[0].clone()
}

/// `tamp conformance` of `wasm`, built from the `name` template: every rule passes.
fn conforms(wasm: &Path, name: &str) {
    let (code, report) = kit_json(wasm, &["--timeout", "60", "--cases", "3"]);
    assert!(
        report.passed && code == 0,
        "{name} does not conform (exit {code}):\n{}",
        report.to_text()
    );
    assert!(
        report.rules.iter().all(|r| r.status != Status::Skipped),
        "{}",
        report.to_text()
    );
    assert_eq!(report.meta.as_ref().expect("metadata").name, name);
}

#[test]
fn the_python_package_builds_installs_and_builds_a_conforming_strategy_anywhere() {
    let root = workspace_root();
    let dir = ScratchDir::new("guest-python-package");
    // The package's sources, as a release would take them from a checkout.
    let src = dir.join("src");
    copy_files(
        &root.join("guests/python"),
        &src,
        &[
            "pyproject.toml",
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
            "tamp_guest",
        ],
    );
    let dist = dir.join("dist");
    run(
        Command::new(guest_python())
            .args(["-m", "build", "--no-isolation", "--outdir"])
            .arg(&dist)
            .arg(&src),
        "python -m build (sdist and wheel)",
    );
    let wheel = built(&dist, "-py3-none-any.whl");
    built(&dist, ".tar.gz");
    assert!(
        wheel.ends_with("tamp_guest-0.1.0-py3-none-any.whl"),
        "{wheel:?}"
    );
    // The wheel carries the licences (a wheel is a zip: its names are stored as written).
    let wheel_bytes = std::fs::read(&wheel).unwrap();
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(
            wheel_bytes
                .windows(licence.len())
                .any(|w| w == licence.as_bytes()),
            "{licence} is not in the wheel"
        );
    }

    // A fresh environment holding the wheel (and the componentizer it pins), and an author's
    // directory outside the repository holding a copy of the template.
    let venv = dir.join("venv");
    tamp_e2e::tools::make_venv(&venv, "the Python package test needs Python 3 with venv")
        .unwrap_or_else(|e| panic!("{e}"));
    run(
        tamp_e2e::tools::pip_install(&venv).arg(&wheel),
        "pip install of the built wheel",
    );
    let author = dir.join("my-strategy");
    copy_files(
        &root.join("guests/python/template"),
        &author,
        &["app.py", "test_app.py"],
    );
    let (out, _) = run(
        Command::new(venv.join("bin/python"))
            .args(["-m", "unittest", "-v"])
            .current_dir(&author),
        "the template's unit tests with the installed package",
    );
    assert!(count_after(&both(&out), "Ran ") >= 4, "{}", both(&out));
    let (_, took) = run(
        Command::new(venv.join("bin/tamp-guest"))
            .args(["build", "app.py", "-o", "archive.wasm"])
            .current_dir(&author),
        "tamp-guest build",
    );
    eprintln!("tamp-guest build (Python) took {took:?}");
    let started = Instant::now();
    conforms(&author.join("archive.wasm"), "py-custom-strategy");
    eprintln!(
        "tamp conformance (Python template) took {:?}",
        started.elapsed()
    );
}

#[test]
fn the_javascript_package_packs_installs_and_builds_a_conforming_strategy_anywhere() {
    let root = workspace_root();
    let dir = ScratchDir::new("guest-js-package");
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    run(
        Command::new("npm")
            .args(["pack", "--silent", "--pack-destination"])
            .arg(&dist)
            .current_dir(root.join("guests/js")),
        "npm pack",
    );
    let tarball = built(&dist, ".tgz");
    assert!(tarball.ends_with("tamp-guest-0.1.0.tgz"), "{tarball:?}");

    // An author's directory outside the repository: a copy of the template, the package
    // installed into it from the tarball (with the componentizer it pins).
    let author = dir.join("my-strategy");
    copy_files(
        &root.join("guests/js/template"),
        &author,
        &["app.js", "app.test.js"],
    );
    std::fs::write(
        author.join("package.json"),
        r#"{"name": "my-strategy", "private": true, "type": "module"}"#,
    )
    .unwrap();
    run(
        Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "--silent",
            ])
            .arg(&tarball)
            .current_dir(&author),
        "npm install of the packed tarball",
    );
    let installed = author.join("node_modules/tamp-guest");
    for file in [
        "wit/tamp-strategy.wit",
        "testing.js",
        "bin/tamp-guest.js",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        assert!(
            installed.join(file).is_file(),
            "{file} is not in the package"
        );
    }
    assert!(!installed.join("test").exists() && !installed.join("template").exists());
    let (out, _) = run(
        Command::new("node").arg("--test").current_dir(&author),
        "the template's unit tests with the installed package",
    );
    assert!(count_after(&both(&out), "# pass") >= 4, "{}", both(&out));
    let (_, took) = run(
        Command::new(author.join("node_modules/.bin/tamp-guest"))
            .args(["build", "app.js", "-o", "archive.wasm"])
            .current_dir(&author),
        "tamp-guest build",
    );
    eprintln!("tamp-guest build (JavaScript) took {took:?}");
    let started = Instant::now();
    conforms(&author.join("archive.wasm"), "js-custom-strategy");
    eprintln!(
        "tamp conformance (JavaScript template) took {:?}",
        started.elapsed()
    );
    // The tests' own componentize-js is the one the package pins.
    assert!(componentize_js().is_file());
}
