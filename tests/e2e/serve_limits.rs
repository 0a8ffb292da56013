//! `tamp serve`'s connection and request limits and its HTTP hygiene (issue 23): header and
//! body timeouts, an oversized declared body, the concurrency and connection limits, a
//! shutdown that idle and half-sent connections do not hold up, the content type, the bearer
//! scheme, JSON error bodies, the token check at start and UTF-8 errors. The real binary on
//! loopback; raw sockets where a well-behaved client cannot misbehave; every wait bounded.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::serve_support::{closed_within, read_answer, ScratchDir, Server};
use tamp_e2e::{corpus, plugin, tamp_bin, write_chain};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// A chain of one custom-strategy stage over a 2,000-token budget (the corpus conversation is
/// far above it), pages in `store.sqlite3` beside the file. With `delay_ms`, the stage
/// summarizes through the scripted provider, each call taking that long.
fn chain(dir: &Path, delay_ms: Option<u64>) -> PathBuf {
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let mut toml = String::new();
    if let Some(delay) = delay_ms {
        std::fs::write(
            dir.join("script.json"),
            format!(r#"{{"default": {{"text": "a slow summary", "delay_ms": {delay}}}}}"#),
        )
        .unwrap();
        toml.push_str(
            "[provider]\nkind = \"scripted\"\nscript = \"script.json\"\n\n\
             [cache]\nenabled = false\n\n",
        );
    }
    toml.push_str(&format!(
        "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\n\
         [[stage]]\nname = \"archive\"\nplugin = \"strategy.so\"\n\
         [stage.config]\nkeep_exchanges = 1\nsummarize = {}\n",
        delay_ms.is_some()
    ));
    write_chain(dir, &toml)
}

fn request(thread: &str) -> Value {
    let conversation: Value =
        serde_json::from_str(&corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")).unwrap();
    json!({"conversation": conversation, "thread_id": thread})
}

async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(server.addr()).await.expect("connect")
}

/// Writes `bytes` on a raw connection.
async fn send(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.expect("write");
}

/// Sends a `POST /v1/compact` head declaring `length` bytes of JSON, then `body_start` (all,
/// part or none of the body).
async fn send_compact(stream: &mut TcpStream, length: u64, body_start: &[u8]) {
    let head = format!(
        "POST /v1/compact HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    );
    send(stream, head.as_bytes()).await;
    send(stream, body_start).await;
}

/// A raw `GET /healthz` whose answer keeps the connection open.
async fn healthz_kept_alive(server: &Server) -> TcpStream {
    let mut stream = connect(server).await;
    send(
        &mut stream,
        b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n",
    )
    .await;
    let answer = read_answer(&mut stream, Duration::from_secs(10))
        .await
        .expect("GET /healthz answered");
    assert_eq!(answer.status, 200);
    stream
}

/// Polls `/metrics` until `tamp_requests_in_flight` is `n`.
async fn wait_in_flight(server: &Server, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = format!("tamp_requests_in_flight {n}\n");
    while !server.metrics().await.contains(&line) {
        assert!(
            Instant::now() < deadline,
            "never {n} compaction(s) in flight; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_slowloris_and_kept_alive_connections_are_closed_after_the_header_timeout() {
    let dir = ScratchDir::new("limits-header-timeout");
    let server = Server::start(&chain(&dir, None), &["--header-timeout-secs", "1"]);

    let started = Instant::now();
    // Sends nothing at all.
    let mut idle = connect(&server).await;
    // Answered once, then silent.
    let mut kept_alive = healthz_kept_alive(&server).await;
    // Slowloris: a request head sent one byte every 100 ms, never finished.
    let slow = connect(&server).await;
    let (mut slow_read, mut slow_write) = slow.into_split();
    let trickle = tokio::spawn(async move {
        let mut head = b"POST /v1/compact HTTP/1.1\r\nhost: localhost\r\n".to_vec();
        head.extend(std::iter::repeat_n(b'x', 10_000));
        for byte in head {
            if slow_write.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    for (what, closed) in [
        (
            "idle",
            closed_within(&mut idle, Duration::from_secs(10)).await,
        ),
        (
            "kept-alive",
            closed_within(&mut kept_alive, Duration::from_secs(10)).await,
        ),
        (
            "slowloris",
            closed_within(&mut slow_read, Duration::from_secs(10)).await,
        ),
    ] {
        assert!(closed, "the {what} connection was not closed");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(6),
        "closed after {elapsed:?}, not after the 1 s header timeout"
    );
    trickle.abort();
    // The server still answers.
    assert_eq!(server.get_json("/healthz").await["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_oversized_declared_body_is_refused_at_once_and_a_slow_body_times_out() {
    let dir = ScratchDir::new("limits-body");
    let server = Server::start(
        &chain(&dir, None),
        &["--max-body", "64KiB", "--body-timeout-secs", "1"],
    );

    // 1 TB declared, nothing sent: 413 without waiting for the body.
    let mut stream = connect(&server).await;
    send_compact(&mut stream, 1_099_511_627_776, b"").await;
    let answer = read_answer(&mut stream, Duration::from_secs(5))
        .await
        .expect("a 413 before any body byte");
    assert_eq!(answer.status, 413);
    assert_eq!(answer.json()["error"]["code"], "body_too_large");
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("65536"));
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");

    // A body sent whole but too large: the answer says the connection closes, so a
    // keep-alive client does not send its next request into it (the fuzzer found reqwest's
    // next request failing), and it does close.
    let mut stream = connect(&server).await;
    let body = format!("{{\"conversation\": \"{}\"}}", "x".repeat(200_000));
    send_compact(&mut stream, body.len() as u64, b"").await;
    let _ = stream.write_all(body.as_bytes()).await; // the server may stop reading
    let answer = read_answer(&mut stream, Duration::from_secs(5))
        .await
        .expect("a 413");
    assert_eq!(answer.status, 413);
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    assert!(closed_within(&mut stream, Duration::from_secs(5)).await);
    // And reqwest, keeping connections alive, gets its next answer.
    let client = reqwest::Client::new();
    let big = client
        .post(server.url("/v1/compact"))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .expect("answered");
    assert_eq!(big.status(), 413);
    let next = client
        .get(server.url("/v1/pages/pg%2F0"))
        .send()
        .await
        .expect("the next request on a kept-alive client is answered");
    assert_eq!(next.status(), 404);

    // 100 bytes declared, 10 sent: 408 after the body timeout.
    let started = Instant::now();
    let mut stream = connect(&server).await;
    send_compact(&mut stream, 100, b"{\"convers").await;
    let answer = read_answer(&mut stream, Duration::from_secs(10))
        .await
        .expect("an answer to the stalled body");
    assert_eq!(answer.status, 408, "{:?}", answer);
    assert_eq!(answer.json()["error"]["code"], "body_timeout");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(closed_within(&mut stream, Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_beyond_max_concurrent_are_answered_503_with_retry_after() {
    let dir = ScratchDir::new("limits-concurrent");
    let server = Arc::new(Server::start(
        &chain(&dir, Some(2500)),
        &["--max-concurrent", "2"],
    ));
    let slow: Vec<_> = (0..2)
        .map(|i| {
            let server = Arc::clone(&server);
            tokio::spawn(async move { server.compact(&request(&format!("slow-{i}"))).await })
        })
        .collect();
    // /metrics takes no permit: it answers while both are taken.
    wait_in_flight(&server, 2).await;

    let (status, answer) = {
        let response = server
            .client
            .post(server.url("/v1/compact"))
            .json(&request("third"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap()),
            Some("1")
        );
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap())
    };
    assert_eq!(status, 503, "{answer:#}");
    assert_eq!(answer["error"]["code"], "overloaded");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-concurrent"));
    let response = server.client.get(server.url("/v1/chain")).send().await;
    assert_eq!(response.unwrap().status().as_u16(), 503);
    // Health checks are not counted.
    assert_eq!(server.get_json("/healthz").await["status"], "ok");

    for task in slow {
        let (status, answer) = task.await.unwrap();
        assert_eq!(status, 200, "{answer:#}");
    }
    // The permits are back.
    let (status, answer) = server.compact(&request("after")).await;
    assert_eq!(status, 200, "{answer:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_closes_idle_and_half_sent_connections_and_waits_only_for_compactions() {
    let dir = ScratchDir::new("limits-sigterm");
    // Default timeouts (10 s header, 30 s body) and grace (60 s): none of them may be waited.
    let server = Arc::new(Server::start(&chain(&dir, Some(3000)), &[]));

    let compaction = {
        let server = Arc::clone(&server);
        tokio::spawn(async move { server.compact(&request("in-flight")).await })
    };
    wait_in_flight(&server, 1).await;
    let mut idle = connect(&server).await;
    let mut kept_alive = healthz_kept_alive(&server).await;
    let mut half_head = connect(&server).await;
    send(
        &mut half_head,
        b"POST /v1/compact HTTP/1.1\r\nhost: localhost\r\ncontent-",
    )
    .await;
    let mut half_body = connect(&server).await;
    send_compact(&mut half_body, 1000, b"{\"conversation\": ").await;
    // Let the server read what was sent before the signal.
    let _ = server.metrics().await;

    let signalled = Instant::now();
    server.sigterm();
    // Closed at once, while the compaction still runs.
    for (what, stream) in [
        ("idle", &mut idle),
        ("kept-alive", &mut kept_alive),
        ("half-sent head", &mut half_head),
    ] {
        assert!(
            closed_within(stream, Duration::from_secs(2)).await,
            "the {what} connection was still open 2 s after SIGTERM"
        );
    }
    let answer = read_answer(&mut half_body, Duration::from_secs(2))
        .await
        .expect("the half-sent body answered at once");
    assert_eq!(answer.status, 503);
    assert_eq!(answer.json()["error"]["code"], "shutting_down");
    assert!(
        !compaction.is_finished(),
        "the compaction ended before the half-sent connections were closed"
    );

    let (status, answer) = compaction.await.unwrap();
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["report"]["stages"][0]["status"], "acted");
    let mut server = Arc::into_inner(server).expect("the last reference");
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}; log:\n{}", server.log());
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "exit took {:?}",
        signalled.elapsed()
    );
    assert!(server
        .log_containing(&["tamp serve: stopped"])
        .contains("tamp serve: stopped"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_connections_holds_new_connections_until_one_closes_or_is_reaped() {
    let dir = ScratchDir::new("limits-connections");
    let server = Server::start(
        &chain(&dir, None),
        &["--max-connections", "2", "--header-timeout-secs", "4", "-v"],
    );
    let first = healthz_kept_alive(&server).await;
    let second = healthz_kept_alive(&server).await;
    let idle_since = Instant::now();

    // A third connection is not accepted while two are open...
    let mut third = connect(&server).await;
    send(
        &mut third,
        b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n",
    )
    .await;
    assert!(
        read_answer(&mut third, Duration::from_millis(700))
            .await
            .is_none(),
        "a third connection was served beyond --max-connections 2"
    );
    // ...and is as soon as one closes (well before the idle ones are reaped).
    drop(first);
    let answer = read_answer(&mut third, Duration::from_secs(3))
        .await
        .expect("the waiting connection served once one closed");
    assert_eq!(answer.status, 200);
    assert!(
        idle_since.elapsed() < Duration::from_secs(4),
        "served only after the header timeout reaped an idle connection"
    );

    // `second` and `third` are idle now and hold both places: a fresh client gets its
    // /healthz once the header timeout has reaped one of them.
    let fresh = reqwest::Client::new();
    let started = Instant::now();
    let response = tokio::time::timeout(
        Duration::from_secs(15),
        fresh.get(server.url("/healthz")).send(),
    )
    .await
    .expect("/healthz answered once idle connections were reaped")
    .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(started.elapsed() < Duration::from_secs(10));
    drop((second, third));
    assert!(
        server
            .log_containing(&["--max-connections"])
            .contains("--max-connections"),
        "the limit is logged:\n{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compact_requires_a_json_content_type() {
    let dir = ScratchDir::new("limits-content-type");
    let server = Server::start(&chain(&dir, None), &[]);
    let body = serde_json::to_vec(&request("t")).unwrap();

    for content_type in [Some("text/plain;charset=UTF-8"), None] {
        let mut post = server
            .client
            .post(server.url("/v1/compact"))
            .body(body.clone());
        if let Some(t) = content_type {
            post = post.header("content-type", t);
        }
        let response = post.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 415, "{content_type:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "unsupported_media_type");
        assert!(answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("application/json"));
    }
    // A large body refused for its type is still read first: answered before it was read,
    // the server's close could reset the connection under the client's write (the fuzzer
    // met this on a loaded machine), and a kept-alive client would send its next request
    // into a closed connection.
    let large: Value =
        serde_json::from_str(&corpus("anthropic", "msa_deepseek_sqlfluff-1733")).unwrap();
    let large = serde_json::to_vec(&json!({"conversation": large})).unwrap();
    for round in 0..20 {
        let response = server
            .client
            .post(server.url("/v1/compact"))
            .header("content-type", "text/plain")
            .body(large.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert_eq!(response.status().as_u16(), 415);
        let health = server
            .client
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {round}, the next request: {e:?}"));
        assert_eq!(health.status().as_u16(), 200);
    }
    let response = server
        .post_compact("Application/JSON; charset=utf-8", body)
        .await;
    assert_eq!(response.status().as_u16(), 200);
    let metrics = server.metrics().await;
    assert_contains(&metrics, "tamp_compactions_total{outcome=\"ok\"} 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bearer_scheme_is_case_insensitive() {
    let dir = ScratchDir::new("limits-bearer");
    let server = Server::start_with_env(
        &chain(&dir, None),
        &["--auth-token-env", "TAMP_TEST_TOKEN"],
        &[("TAMP_TEST_TOKEN", "tok-123")],
    );
    for (authorization, status) in [
        ("Bearer tok-123", 200),
        ("BEARER tok-123", 200),
        ("bearer  tok-123", 200),
        ("Basic dG9rLTEyMw==", 401),
        ("Bearer", 401),
        ("BEARER tok-124", 401),
    ] {
        let response = server
            .client
            .get(server.url("/v1/chain"))
            .header("authorization", authorization)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{authorization}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_error_body_is_json() {
    let dir = ScratchDir::new("limits-json-errors");
    let server = Server::start(&chain(&dir, None), &[]);
    let long = format!("/v1/pages/pg_{}", "a".repeat(20_000));
    for (path, status, code) in [
        ("/v1/pages/%FF%FE", 400, "invalid_request"),
        ("/v1/pages/pg_1?format=a&format=b", 400, "invalid_request"),
        (long.as_str(), 414, "uri_too_long"),
    ] {
        let response = server.client.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{path:.40}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{path:.40}"
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{path:.40}: {answer}");
    }

    // Invalid UTF-8 in a body: the error gives its byte offset.
    let mut body = br#"{"conversation": {"messages": [{"role": "user", "content": "ab"#.to_vec();
    let offset = body.len();
    body.extend_from_slice(b"\xff\xfecd\"}]}}");
    let response = server.post_compact("application/json", body).await;
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_request");
    let message = answer["error"]["message"].as_str().unwrap();
    assert_contains(message, &format!("byte offset {offset}"));
}

#[test]
fn a_whitespace_only_token_is_refused_at_start() {
    let dir = ScratchDir::new("limits-blank-token");
    let config = chain(&dir, None);
    for token in ["   ", " \t ", " padded "] {
        let mut child = Command::new(tamp_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(["--auth-token-env", "TAMP_BLANK_TOKEN"])
            .env("TAMP_BLANK_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tamp serve started with the token {token:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{token:?}: {stderr}");
        assert!(stderr.contains("TAMP_BLANK_TOKEN"), "{token:?}: {stderr}");
        assert!(stderr.contains("whitespace"), "{token:?}: {stderr}");
        assert!(!stderr.contains("listening"), "{token:?}: {stderr}");
    }
}

/// Resident memory of process `pid`, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// `tamp proxy` answers a declared body over `--max-body` with 413 at once (it read nothing
/// for 60 s, then answered 408 `body_timeout`), and bounds the bytes of request bodies it
/// holds at once, across clients (`--max-body-memory`; 24 stalled uploads took it from 88 to
/// 1,635 MB): past the bound a request is answered 503 `overloaded` at once, and when the
/// clients holding it hang up, the bound and the memory come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_proxy_refuses_a_declared_body_over_its_limit_at_once_and_bounds_the_bodies_it_holds() {
    use tamp_e2e::mock_upstream::MockUpstream;
    let dir = ScratchDir::new("proxy-bodies");
    let upstream = MockUpstream::start();
    std::fs::copy(plugin("tamp_custom_strategy"), dir.join("strategy.so")).unwrap();
    let config = write_chain(
        &dir,
        &format!(
            "[store]\npath = \"store.sqlite3\"\n\n[proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n\n\
             [[stage]]\nname = \"archive\"\nplugin = \"strategy.so\"\n",
            upstream.url(),
            upstream.openai_url()
        ),
    );
    let server = Server::start_command(
        "proxy",
        &config,
        &["--max-body", "8MiB", "--max-body-memory", "24MiB"],
        &[],
    );
    let head = |length: usize| {
        format!(
            "POST /v1/messages HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             anthropic-version: 2023-06-01\r\ncontent-length: {length}\r\n\r\n"
        )
    };

    // 70 MiB declared, nothing sent: 413 at once, in Anthropic's error shape.
    let mut stream = connect(&server).await;
    send(&mut stream, head(73_400_320).as_bytes()).await;
    let started = Instant::now();
    let answer = read_answer(&mut stream, Duration::from_secs(10))
        .await
        .expect("a 413 before any body byte");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(answer.json()["error"]["type"], "request_too_large");
    assert_eq!(answer.header("x-tamp-error"), Some("body_too_large"));
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");

    // Three uploads of 8 MiB each send 6 MiB and stall: they hold the 24 MiB.
    let baseline = rss_bytes(server.pid());
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&server).await;
        send(&mut stream, head(8 << 20).as_bytes()).await;
        send(&mut stream, &vec![b' '; 6 << 20]).await;
        stalled.push(stream);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while rss_bytes(server.pid()) < baseline + (12 << 20) {
        assert!(Instant::now() < deadline, "the stalled bodies are not held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fourth, however small: 503 at once, and it says why.
    let body =
        json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
            .to_string();
    let client = reqwest::Client::new();
    let small = |client: &reqwest::Client| {
        client
            .post(server.url("/v1/messages"))
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .header("x-api-key", "sk-test")
            .body(body.clone())
            .send()
    };
    let refused = small(&client).await.expect("answered");
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["x-tamp-error"], "overloaded");
    assert_eq!(refused.headers()["retry-after"], "1");
    let text = refused.text().await.unwrap();
    assert!(
        text.contains("overloaded_error") && text.contains("--max-body-memory"),
        "{text}"
    );

    // They hang up: the bound comes back, and so does the memory.
    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = small(&client).await.expect("answered");
        if answer.status() == 200 {
            break;
        }
        assert_eq!(answer.status(), 503);
        assert!(Instant::now() < deadline, "the bound did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The allocator hands a freed body back to the system when the threads that held it run
    // again, as they do while requests keep coming: an idle server may sit on it for longer.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rss_bytes(server.pid()) > baseline + (8 << 20) {
        assert!(
            Instant::now() < deadline,
            "the memory did not come back: {} MiB, {} MiB before",
            rss_bytes(server.pid()) >> 20,
            baseline >> 20
        );
        assert_eq!(small(&client).await.expect("answered").status(), 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
