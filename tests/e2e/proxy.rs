//! `tamp proxy` end to end: the real binary between real clients (the official `anthropic`
//! and `openai` Python SDKs, installed from PyPI into `target/tools/`, and reqwest) and local
//! upstreams that answer like the providers, SSE streams included (`mock_upstream`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::mock_upstream::{MockUpstream, Received};
use tamp_e2e::serve_support::{write_atomically, ScratchDir, Server};
use tamp_e2e::{agent_session, corpus, plugin, tools, workspace_root};

/// What every client sends as its key: it must reach the upstream and nothing else.
const KEY: &str = "sk-proxy-e2e-0123456789abcdefSECRET";

/// The shipped chain at a budget the corpus conversations are over, with `[proxy]`
/// pointing at `upstream`, and `extra` appended to the `[proxy]` table.
fn shipped_chain(dir: &Path, upstream: &MockUpstream, extra: &str) -> PathBuf {
    let shipped = std::fs::read_to_string(workspace_root().join("examples/chains/shipped.toml"))
        .unwrap()
        .replace("max_tokens = 16000", "max_tokens = 4000")
        .replace("keep_recent = 10", "keep_recent = 6")
        .replace("\"tamp-store.sqlite3\"", "\"store.sqlite3\"");
    let text = format!(
        "{shipped}\n[proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n{extra}\n",
        upstream.url(),
        upstream.openai_url()
    );
    tamp_e2e::write_chain(dir, &text)
}

/// A chain of one `misbehaving` stage in `mode`, run on every request.
fn misbehaving_chain(
    dir: &Path,
    upstream: &MockUpstream,
    mode: &str,
    proxy_extra: &str,
) -> PathBuf {
    let text = format!(
        "[store]\npath = \"store.sqlite3\"\n\n[proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n{proxy_extra}\n\n\
         [[stage]]\nname = \"boom\"\nplugin = \"{}\"\ntrigger = \"always\"\ntimeout_secs = 30\n\
         [stage.config]\nmode = \"{mode}\"\n",
        upstream.url(),
        upstream.openai_url(),
        plugin("tamp_test_misbehaving").display()
    );
    tamp_e2e::write_chain(dir, &text)
}

fn start_proxy(config: &Path) -> Server {
    Server::start_command("proxy", config, &[], &[("TAMP_LOG", "debug")])
}

/// Runs `tests/e2e/proxy_sdk.py <sdk>` against the proxy; what the SDK saw.
fn run_sdk(sdk: &str, proxy: &Server, conversation: &Path, run_id: &str) -> Value {
    let python = tools::python_with_sdks();
    let script = workspace_root().join("tests/e2e/proxy_sdk.py");
    let out = Command::new(python)
        .arg(script)
        .args([sdk, &proxy.base])
        .arg(conversation)
        .arg(run_id)
        .env("TAMP_TEST_KEY", KEY)
        .output()
        .expect("run the SDK script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the {sdk} SDK script failed:\n{}\nproxy log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.log()
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `12034->4410; pages=pg_1,pg_2`: the page ids, asserting the tokens went down.
fn compacted_pages(header: &Value) -> Vec<String> {
    let text = header
        .as_str()
        .unwrap_or_else(|| panic!("no x-tamp-compaction: {header}"));
    let (tokens, pages) = text.split_once("; pages=").unwrap_or((text, ""));
    let (before, after) = tokens.split_once("->").unwrap_or_else(|| panic!("{text}"));
    let (before, after): (u64, u64) = (before.parse().unwrap(), after.parse().unwrap());
    assert!(after < before, "{text}");
    pages
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The requests the upstream got on `path`.
fn on(received: &[Received], path: &str) -> Vec<Received> {
    received
        .iter()
        .filter(|r| r.target == path)
        .cloned()
        .collect()
}

/// The requests carrying `x-mock-fail` with this key.
fn failing(received: &[Received], key: &str) -> usize {
    received
        .iter()
        .filter(|r| r.header("x-mock-fail").is_some_and(|v| v.ends_with(key)))
        .count()
}

/// No client key in the proxy's log (debug logging on) nor in its page store.
fn assert_key_kept_out(proxy: &Server, dir: &Path) {
    proxy.assert_secret_kept_out(KEY, dir);
    proxy.assert_secret_kept_out("0123456789abcdefSECRET", dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdk_sees_its_own_api_and_the_upstream_the_compacted_body() {
    let dir = ScratchDir::new("proxy-anthropic-sdk");
    let upstream = MockUpstream::start();
    let proxy = start_proxy(&shipped_chain(&dir, &upstream, ""));
    let name = "taubench_gpt4o_airline_task2_trial2";
    let conversation = dir.join("conversation.json");
    std::fs::write(&conversation, corpus("anthropic", name)).unwrap();
    let original: Value = serde_json::from_str(&corpus("anthropic", name)).unwrap();
    let original_messages = original["messages"].as_array().unwrap().len();

    let seen = run_sdk("anthropic", &proxy, &conversation, "a1");
    let received = upstream.received();

    // Non-streaming, with a tool: the SDK's own types, the model saw fewer messages.
    let create = &seen["create"];
    let pages = compacted_pages(&create["compaction"]);
    assert!(!pages.is_empty(), "{create}");
    assert!(create["request_id"].as_str().unwrap().starts_with("req_"));
    assert_eq!(create["stop_reason"], "tool_use");
    assert_eq!(create["content"][1]["type"], "tool_use");
    assert_eq!(
        create["content"][1]["input"],
        json!({"query": "weather in Paris"})
    );
    let messages = on(&received, "/v1/messages");
    assert_eq!(
        messages.len(),
        6,
        "create, stream, stream helper, 429 + retry, 400"
    );
    let first = messages[0].json();
    let sent = first["messages"].as_array().unwrap().len();
    assert!(
        sent < original_messages,
        "{sent} of {original_messages} messages sent"
    );
    assert_eq!(
        create["content"][0]["text"],
        format!("Seen {sent} messages. word1 word2")
    );
    // The summary carries its page ref, and every field tamp does not read is as sent.
    assert!(
        first.to_string().contains(&pages[0]),
        "the summary names its page"
    );
    assert_eq!(first["model"], "claude-test");
    assert_eq!(first["max_tokens"], 256);
    assert_eq!(first["tools"][0]["name"], "get_weather");
    assert_eq!(first["system"], original["system"]);

    // Streaming: every event, in the order the upstream sent them.
    let stream = &seen["stream"];
    compacted_pages(&stream["compaction"]);
    let mut expected = vec!["message_start", "content_block_start"];
    expected.extend(["content_block_delta"; 3]);
    expected.extend(["content_block_stop", "content_block_start"]);
    expected.extend(["content_block_delta"; 3]);
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(stream["events"], json!(expected));
    assert_eq!(stream["text"], format!("Seen {sent} messages. word1 word2"));
    assert_eq!(messages[1].json()["stream"], true);
    let helper = &seen["stream_helper"];
    assert_eq!(
        helper["content"][1]["input"],
        json!({"query": "weather in Paris"})
    );

    // count_tokens counts what would be sent: the compacted body.
    let counted = on(&received, "/v1/messages/count_tokens");
    assert_eq!(counted.len(), 1);
    compacted_pages(&seen["count_tokens"]["compaction"]);
    assert_eq!(
        counted[0].json()["messages"].as_array().unwrap().len(),
        sent
    );
    assert_eq!(
        seen["count_tokens"]["input_tokens"].as_u64().unwrap() as usize,
        counted[0].body.len() / 4
    );

    // The upstream's 429 (retry-after: 1) is retried by the SDK itself; its 400 is the SDK's
    // own error type, not retried.
    assert_eq!(seen["retry"]["text"], "Seen 1 messages. word1 word2");
    assert!(
        seen["retry"]["seconds"].as_f64().unwrap() >= 0.9,
        "{}",
        seen["retry"]
    );
    assert_eq!(failing(&received, "a429-a1"), 2);
    let bad = &seen["bad_request"];
    assert_eq!(bad["class"], "BadRequestError");
    assert_eq!(bad["status"], 400);
    assert_eq!(bad["type"], "invalid_request_error");
    assert_eq!(failing(&received, "a400-a1"), 1);

    // Every client header reached the upstream untouched; the proxy's own did not.
    for r in received
        .iter()
        .filter(|r| r.target.starts_with("/v1/messages"))
    {
        // The SDK sends its key as `authorization: Bearer` since 2.x; older ones and curl
        // send `x-api-key`: either reaches the upstream as the client sent it.
        let bearer = format!("Bearer {KEY}");
        assert!(
            r.header("x-api-key") == Some(KEY) || r.header("authorization") == Some(&bearer),
            "{:?}",
            r.headers
        );
        assert!(r.header("anthropic-version").is_some());
        assert!(r
            .header("user-agent")
            .is_some_and(|ua| ua.contains("Anthropic/Python")));
        assert!(r.header("x-tamp-thread-id").is_none());
    }
    for r in &messages[..3] {
        assert_eq!(
            r.header("anthropic-beta"),
            Some("token-efficient-tools-2025-02-19")
        );
        assert_eq!(r.header("x-client-marker"), Some("marker-a1"));
    }

    // The pages behind the summary, tagged with the client's thread.
    let page: Value = reqwest::get(proxy.url(&format!("/tamp/v1/pages/{}", pages[0])))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["thread_id"], "sdk-thread-a1");
    assert!(page["messages"].as_array().unwrap().len() > 1, "{page}");
    assert_key_kept_out(&proxy, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_sees_its_own_api_and_the_upstream_the_compacted_body() {
    let dir = ScratchDir::new("proxy-openai-sdk");
    let upstream = MockUpstream::start();
    let proxy = start_proxy(&shipped_chain(&dir, &upstream, ""));
    let name = "taubench_gpt4o_airline_task2_trial2";
    let conversation = dir.join("conversation.json");
    std::fs::write(&conversation, corpus("openai", name)).unwrap();
    let original: Value = serde_json::from_str(&corpus("openai", name)).unwrap();
    let original_messages = original["messages"].as_array().unwrap().len();

    let seen = run_sdk("openai", &proxy, &conversation, "o1");
    let received = upstream.received();

    let create = &seen["create"];
    compacted_pages(&create["compaction"]);
    assert!(create["request_id"].as_str().unwrap().starts_with("req_"));
    assert_eq!(create["finish_reason"], "tool_calls");
    assert_eq!(
        create["tool_calls"],
        json!([{"name": "get_weather", "arguments": "{\"query\": \"weather in Paris\"}"}])
    );
    let completions = on(&received, "/v1/chat/completions");
    assert_eq!(completions.len(), 5, "create, stream, 429 + retry, 400");
    let first = completions[0].json();
    let sent = first["messages"].as_array().unwrap().len();
    assert!(
        sent < original_messages,
        "{sent} of {original_messages} messages sent"
    );
    assert_eq!(
        create["content"],
        format!("Seen {sent} messages. word1 word2")
    );
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(first["tools"][0]["function"]["name"], "get_weather");

    let stream = &seen["stream"];
    compacted_pages(&stream["compaction"]);
    // The role chunk, three content chunks, four tool-call chunks, the finish, the usage.
    assert_eq!(stream["chunks"], 10, "{stream}");
    assert_eq!(stream["text"], format!("Seen {sent} messages. word1 word2"));
    assert_eq!(stream["arguments"], "{\"query\": \"weather in Paris\"}");
    assert_eq!(stream["finish_reason"], "tool_calls");
    assert!(stream["usage"].as_u64().unwrap() > 0);
    assert_eq!(
        completions[1].json()["stream_options"],
        json!({"include_usage": true})
    );

    assert_eq!(seen["retry"]["text"], "Seen 1 messages. word1 word2");
    assert!(
        seen["retry"]["seconds"].as_f64().unwrap() >= 0.9,
        "{}",
        seen["retry"]
    );
    assert_eq!(failing(&received, "o429-o1"), 2);
    let bad = &seen["bad_request"];
    assert_eq!(bad["class"], "BadRequestError");
    assert_eq!(bad["status"], 400);
    assert_eq!(failing(&received, "o400-o1"), 1);

    for r in &received {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert!(r.header("x-tamp-thread-id").is_none());
    }
    for r in &completions[..2] {
        assert_eq!(r.header("x-client-marker"), Some("marker-o1"));
    }
    assert_key_kept_out(&proxy, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdks_responses_api_sees_its_own_api_and_the_upstream_the_compacted_body() {
    let dir = ScratchDir::new("proxy-responses-sdk");
    let upstream = MockUpstream::start();
    let proxy = start_proxy(&shipped_chain(&dir, &upstream, ""));
    // The last request of a real Codex session: its instructions as developer messages,
    // twelve reasoning items, calls and outputs.
    let codex = agent_session("codex").pop().unwrap();
    let original_items = codex["input"].as_array().unwrap().len();
    let conversation = dir.join("conversation.json");
    std::fs::write(&conversation, json!({"input": codex["input"]}).to_string()).unwrap();

    let seen = run_sdk("responses", &proxy, &conversation, "r1");
    let received = upstream.received();
    let responses = on(&received, "/v1/responses");
    assert_eq!(
        responses.len(),
        5,
        "create, stream, stream helper, previous, 400"
    );

    let create = &seen["create"];
    compacted_pages(&create["compaction"]);
    assert_eq!(create["thread"], "session:sdk-session-r1");
    let first = responses[0].json();
    let sent = first["input"].as_array().unwrap().len();
    assert!(
        sent < original_items,
        "{sent} of {original_items} items sent"
    );
    assert_eq!(create["text"], format!("Seen {sent} items. word1 word2"));
    assert_eq!(
        create["calls"],
        json!([{"name": "get_weather", "arguments": "{\"query\": \"weather in Paris\"}"}])
    );
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(first["tools"][0]["name"], "get_weather");
    assert_eq!(first["prompt_cache_key"], "sdk-session-r1");

    let stream = &seen["stream"];
    compacted_pages(&stream["compaction"]);
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(["response.output_text.delta"; 3]);
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]);
    expected.extend(["response.function_call_arguments.delta"; 3]);
    expected.extend([
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(stream["events"], json!(expected));
    assert_eq!(stream["text"], format!("Seen {sent} items. word1 word2"));
    assert_eq!(
        seen["stream_helper"]["types"],
        json!(["message", "function_call"])
    );

    // Forwarded to an upstream that has server-side compaction, as it was sent.
    let compact = &seen["compact"];
    assert_eq!(compact["object"], "response.compaction");
    assert_eq!(
        compact["types"].as_array().unwrap().last().unwrap(),
        "compaction"
    );
    let forwarded = on(&received, "/v1/responses/compact");
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0].json()["input"], codex["input"]);

    // Server-side state: nothing to compact, forwarded, and the header says why.
    let previous = seen["previous"]["compaction"].as_str().unwrap();
    assert!(
        previous
            .starts_with("skipped (the request continues server-side state (previous_response_id)"),
        "{previous}"
    );
    assert_eq!(responses[3].json()["previous_response_id"], "resp_earlier");

    let bad = &seen["bad_request"];
    assert_eq!(bad["class"], "BadRequestError");
    assert_eq!(bad["status"], 400);
    for r in &received {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    assert_eq!(responses[0].header("x-client-marker"), Some("marker-r1"));
    assert_key_kept_out(&proxy, &dir);
}

/// A body with spacing and a field no API has: forwarded byte for byte when nothing changes.
const ODD_BODY: &str = "{ \"model\" : \"claude-test\",\n \"max_tokens\": 16, \"x_unknown\": [1.0e2, \"\\u00e9\"],\n \"messages\": [ {\"role\": \"user\", \"content\": \"hello\"} ] }";

/// Points the chain file's `openai` upstream at a port nothing listens on (its URL carrying
/// `userinfo`), waits for the proxy to reload it, and sends a Chat Completions request there.
async fn chat_to_an_upstream_that_is_down(
    proxy: &Server,
    dir: &Path,
    upstream: &MockUpstream,
    userinfo: &str,
) -> (reqwest::Response, u16) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = std::fs::read_to_string(dir.join("chain.toml"))
        .unwrap()
        .replace(
            &format!("openai = \"{}\"", upstream.openai_url()),
            &format!("openai = \"http://{userinfo}127.0.0.1:{port}/v1\""),
        );
    write_atomically(&dir.join("chain.toml"), text.as_bytes());
    proxy.log_containing(&["tamp proxy: reloaded"]);
    let answer = reqwest::Client::new()
        .post(proxy.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .body("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}")
        .send()
        .await
        .unwrap();
    (answer, port)
}

async fn post_messages(proxy: &Server, body: &'static str) -> reqwest::Response {
    reqwest::Client::new()
        .post(proxy.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_that_panics_hangs_or_cannot_read_the_body_forwards_the_original() {
    let dir = ScratchDir::new("proxy-fallback");
    let upstream = MockUpstream::start();

    // A stage that panics: rolled back, the original bytes go upstream, the header says so.
    let panics = start_proxy(&misbehaving_chain(&dir, &upstream, "panic_in_compact", ""));
    let answer = post_messages(&panics, ODD_BODY).await;
    assert_eq!(answer.status(), 200);
    let header = answer.headers()["x-tamp-compaction"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        header.starts_with("unchanged (stage \"boom\" rolled back (panicked)"),
        "{header}"
    );
    assert_eq!(
        upstream.received().last().unwrap().body,
        ODD_BODY.as_bytes()
    );
    drop(panics);

    // A stage that hangs past [proxy] compaction_timeout_secs: the original goes at once.
    let hangs = start_proxy(&misbehaving_chain(
        &dir,
        &upstream,
        "hang",
        "compaction_timeout_secs = 0.3",
    ));
    let started = Instant::now();
    let answer = post_messages(&hangs, ODD_BODY).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let header = answer.headers()["x-tamp-compaction"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        header.starts_with("skipped (the compaction took longer than 0.3 s"),
        "{header}"
    );
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], "Seen 1 messages. word1 word2");
    assert_eq!(
        upstream.received().last().unwrap().body,
        ODD_BODY.as_bytes()
    );

    // A body that is not a conversation: forwarded as it is, the upstream says what is wrong.
    let answer = post_messages(&hangs, "{\"messages\": 5, \"model\": \"m\"}").await;
    let header = answer.headers()["x-tamp-compaction"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        header.starts_with("skipped (request body: messages: expected an array"),
        "{header}"
    );
    assert_eq!(
        upstream.received().last().unwrap().body,
        "{\"messages\": 5, \"model\": \"m\"}".as_bytes()
    );
    drop(hangs);

    // Strict: tamp's error in Anthropic's shape, and nothing goes upstream.
    let before = upstream.count();
    let strict = start_proxy(&misbehaving_chain(
        &dir,
        &upstream,
        "hang",
        "compaction_timeout_secs = 0.3\nstrict = true",
    ));
    let answer = post_messages(&strict, ODD_BODY).await;
    assert_eq!(answer.status(), 502);
    assert_eq!(answer.headers()["x-tamp-error"], "compaction_failed");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "api_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("strict = true"),
        "{body}"
    );
    let answer = post_messages(&strict, "not json").await;
    assert_eq!(answer.status(), 502);
    assert_eq!(
        answer.headers()["x-should-retry"],
        "false",
        "the same body fails again"
    );
    assert_eq!(upstream.count(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_other_paths_and_tamps_own_routes() {
    let dir = ScratchDir::new("proxy-paths");
    let upstream = MockUpstream::start();
    let proxy = start_proxy(&shipped_chain(&dir, &upstream, ""));
    let client = reqwest::Client::new();

    // A 429 reaches the client verbatim: status, retry-after, rate-limit headers, body.
    let answer = client
        .post(proxy.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("x-mock-fail", "429:1:raw")
        .body("{\"model\": \"m\", \"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    let h = answer.headers().clone();
    assert_eq!(h["retry-after"], "1");
    assert_eq!(h["anthropic-ratelimit-requests-remaining"], "0");
    assert!(h["request-id"].to_str().unwrap().starts_with("req_"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");

    // Other paths: to the right upstream, bodies and queries as sent, nothing compacted.
    let models = client
        .get(proxy.url("/v1/models?limit=5"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert!(models.headers().get("x-tamp-compaction").is_none());
    let models: Value = models.json().await.unwrap();
    assert_eq!(models["data"][0]["type"], "model");
    let models: Value = client
        .get(proxy.url("/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    // A conversation-shaped body on a path that is not a conversation's: as it was sent.
    let other_body = corpus("openai", "taubench_gpt4o_airline_task2_trial2");
    let answer = client
        .post(proxy.url("/v1/embeddings"))
        .bearer_auth(KEY)
        .body(other_body.clone())
        .send()
        .await
        .unwrap();
    assert!(answer.headers().get("x-tamp-compaction").is_none());
    let batches = "{\"requests\": [{\"custom_id\": \"a\", \"params\": {}}]}";
    client
        .post(proxy.url("/v1/messages/batches"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .body(batches)
        .send()
        .await
        .unwrap();
    let received = upstream.received();
    assert_eq!(on(&received, "/v1/models?limit=5").len(), 1);
    assert_eq!(
        on(&received, "/v1/embeddings")[0].body,
        other_body.as_bytes()
    );
    assert_eq!(
        on(&received, "/v1/messages/batches")[0].body,
        batches.as_bytes()
    );

    // tamp's own routes.
    let health: Value = client
        .get(proxy.url("/tamp/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let missing = client.get(proxy.url("/tamp/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let metrics = tamp_e2e::get_text(&client, &proxy.url("/tamp/metrics")).await;
    for line in [
        "tamp_http_requests_total{route=\"POST /v1/messages\",status=\"429\"} 1",
        "tamp_http_requests_total{route=\"openai (passed through)\",status=\"200\"} 2",
        "tamp_proxy_compactions_total{outcome=\"unchanged\"} 1",
        "tamp_proxy_upstream_duration_seconds_count{route=\"POST /v1/messages\"} 1",
        "tamp_proxy_streams_open 0",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    assert!(
        metrics.contains("tamp_proxy_relayed_bytes_total{route=\"anthropic (passed through)\"}")
    );

    // An upstream that cannot be reached: 502 in the provider's shape.
    let (answer, port) = chat_to_an_upstream_that_is_down(&proxy, &dir, &upstream, "").await;
    assert_eq!(answer.status(), 502);
    assert_eq!(answer.headers()["x-tamp-error"], "upstream_unreachable");
    assert!(answer.headers()["x-tamp-compaction"]
        .to_str()
        .unwrap()
        .starts_with("unchanged"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_unreachable");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("127.0.0.1:{port}")) && !message.contains(KEY),
        "{message}"
    );
    assert_key_kept_out(&proxy, &dir);
}

/// A streamed Anthropic answer read to its end: its event names and its text.
async fn read_stream(
    client: &reqwest::Client,
    proxy: &str,
    deltas: usize,
    delay_ms: u64,
) -> Result<(Vec<String>, String), String> {
    let answer = client
        .post(format!("{proxy}/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("x-mock-deltas", deltas.to_string())
        .header("x-mock-delay-ms", delay_ms.to_string())
        .body("{\"model\": \"m\", \"max_tokens\": 64, \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}")
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if answer.status() != 200 {
        return Err(format!("status {}", answer.status()));
    }
    let text = answer.text().await.map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    let mut said = String::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("event: "))
            .ok_or(block.to_string())?;
        let data: Value = serde_json::from_str(
            block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .ok_or(block.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        if let Some(t) = data["delta"]["text"].as_str() {
            said.push_str(t);
        }
        events.push(name.to_string());
    }
    Ok((events, said))
}

fn expected_stream(deltas: usize) -> (Vec<String>, String) {
    let mut events = vec!["message_start", "content_block_start", "ping"];
    events.extend(std::iter::repeat_n("content_block_delta", deltas));
    events.extend(["content_block_stop", "message_delta", "message_stop"]);
    let mut text = "Seen 1 messages.".to_string();
    for i in 1..deltas {
        text.push_str(&format!(" word{i}"));
    }
    (events.into_iter().map(str::to_string).collect(), text)
}

/// Peak resident memory of a process (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_all_arrive_whole_in_bounded_memory() {
    const STREAMS: usize = 200;
    const DELTAS: usize = 20;
    let dir = ScratchDir::new("proxy-200");
    let upstream = MockUpstream::start_unrecorded();
    let proxy = start_proxy(&shipped_chain(&dir, &upstream, ""));
    let client = reqwest::Client::new();
    let started = Instant::now();
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| {
            let client = client.clone();
            let base = proxy.base.clone();
            tokio::spawn(async move { read_stream(&client, &base, DELTAS, 25).await })
        })
        .collect();
    let expected = expected_stream(DELTAS);
    let mut failed = Vec::new();
    for stream in streams {
        match stream.await.unwrap() {
            Ok(got) if got == expected => {}
            other => failed.push(format!("{other:?}")),
        }
    }
    let peak = peak_rss_mib(proxy.pid());
    eprintln!(
        "{STREAMS} concurrent streams of {DELTAS} deltas in {:.2} s; proxy peak RSS {peak:.1} MiB",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "{} failed, e.g. {}",
        failed.len(),
        failed[0]
    );
    assert_eq!(upstream.count(), STREAMS);
    assert!(peak > 0.0 && peak < 400.0, "peak RSS {peak:.1} MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_while_streams_are_open_breaks_none_and_applies_to_new_requests() {
    const STREAMS: usize = 20;
    const DELTAS: usize = 60;
    let dir = ScratchDir::new("proxy-reload");
    let first = MockUpstream::start_unrecorded();
    let second = MockUpstream::start_unrecorded();
    let config = shipped_chain(&dir, &first, "");
    let proxy = start_proxy(&config);
    let client = reqwest::Client::new();
    // 60 deltas 50 ms apart: each stream is open for 3 s, longer than a reload takes.
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| {
            let client = client.clone();
            let base = proxy.base.clone();
            tokio::spawn(async move { read_stream(&client, &base, DELTAS, 50).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.count() < STREAMS {
        assert!(
            Instant::now() < deadline,
            "{} streams opened",
            first.count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Another upstream and another chain (a third of the budget), saved as editors save.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&first.url(), &second.url())
        .replace("max_tokens = 4000", "max_tokens = 3000");
    write_atomically(&config, text.as_bytes());
    let saved = Instant::now();
    while !proxy.log().contains("tamp proxy: reloaded") {
        assert!(
            saved.elapsed() < Duration::from_secs(10),
            "no reload:\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let open = streams.iter().filter(|s| !s.is_finished()).count();
    assert_eq!(
        open, STREAMS,
        "every stream was still open when the reload was applied"
    );
    // The new request goes to the new upstream while the old streams are still open.
    let after = read_stream(&client, &proxy.base, 2, 0).await.unwrap();
    assert_eq!(after, expected_stream(2));
    assert_eq!(second.count(), 1);
    let expected = expected_stream(DELTAS);
    for stream in streams {
        assert_eq!(stream.await.unwrap().unwrap(), expected);
    }
    assert_eq!(first.count(), STREAMS);
}

/// Session `session`'s request after `turns` messages of a corpus conversation, as Claude
/// Code sends it (`metadata.user_id` naming its session) or, with `named` false, without it.
/// Sessions share the system prompt and first message (one agent, one folder, one task) and
/// differ from the second user turn on, as two sessions' tool results do.
fn session_request(conversation: &Value, turns: usize, session: &str, named: bool) -> Value {
    let mut body = json!({
        "model": "claude-test",
        "max_tokens": 64,
        "system": conversation["system"],
        "messages": conversation["messages"].as_array().unwrap()[..turns],
    });
    for m in body["messages"].as_array_mut().unwrap().iter_mut().skip(1) {
        if m["role"] == "user" {
            if let Some(Value::Array(blocks)) = m.get_mut("content") {
                blocks.push(json!({"type": "text", "text": format!("(in {session})")}));
            }
        }
    }
    if named {
        let user_id = json!({"device_id": "d1", "account_uuid": "", "session_id": session});
        body["metadata"] = json!({"user_id": user_id.to_string()});
    }
    body
}

/// The `x-tamp-thread` of each answer, session A's and B's requests interleaved.
async fn interleaved_threads(proxy: &Server, sessions: [&str; 2], named: bool) -> Vec<[String; 2]> {
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let client = reqwest::Client::new();
    let mut threads = Vec::new();
    for turns in (13..=37).step_by(4) {
        let mut pair = [String::new(), String::new()];
        for (i, session) in sessions.iter().enumerate() {
            let answer = client
                .post(proxy.url("/v1/messages"))
                .header("x-api-key", KEY)
                .header("anthropic-version", "2023-06-01")
                .json(&session_request(&conversation, turns, session, named))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
            pair[i] = answer.headers()["x-tamp-thread"]
                .to_str()
                .unwrap()
                .to_string();
        }
        threads.push(pair);
    }
    threads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_of_one_agent_at_once_keep_their_own_threads() {
    let dir = ScratchDir::new("proxy-sessions");
    let upstream = MockUpstream::start();
    let proxy = start_proxy(&shipped_chain(&dir, &upstream, ""));

    // Each session is its own thread, and continues it between the other's requests.
    let threads = interleaved_threads(&proxy, ["sess-a", "sess-b"], true).await;
    for [a, b] in &threads {
        assert!(a.starts_with("session:sess-a"), "{threads:?}");
        assert!(b.starts_with("session:sess-b"), "{threads:?}");
    }
    for (i, name) in ["sess-a", "sess-b"].iter().enumerate() {
        let continued = threads
            .iter()
            .filter(|p| p[i].ends_with("; continued"))
            .count();
        assert!(
            continued >= 3,
            "{name} continued {continued} times: {threads:?}"
        );
    }

    // Without the sessions, both are one thread named by their shared first messages: each
    // request finds the other session's state, and neither ever continues.
    let threads = interleaved_threads(&proxy, ["sess-c", "sess-d"], false).await;
    assert!(
        threads.iter().flatten().all(|t| t == "derived"),
        "{threads:?}"
    );
}

/// A Messages request in thread `thread` (`x-tamp-thread-id`); its compaction and thread
/// headers.
async fn post_in_thread(proxy: &Server, thread: &str, body: &str) -> (String, String) {
    let answer = reqwest::Client::new()
        .post(proxy.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("x-tamp-thread-id", thread)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .map_or("", |v| v.to_str().unwrap())
            .to_string()
    };
    (header("x-tamp-compaction"), header("x-tamp-thread"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_under_the_watermark_goes_unread_unless_its_thread_has_a_compaction() {
    let dir = ScratchDir::new("proxy-precount");
    let upstream = MockUpstream::start();
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let body = |turns: usize| {
        json!({
            "model": "claude-test",
            "max_tokens": 64,
            "system": conversation["system"],
            "messages": conversation["messages"].as_array().unwrap()[..turns],
        })
        .to_string()
    };
    let last_body = || upstream.received().last().unwrap().body.clone();

    // Budget 4,000: thread t1 is compacted, and its answer stored.
    let chain = shipped_chain(&dir, &upstream, "");
    let proxy = start_proxy(&chain);
    let (compaction, thread) = post_in_thread(&proxy, "t1", &body(33)).await;
    assert_contains(&compaction, "->");
    assert_eq!(thread, "t1");
    // A short request is under the high watermark by its declared length alone, in a thread
    // its header names with no stored answer: streamed upstream as it arrives, never read.
    let short =
        r#"{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let (compaction, thread) = post_in_thread(&proxy, "t0", short).await;
    assert!(
        compaction.starts_with("unchanged (") && compaction.ends_with("streamed unread)"),
        "{compaction}"
    );
    assert_eq!(thread, "t0");
    assert_eq!(last_body(), short.as_bytes());
    drop(proxy);

    // The same store, a budget both threads are far under. Thread t2 has no stored answer:
    // its request goes unread. Thread t1's compaction must be applied to its next request
    // again: that request is read, and continues the thread.
    let text = std::fs::read_to_string(&chain)
        .unwrap()
        .replace("max_tokens = 4000\n", "max_tokens = 4000000\n");
    assert!(text.contains("max_tokens = 4000000"));
    std::fs::write(&chain, text).unwrap();
    let proxy = start_proxy(&chain);
    let next = body(37);
    let (compaction, thread) = post_in_thread(&proxy, "t2", &next).await;
    assert!(compaction.ends_with("streamed unread)"), "{compaction}");
    assert_eq!(thread, "t2");
    assert_eq!(last_body(), next.as_bytes());
    let (compaction, thread) = post_in_thread(&proxy, "t1", &next).await;
    assert_contains(&compaction, "->");
    assert_eq!(thread, "t1; continued");
    assert!(last_body().len() < next.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamp_answers_openais_server_side_compaction_for_an_upstream_that_lacks_it() {
    let dir = ScratchDir::new("proxy-own-compaction");
    let upstream = MockUpstream::start();
    let proxy = start_proxy(&shipped_chain(
        &dir,
        &upstream,
        "openai_compaction = \"tamp\"",
    ));
    let client = reqwest::Client::new();
    let post = |path: &str, body: &Value| {
        client
            .post(proxy.url(path))
            .header("authorization", format!("Bearer {KEY}"))
            .json(body)
    };
    let codex = agent_session("codex").pop().unwrap();
    let input = codex["input"].as_array().unwrap().clone();
    let users: Vec<Value> = input
        .iter()
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .cloned()
        .collect();

    // responses.compact: the user messages, then tamp's compaction item.
    let answer = post(
        "/v1/responses/compact",
        &json!({"model": "gpt-test", "input": input}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    let pages = compacted_pages(&json!(answer.headers()["x-tamp-compaction"]
        .to_str()
        .unwrap()));
    assert!(!pages.is_empty());
    let compacted: Value = answer.json().await.unwrap();
    assert_eq!(compacted["object"], "response.compaction");
    let output = compacted["output"].as_array().unwrap();
    assert_eq!(output[..output.len() - 1], users[..]);
    let item = output.last().unwrap().clone();
    assert_eq!(item["type"], "compaction");
    assert!(item["encrypted_content"]
        .as_str()
        .unwrap()
        .starts_with("tamp:v1:"));
    assert!(on(&upstream.received(), "/v1/responses/compact").is_empty());
    // The pages hold what was taken out.
    let page =
        tamp_e2e::get_text(&client, &proxy.url(&format!("/tamp/v1/pages/{}", pages[0]))).await;
    assert_contains(&page, "echo step 1");

    // The next turn, as Codex sends it: instructions, user messages, the compaction item, a
    // new call. The upstream gets tamp's summaries in the item's place.
    let mut next: Vec<Value> = input
        .iter()
        .filter(|i| i["role"] == "developer")
        .cloned()
        .collect();
    next.extend(users.iter().cloned());
    next.push(item);
    next.push(json!({"type": "function_call", "call_id": "call_next", "name": "exec_command", "arguments": "{\"cmd\": \"echo step 13\"}"}));
    next.push(json!({"type": "function_call_output", "call_id": "call_next", "output": "step 13"}));
    let answer = post(
        "/v1/responses",
        &json!({"model": "gpt-test", "input": next}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    let received = on(&upstream.received(), "/v1/responses");
    let forwarded = received.last().unwrap().json();
    let items = forwarded["input"].as_array().unwrap();
    assert!(
        items.iter().all(|i| i["type"] != "compaction"),
        "{forwarded}"
    );
    let text = forwarded.to_string();
    assert_contains(&text, &format!("<tamp-summary page=\\\"{}", pages[0]));
    assert!(text.contains("echo step 13"));

    // Codex 0.169's way: a compaction_trigger, answered with a stream holding the item.
    let mut triggered = input.clone();
    triggered.push(json!({"type": "compaction_trigger"}));
    let answer = post(
        "/v1/responses",
        &json!({"model": "gpt-test", "stream": true, "input": triggered}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = answer.text().await.unwrap();
    let completed = events
        .split("\n\n")
        .find_map(|e| e.strip_prefix("event: response.completed\ndata: "))
        .expect("a response.completed event");
    let completed: Value = serde_json::from_str(completed).unwrap();
    assert_eq!(completed["response"]["output"][0]["type"], "compaction");
    assert_eq!(
        on(&upstream.received(), "/v1/responses").len(),
        received.len()
    );
    assert_key_kept_out(&proxy, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_repeats_its_threads_last_read_one_goes_unread() {
    let dir = ScratchDir::new("proxy-last-read");
    let upstream = MockUpstream::start();
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    let body = |turns: usize, first: &str| {
        let mut messages = conversation["messages"].as_array().unwrap()[..turns].to_vec();
        messages[0]["content"] = json!(first);
        json!({
            "model": "claude-test",
            "max_tokens": 64,
            "system": conversation["system"],
            "messages": messages,
        })
        .to_string()
    };
    let first = body(33, "Hi, I need to change my flight.");
    // A high watermark just under the request's length: its length does not bound its
    // tokens under it, its count does.
    let max_tokens = (first.len() - 1) * 4 / 3;
    let text = std::fs::read_to_string(shipped_chain(&dir, &upstream, ""))
        .unwrap()
        .replace(
            "max_tokens = 4000\n",
            &format!("max_tokens = {max_tokens}\n"),
        );
    let chain = tamp_e2e::write_chain(&dir, &text);
    let proxy = start_proxy(&chain);
    let last_body = || upstream.received().last().unwrap().body.clone();

    // Read and counted.
    let (compaction, thread) = post_in_thread(&proxy, "t1", &first).await;
    assert!(
        compaction.contains("tokens, not above the high watermark")
            && !compaction.contains("unread"),
        "{compaction}"
    );
    assert_eq!(thread, "t1");
    // The same request again, then one with four messages more: bounded from the first.
    let grown = body(37, "Hi, I need to change my flight.");
    for next in [&first, &grown] {
        let (compaction, thread) = post_in_thread(&proxy, "t1", next).await;
        assert!(
            compaction.contains("counted in the thread's last request read")
                && compaction.ends_with("forwarded unread)"),
            "{compaction}"
        );
        assert_eq!(thread, "t1");
        assert_eq!(last_body(), next.as_bytes());
    }
    // An earlier message edited, or another thread: read again.
    let edited = body(37, "Hi, I need to change my flight!");
    let (compaction, _) = post_in_thread(&proxy, "t1", &edited).await;
    assert!(!compaction.contains("unread"), "{compaction}");
    assert_eq!(last_body(), edited.as_bytes());
    let (compaction, thread) = post_in_thread(&proxy, "t2", &grown).await;
    assert!(!compaction.contains("unread"), "{compaction}");
    assert_eq!(thread, "t2");
    // The edited request is now t1's last read one.
    let (compaction, _) = post_in_thread(&proxy, "t1", &edited).await;
    assert!(compaction.ends_with("forwarded unread)"), "{compaction}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_one_access_line_and_a_request_of_no_api_reaches_no_upstream() {
    let dir = ScratchDir::new("proxy-access");
    let upstream = MockUpstream::start();
    // The default log level: what a user sees without TAMP_LOG.
    let proxy = Server::start_command("proxy", &shipped_chain(&dir, &upstream, ""), &[], &[]);
    let client = reqwest::Client::new();

    // A conversation over the chain's budget, in an agent's session: compacted.
    let mut body: Value =
        serde_json::from_str(&corpus("anthropic", "openhands_llama4_ponyc-4588")).unwrap();
    body["metadata"] = json!({"user_id": "user_ab12_account_cd34_session_7f3e-a1"});
    body["model"] = json!("claude-opus-5-5");
    let answer = client
        .post(proxy.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let header = answer.headers()["x-tamp-compaction"]
        .to_str()
        .unwrap()
        .to_string();
    let pages = compacted_pages(&json!(header));
    let (tokens, _) = header.split_once(';').unwrap();
    let line = format!(
        "POST /v1/messages model=claude-opus-5-5 thread=session:7f3e-a1 tokens={tokens} \
         pages={} compaction=compacted upstream=200 ",
        pages.len()
    );
    let log = proxy.log_containing(&[&line]);
    assert!(log.contains(&line), "no \"{line}\" in:\n{log}");

    // The thread's totals.
    let threads: Value = client
        .get(proxy.url("/tamp/v1/threads"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let thread = &threads["threads"][0];
    assert_eq!(thread["thread"], "session:7f3e-a1", "{threads}");
    assert_eq!(thread["requests"], 1);
    assert_eq!(thread["compactions"], 1);
    assert_eq!(thread["pages"], pages.len());
    let (before, after) = tokens.split_once("->").unwrap();
    assert_eq!(thread["tokens_in"].to_string(), before);
    assert_eq!(thread["tokens_out"].to_string(), after);

    // Claude Code's HEAD /api/hello carries no provider's headers: answered here, 404, and
    // sent to neither upstream; with a provider's header it goes to that provider.
    let before = upstream.received().len();
    let hello = client.head(proxy.url("/api/hello")).send().await.unwrap();
    assert_eq!(hello.status(), 404);
    let hello = client.get(proxy.url("/api/hello")).send().await.unwrap();
    assert_eq!(hello.status(), 404);
    let text = hello.text().await.unwrap();
    assert_contains(&text, "belongs to no API this proxy serves");
    assert_eq!(
        upstream.received().len(),
        before,
        "a request of no API went upstream"
    );
    client
        .get(proxy.url("/api/hello"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let received = upstream.received();
    assert_eq!(on(&received, "/api/hello").len(), 1);
    assert!(
        proxy.log().contains("HEAD /api/hello upstream=404"),
        "{}",
        proxy.log()
    );

    // An upstream that is down is a warning, naming neither a key nor its URL's password.
    let (answer, _) =
        chat_to_an_upstream_that_is_down(&proxy, &dir, &upstream, "user:URL-PASSWORD@").await;
    assert_eq!(answer.status(), 502);
    let warning = "POST /v1/chat/completions: the upstream failed after";
    let log = proxy.log_containing(&[warning]);
    assert!(log.contains(warning) && log.contains("WARN"), "{log}");
    assert_contains(&log, "upstream=502");
    assert!(!log.contains(KEY) && !log.contains("URL-PASSWORD"), "{log}");
}
