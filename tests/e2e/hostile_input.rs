//! Issue 32: what a hostile-input probe found short, through the real `tamp` binary:
//!
//! - a huge duration in a chain file (`timeout_secs = inf`, `1e20`, `1e300`) is a
//!   `file:line: field` error from `check-config` and `compact`, never a panic (point 3);
//! - the smaller findings of point 7, each in its own test below.
//!
//! The probe's other cases, and the test that covers each, are listed in docs/security.md
//! ("What a hostile-input probe checks").

use std::process::{Command, Stdio};
use std::time::Duration;

use tamp_e2e::assert_contains;
use tamp_e2e::serve_support::ScratchDir;
use tamp_e2e::{assert_ok, assert_stderr_has};
use tamp_e2e::{corpus, plugin, run_tamp as tamp, tamp_bin, text, write_chain};

/// The custom strategy (`strategy.so`) and a corpus conversation (`input.json`, returned) in
/// `dir`: what a chain file there and `tamp compact` need.
fn strategy_and_input(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let input = dir.join("input.json");
    std::fs::write(
        &input,
        corpus("anthropic", "taubench_gpt4o_airline_task2_trial2"),
    )
    .unwrap();
    input
}

/// `check-config` and `compact` of `input` with `config`: each exits 1 without a panic; what
/// each said on stderr.
fn refused_by_check_and_compact(
    dir: &std::path::Path,
    input: &std::path::Path,
    config: &str,
) -> Vec<String> {
    [
        vec!["check-config", "--config", config],
        vec!["compact", input.to_str().unwrap(), "--config", config],
    ]
    .into_iter()
    .map(|args| {
        let out = tamp(&args, dir);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        stderr
    })
    .collect()
}

#[test]
fn a_huge_duration_is_a_field_error_never_a_panic() {
    let dir = ScratchDir::new("huge-duration");
    let input = strategy_and_input(&dir);
    for value in ["inf", "1e20", "1e300", "nan", "-1"] {
        for (table, line) in [
            (
                format!("[provider]\ntimeout_secs = {value}\n"),
                "provider.timeout_secs",
            ),
            (
                format!("[proxy]\ncompaction_timeout_secs = {value}\n"),
                "proxy.compaction_timeout_secs",
            ),
            (
                format!("[batch]\nlease_secs = {value}\n"),
                "batch.lease_secs",
            ),
            (String::new(), "stage \"a\": timeout_secs"),
        ] {
            let stage_timeout = if table.is_empty() {
                format!("timeout_secs = {value}\n")
            } else {
                String::new()
            };
            let config = write_chain(
                &dir,
                &format!(
                    "[store]\npath = \"store.sqlite3\"\n{table}\n[[stage]]\nname = \"a\"\n\
                     plugin = \"strategy.so\"\n{stage_timeout}"
                ),
            );
            let config = config.to_str().unwrap();
            for stderr in refused_by_check_and_compact(&dir, &input, config) {
                assert!(
                    stderr.starts_with(&format!("error: {config}:"))
                        && stderr
                            .contains(&format!("{line}: must be a positive number of seconds")),
                    "{value}: {stderr}"
                );
            }
        }
    }
    // And on the command line: a flag's seconds are checked by the same rule.
    let out = tamp(
        &[
            "serve",
            "--config",
            "x.toml",
            "--shutdown-grace-secs",
            "1e300",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_stderr_has(&out, "at most 2592000");
}

/// A number that scales a count is range-checked like a duration: `chars_per_token:1e-300`
/// made every count wrap (a conversation of 203 tokens was never compacted), and prices of
/// `inf` or `-1` made every cost nonsense. Each is a `file:line: field` error naming the range,
/// from `check-config` and `compact` alike.
#[test]
fn a_number_that_scales_a_count_is_range_checked() {
    let dir = ScratchDir::new("scales");
    let input = strategy_and_input(&dir);
    for (table, key, says) in [
        (
            "[tokenizer]\nencoding = \"chars_per_token:1e-300\"\n",
            "encoding",
            "tokenizer.encoding: token encoding chars_per_token:1e-300: the characters per token \
             must be a number from 0.01 to 1000, got 1e-300",
        ),
        (
            "[tokenizer]\nencoding = \"chars/1e-16\"\n",
            "encoding",
            "tokenizer.encoding: token encoding chars_per_token:1e-16: the characters per \
             token must be a number from 0.01 to 1000, got 1e-16",
        ),
        (
            "[provider.price]\ninput_per_mtok = inf\noutput_per_mtok = 1.0\n",
            "input_per_mtok",
            "provider.price.input_per_mtok: must be a number from 0 to 100000, got inf",
        ),
        (
            "[provider.price]\ninput_per_mtok = 1.0\noutput_per_mtok = -1.0\n",
            "output_per_mtok",
            "provider.price.output_per_mtok: must be a number from 0 to 100000, got -1.0",
        ),
        (
            "[provider.price]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\nbatch_factor = nan\n",
            "batch_factor",
            "provider.price.batch_factor: must be a number from 0 to 10, got NaN",
        ),
    ] {
        let toml = format!(
            "[store]\npath = \"store.sqlite3\"\n{table}\n[[stage]]\nname = \"a\"\n\
             plugin = \"strategy.so\"\n"
        );
        let line = 1 + toml
            .lines()
            .position(|l| l.starts_with(&format!("{key} =")))
            .unwrap();
        let config = write_chain(&dir, &toml);
        let config = config.to_str().unwrap();
        for stderr in refused_by_check_and_compact(&dir, &input, config) {
            assert!(
                stderr.starts_with(&format!("error: {config}:{line}: {says}")),
                "{stderr}"
            );
        }
    }
}

/// Every file tamp reads whole is opened without waiting, refused unless it is a regular
/// file, and read up to a bound the error names: `check-config /dev/zero` grew to 4 GB in 8 s,
/// `compact --config /dev/zero` to 5.6 GB, a chain file swapped for a symlink to `/dev/zero`
/// ran out of memory, and a FIFO hung for ever. Each is now a refusal within seconds, exit 1,
/// naming the file and what it is (or the bound): chain files, conversations (a file or
/// stdin), facts files, scripts, recorded answers and a stage's JSON config.
#[test]
fn files_that_never_end_or_never_open_are_refused_at_once() {
    let dir = ScratchDir::new("unbounded-reads");
    strategy_and_input(&dir);
    let made = Command::new("mkfifo")
        .arg(dir.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.toml")).unwrap();
    // Sparse: 17 MiB that take no room.
    std::fs::File::create(dir.join("big.toml"))
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    let chain = |provider: &str| {
        format!(
            "[store]\npath = \"store.sqlite3\"\n{provider}\n[[stage]]\nname = \"a\"\n\
             plugin = \"strategy.so\"\n"
        )
    };
    std::fs::write(dir.join("chain.toml"), chain("")).unwrap();
    std::fs::write(
        dir.join("scripted.toml"),
        chain("[provider]\nkind = \"scripted\"\nscript = \"pipe\"\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("replay.toml"),
        chain("[provider]\nkind = \"replay\"\nanswers = \"zero.toml\"\n"),
    )
    .unwrap();
    let fifo = "it is a FIFO (named pipe), not a regular file";
    let device = "it is a character device, not a regular file";
    let cases: Vec<(Vec<&str>, String)> =
        vec![
        (
            vec!["check-config", "--config", "/dev/zero"],
            format!("error: /dev/zero: cannot read: {device}"),
        ),
        (
            vec!["check-config", "--config", "zero.toml"],
            format!("error: zero.toml: cannot read: {device}"),
        ),
        (
            vec!["check-config", "--config", "pipe"],
            format!("error: pipe: cannot read: {fifo}"),
        ),
        (
            vec!["check-config", "--config", "big.toml"],
            "error: big.toml: cannot read: it has 17825792 bytes, more than the 16 MiB a chain \
             file may have; not read further"
                .into(),
        ),
        (
            vec!["compact", "input.json", "--config", "/dev/zero"],
            format!("error: /dev/zero: cannot read: {device}"),
        ),
        (
            vec!["compact", "pipe", "--config", "chain.toml"],
            format!("error: cannot read pipe: {fifo}"),
        ),
        (
            vec!["compact", "zero.toml", "--config", "chain.toml"],
            format!("error: cannot read zero.toml: {device}"),
        ),
        (
            vec!["compact", "input.json", "--config", "scripted.toml"],
            format!("pipe: cannot read: {fifo}"),
        ),
        (
            vec!["compact", "input.json", "--config", "replay.toml"],
            format!("zero.toml: {device}"),
        ),
        (
            vec!["eval", "--chain", "chain.toml", "--facts", "pipe", "input.json"],
            format!("error: pipe: cannot read the facts file: {fifo}"),
        ),
        (
            vec!["conformance", "strategy.so", "--stage-config", "@pipe"],
            format!("error: --stage-config @pipe: cannot read: {fifo}"),
        ),
    ];
    for (args, says) in cases {
        let out = tamp_e2e::run_tamp_within(&args, &dir, Stdio::null(), Duration::from_secs(30));
        let stderr = text(&out.stderr);
        // `tamp conformance` exits 2 on an error of its own (1 is a failed check).
        let code = if args[0] == "conformance" { 2 } else { 1 };
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&says),
            "{args:?}: {says:?} not in: {stderr}"
        );
    }
    // Standard input, where `-` names it, is read up to the conversation's bound.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let out = tamp_e2e::run_tamp_within(
        &["compact", "-", "--config", "chain.toml"],
        &dir,
        Stdio::from(zero),
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: cannot read stdin: it goes on, more than the 256 MiB a conversation may \
             have; not read further"
        ),
        "{stderr}"
    );
}

/// A FIFO put in place of the chain file while `tamp serve` runs wedged the reloader for good
/// (its read waited for a writer that never came), and SIGTERM then printed `stopped` while
/// the process ran on past its grace. Now each such reload is refused at once, naming the
/// FIFO, the next good file is loaded, and SIGTERM ends the process within its grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_place_of_the_chain_file_never_wedges_reload_or_shutdown() {
    use tamp_e2e::serve_support::{chain_stage_names, Server};
    let dir = ScratchDir::new("fifo-chain");
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let chain = |stage: &str| {
        format!(
            "[store]\npath = \"store.sqlite3\"\n\n[[stage]]\nname = \"{stage}\"\n\
             plugin = \"strategy.so\"\n"
        )
    };
    let config = write_chain(&dir, &chain("first"));
    let mut server = Server::start(&config, &["--shutdown-grace-secs", "2"]);
    let fifo_in_place = || {
        std::fs::remove_file(&config).unwrap();
        let made = Command::new("mkfifo").arg(&config).status().unwrap();
        assert!(made.success());
    };
    let refused = |c: &serde_json::Value| {
        c["last_reload_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot read: it is a FIFO (named pipe)"))
    };
    fifo_in_place();
    let shown = server
        .wait_for_chain("the FIFO's refusal", Duration::from_secs(20), refused)
        .await;
    assert_eq!(chain_stage_names(&shown), ["first"], "{shown:#}");
    // Not wedged: the next good file is loaded.
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, chain("second")).unwrap();
    server
        .wait_for_chain("the file after the FIFO", Duration::from_secs(20), |c| {
            chain_stage_names(c) == ["second"] && c["last_reload_error"].is_null()
        })
        .await;
    fifo_in_place();
    server
        .wait_for_chain(
            "the second FIFO's refusal",
            Duration::from_secs(20),
            refused,
        )
        .await;
    server.sigterm();
    let started = std::time::Instant::now();
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {}", server.log());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );
}

/// A credential in a URL the operator writes is never shown: `[proxy] anthropic =
/// "http://produser:S3CRET@127.0.0.1:9"` was quoted whole in every 502 body and in the
/// startup log. One is planted in every URL a chain file or its environment names (both
/// upstreams, the provider's base URL, a PostgreSQL store's URL) and in the URLs a config
/// check refuses; no answer body or header, report, output or log line (at trace level) of
/// `check-config`, `compact`, `serve` and `proxy` holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_in_a_url_is_in_no_answer_log_or_report() {
    use tamp_e2e::serve_support::Server;
    const SECRET: &str = "S3CRET-PW-IN-URL";
    let dir = ScratchDir::new("url-credentials");
    strategy_and_input(&dir);
    let url = format!("http://produser:{SECRET}@127.0.0.1:9");
    let chain = format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [provider]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"{url}/v1\"\n\
         max_retries = 0\n\n[proxy]\nanthropic = \"{url}\"\nopenai = \"{url}\"\n\n\
         [[stage]]\nname = \"archive\"\nplugin = \"strategy.so\"\n\
         [stage.config]\nkeep_exchanges = 1\n"
    );
    let config = dir.join("served.toml");
    std::fs::write(&config, &chain).unwrap();
    let config = config.to_str().unwrap();
    let trace = [("TAMP_LOG", "trace")];
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(tamp_bin())
            .args(args)
            .current_dir(&*dir)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!all.contains(SECRET), "{args:?}: {all}");
        (out, all)
    };
    let (out, _) = run(&["check-config", "--config", config], &trace);
    assert!(out.status.success());
    let (out, all) = run(
        &[
            "compact",
            "input.json",
            "--config",
            config,
            "--report-json",
            "-",
        ],
        &trace,
    );
    assert!(out.status.success(), "{all}");
    // The provider was called, and its failure reported: without naming the credential.
    assert!(
        all.contains("llm_errors") && all.contains("127.0.0.1:9/v1/chat/completions"),
        "{all}"
    );
    // URLs refused by the config check; a PostgreSQL store that cannot be reached.
    for (table, says) in [
        (
            format!("[proxy]\nanthropic = \"ftp://produser:{SECRET}@h\"\n"),
            "proxy.anthropic: must be an http:// or https:// URL with a host, got \
             \"ftp://[redacted]@h\"",
        ),
        (
            format!(
                "[provider]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"ftp://u:{SECRET}@h\"\n"
            ),
            "provider.base_url: must be an http:// or https:// URL, got \"ftp://[redacted]@h\"",
        ),
        (
            "[store]\nkind = \"postgres\"\nurl_env = \"TAMP_TEST_DB_URL\"\n".to_string(),
            "127.0.0.1:9",
        ),
    ] {
        let refused = write_chain(&dir, &table);
        let db = format!("postgres://produser:{SECRET}@127.0.0.1:9/tamp");
        let (out, all) = run(
            &["check-config", "--config", refused.to_str().unwrap()],
            &[("TAMP_TEST_DB_URL", db.as_str()), ("TAMP_LOG", "trace")],
        );
        assert_eq!(out.status.code(), Some(1), "{all}");
        assert!(all.contains(says), "{says:?} not in: {all}");
    }
    let config = std::path::Path::new(config);

    // The proxy: its startup line, the 502s of both upstreams, the 400 of a target its
    // OpenAI base URL cannot place, and its log.
    let proxy = Server::start_command("proxy", config, &[], &trace);
    let client = reqwest::Client::new();
    let body = serde_json::json!({"model": "m", "max_tokens": 1,
        "messages": [{"role": "user", "content": "hi"}]});
    for (path, status) in [
        ("/v1/messages", 502),
        ("/v1/chat/completions", 502),
        ("/other", 400),
    ] {
        let request = client.post(proxy.url(path)).json(&body);
        // Anthropic's headers on its route; a shared path without them goes to OpenAI.
        let request = if path == "/v1/messages" {
            request
                .header("anthropic-version", "2023-06-01")
                .header("x-api-key", "sk-client")
        } else {
            request.bearer_auth("sk-client")
        };
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status().as_u16(), status, "{path}");
        let headers = format!("{:?}", answer.headers());
        let text = answer.text().await.unwrap();
        assert!(text.contains("[redacted]"), "{path}: {text}");
        assert!(
            !text.contains(SECRET) && !headers.contains(SECRET),
            "{path}: {text}"
        );
    }
    for path in ["/tamp/healthz", "/tamp/metrics"] {
        let text = tamp_e2e::get_text(&client, &proxy.url(path)).await;
        assert!(!text.contains(SECRET), "{path}: {text}");
    }
    let log = proxy.log_containing(&["http://[redacted]@127.0.0.1:9"]);
    assert!(log.contains("TRACE"), "not a trace log: {log}");
    assert_contains(&log, "upstreams anthropic -> http://[redacted]@127.0.0.1:9");
    assert!(!log.contains(SECRET), "{log}");
    drop(proxy);

    // tamp serve: the compaction's report and the chain it shows.
    let serve = Server::start_with_env(config, &[], &trace);
    let conversation: serde_json::Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let (status, answer) = serve
        .compact(&serde_json::json!({"conversation": conversation, "thread_continuity": false}))
        .await;
    assert_eq!(status, 200, "{answer:#}");
    let answer = answer.to_string();
    assert!(
        answer.contains("llm_errors") && answer.contains("127.0.0.1:9") && !answer.contains(SECRET),
        "{answer}"
    );
    let chain = serve.get_json("/v1/chain").await.to_string();
    assert!(!chain.contains(SECRET), "{chain}");
    let log = serve.log();
    assert!(log.contains("TRACE") && !log.contains(SECRET), "{log}");
}

/// Point 7: a lone surrogate in text tamp reads is named as what it is.
#[test]
fn a_lone_surrogate_in_read_text_is_named_as_such() {
    let dir = ScratchDir::new("lone-surrogate");
    let input = dir.join("in.json");
    std::fs::write(
        &input,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a\ud800b"}]}"#,
    )
    .unwrap();
    let out = tamp(&["compact", input.to_str().unwrap()], &dir);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "messages[0].content: invalid JSON: the string holds a lone surrogate escape (\\ud800)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("hex escape"), "{stderr}");
}

/// Point 7: logs written to a file or a pipe carry no colour codes.
#[test]
fn logs_to_a_file_carry_no_colour_codes() {
    let dir = ScratchDir::new("log-colour");
    let log = std::fs::File::create(dir.join("tamp.log")).unwrap();
    let root = tamp_e2e::workspace_root();
    let status = Command::new(tamp_bin())
        .args(["compact", "--force", "--store"])
        .arg(dir.join("s.sqlite3"))
        .arg(root.join("examples/conversations/ponyc-4588.anthropic.json"))
        .env("TAMP_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .unwrap();
    assert!(status.success());
    let written = std::fs::read_to_string(dir.join("tamp.log")).unwrap();
    assert_contains(&written, "DEBUG");
    assert!(!written.contains('\u{1b}'), "escape codes in the log file");
}

/// Point 7: `check-config` of a long chain says it on one readable line, and creates no
/// store (the default `./.tamp` of a file without `[store]`, or any other).
#[test]
fn check_config_summarizes_a_long_chain_and_creates_nothing() {
    let dir = ScratchDir::new("check-long");
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let stages: String = (0..2_000)
        .map(|i| format!("[[stage]]\nname = \"stage-{i}\"\nplugin = \"strategy.so\"\n"))
        .collect();
    let config = write_chain(&dir, &stages);
    let out = tamp(
        &["check-config", "--config", config.to_str().unwrap()],
        &dir,
    );
    assert_ok(&out, "");
    let stdout = text(&out.stdout);
    assert!(stdout.len() < 600, "{} bytes: {stdout}", stdout.len());
    assert!(
        stdout.contains("2000 stages (stage-0: custom-strategy")
            && stdout.contains("and 1992 more"),
        "{stdout}"
    );
    assert!(!dir.join(".tamp").exists(), "check-config created ./.tamp");
    let named = write_chain(&dir, "[store]\npath = \"deep/er/s.sqlite3\"\n");
    let out = tamp(&["check-config", "--config", named.to_str().unwrap()], &dir);
    assert_ok(&out, "");
    assert!(
        !dir.join("deep").exists(),
        "check-config created the store's directory"
    );
    // A store that could not be created is still an error.
    std::fs::write(dir.join("file"), "").unwrap();
    let blocked = write_chain(&dir, "[store]\npath = \"file/s.sqlite3\"\n");
    let out = tamp(
        &["check-config", "--config", blocked.to_str().unwrap()],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "is not a directory");
}

/// Point 7: `tamp batch status` reads the store and never writes it: a store that is not
/// there is an error, not a new file.
#[test]
fn batch_status_opens_the_store_read_only() {
    let dir = ScratchDir::new("batch-status");
    let store = dir.join("none/s.sqlite3");
    let out = tamp(
        &["batch", "status", "--store", store.to_str().unwrap()],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_stderr_has(&out, "no such file");
    assert!(!dir.join("none").exists(), "batch status created the store");
}

/// Point 7: the requests hyper answers itself (a malformed head, headers past its limits, a
/// target past 64 KiB) get a JSON error body like every other, on both servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hypers_own_answers_carry_a_json_error() {
    use tamp_e2e::serve_support::{read_answer, Server};
    use tokio::io::AsyncWriteExt as _;
    let dir = ScratchDir::new("hyper-answers");
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let config = write_chain(
        &dir,
        "[store]\npath = \"s.sqlite3\"\n[[stage]]\nname = \"a\"\nplugin = \"strategy.so\"\n",
    );
    let serve = Server::start(&config, &[]);
    let proxy = Server::start_command("proxy", &config, &[], &[]);
    let big_header = format!("x-big: {}", "a".repeat(500_000));
    let long_target = format!("/{}", "a".repeat(70_000));
    for server in [&serve, &proxy] {
        for (request, status, code) in [
            (
                "GET /healthz HTTP/1.1\r\nhost: localhost\r\nno colon here\r\n\r\n".to_string(),
                400,
                "invalid_request",
            ),
            (
                format!("GET /healthz HTTP/1.1\r\nhost: localhost\r\n{big_header}\r\n\r\n"),
                431,
                "invalid_request",
            ),
            (
                format!("GET {long_target} HTTP/1.1\r\nhost: localhost\r\n\r\n"),
                414,
                "uri_too_long",
            ),
        ] {
            let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            let answer = read_answer(&mut stream, std::time::Duration::from_secs(10))
                .await
                .expect("an answer");
            assert_eq!(answer.status, status);
            assert_eq!(answer.header("content-type"), Some("application/json"));
            assert_eq!(answer.json()["error"]["code"], code);
        }
    }
}

/// The probe's load case, kept: 200 compactions at once on a server whose runtime has one
/// worker thread, every answer a valid compacted conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_compactions_on_one_thread_are_all_answered() {
    use tamp_e2e::serve_support::Server;
    let dir = ScratchDir::new("one-thread");
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let config = write_chain(
        &dir,
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n[store]\npath = \"s.sqlite3\"\n\
         [[stage]]\nname = \"a\"\nplugin = \"strategy.so\"\n",
    );
    let server = std::sync::Arc::new(Server::start_with_env(
        &config,
        &["--max-concurrent", "256"],
        &[("TOKIO_WORKER_THREADS", "1")],
    ));
    let conversation: serde_json::Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let requests = (0..200).map(|i| {
        let server = server.clone();
        let body = serde_json::json!({"conversation": conversation, "thread_id": format!("t{i}")});
        tokio::spawn(async move { server.compact(&body).await })
    });
    // Each request is the same conversation, over the budget, on a thread of its own: every
    // one is compacted, and the same way.
    let mut compacted = std::collections::BTreeSet::new();
    for answer in futures::future::join_all(requests).await {
        let (status, body) = answer.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(
            body["conversation"]["messages"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
        let report = &body["report"];
        assert_eq!(report["stages"][0]["status"], "acted", "{report:#}");
        let tokens = |key: &str| {
            report[key]
                .as_u64()
                .unwrap_or_else(|| panic!("no report.{key}: {report:#}"))
        };
        let (before, after) = (tokens("tokens_before"), tokens("tokens_after"));
        assert!(after < before, "{before} -> {after}: {report:#}");
        // A valid request again, with a summary in place of what was archived.
        let (back, _) = tamp_host::wire::parse_value(body["conversation"].clone(), None)
            .unwrap_or_else(|e| panic!("the answer does not read back: {e}"));
        assert!(
            back.messages.iter().any(|m| m.summary_info().is_some()),
            "no summary in {body}"
        );
        compacted.insert((before, after, back.messages.len()));
    }
    assert_eq!(
        compacted.len(),
        1,
        "the same input compacted differently: {compacted:?}"
    );
}

/// The probe's hang-up case, kept: a client that goes away in the middle of a streamed
/// answer releases its stream (`tamp_proxy_streams_open` back to 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_stream_releases_it() {
    use tamp_e2e::mock_upstream::MockUpstream;
    use tamp_e2e::serve_support::Server;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = ScratchDir::new("hang-up");
    let upstream = MockUpstream::start();
    let config = write_chain(
        &dir,
        &format!(
            "[store]\npath = \"s.sqlite3\"\n[proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n",
            upstream.url(),
            upstream.openai_url()
        ),
    );
    let proxy = Server::start_command("proxy", &config, &[], &[]);
    let open_streams = || async {
        let metrics = reqwest::get(proxy.url("/tamp/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("tamp_proxy_streams_open "))
            .map(|v| v.trim().parse::<f64>().unwrap())
            .unwrap()
    };
    let body =
        r#"{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut client = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: k\r\n\
         anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n\
         x-mock-deltas: 1000\r\nx-mock-delay-ms: 20\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 512];
    let n = client.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(open_streams().await, 1.0);
    drop(client);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while open_streams().await != 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream stayed open: {}",
            proxy.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
