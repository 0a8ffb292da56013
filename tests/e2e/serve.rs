//! `tamp serve` end to end: the real binary, real plugin libraries, real HTTP on loopback.
//! Waits are polls with deadlines, never fixed sleeps.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::serve_support::{
    chain_stage_names, report_stage_names, write_atomically, ScratchDir, Server,
};
use tamp_e2e::{corpus, plugin, tamp_bin, write_chain};

const RELOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// A chain of one custom-strategy stage over a 2,000-token budget (the corpus conversation
/// below is far above it, so the stage acts), pages in `store.sqlite3` beside the file.
fn chain_toml(stage: &str, plugin: &str, stage_config: &str) -> String {
    format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [[stage]]\nname = \"{stage}\"\nplugin = \"{plugin}\"\n{stage_config}"
    )
}

/// The custom strategy copied into `dir` (so no other build touches the file the server
/// watches), named in the chain by path.
fn local_plugin(dir: &Path) -> &'static str {
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    "strategy.so"
}

fn simple_chain(dir: &Path, stage: &str, keep_exchanges: u32) -> PathBuf {
    let plugin = local_plugin(dir);
    write_chain(
        dir,
        &chain_toml(
            stage,
            plugin,
            &format!("[stage.config]\nkeep_exchanges = {keep_exchanges}\nsummarize = false\n"),
        ),
    )
}

fn conversation() -> Value {
    serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap()
}

fn request(thread: &str) -> Value {
    json!({"conversation": conversation(), "thread_id": thread})
}

fn first_stage(chain: &Value) -> &Value {
    &chain["stages"][0]
}

/// The probe's requests through HTTP: fields `serde_json::Value` cannot hold reach the client
/// as the text it sent (issue 23).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_keeps_pass_through_values_as_sent() {
    let dir = ScratchDir::new("serve-passthrough");
    let config = simple_chain(&dir, "archive", 1);
    let server = Server::start(&config, &[]);
    let client = reqwest::Client::new();
    for (conversation, kept) in [
        (
            r#"{"model":"m","max_tokens":9,"tools":[{"name":"t","description":"\ud83d","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","max_tokens":9,"tools":[{"name":"t","description":"\ud83d","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}"#,
        ),
        (
            r#"{"model":"m","n":123456789012345678901234,"messages":[{"role":"user","content":"hi"}]}"#,
            r#""n":123456789012345678901234"#,
        ),
    ] {
        let body = format!(r#"{{"conversation":{conversation},"thread_id":"t"}}"#);
        let answer = client
            .post(server.url("/v1/compact"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let text = answer.text().await.unwrap();
        assert!(text.contains(kept), "{kept} is not in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compacts_every_format_and_serves_pages_chain_health_and_metrics() {
    let dir = ScratchDir::new("serve-api");
    let config = simple_chain(&dir, "archive", 1);
    let server = Server::start(&config, &[]);

    let (status, answer) = server.compact(&request("thread-1")).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["format"], "anthropic");
    assert_eq!(report_stage_names(&answer), ["archive"]);
    let run = &answer["report"]["stages"][0];
    assert_eq!(run["status"], "acted", "{run:#}");
    let tokens = |key: &str| {
        answer["report"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no report.{key}: {answer:#}"))
    };
    assert!(tokens("tokens_after") < tokens("tokens_before"));
    // The answer is a valid Anthropic request again, with the summaries in it.
    let text = answer["conversation"].to_string();
    let (back, format) = tamp_host::wire::parse_str(&text, None).unwrap();
    assert_eq!(format, tamp_host::wire::WireFormat::Anthropic);
    assert!(back.messages.iter().any(|m| m.summary_info().is_some()));
    assert_eq!(answer["conversation"]["model"], conversation()["model"]);

    // Every page the report names holds originals of the input, tagged with the thread.
    let original = conversation();
    let pages = run["pages"].as_array().unwrap();
    assert!(!pages.is_empty());
    let mut archived = 0;
    for id in pages {
        let page = server
            .get_json(&format!("/v1/pages/{}", id.as_str().unwrap()))
            .await;
        assert_eq!(page["id"], *id);
        assert_eq!(page["thread_id"], "thread-1");
        assert_eq!(page["format"], "anthropic");
        for message in page["messages"].as_array().unwrap() {
            assert!(
                original["messages"].as_array().unwrap().contains(message),
                "a page message is not an original message: {message:#}"
            );
            archived += 1;
        }
    }
    assert_eq!(archived, run["messages_removed"].as_u64().unwrap());

    // OpenAI in, OpenAI out.
    let openai: Value =
        serde_json::from_str(&corpus("openai", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let (status, answer) = server
        .compact(&json!({"conversation": openai, "format": "openai", "budget": {"keep_recent": 6}}))
        .await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["format"], "openai");
    assert_eq!(answer["report"]["budget"]["keep_recent"], 6);
    let (_, format) =
        tamp_host::wire::parse_str(&answer["conversation"].to_string(), None).unwrap();
    assert_eq!(format, tamp_host::wire::WireFormat::OpenAi);

    // Responses in (detected: an input and no messages), Responses out, pages as items.
    let responses: Value =
        serde_json::from_str(&corpus("responses", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let (status, answer) = server
        .compact(&json!({"conversation": responses, "thread_id": "thread-r"}))
        .await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["format"], "responses");
    assert_eq!(answer["report"]["stages"][0]["status"], "acted");
    let (_, format) =
        tamp_host::wire::parse_str(&answer["conversation"].to_string(), None).unwrap();
    assert_eq!(format, tamp_host::wire::WireFormat::Responses);
    let page = answer["report"]["stages"][0]["pages"][0].as_str().unwrap();
    let page = server.get_json(&format!("/v1/pages/{page}")).await;
    assert_eq!(page["format"], "responses");
    for item in page["messages"].as_array().unwrap() {
        assert!(
            responses["input"].as_array().unwrap().contains(item),
            "a page item is not an original item: {item:#}"
        );
    }

    // The chain, health and metrics.
    let chain = server.get_json("/v1/chain").await;
    assert_eq!(chain_stage_names(&chain), ["archive"]);
    assert_eq!(first_stage(&chain)["plugin"], "custom-strategy");
    assert!(first_stage(&chain)["version"].is_string());
    assert_eq!(first_stage(&chain)["trigger"], "over_budget");
    assert_eq!(chain["config_hash"].as_str().unwrap().len(), 32);
    assert!(chain["loaded_at"].as_str().unwrap().ends_with("GMT"));
    assert!(chain["last_reload_error"].is_null());
    assert_eq!(server.get_json("/healthz").await["status"], "ok");
    let metrics = server.metrics().await;
    assert_contains(&metrics, "tamp_compactions_total{outcome=\"ok\"} 3\n");
    assert_contains(
        &metrics,
        "tamp_stage_duration_seconds_count{stage=\"archive\"} 3\n",
    );
    assert!(metrics.contains("tamp_stage_runs_total{stage=\"archive\",status=\"acted\"} 3\n"));
    assert!(metrics.contains("tamp_conversation_tokens_total{direction=\"in\"} "));
    assert!(metrics.contains(&format!(
        "tamp_chain_info{{config_hash=\"{}\"}} 1",
        chain["config_hash"].as_str().unwrap()
    )));

    // Errors: stable codes, the field at fault named.
    let mut bad = conversation();
    bad["messages"][3]["content"] = json!(5);
    let (status, answer) = server.compact(&json!({"conversation": bad})).await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"]["code"], "invalid_conversation");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("conversation.messages[3]"), "{message}");
    let (status, answer) = server
        .compact(&json!({"conversation": conversation(), "budget": {"max_tokenz": 5}}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"]["code"], "invalid_request");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokenz"));
    let response = server
        .get("/v1/pages/pg_00000000000000000000000000000000")
        .await;
    assert_eq!(response.status().as_u16(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    let response = server.get("/v2/nothing").await;
    assert_eq!(response.status().as_u16(), 404);
    let response = server.get("/v1/compact").await;
    assert_eq!(response.status().as_u16(), 405);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let metrics = server.metrics().await;
    assert_contains(&metrics, "tamp_compactions_total{outcome=\"invalid\"} 2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bearer_token_and_body_limit() {
    const TOKEN: &str = "s3cret-token-never-logged";
    let dir = ScratchDir::new("serve-auth");
    let config = simple_chain(&dir, "archive", 1);
    let server = Server::start_with_env(
        &config,
        &[
            "--auth-token-env",
            "TAMP_TEST_TOKEN",
            "--max-body",
            "64KiB",
            "-v",
        ],
        &[("TAMP_TEST_TOKEN", TOKEN)],
    );
    let body = request("t");

    let response = server
        .client
        .post(server.url("/v1/compact"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "unauthorized");
    for path in ["/v1/chain", "/metrics"] {
        let response = server
            .client
            .get(server.url(path))
            .bearer_auth("wrong-token")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
    }
    // Health checks carry no credentials.
    let response = server.get("/healthz").await;
    assert_eq!(response.status().as_u16(), 200);

    let response = server
        .client
        .post(server.url("/v1/compact"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);

    let mut large = conversation();
    large["metadata"] = json!({"padding": "x".repeat(100 * 1024)});
    let response = server
        .client
        .post(server.url("/v1/compact"))
        .bearer_auth(TOKEN)
        .json(&json!({"conversation": large}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "body_too_large");

    let log = server.log_containing(&["DEBUG"]);
    assert!(
        log.contains("DEBUG"),
        "the server logs at debug level: {log}"
    );
    assert!(!log.contains(TOKEN), "the token appears in the log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloads_follow_the_config_and_refuse_bad_ones() {
    let dir = ScratchDir::new("serve-reload");
    let config = simple_chain(&dir, "alpha", 1);
    let plugin = "strategy.so";
    let server = Server::start(&config, &[]);
    let first = server.get_json("/v1/chain").await;
    assert_eq!(chain_stage_names(&first), ["alpha"]);

    // Rewritten in place (same inode).
    std::fs::write(
        &config,
        chain_toml(
            "beta",
            plugin,
            "[stage.config]\nkeep_exchanges = 1\nsummarize = false\n",
        ),
    )
    .unwrap();
    server
        .wait_for_chain("the in-place edit", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["beta"]
        })
        .await;
    let (status, answer) = server.compact(&request("t")).await;
    assert_eq!(status, 200);
    assert_eq!(report_stage_names(&answer), ["beta"]);

    // Saved by atomic rename (a new inode), with a new stage config value.
    write_atomically(
        &config,
        chain_toml(
            "gamma",
            plugin,
            "[stage.config]\nkeep_exchanges = 2\nsummarize = false\n",
        )
        .as_bytes(),
    );
    let gamma = server
        .wait_for_chain("the atomic save", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["gamma"]
        })
        .await;
    assert_eq!(first_stage(&gamma)["config"]["keep_exchanges"], 2);
    assert!(gamma["last_reload_error"].is_null());

    // Invalid TOML: refused, the error names the file and line, gamma keeps answering.
    std::fs::write(
        &config,
        "[budget]\nmax_tokens = 2000\n[stage\nname = \"broken\"\n",
    )
    .unwrap();
    let chain = server
        .wait_for_chain("the TOML error", RELOAD_TIMEOUT, |c| {
            !c["last_reload_error"].is_null()
        })
        .await;
    let error = &chain["last_reload_error"];
    assert_eq!(chain_stage_names(&chain), ["gamma"]);
    assert_eq!(chain["config_hash"], gamma["config_hash"]);
    assert!(
        error["file"].as_str().unwrap().ends_with("chain.toml"),
        "{error:#}"
    );
    assert_eq!(error["line"], 3, "{error:#}");
    let (status, answer) = server.compact(&request("t")).await;
    assert_eq!(status, 200);
    assert_eq!(report_stage_names(&answer), ["gamma"]);

    // A stage config the plugin's schema refuses: the field and its line.
    let bad_field = chain_toml(
        "delta",
        plugin,
        "[stage.config]\nsummarize = false\nkeep_exchanges = \"many\"\n",
    );
    let field_line = bad_field
        .lines()
        .position(|l| l.starts_with("keep_exchanges"))
        .unwrap()
        + 1;
    write_atomically(&config, bad_field.as_bytes());
    let chain = server
        .wait_for_chain("the stage field error", RELOAD_TIMEOUT, |c| {
            c["last_reload_error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("keep_exchanges"))
        })
        .await;
    assert_eq!(chain["last_reload_error"]["line"], field_line);
    assert!(chain["last_reload_error"]["message"]
        .as_str()
        .unwrap()
        .contains("stage \"delta\""));
    // Logged with file, line and field.
    let logged = format!("chain.toml:{field_line}: stage \"delta\": config.keep_exchanges");
    let log = server.log_containing(&[&logged]);
    assert!(log.contains(&logged), "{logged} not in:\n{log}");
    assert_eq!(chain_stage_names(&chain), ["gamma"]);

    // An unknown plugin.
    write_atomically(
        &config,
        chain_toml("epsilon", "no_such_plugin_anywhere", "").as_bytes(),
    );
    let chain = server
        .wait_for_chain("the unknown plugin error", RELOAD_TIMEOUT, |c| {
            c["last_reload_error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no_such_plugin_anywhere"))
        })
        .await;
    assert!(chain["last_reload_error"]["line"].is_u64());
    assert_eq!(chain_stage_names(&chain), ["gamma"]);
    let (status, answer) = server.compact(&request("t")).await;
    assert_eq!(status, 200);
    assert_eq!(report_stage_names(&answer), ["gamma"]);

    // A good config lands: the error is cleared.
    write_atomically(
        &config,
        chain_toml("zeta", plugin, "[stage.config]\nsummarize = false\n").as_bytes(),
    );
    let chain = server
        .wait_for_chain("the good config", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["zeta"]
        })
        .await;
    assert!(chain["last_reload_error"].is_null(), "{chain:#}");
    let metrics = server.metrics().await;
    assert_contains(&metrics, "tamp_reloads_total{result=\"applied\"} 3\n");
    assert_contains(&metrics, "tamp_reloads_total{result=\"rejected\"} 3\n");
}

/// Compacts in `clients` loops until `stop`; returns (ok, failed, stage names seen).
fn spawn_load(
    server: &Arc<Server>,
    clients: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<(usize, Vec<String>)>> {
    (0..clients)
        .map(|i| {
            let server = Arc::clone(server);
            let stop = Arc::clone(stop);
            tokio::spawn(async move {
                let mut ok = 0;
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let (status, answer) = server.compact(&request(&format!("load-{i}"))).await;
                    assert_eq!(status, 200, "a request failed during reloads: {answer:#}");
                    ok += 1;
                    for name in report_stage_names(&answer) {
                        if !seen.contains(&name) {
                            seen.push(name);
                        }
                    }
                }
                (ok, seen)
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloads_during_a_stream_of_requests_fail_none() {
    let dir = ScratchDir::new("serve-stream");
    let config = simple_chain(&dir, "one", 1);
    let server = Arc::new(Server::start(&config, &["--debounce-ms", "50"]));
    let stop = Arc::new(AtomicBool::new(false));
    let load = spawn_load(&server, 4, &stop);
    for round in 0..6 {
        let name = if round % 2 == 0 { "two" } else { "one" };
        write_atomically(
            &config,
            chain_toml(
                name,
                "strategy.so",
                &format!(
                    "[stage.config]\nkeep_exchanges = {}\nsummarize = false\n",
                    round % 3
                ),
            )
            .as_bytes(),
        );
        server
            .wait_for_chain("the reload", RELOAD_TIMEOUT, |c| {
                chain_stage_names(c) == [name]
            })
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    let mut seen = Vec::new();
    for task in load {
        let (ok, names) = task.await.expect("a load client failed");
        total += ok;
        seen.extend(names);
    }
    assert!(total >= 6, "only {total} requests ran");
    assert!(seen.contains(&"one".to_string()) && seen.contains(&"two".to_string()));
    let metrics = server.metrics().await;
    assert_contains(&metrics, "tamp_reloads_total{result=\"applied\"} 6\n");
    assert!(metrics.contains("tamp_compactions_total{outcome=\"error\"} 0\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_file_replaced_on_disk_is_loaded_from_a_new_private_copy() {
    let dir = ScratchDir::new("serve-plugin-swap");
    let plugin_path = dir.join("strategy.so");
    std::fs::copy(plugin("tamp_custom_strategy"), &plugin_path).unwrap();
    // No stage config: both plugins accept their defaults.
    let config = write_chain(&dir, &chain_toml("swappable", "strategy.so", ""));
    let server = Arc::new(Server::start(&config, &[]));
    let first = server.get_json("/v1/chain").await;
    assert_eq!(first_stage(&first)["plugin"], "custom-strategy");
    let stop = Arc::new(AtomicBool::new(false));
    let load = spawn_load(&server, 2, &stop);

    // Copied over in place (`cp other.so strategy.so`: the same inode, its bytes rewritten
    // under the path) while requests run: the server runs only its private copy of the file,
    // so it survives, and loads the new bytes from a new copy.
    std::fs::copy(plugin("tamp_buffered_tool_call"), &plugin_path).unwrap();
    let swapped = server
        .wait_for_chain("the plugin copied in place", RELOAD_TIMEOUT, |c| {
            first_stage(c)["plugin"] == "buffered-tool-call"
        })
        .await;
    assert_ne!(
        first_stage(&swapped)["plugin_identity"],
        first_stage(&first)["plugin_identity"]
    );
    let (status, answer) = server.compact(&request("after-copy")).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(
        answer["report"]["stages"][0]["plugin"],
        "buffered-tool-call"
    );

    // Rebuilt and swapped in by rename (what `cargo build` and `install` do): a new inode.
    let staged = dir.join("strategy.so.new");
    std::fs::copy(plugin("tamp_custom_strategy"), &staged).unwrap();
    std::fs::rename(&staged, &plugin_path).unwrap();
    server
        .wait_for_chain("the renamed plugin", RELOAD_TIMEOUT, |c| {
            first_stage(c)["plugin"] == "custom-strategy"
        })
        .await;
    let (status, answer) = server.compact(&request("after-rename")).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["report"]["stages"][0]["plugin"], "custom-strategy");
    let log = server.log_containing(&["reloaded"]);
    assert_contains(&log, "reloaded");

    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for task in load {
        let (ok, _) = task
            .await
            .expect("a request failed while the plugin was swapped");
        total += ok;
    }
    assert!(total > 0, "no request ran while the plugin was swapped");
    let private: Vec<_> =
        std::fs::read_dir(std::env::temp_dir().join(format!("tamp-plugins-{}", server.pid())))
            .unwrap()
            .filter_map(|e| e.ok())
            .collect();
    assert_eq!(private.len(), 2, "one private copy per distinct content");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_requests_in_flight_and_flushes_the_store() {
    let dir = ScratchDir::new("serve-sigterm");
    std::fs::write(
        dir.join("script.json"),
        r#"{"default": {"text": "a slow summary", "delay_ms": 1500}}"#,
    )
    .unwrap();
    let plugin = local_plugin(&dir);
    let toml = format!(
        "[provider]\nkind = \"scripted\"\nscript = \"script.json\"\n\n[cache]\nenabled = false\n\n{}",
        chain_toml("slow", plugin, "[stage.config]\nkeep_exchanges = 1\nsummarize = true\n")
    );
    let config = write_chain(&dir, &toml);
    let server = Arc::new(Server::start(&config, &[]));

    let done = Arc::new(AtomicUsize::new(0));
    let requests: Vec<_> = (0..3)
        .map(|i| {
            let server = Arc::clone(&server);
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                let answer = server.compact(&request(&format!("slow-{i}"))).await;
                done.fetch_add(1, Ordering::SeqCst);
                answer
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server
        .metrics()
        .await
        .contains("tamp_requests_in_flight 3\n")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the requests never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.sigterm();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server.log().contains("shutting down") {
        assert!(
            std::time::Instant::now() < deadline,
            "no shutdown: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "requests finished before the signal"
    );
    // No new connections once shutting down.
    let fresh = reqwest::Client::new();
    let refused = fresh.get(server.url("/healthz")).send().await;
    assert!(
        refused.is_err(),
        "a new connection was accepted after SIGTERM"
    );

    let mut pages = Vec::new();
    for request in requests {
        let (status, answer) = request.await.unwrap();
        assert_eq!(status, 200, "{answer:#}");
        let run = &answer["report"]["stages"][0];
        assert_eq!(run["status"], "acted", "{run:#}");
        assert!(run["llm_calls"].as_u64().unwrap() > 0);
        pages.extend(
            run["pages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string()),
        );
    }
    let server = Arc::into_inner(server).expect("the last reference");
    let mut server = server;
    let status = server.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        server.log()
    );
    assert!(server
        .log_containing(&["tamp serve: stopped"])
        .contains("tamp serve: stopped"));
    assert!(!std::env::temp_dir()
        .join(format!("tamp-plugins-{}", server.pid()))
        .exists());

    // Every page of the finished requests is in the store file.
    use tamp_host::store::PageStore as _;
    let store = tamp_host::store::SqliteStore::open(&dir.join("store.sqlite3")).unwrap();
    assert!(!pages.is_empty());
    for id in pages {
        store.get_page(&id).await.unwrap();
    }
}

#[test]
fn check_config_reports_ok_or_the_same_errors_as_a_reload() {
    let dir = ScratchDir::new("serve-check");
    let config = simple_chain(&dir, "checked", 1);
    let output = std::process::Command::new(tamp_bin())
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.starts_with("ok: "), "{stdout}");
    assert_contains(&stdout, "1 stage (checked: custom-strategy ");
    assert_eq!(stdout.lines().count(), 1);

    let bad = chain_toml(
        "checked",
        "strategy.so",
        "[stage.config]\nsummarize = false\nmin_exchanges = 0\n",
    );
    std::fs::write(&config, &bad).unwrap();
    let output = std::process::Command::new(tamp_bin())
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let line = bad
        .lines()
        .position(|l| l.starts_with("min_exchanges"))
        .unwrap()
        + 1;
    assert_contains(&stderr, &format!("chain.toml:{line}: stage \"checked\""));
    assert_contains(&stderr, "min_exchanges");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn symlink_swaps_target_edits_and_backup_saves_reload() {
    let dir = ScratchDir::new("serve-symlink");
    let plugin = local_plugin(&dir);
    let config_of = |stage: &str| {
        chain_toml(
            stage,
            plugin,
            "[stage.config]\nkeep_exchanges = 1\nsummarize = false\n",
        )
    };
    std::fs::write(dir.join("a.toml"), config_of("from-a")).unwrap();
    std::fs::write(dir.join("b.toml"), config_of("from-b")).unwrap();
    let config = dir.join("chain.toml");
    std::os::unix::fs::symlink("a.toml", &config).unwrap();
    let server = Server::start(&config, &[]);
    assert_eq!(
        chain_stage_names(&server.get_json("/v1/chain").await),
        ["from-a"]
    );

    // The link swapped to another target (`ln -sfn b.toml chain.toml` renames a new link over).
    let staged = dir.join("chain.toml.link");
    std::os::unix::fs::symlink("b.toml", &staged).unwrap();
    std::fs::rename(&staged, &config).unwrap();
    server
        .wait_for_chain("the symlink swap", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["from-b"]
        })
        .await;

    // The current target edited in place.
    std::fs::write(dir.join("b.toml"), config_of("b-edited")).unwrap();
    server
        .wait_for_chain("the target edit", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["b-edited"]
        })
        .await;

    // vim's backup save: the file is renamed to a backup, then written anew.
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, config_of("plain-file")).unwrap();
    std::fs::rename(&config, dir.join("chain.toml~")).unwrap();
    std::fs::write(&config, config_of("after-backup")).unwrap();
    let chain = server
        .wait_for_chain("the backup save", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["after-backup"]
        })
        .await;
    assert!(chain["last_reload_error"].is_null(), "{chain:#}");
    let (status, answer) = server.compact(&request("t")).await;
    assert_eq!(status, 200);
    assert_eq!(report_stage_names(&answer), ["after-backup"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_in_flight_finishes_on_the_chain_it_started_with() {
    let dir = ScratchDir::new("serve-in-flight");
    std::fs::write(
        dir.join("script.json"),
        r#"{"default": {"text": "a slow summary", "delay_ms": 1500}}"#,
    )
    .unwrap();
    let plugin = local_plugin(&dir);
    let slow = |stage: &str| {
        format!(
            "[provider]\nkind = \"scripted\"\nscript = \"script.json\"\n\n[cache]\nenabled = false\n\n{}",
            chain_toml(stage, plugin, "[stage.config]\nkeep_exchanges = 1\nsummarize = true\n")
        )
    };
    let config = write_chain(&dir, &slow("old"));
    let server = Arc::new(Server::start(&config, &["--debounce-ms", "50"]));
    let old_hash = server.get_json("/v1/chain").await["config_hash"].clone();
    let in_flight = {
        let server = Arc::clone(&server);
        tokio::spawn(async move { server.compact(&request("long")).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server
        .metrics()
        .await
        .contains("tamp_requests_in_flight 1\n")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    write_atomically(&config, slow("new").as_bytes());
    server
        .wait_for_chain("the reload", RELOAD_TIMEOUT, |c| {
            chain_stage_names(c) == ["new"]
        })
        .await;
    assert!(
        !in_flight.is_finished(),
        "the request ended before the reload"
    );
    let (status, answer) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(report_stage_names(&answer), ["old"]);
    assert_eq!(answer["chain"]["config_hash"], old_hash);
    assert_eq!(answer["report"]["stages"][0]["status"], "acted");
}
