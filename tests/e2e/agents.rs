//! Claude Code and Codex, the real agents (pinned from npm, installed into `target/tools/`),
//! run non-interactively through `tamp proxy` against a scripted upstream that checks every
//! request as the real API would (`agent_upstream`): each agent does a 12-step shell task whose
//! history outgrows the chain's small budget, so the proxy must compact it on the way.
//!
//! Every agent runs with a scratch home, its telemetry, error reports and update checks off,
//! and a fake key; every URL it is given is on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tamp_e2e::agent_upstream::{AgentUpstream, Exchange, ServerCompaction, Task, PLANTED_FACT};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::serve_support::{ScratchDir, Server};
use tamp_e2e::{plugin, tools};

/// The key every agent sends: it must reach the upstream and stay out of tamp's log and store.
const KEY: &str = "sk-agents-e2e-0123456789SECRET";
const STEPS: u32 = 12;

fn task(tool: &str) -> String {
    format!(
        "Run `echo step N` for N from 1 to {STEPS}, one {tool} call per step, then say you are \
         done."
    )
}

/// The template strategy (old tool exchanges archived behind an extractive summary, no LLM):
/// the proxy's chain in most tests.
fn template_stage() -> String {
    format!(
        "[[stage]]\nname = \"archive-old-tool-calls\"\nplugin = \"{}\"\n\
         [stage.config]\nkeep_exchanges = 2\nsummarize = true\nsummary_tokens = 60\n",
        plugin("tamp_custom_strategy").display()
    )
}

/// map-reduce-adaptive with its defaults: a strategy that summarizes plain messages too (the
/// template strategy only takes tool exchanges).
fn fold_stage() -> String {
    format!(
        "[[stage]]\nname = \"fold\"\nplugin = \"{}\"\n",
        plugin("tamp_map_reduce_adaptive").display()
    )
}

/// The proxy's chain: `stage` with the high watermark at `high` tokens, its store in `dir`.
/// An agent's first request is its system prompt and instructions (Claude Code's: 3,900
/// tokens) and each step adds 50-60: `high` a few steps above the first request makes most
/// requests compacted.
fn chain(
    dir: &Path,
    upstream: &AgentUpstream,
    high: u64,
    proxy_extra: &str,
    stage: &str,
) -> PathBuf {
    let text = format!(
        "[budget]\nmax_tokens = {}\nhigh_watermark = 0.8\nlow_watermark = 0.7\n\
         keep_recent = 4\n\n[provider]\nkind = \"extractive\"\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n{proxy_extra}\n\n{stage}",
        high * 5 / 4,
        upstream.url(),
        upstream.openai_url(),
    );
    tamp_e2e::write_chain(dir, &text)
}

/// `tamp proxy` (debug log) in front of a scripted upstream, in a scratch directory; the
/// proxy's chain as [`chain`] makes it, its store in `store`. Dropped in field order: the
/// proxy stops before its directory goes.
struct Setup {
    proxy: Server,
    upstream: AgentUpstream,
    store: PathBuf,
    dir: ScratchDir,
}

impl Setup {
    fn start(name: &str, compaction: ServerCompaction, high: u64, proxy_extra: &str) -> Setup {
        Setup::start_with(name, compaction, high, proxy_extra, &template_stage())
    }

    /// [`Setup::start`] with `stage` as the chain.
    fn start_with(
        name: &str,
        compaction: ServerCompaction,
        high: u64,
        proxy_extra: &str,
        stage: &str,
    ) -> Setup {
        Setup::start_task(name, compaction, high, proxy_extra, stage, STEPS, |_| {
            Task::Echo
        })
    }

    /// [`Setup::start_with`] for a task of `steps` steps, each doing what `task` gives for
    /// the scratch directory.
    fn start_task(
        name: &str,
        compaction: ServerCompaction,
        high: u64,
        proxy_extra: &str,
        stage: &str,
        steps: u32,
        task: impl FnOnce(&Path) -> Task,
    ) -> Setup {
        let dir = ScratchDir::new(name);
        let store = dir.join("proxy");
        std::fs::create_dir_all(&store).unwrap();
        let upstream = AgentUpstream::start_task(KEY, steps, compaction, task(&dir));
        let config = chain(&store, &upstream, high, proxy_extra, stage);
        let proxy = Server::start_command("proxy", &config, &[], &[("TAMP_LOG", "debug")]);
        Setup {
            proxy,
            upstream,
            store,
            dir,
        }
    }
}

/// A scratch directory for an agent: its home and the folder it works in.
fn agent_dirs(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let home = dir.join(name).join("home");
    let work = dir.join(name).join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    (home, work)
}

/// A command with nothing of the test's environment but `PATH` (for the shell tool) and a
/// scratch `HOME`, run in `work`.
fn isolated(bin: &Path, home: &Path, work: &Path) -> Command {
    let mut command = Command::new(bin);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TERM", "dumb")
        .current_dir(work)
        .stdin(Stdio::null());
    command
}

/// `claude -p <task> --allowedTools Bash,Write` with `ANTHROPIC_BASE_URL` at `base`.
fn claude(base: &str, home: &Path, work: &Path) -> Command {
    let mut command = isolated(&tools::claude_code(), home, work);
    command
        .args(["-p", &task("Bash"), "--allowedTools", "Bash,Write"])
        .env("ANTHROPIC_BASE_URL", base)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    command
}

/// `codex exec <task>` with a `model_providers` entry whose `base_url` is `base` (an OpenAI
/// base URL, with `/v1`) and `config_extra` appended to its `config.toml`.
fn codex(
    base: &str,
    home: &Path,
    work: &Path,
    provider_extra: &str,
    config_extra: &str,
) -> Command {
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-5.5-codex\"\nmodel_provider = \"tamp\"\napproval_policy = \"never\"\n\
             sandbox_mode = \"danger-full-access\"\ncheck_for_update_on_startup = false\n\
             {config_extra}\n\
             [analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n\
             [otel]\nexporter = \"none\"\n\n\
             [model_providers.tamp]\nname = \"tamp\"\nbase_url = \"{base}\"\n\
             wire_api = \"responses\"\nenv_key = \"TAMP_AGENT_KEY\"\nrequest_max_retries = 0\n\
             stream_max_retries = 0\n{provider_extra}\n"
        ),
    )
    .unwrap();
    codex_exec(home, work, &codex_home)
}

/// `codex exec` on the shell task, its configuration in `codex_home`.
fn codex_exec(home: &Path, work: &Path, codex_home: &Path) -> Command {
    let mut command = isolated(&tools::codex(), home, work);
    command
        .args([
            "exec",
            "--skip-git-repo-check",
            "--color",
            "never",
            &task("shell"),
        ])
        .env("CODEX_HOME", codex_home)
        .env("TAMP_AGENT_KEY", KEY);
    command
}

fn run(mut command: Command, what: &str) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"))
}

/// Claude Code's run through `proxy` in `dir`: its model calls (`/v1/messages`), once it
/// finished with every request checked ([`assert_finished`]).
fn claude_model_calls(dir: &Path, upstream: &AgentUpstream, proxy: &Server) -> Vec<Exchange> {
    let (home, work) = agent_dirs(dir, "claude");
    let out = run(claude(&proxy.base, &home, &work), "claude");
    assert_finished("claude -p", &out, upstream, proxy)
        .into_iter()
        .filter(|e| e.target.starts_with("/v1/messages"))
        .collect()
}

/// Asserts the agent finished its task and no request was refused; returns what the upstream
/// answered.
fn assert_finished(
    what: &str,
    out: &Output,
    upstream: &AgentUpstream,
    proxy: &Server,
) -> Vec<Exchange> {
    let exchanges = upstream.exchanges();
    let refused: Vec<String> = exchanges
        .iter()
        .filter_map(|e| {
            e.refusal
                .as_ref()
                .map(|r| format!("{} {}: {r}", e.method, e.target))
        })
        .collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let diagnosis = || {
        format!(
            "{what}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{}\nrefused by the upstream: \
             {refused:#?}\nproxy log (tail):\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr),
            tail(&proxy.log(), 60)
        )
    };
    assert!(refused.is_empty(), "{}", diagnosis());
    assert!(out.status.success(), "{}", diagnosis());
    assert!(stdout.contains(&upstream.final_text()), "{}", diagnosis());
    // Both agents ask for compressed answers, so the relay of a gzip stream is under test.
    assert!(
        exchanges.iter().any(|e| e.gzip),
        "{what}: no answer went out gzip-encoded (did the agent stop asking for it?)"
    );
    exchanges
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Asserts at least 4 of `exchanges` reached the upstream compacted (issue 31's bar).
fn assert_compacted(what: &str, exchanges: &[&Exchange]) {
    let n = exchanges.iter().filter(|e| e.compacted()).count();
    assert!(
        n >= 4,
        "{what}: only {n} of {} requests reached the upstream compacted",
        exchanges.len()
    );
}

#[test]
fn claude_code_finishes_a_tool_task_through_the_proxy_with_its_history_compacted() {
    let Setup {
        proxy,
        upstream,
        store,
        dir,
    } = Setup::start("agents-claude", ServerCompaction::Present, 4_100, "");
    let exchanges = claude_model_calls(&dir, &upstream, &proxy);
    let turns: Vec<&Exchange> = exchanges.iter().collect();
    assert!(
        turns.len() > STEPS as usize,
        "{} model calls for {STEPS} steps",
        turns.len()
    );
    assert_compacted("claude -p", &turns);
    proxy.assert_secret_kept_out(KEY, &store);
}

/// The texts of an Anthropic request's mid-conversation system messages (Claude Code sends
/// one every few tool calls; tamp writes those one after another as one message), and how
/// many tool calls it still holds.
fn system_messages_and_calls(exchange: &Exchange) -> (Vec<String>, usize) {
    let messages = exchange.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let texts = messages
        .iter()
        .filter(|m| m["role"] == "system")
        .flat_map(|m| match &m["content"] {
            serde_json::Value::String(text) => vec![text.clone()],
            blocks => blocks
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|b| b["text"].as_str().unwrap_or_default().to_string())
                .collect(),
        })
        .collect();
    let calls = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_use")
        .count();
    (texts, calls)
}

#[test]
fn claude_code_s_system_messages_are_kept_and_do_not_stop_a_summary() {
    // Claude Code sends a system message every few tool calls. A summarizing strategy whose
    // span stopped at each stalled after the second: every later call stayed in the history.
    // Now the span goes on past them, and they stay, after the summary.
    const LONG: u32 = 30;
    let stage = fold_stage();
    let Setup {
        proxy,
        upstream,
        dir,
        ..
    } = Setup::start_task(
        "agents-claude-long",
        ServerCompaction::Present,
        4_100,
        "",
        &stage,
        LONG,
        |_| Task::Echo,
    );
    let exchanges = claude_model_calls(&dir, &upstream, &proxy);
    let turns: Vec<&Exchange> = exchanges.iter().collect();
    assert!(turns.len() > LONG as usize, "{} model calls", turns.len());
    assert_compacted("claude -p", &turns);
    // Every system message Claude Code sent reaches the upstream in the last call; one it
    // said again word for word is there once (the later copy keeps it), not once a repeat.
    let last = turns.last().unwrap();
    let (kept, calls) = system_messages_and_calls(last);
    let mut sent: Vec<String> = turns
        .iter()
        .flat_map(|e| system_messages_and_calls(e).0)
        .collect();
    sent.sort();
    sent.dedup();
    for text in &sent {
        assert!(
            kept.contains(text),
            "lost from the last call: {text:?}; it has {kept:#?}"
        );
    }
    let nudges = kept
        .iter()
        .filter(|t| t.starts_with("The user hasn't heard from you"))
        .count();
    assert!(
        (1..=2).contains(&nudges),
        "{nudges} copies of Claude Code's reminder in the last call: {kept:#?}"
    );
    // And the calls before the recent ones are summarized, not left in the history.
    assert!(
        calls <= 10,
        "the last call still holds {calls} of the {LONG} tool calls: the summaries stalled"
    );
}

/// How many ledger entries the summaries in `text` say they moved out to their pages (`(N
/// older entries moved out …)`): past a ledger's room its oldest entries go to the page,
/// counted, never silently.
fn moved_out(text: &str) -> usize {
    text.match_indices(" older entries moved out")
        .filter_map(|(at, _)| {
            let digits = text[..at].rsplit(|c: char| !c.is_ascii_digit()).next()?;
            digits.parse::<usize>().ok()
        })
        .sum()
}

/// Asserts that of `steps` facts each is still in the last call (`kept`) or listed in a
/// summary's ledger (`listed`), but for as many as the summaries say moved out to their
/// pages; and that the ledger lists at least three. (With the thread continued between
/// compactions, each summary covers the few steps since the one before; a summary of three
/// short steps has room for one ledger entry, the others moved out to its page.)
fn assert_accounted(what: &str, text: &str, steps: u32, kept: &[u32], listed: &[u32]) {
    let missing: Vec<u32> = (1..=steps)
        .filter(|s| !kept.contains(s) && !listed.contains(s))
        .collect();
    let moved = moved_out(text);
    assert!(
        missing.len() <= moved,
        "{what}: steps {missing:?} are neither in the last call ({kept:?}) nor in a ledger \
         ({listed:?}), and the summaries say {moved} entries moved out"
    );
    assert!(
        listed.len() >= 3,
        "{what}: only {} listed in the ledger: {listed:?}; kept {kept:?}",
        listed.len()
    );
}

/// The steps whose file-writing call is still in the request (not summarized): Claude Code's
/// `Write` `tool_use` blocks, Codex's `apply_patch` `custom_tool_call` items.
fn writing_calls_kept(exchange: &Exchange) -> Vec<u32> {
    let step = |text: &str| {
        let name = text.rsplit('/').next()?;
        let digits: String = name
            .strip_prefix("step-")?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<u32>().ok()
    };
    let mut kept = Vec::new();
    for message in exchange.body["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_use" && block["name"] == "Write" {
                kept.extend(block["input"]["file_path"].as_str().and_then(step));
            }
        }
    }
    for item in exchange.body["input"].as_array().into_iter().flatten() {
        if item["type"] == "custom_tool_call" && item["name"] == "apply_patch" {
            let input = item["input"].as_str().unwrap_or("");
            kept.extend(
                input
                    .lines()
                    .filter_map(|l| l.strip_prefix("*** Add File: "))
                    .find_map(step),
            );
        }
    }
    kept
}

/// Asserts every file the agent wrote is on disk, and that the last model call either still
/// holds the call that wrote it or lists it in a summary's ledger as `path (how)` (see
/// [`assert_accounted`]).
fn assert_files_in_the_ledger(
    what: &str,
    exchanges: &[Exchange],
    work: &Path,
    how: &str,
    steps: u32,
) {
    let last = exchanges.last().expect("a model call");
    let kept = writing_calls_kept(last);
    let text = String::from_utf8_lossy(&last.raw);
    let mut listed = Vec::new();
    for step in 1..=steps {
        let path = work.join(format!("step-{step}.txt"));
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            written.trim(),
            format!("step {step}"),
            "{what}: {}",
            path.display()
        );
        if text.contains(&format!("{} ({how})", path.display())) {
            listed.push(step);
        }
    }
    assert_accounted(what, &text, steps, &kept, &listed);
}

/// One agent's run through the proxy with map-reduce-adaptive summarizing (its ledger on).
struct FoldRun {
    what: &'static str,
    /// Every model call, in order (the agent finished, and at least 4 were compacted).
    turns: Vec<Exchange>,
    /// The folder the agent worked in.
    work: PathBuf,
    steps: u32,
    _setup: Setup,
}

/// Claude Code, then Codex, each doing a `steps`-step task of `task` (given its working
/// folder) through the proxy with map-reduce-adaptive. Codex's first request is 5,700
/// tokens: at `CODEX_HIGH` the low watermark is below it, so each compaction could take one
/// step only, whose summary has no room for a ledger line (a summary stays smaller than its
/// span); 1,500 tokens more, and twice the steps, leave room for a few steps a summary.
fn fold_runs(name: &str, steps: u32, task: fn(PathBuf) -> Task) -> [FoldRun; 2] {
    let stage = fold_stage();
    let agents: [(&'static str, u64, u32); 2] = [
        ("claude", 4_100, steps),
        ("codex", CODEX_HIGH + 1_500, steps * 2),
    ];
    agents.map(|(agent, high, steps)| {
        let setup = Setup::start_task(
            &format!("{name}-{agent}"),
            ServerCompaction::Present,
            high,
            "",
            &stage,
            steps,
            |dir| task(dir.join(agent).join("work")),
        );
        let (home, work) = agent_dirs(&setup.dir, agent);
        let (what, command) = if agent == "claude" {
            ("claude -p", claude(&setup.proxy.base, &home, &work))
        } else {
            let base = format!("{}/v1", setup.proxy.base);
            ("codex exec", codex(&base, &home, &work, "", ""))
        };
        let out = run(command, what);
        let turns: Vec<Exchange> = assert_finished(what, &out, &setup.upstream, &setup.proxy)
            .into_iter()
            .filter(|e| {
                e.target.starts_with("/v1/messages") || e.target.starts_with("/v1/responses")
            })
            .collect();
        assert_compacted(what, &turns.iter().collect::<Vec<_>>());
        FoldRun {
            what,
            turns,
            work,
            steps,
            _setup: setup,
        }
    })
}

#[test]
fn the_ledger_lists_the_files_the_agents_write_with_their_own_editor_tools() {
    // Claude Code writes with `Write` (JSON input); Codex with `apply_patch`, a freeform tool
    // whose input is the patch itself. Summarized by map-reduce-adaptive, each file written is
    // listed in the summary's ledger: before, Codex's were not (its input is not JSON).
    for run in fold_runs("agents-writes", STEPS, Task::WriteFiles) {
        let how = if run.what == "claude -p" {
            "Write"
        } else {
            "add"
        };
        assert_files_in_the_ledger(run.what, &run.turns, &run.work, how, run.steps);
    }
}

/// The steps whose failing `cat missing-N.txt` call is still in the request (not summarized).
fn failing_calls_kept(exchange: &Exchange, steps: u32) -> Vec<u32> {
    let text = exchange.body.to_string();
    (1..=steps)
        .filter(|step| {
            // The call's input as the request carries it: JSON inside a JSON string (Codex's
            // arguments) or a JSON object (Claude Code's input).
            let command = format!("cat missing-{step}.txt");
            text.contains(&format!("\\\"cmd\\\":\\\"{command}\\\""))
                || text.contains(&format!("\"command\":\"{command}\""))
        })
        .collect()
}

/// Asserts that the last model call either still holds each failed `cat missing-N.txt` or
/// lists it in a summary's ledger as an open error, with the line that says why (see
/// [`assert_accounted`]).
fn assert_errors_in_the_ledger(what: &str, exchanges: &[Exchange], steps: u32) {
    let last = exchanges.last().expect("a model call");
    let kept = failing_calls_kept(last, steps);
    let text = String::from_utf8_lossy(&last.raw);
    let listed: Vec<u32> = (1..=steps)
        .filter(|step| {
            text.contains(&format!(
                "failed: cat: missing-{step}.txt: No such file or directory"
            ))
        })
        .collect();
    assert_accounted(what, &text, steps, &kept, &listed);
}

#[test]
fn the_ledger_lists_the_commands_that_failed_for_the_agents() {
    // Claude Code marks a failed command's result `is_error`; Codex's Responses output has no
    // such flag, only its text: `Process exited with code 1`, then the output.
    for run in fold_runs("agents-fails", STEPS, |_| Task::FailingCommands) {
        assert_errors_in_the_ledger(run.what, &run.turns, run.steps);
    }
}

/// What an agent sent, as a fixture: every request of the session in order, its headers less
/// the key and the connection's own (`host`, `content-length`), its body as sent; one request
/// per line.
fn session_fixture(agent: &str, exchanges: &[Exchange]) -> String {
    let requests: Vec<String> = exchanges
        .iter()
        .map(|e| {
            let headers: Vec<(&str, &str)> = e
                .headers
                .iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "x-api-key" | "authorization" | "host" | "content-length")
                })
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            serde_json::json!({"method": e.method, "path": e.target, "headers": headers, "body": e.body})
                .to_string()
        })
        .collect();
    format!(
        "{{\"agent\": {},\n\"requests\": [\n{}\n]}}\n",
        serde_json::Value::from(agent),
        requests.join(",\n")
    )
}

/// Rewrites `tests/fixtures/agents/`: each agent run once straight against the scripted
/// upstream (no proxy), and every request it sent written down. The proxy tests and the proxy
/// bench replay these sessions. Run it by hand when an agent's pinned version changes:
/// `cargo test -p tamp-e2e --test e2e agents::record -- --ignored`.
#[test]
#[ignore = "rewrites the committed fixtures; run by hand"]
fn record_the_agents_sessions_into_the_fixtures() {
    let dir = ScratchDir::new("agents-record");
    let fixtures = tamp_e2e::workspace_root().join("tests/fixtures/agents");
    std::fs::create_dir_all(&fixtures).unwrap();

    let upstream = AgentUpstream::start(KEY, STEPS, ServerCompaction::Present);
    let (home, work) = agent_dirs(&dir, "claude");
    let out = run(claude(&upstream.url(), &home, &work), "claude");
    assert_ok(&out, "");
    let fixture = session_fixture(tools::CLAUDE_CODE, &upstream.exchanges());
    std::fs::write(fixtures.join("claude-code.session.json"), fixture).unwrap();

    let upstream = AgentUpstream::start(KEY, STEPS, ServerCompaction::Present);
    let (home, work) = agent_dirs(&dir, "codex");
    let out = run(codex(&upstream.openai_url(), &home, &work, "", ""), "codex");
    assert_ok(&out, "");
    let fixture = session_fixture(tools::CODEX, &upstream.exchanges());
    std::fs::write(fixtures.join("codex.session.json"), fixture).unwrap();
}

#[test]
fn two_claude_code_sessions_at_once_in_one_folder_keep_their_own_threads() {
    let Setup {
        proxy,
        upstream,
        dir,
        ..
    } = Setup::start("agents-claude-two", ServerCompaction::Present, 4_100, "");
    // One folder and one task: the same system prompt and first message for both.
    let (home, work) = agent_dirs(&dir, "claude");
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run(claude(&proxy.base, &home, &work), "claude (a)"));
        let b = s.spawn(|| run(claude(&proxy.base, &home, &work), "claude (b)"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let exchanges = assert_finished("claude -p (a)", &a, &upstream, &proxy);
    assert_finished("claude -p (b)", &b, &upstream, &proxy);
    let mut sessions: Vec<String> = exchanges.iter().filter_map(Exchange::session).collect();
    sessions.sort();
    sessions.dedup();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let log = proxy.log();
    for session in &sessions {
        let mine: Vec<&Exchange> = exchanges
            .iter()
            .filter(|e| e.session().as_ref() == Some(session))
            .collect();
        assert_compacted(&format!("session {session}"), &mine);
        let continued = format!("thread session:{session}; continued");
        assert!(
            log.contains(&continued),
            "no \"{continued}\" in the log:\n{}",
            tail(&log, 80)
        );
    }
}

#[test]
fn codex_finishes_a_tool_task_through_the_proxy_with_its_history_compacted() {
    let Setup {
        proxy,
        upstream,
        store,
        dir,
    } = Setup::start("agents-codex", ServerCompaction::Present, CODEX_HIGH, "");
    let (home, work) = agent_dirs(&dir, "codex");

    let base = format!("{}/v1", proxy.base);
    let out = run(codex(&base, &home, &work, "", ""), "codex exec");
    let exchanges = assert_finished("codex exec", &out, &upstream, &proxy);
    let turns = exchanges.len();
    assert!(
        turns > STEPS as usize,
        "{turns} model calls for {STEPS} steps"
    );
    assert_compacted("codex exec", &exchanges.iter().collect::<Vec<_>>());
    let session = exchanges[0]
        .session()
        .expect("Codex sends its prompt_cache_key");
    let continued = format!("thread session:{session}; continued");
    assert!(
        proxy.log_containing(&[&continued]).contains(&continued),
        "no \"{continued}\" in the log"
    );
    proxy.assert_secret_kept_out(KEY, &store);
}

/// Codex's first request is its instructions, skills and environment (5,700 tokens); each
/// step adds about 85.
const CODEX_HIGH: u64 = 6_100;

/// The texts of a Responses request's user messages, in order.
/// Through a chain of no stages the proxy streams each body to the upstream as it arrives,
/// never collecting it (both agents declare a `Content-Length`): the agents still finish,
/// every request checked by the upstream as the real API would, none of them changed.
#[test]
fn both_agents_finish_through_a_chain_of_no_stages_their_bodies_streamed_unread() {
    for agent in ["claude", "codex"] {
        let Setup {
            proxy,
            upstream,
            dir,
            ..
        } = Setup::start_with(
            &format!("agents-streamed-{agent}"),
            ServerCompaction::Present,
            4_100,
            "",
            "",
        );
        let (home, work) = agent_dirs(&dir, agent);
        let command = if agent == "claude" {
            claude(&proxy.base, &home, &work)
        } else {
            codex(&format!("{}/v1", proxy.base), &home, &work, "", "")
        };
        let out = run(command, agent);
        let exchanges = assert_finished(agent, &out, &upstream, &proxy);
        assert!(
            exchanges.len() > STEPS as usize,
            "{agent}: {} model calls for {STEPS} steps",
            exchanges.len()
        );
        assert!(
            exchanges.iter().all(|e| !e.compacted()),
            "{agent}: a request reached the upstream compacted through a chain of no stages"
        );
        let streamed = "body not collected: unchanged (the chain has no stages: streamed unread)";
        let log = proxy.log_containing(&[streamed]);
        assert!(
            log.matches(streamed).count() >= exchanges.len(),
            "{agent}: {} of {} bodies streamed unread\n{}",
            log.matches(streamed).count(),
            exchanges.len(),
            tail(&log, 40)
        );
    }
}

fn user_texts(exchange: &Exchange) -> Vec<String> {
    let items = exchange.body["input"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter(|item| item["role"] == "user")
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn codex_s_task_after_its_own_context_message_is_never_compacted() {
    // Codex opens with a user message of its own (its AGENTS.md and `<environment_context>`)
    // and sends the user's task as the next one: the task is that second message, and every
    // compacted request must still carry it word for word, with the context before it.
    let stage = fold_stage();
    let Setup {
        proxy,
        upstream,
        dir,
        ..
    } = Setup::start_with(
        "agents-codex-task",
        ServerCompaction::Present,
        CODEX_HIGH,
        "",
        &stage,
    );
    let (home, work) = agent_dirs(&dir, "codex");
    let rule = "Never edit the vendor/ folder.";
    std::fs::write(work.join("AGENTS.md"), format!("{rule}\n")).unwrap();

    let base = format!("{}/v1", proxy.base);
    let out = run(codex(&base, &home, &work, "", ""), "codex exec");
    let exchanges = assert_finished("codex exec", &out, &upstream, &proxy);
    let compacted: Vec<&Exchange> = exchanges.iter().filter(|e| e.compacted()).collect();
    assert_compacted("codex exec", &compacted);
    let task = task("shell");
    for (n, exchange) in exchanges.iter().enumerate() {
        let texts = user_texts(exchange);
        let at = texts.iter().position(|t| *t == task).unwrap_or_else(|| {
            panic!(
                "request {n} ({}compacted) lost the task; its user texts: {texts:#?}",
                if exchange.compacted() { "" } else { "not " }
            )
        });
        assert!(
            texts[..at].iter().any(|t| t.contains(rule))
                && texts[..at]
                    .iter()
                    .any(|t| t.starts_with("<environment_context>")),
            "request {n}: Codex's own context is not kept before the task: {texts:#?}"
        );
    }
}

/// The page ids of the tamp summaries in a request.
fn pages_in(exchange: &Exchange) -> Vec<String> {
    let text = String::from_utf8_lossy(&exchange.raw).replace("\\\"", "\"");
    text.match_indices("<tamp-summary page=\"")
        .filter_map(|(at, marker)| {
            let rest = &text[at + marker.len()..];
            rest.split_once('"').map(|(page, _)| page.to_string())
        })
        .collect()
}

#[test]
fn codex_compacts_its_history_through_tamp_when_the_upstream_cannot() {
    // An upstream like vLLM: no compaction_trigger, no compaction items; a budget the task
    // stays under: the only compaction is the one Codex asks for.
    let Setup {
        proxy,
        upstream,
        store,
        dir,
    } = Setup::start(
        "agents-codex-own",
        ServerCompaction::Absent,
        100_000,
        "openai_compaction = \"tamp\"",
    );
    let (home, work) = agent_dirs(&dir, "codex");

    // A provider Codex takes for OpenAI (so it compacts server-side), with no WebSocket
    // attempts, and a limit its history passes after a few steps (usage is bytes / 4).
    let base = format!("{}/v1", proxy.base);
    let command = codex(
        &base,
        &home,
        &work,
        "supports_websockets = false",
        "model_auto_compact_token_limit = 8500",
    );
    let config = home.join(".codex/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("name = \"tamp\"", "name = \"OpenAI\""),
    )
    .unwrap();
    let out = run(command, "codex exec");
    let exchanges = assert_finished("codex exec", &out, &upstream, &proxy);

    // Codex compacted (tamp answered: the upstream would have refused the trigger), and every
    // later request carries tamp's summary in place of its compaction item.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_contains(&said, "context compacted");
    assert_compacted("codex exec", &exchanges.iter().collect::<Vec<_>>());
    let last = exchanges.last().unwrap();
    let pages = pages_in(last);
    assert!(!pages.is_empty(), "no summary in the last request");
    // The pages hold what was taken out: the first steps' calls.
    let archived = tamp_e2e::rt().block_on(async {
        let mut archived = String::new();
        for page in &pages {
            let url = proxy.url(&format!("/tamp/v1/pages/{page}"));
            archived += &reqwest::get(url).await.unwrap().text().await.unwrap();
        }
        archived
    });
    assert_contains(&archived, "echo step 1");
    proxy.assert_secret_kept_out(KEY, &store);
}

/// `system` and the conversation of a model call (Anthropic's `system` and `messages`, or the
/// Responses `instructions` and `input`) with every `cache_control` mark taken out: what a
/// provider's prompt cache compares.
fn cached_prefix(exchange: &Exchange) -> (serde_json::Value, Vec<serde_json::Value>) {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.remove("cache_control");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut body = exchange.body.clone();
    strip(&mut body);
    let (head, list) = if body.get("messages").is_some() {
        ("system", "messages")
    } else {
        ("instructions", "input")
    };
    let items = body[list].as_array().cloned().unwrap_or_default();
    (body[head].take(), items)
}

/// How many model calls start with the call before them (its system and conversation, marks
/// aside): the requests whose prefix a provider's prompt cache can read.
fn extending(turns: &[&Exchange]) -> usize {
    turns
        .windows(2)
        .filter(|pair| {
            let (head_a, a) = cached_prefix(pair[0]);
            let (head_b, b) = cached_prefix(pair[1]);
            head_a == head_b && b.len() >= a.len() && b[..a.len()] == a[..]
        })
        .count()
}

/// The page ids a request names (in placeholders and summaries).
fn pages_named(exchange: &Exchange) -> std::collections::HashSet<String> {
    let text = String::from_utf8_lossy(&exchange.raw);
    text.match_indices("pg_")
        .map(|(at, _)| {
            text[at + 3..]
                .chars()
                .take_while(char::is_ascii_hexdigit)
                .collect::<String>()
        })
        .filter(|hex| hex.len() >= 16)
        .map(|hex| format!("pg_{hex}"))
        .collect()
}

/// Of the model calls that are not a compaction (naming no page the call before did not),
/// the share that start with the call before them (see [`extending`]); and how many calls
/// were compactions.
fn extending_between_compactions(turns: &[&Exchange]) -> (f64, usize) {
    let mut pairs = 0;
    let mut extend = 0;
    let mut compactions = 0;
    for pair in turns.windows(2) {
        if !pages_named(pair[1]).is_subset(&pages_named(pair[0])) {
            compactions += 1;
            continue;
        }
        pairs += 1;
        extend += extending(pair);
    }
    (extend as f64 / pairs.max(1) as f64, compactions)
}

/// `examples/chains/agents.toml` in `dir`, its upstreams `upstream`'s, every model's budget
/// `max_tokens` (the agents' real windows would take a long session to fill).
fn agents_chain(dir: &Path, upstream: &AgentUpstream, max_tokens: u64) -> PathBuf {
    let shipped = tamp_e2e::workspace_root().join("examples/chains/agents.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    let (head, rest) = text.split_once("[proxy.models]\n").unwrap();
    let stages = &rest[rest.find("[[stage]]").unwrap()..];
    let head = head
        .replace("https://api.anthropic.com", &upstream.url())
        .replace("https://api.openai.com/v1", &upstream.openai_url());
    let text = format!("{head}[proxy.models]\n\"*\" = {{ max_tokens = {max_tokens} }}\n\n{stages}");
    let path = dir.join("agents.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The model calls of `exchanges`.
fn model_calls(exchanges: &[Exchange]) -> Vec<&Exchange> {
    exchanges
        .iter()
        .filter(|e| e.target.starts_with("/v1/messages") || e.target.starts_with("/v1/responses"))
        .collect()
}

/// An agent's 40-step task of ~4,000-token outputs, straight at the upstream and then through
/// the proxy with the agents chain: between compactions, a request through the proxy starts
/// with the one before it at least 0.9 times as often as the agent's own requests do straight
/// at the upstream (the provider's prompt cache reads what it wrote).
fn assert_prompt_cache_holds(agent: &str) {
    const TURNS: u32 = 40;
    let task = || Task::Logs { recall_after: None };
    let command = |base: &str, home: &Path, work: &Path| {
        if agent == "claude" {
            claude(base, home, work)
        } else {
            codex(&format!("{base}/v1"), home, work, "", "")
        }
    };
    let dir = ScratchDir::new(&format!("agents-cache-{agent}"));
    let direct = AgentUpstream::start_task(KEY, TURNS, ServerCompaction::Present, task());
    let (home, work) = agent_dirs(&dir, "direct");
    let out = run(command(&direct.url(), &home, &work), agent);
    assert_ok(&out, "");
    let straight_exchanges = direct.exchanges();
    let straight = model_calls(&straight_exchanges);
    let straight_share = extending(&straight) as f64 / (straight.len() - 1) as f64;

    let upstream = AgentUpstream::start_task(KEY, TURNS, ServerCompaction::Present, task());
    let config = agents_chain(&dir, &upstream, 60_000);
    let proxy = Server::start_command("proxy", &config, &[], &[]);
    let (home, work) = agent_dirs(&dir, "proxied");
    let out = run(command(&proxy.base, &home, &work), agent);
    let exchanges = assert_finished(agent, &out, &upstream, &proxy);
    let through = model_calls(&exchanges);
    // The agent's session reaches the upstream on every request as it sent it: Claude
    // Code's `metadata.user_id`, Codex's `prompt_cache_key` (what OpenAI keys its cache by).
    let session = through[0].session().expect("the agent names its session");
    assert!(
        through
            .iter()
            .all(|e| e.session().as_ref() == Some(&session)),
        "{agent}: a request reached the upstream without its session"
    );
    let (share, compactions) = extending_between_compactions(&through);
    eprintln!(
        "{agent}: straight {:.3} of {} requests extend the one before; through the proxy {share:.3} \
         between {compactions} compaction(s) in {} requests",
        straight_share,
        straight.len(),
        through.len()
    );
    // Compactions come only as the context crosses the high watermark again (each takes
    // it far under): a request that did not continue its thread is compacted again from
    // the raw history, a compaction on every request.
    assert!(
        (2..=TURNS as usize / 4).contains(&compactions),
        "{agent}: {compactions} compaction(s) in {} requests\n{}",
        through.len(),
        tail(&proxy.log(), 60)
    );
    assert!(
        share >= 0.9 * straight_share,
        "{agent}: between compactions {share:.3} of the requests through the proxy extend the \
         one before, straight {straight_share:.3}\n{}",
        tail(&proxy.log(), 60)
    );
    drop(proxy);
}

#[test]
fn claude_code_s_prompt_cache_holds_between_compactions() {
    assert_prompt_cache_holds("claude");
}

#[test]
fn codex_s_prompt_cache_holds_between_compactions() {
    assert_prompt_cache_holds("codex");
}

/// How an agent reaches `tamp mcp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mcp {
    /// `tamp mcp --config <chain>`, started by the agent.
    Stdio,
    /// The proxy's `/tamp/mcp`, with the agent's key.
    Http,
}

/// Steps of the recall task: step 1 prints the fact, and by step 5 its output is cleared.
const RECALL_STEPS: u32 = 8;
const RECALL_AFTER: u32 = 5;

/// Claude Code's MCP configuration (`--mcp-config`) for `tamp mcp` as `how` says.
fn claude_mcp_config(how: Mcp, chain: &Path, proxy: &Server) -> String {
    let server = match how {
        Mcp::Stdio => serde_json::json!({
            "command": tamp_e2e::tamp_bin(),
            "args": ["mcp", "--config", chain],
        }),
        Mcp::Http => serde_json::json!({
            "type": "http",
            "url": proxy.url("/tamp/mcp"),
            "headers": {"x-api-key": KEY},
        }),
    };
    serde_json::json!({"mcpServers": {"tamp": server}}).to_string()
}

/// Codex's `[mcp_servers.tamp]` for `tamp mcp` as `how` says.
fn codex_mcp_config(how: Mcp, chain: &Path, proxy: &Server) -> String {
    match how {
        Mcp::Stdio => format!(
            "[mcp_servers.tamp]\ncommand = {}\nargs = [\"mcp\", \"--config\", {}]\n",
            toml_string(&tamp_e2e::tamp_bin().display().to_string()),
            toml_string(&chain.display().to_string()),
        ),
        Mcp::Http => format!(
            "[mcp_servers.tamp]\nurl = {}\nbearer_token_env_var = \"TAMP_AGENT_KEY\"\n",
            toml_string(&proxy.url("/tamp/mcp")),
        ),
    }
}

fn toml_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The upstream of the recall tasks: a log task whose model recalls a cleared fact after
/// [`RECALL_AFTER`] steps.
fn recall_upstream() -> AgentUpstream {
    AgentUpstream::start_task(
        KEY,
        RECALL_STEPS,
        ServerCompaction::Present,
        Task::Logs {
            recall_after: Some(RECALL_AFTER),
        },
    )
}

/// An agent's run of the recall task through the proxy with the agents chain, `tamp mcp`
/// reached as `how`: the model calls `recall` on the page of the cleared first output, and the
/// fact planted there is in the next request (it was in none since the clearing).
fn assert_recalls_a_cleared_fact(agent: &str, how: Mcp) -> (Setup, PathBuf) {
    let name = format!("agents-recall-{agent}-{how:?}").to_lowercase();
    let dir = ScratchDir::new(&name);
    let upstream = recall_upstream();
    let store = dir.join("proxy");
    std::fs::create_dir_all(&store).unwrap();
    // A budget the first request fits in, and the fourth step's output overflows.
    let budget = if agent == "claude" { 24_000 } else { 30_000 };
    let chain = agents_chain(&store, &upstream, budget);
    let proxy = Server::start_command("proxy", &chain, &[], &[("TAMP_LOG", "debug")]);
    let (home, work) = agent_dirs(&dir, agent);
    let command = if agent == "claude" {
        let mut command = claude(&proxy.base, &home, &work);
        let config = claude_mcp_config(how, &chain, &proxy);
        command
            .args([
                "--mcp-config",
                &config,
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__tamp__recall",
            ])
            // Past a custom base URL Claude Code defers MCP tools behind its ToolSearch tool,
            // which a scripted model would have to call first; listed, the model calls it.
            .env("ENABLE_TOOL_SEARCH", "false");
        command
    } else {
        let base = format!("{}/v1", proxy.base);
        // Codex defers MCP tools behind its client-executed `tool_search` tool: the scripted
        // model searches for the recall tool first, as a real one does.
        codex(
            &base,
            &home,
            &work,
            "",
            &codex_mcp_config(how, &chain, &proxy),
        )
    };
    let out = run(command, agent);
    assert_recalled(&format!("{agent} ({how:?})"), &out, &upstream, &proxy);
    let setup = Setup {
        proxy,
        upstream,
        store,
        dir,
    };
    (setup, chain)
}

/// Asserts that the agent's run (`out`, through `proxy` to `upstream`) finished, that the
/// model called `recall` on the page of the cleared first output, and that the fact planted
/// there is in the recall's result (and was in none of the requests since the clearing).
fn assert_recalled(what: &str, out: &Output, upstream: &AgentUpstream, proxy: &Server) {
    let exchanges = assert_finished(what, out, upstream, proxy);
    let turns = model_calls(&exchanges);
    let has_fact = |e: &Exchange| String::from_utf8_lossy(&e.raw).contains(PLANTED_FACT);
    let called = turns
        .iter()
        .position(|e| !recall_result_text(e).is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{what}: no request carries a recall result; tools offered: {:?}\n\
                 agent's stderr:\n{}\nproxy log:\n{}",
                turns.last().map(|e| tool_names(e)),
                String::from_utf8_lossy(&out.stderr),
                tail(&proxy.log(), 40)
            )
        });
    let recalled = recall_result_text(turns[called]);
    assert!(
        recalled.contains(PLANTED_FACT),
        "{what}: the recall's result lacks the fact: {recalled}"
    );
    assert!(
        !has_fact(turns[called - 1]),
        "{what}: the fact was still in the request before the recall: not a test"
    );
}

/// The text of the recall call's result in a request (what the MCP server answered): the
/// result of the call of a tool whose name ends in `recall`, in either API.
fn recall_result_text(exchange: &Exchange) -> String {
    let body = &exchange.body;
    let is_recall = |name: &serde_json::Value| name.as_str().is_some_and(|n| n.ends_with("recall"));
    let blocks: Vec<&serde_json::Value> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .collect();
    let items: Vec<&serde_json::Value> = body["input"].as_array().into_iter().flatten().collect();
    let call = blocks
        .iter()
        .find(|b| b["type"] == "tool_use" && is_recall(&b["name"]))
        .map(|b| b["id"].clone())
        .or_else(|| {
            items
                .iter()
                .find(|i| i["type"] == "function_call" && is_recall(&i["name"]))
                .map(|i| i["call_id"].clone())
        });
    let Some(call) = call else {
        return String::new();
    };
    let result = blocks
        .iter()
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == call)
        .map(|b| b["content"].clone())
        .or_else(|| {
            items
                .iter()
                .find(|i| i["type"] == "function_call_output" && i["call_id"] == call)
                .map(|i| i["output"].clone())
        });
    result.map(|r| r.to_string()).unwrap_or_default()
}

fn tool_names(exchange: &Exchange) -> Vec<String> {
    exchange.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            if t["type"] == "tool_search" {
                t.to_string()
            } else {
                t["name"]
                    .as_str()
                    .unwrap_or(t["type"].as_str().unwrap_or("?"))
                    .to_string()
            }
        })
        .collect()
}

#[test]
fn claude_code_recalls_a_cleared_fact_through_tamp_mcp_over_stdio() {
    assert_recalls_a_cleared_fact("claude", Mcp::Stdio);
}

#[test]
fn claude_code_recalls_a_cleared_fact_through_the_proxy_s_mcp_route() {
    let (setup, _) = assert_recalls_a_cleared_fact("claude", Mcp::Http);
    let proxy = &setup.proxy;
    // The key whose requests archived the page reads it; another key finds and reads nothing,
    // and a call with no key is told what to send.
    let page = setup
        .upstream
        .exchanges()
        .iter()
        .find_map(|e| {
            let text = e.body["messages"].to_string().replace("\\\"", "\"");
            let at = text.find("<tamp-cleared page=\"")? + "<tamp-cleared page=\"".len();
            Some(
                text[at..]
                    .chars()
                    .take_while(|c| *c != '"')
                    .collect::<String>(),
            )
        })
        .expect("a cleared output");
    let recall = serde_json::json!({"page": page});
    let search = serde_json::json!({"query": "deploy code K7-4481-QX"});
    let own = [("x-api-key", KEY)];
    let (ok, text) = mcp_call(proxy, &own, "recall", &recall);
    assert!(ok && text.contains(PLANTED_FACT), "{text}");
    let (ok, text) = mcp_call(proxy, &own, "search", &search);
    assert!(ok && text.contains(&page), "{text}");
    for other in [
        [("x-api-key", "sk-someone-else-0123456789")],
        [("authorization", "Bearer sk-someone-else-0123456789")],
    ] {
        let (ok, text) = mcp_call(proxy, &other, "recall", &recall);
        assert!(!ok && text.starts_with("no page "), "{text}");
        let (ok, text) = mcp_call(proxy, &other, "search", &search);
        assert!(
            ok && text.starts_with("No archived message matches"),
            "{text}"
        );
    }
    let (ok, text) = mcp_call(proxy, &[], "recall", &recall);
    assert!(!ok && text.contains("x-api-key"), "{text}");
}

/// Calls `tool` with `arguments` on the proxy's MCP route with `headers`, as an MCP client
/// does over Streamable HTTP (initialize, then the call); whether the tool succeeded, and its
/// text.
fn mcp_call(
    proxy: &Server,
    headers: &[(&str, &str)],
    tool: &str,
    arguments: &serde_json::Value,
) -> (bool, String) {
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        let mut request = client
            .post(proxy.url("/tamp/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        tamp_e2e::rt().block_on(async {
            let answer = request.send().await.expect("the MCP route answers");
            let status = answer.status();
            let text = answer.text().await.unwrap();
            assert!(status.is_success(), "{status}: {text}");
            text
        })
    };
    post(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tamp-e2e", "version": "1"}}}),
    );
    let text = post(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}}),
    );
    let answer: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let result = &answer["result"];
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (result["isError"] != true, text)
}

#[test]
fn codex_recalls_a_cleared_fact_through_tamp_mcp_over_stdio() {
    assert_recalls_a_cleared_fact("codex", Mcp::Stdio);
}

#[test]
fn codex_recalls_a_cleared_fact_through_the_proxy_s_mcp_route() {
    assert_recalls_a_cleared_fact("codex", Mcp::Http);
}

/// The fenced block of `docs/proxy.md` that follows `<!-- setup: NAME -->`.
fn setup_block(name: &str) -> String {
    let doc = std::fs::read_to_string(tamp_e2e::workspace_root().join("docs/proxy.md")).unwrap();
    let marker = format!("<!-- setup: {name} -->");
    let after = &doc[doc
        .find(&marker)
        .unwrap_or_else(|| panic!("no {marker} in docs/proxy.md"))..];
    let open = after.find("```").unwrap();
    let body = &after[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_string()
}

/// A `PATH` with `dirs` first, then the test's own.
fn path_with(dirs: &[&Path]) -> std::ffi::OsString {
    let mut all: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    all.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(all).unwrap()
}

/// Runs a line of a doc's `sh` block in bash with `home` as `HOME`, from the repository's
/// root, `tamp` and the agents on `PATH`.
fn doc_line(line: &str, home: &Path) {
    let tamp_dir = tamp_e2e::tamp_bin().parent().unwrap().to_path_buf();
    let claude_dir = tools::claude_code().parent().unwrap().to_path_buf();
    let out = Command::new("bash")
        .args(["-euc", line])
        .env("HOME", home)
        .env("PATH", path_with(&[&tamp_dir, &claude_dir]))
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .current_dir(tamp_e2e::workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/proxy.md: `{line}` failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_set_ups_in_docs_proxy_md_run_as_written() {
    // docs/proxy.md's blocks, run as a user would from a clone: the proxy's, then each agent's,
    // each agent doing the recall task. What the test changes, and only that: the upstreams
    // (the scripted one), the agents chain's budget (small enough for the task to compact),
    // the proxy's port (a free one), and the Codex config's example home directory.
    let dir = ScratchDir::new("agents-docs");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let proxy_block = setup_block("proxy");
    let mut lines = proxy_block.lines().filter(|l| !l.trim().is_empty());
    let serve = lines.next_back().expect("the proxy's command");
    for line in lines {
        doc_line(line, &home);
    }
    let config = serve
        .strip_prefix("tamp proxy --config ")
        .unwrap_or_else(|| panic!("not a tamp proxy command: {serve}"))
        .replace('~', &home.display().to_string());
    let config = PathBuf::from(config);
    for agent in ["claude", "codex"] {
        let upstream = recall_upstream();
        // The copied chain with this test's upstream and budget.
        let text = std::fs::read_to_string(&config).unwrap();
        let (head, rest) = text.split_once("[proxy.models]\n").unwrap();
        let stages = &rest[rest.find("[[stage]]").unwrap()..];
        let budget = if agent == "claude" { 24_000 } else { 30_000 };
        let head = head
            .replace("https://api.anthropic.com", &upstream.url())
            .replace("https://api.openai.com/v1", &upstream.openai_url());
        let test_config = config.with_file_name(format!("agents-{agent}.toml"));
        std::fs::write(
            &test_config,
            format!("{head}[proxy.models]\n\"*\" = {{ max_tokens = {budget} }}\n\n{stages}"),
        )
        .unwrap();
        let proxy = Server::start_command("proxy", &test_config, &[], &[]);
        let port = proxy.base.rsplit(':').next().unwrap().to_string();
        // One home, as for a user: the chain the proxy block copied is under it.
        let (_, work) = agent_dirs(&dir, agent);
        let agent_home = home.clone();
        let command = if agent == "claude" {
            let block = setup_block("claude-code").replace("7475", &port);
            let mut block_lines = block.lines().filter(|l| !l.trim().is_empty());
            let add = block_lines
                .next()
                .unwrap()
                .replace("agents.toml", &format!("agents-{agent}.toml"));
            doc_line(&add, &agent_home);
            let run_line = block_lines.next().unwrap();
            let (assignment, program) = run_line.split_once(' ').unwrap();
            assert_eq!(program, "claude", "{run_line}");
            let (var, value) = assignment.split_once('=').unwrap();
            let mut command = isolated(&tools::claude_code(), &agent_home, &work);
            command
                .args([
                    "-p",
                    &task("Bash"),
                    "--allowedTools",
                    "Bash,mcp__tamp__recall",
                ])
                .env(var, value)
                .env("ANTHROPIC_API_KEY", KEY)
                .env("DISABLE_TELEMETRY", "1")
                .env("DISABLE_ERROR_REPORTING", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("ENABLE_TOOL_SEARCH", "false")
                .env("PATH", path_with(&[tamp_e2e::tamp_bin().parent().unwrap()]));
            command
        } else {
            let codex_home = agent_home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            let block = setup_block("codex")
                .replace("7475", &port)
                .replace("/home/you", &home.display().to_string())
                .replace("agents.toml", &format!("agents-{agent}.toml"))
                .replace("OPENAI_API_KEY", "TAMP_AGENT_KEY");
            // The doc's file, and what keeps a test run to itself (no update checks, no
            // analytics, no retries, no sandbox prompts).
            let isolation = "approval_policy = \"never\"\nsandbox_mode = \"danger-full-access\"\n\
                             check_for_update_on_startup = false\n";
            let tail = "\n[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n\
                        [otel]\nexporter = \"none\"\n";
            std::fs::write(
                codex_home.join("config.toml"),
                format!("{isolation}{block}{tail}"),
            )
            .unwrap();
            let mut command = codex_exec(&agent_home, &work, &codex_home);
            command.env("PATH", path_with(&[tamp_e2e::tamp_bin().parent().unwrap()]));
            command
        };
        let out = run(command, agent);
        assert_recalled(&format!("{agent} (docs/proxy.md)"), &out, &upstream, &proxy);
        // The proxy's access lines, at its default level.
        let log = proxy.log();
        assert_contains(&log, "INFO tamp::access: POST /v1/");
    }
}
