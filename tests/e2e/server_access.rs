//! Issue 32, points 4 and 6, through the real `tamp serve` and `tamp proxy` on raw sockets
//! (so the Host and the request target are exactly what is written):
//!
//! - both servers answer only a loopback Host, their listen address, or a name under `[http]
//!   allowed_hosts` (a DNS-rebinding guard), and refuse any other with 421 and a JSON error;
//! - `tamp proxy --auth-token-env` guards its own `/tamp/` routes (but `/tamp/healthz`) with
//!   the bearer token, while the provider routes pass the client's key upstream untouched;
//! - the proxy forwards the request target as sent, and refuses with 400 one its HTTP client
//!   would rewrite (`/v1/../tamp/healthz`) instead of forwarding another; tamp's `/tamp/`
//!   routes are matched on the raw path.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tamp_e2e::mock_upstream::MockUpstream;
use tamp_e2e::serve_support::{read_answer, write_atomically, RawAnswer, ScratchDir, Server};
use tamp_e2e::{plugin, write_chain};
use tokio::io::AsyncWriteExt as _;

/// One request on a fresh connection, `head_lines` (the Host among them, or not) as given.
async fn raw(server: &Server, request_line: &str, head_lines: &[String], body: &str) -> RawAnswer {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut text = format!("{request_line}\r\n");
    for line in head_lines {
        text.push_str(line);
        text.push_str("\r\n");
    }
    text.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(text.as_bytes()).await.unwrap();
    read_answer(&mut stream, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no answer to {request_line}; log:\n{}", server.log()))
}

fn host(value: &str) -> Vec<String> {
    vec![format!("host: {value}")]
}

fn error_code(answer: &RawAnswer) -> String {
    answer.json()["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn chain(dir: &Path, extra: &str) -> PathBuf {
    write_chain(
        dir,
        &format!(
            "[budget]\nmax_tokens = 2000\nkeep_recent = 4\n\n[store]\npath = \"store.sqlite3\"\n\
             {extra}\n[[stage]]\nname = \"a\"\nplugin = \"{}\"\n",
            plugin("tamp_custom_strategy").display()
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_only_the_hosts_it_serves() {
    let dir = ScratchDir::new("access-serve");
    let config = chain(&dir, "");
    let server = Server::start(&config, &[]);
    let port = server.addr().rsplit(':').next().unwrap().to_string();

    for named in [
        "evil.example.com",
        &format!("evil.example.com:{port}"),
        "127.0.0.2.evil.com",
    ] {
        let answer = raw(&server, "GET /v1/chain HTTP/1.1", &host(named), "").await;
        assert_eq!(answer.status, 421, "{named}");
        assert_eq!(error_code(&answer), "host_not_allowed", "{named}");
        assert!(
            answer.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("[http] allowed_hosts"),
            "{:?}",
            answer.json()
        );
    }
    let body = r#"{"conversation": {"messages": [{"role": "user", "content": "hi"}]}}"#;
    let refused = raw(
        &server,
        "POST /v1/compact HTTP/1.1",
        &[
            "host: evil.example.com".into(),
            "content-type: application/json".into(),
        ],
        body,
    )
    .await;
    assert_eq!(refused.status, 421);
    for named in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "LocalHost.".into(),
        format!("[::1]:{port}"),
        "127.8.9.10".into(),
    ] {
        let answer = raw(&server, "GET /v1/chain HTTP/1.1", &host(&named), "").await;
        assert_eq!(answer.status, 200, "{named}: {:?}", answer.json());
    }
    // HTTP/1.0 without a Host comes from no browser.
    let answer = raw(&server, "GET /healthz HTTP/1.0", &[], "").await;
    assert_eq!(answer.status, 200);
    let compacted = raw(
        &server,
        "POST /v1/compact HTTP/1.1",
        &[
            format!("host: 127.0.0.1:{port}"),
            "content-type: application/json".into(),
        ],
        body,
    )
    .await;
    assert_eq!(compacted.status, 200, "{:?}", compacted.json());

    // A name the operator lists is answered, after the reload that brings it.
    write_atomically(
        &config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace(
                "[store]",
                "[http]\nallowed_hosts = [\"tamp.internal\"]\n\n[store]",
            )
            .as_bytes(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = raw(
            &server,
            "GET /v1/chain HTTP/1.1",
            &host("tamp.internal:7474"),
            "",
        )
        .await;
        if answer.status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never reloaded: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = raw(
        &server,
        "GET /v1/chain HTTP/1.1",
        &host("evil.example.com"),
        "",
    )
    .await;
    assert_eq!(answer.status, 421);
}

fn proxy_chain(dir: &Path, upstream: &MockUpstream) -> PathBuf {
    chain(
        dir,
        &format!(
            "[proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n",
            upstream.url(),
            upstream.openai_url()
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_answers_only_its_hosts_and_guards_its_own_routes_with_the_token() {
    let dir = ScratchDir::new("access-proxy");
    let upstream = MockUpstream::start();
    let config = proxy_chain(&dir, &upstream);
    let proxy = Server::start_command(
        "proxy",
        &config,
        &["--auth-token-env", "TAMP_TEST_PROXY_TOKEN"],
        &[("TAMP_TEST_PROXY_TOKEN", "proxy-secret")],
    );
    let local = || host("127.0.0.1");
    let with_token = |token: &str| {
        vec![
            "host: localhost".to_string(),
            format!("authorization: Bearer {token}"),
        ]
    };

    // Another Host: refused on tamp's routes and the providers' alike, nothing forwarded.
    for target in [
        "/tamp/v1/pages/pg_00000000000000000000000000000000",
        "/tamp/healthz",
        "/v1/models",
    ] {
        let answer = raw(
            &proxy,
            &format!("GET {target} HTTP/1.1"),
            &host("evil.example.com"),
            "",
        )
        .await;
        assert_eq!(answer.status, 421, "{target}");
        assert_eq!(error_code(&answer), "host_not_allowed");
    }
    assert_eq!(upstream.count(), 0);

    // tamp's own routes take the token; the health check does not need it.
    let page = "GET /tamp/v1/pages/pg_00000000000000000000000000000000 HTTP/1.1";
    for (line, head, status) in [
        (page, local(), 401),
        (page, with_token("wrong"), 401),
        (page, with_token("proxy-secret"), 404),
        ("GET /tamp/metrics HTTP/1.1", local(), 401),
        (
            "GET /tamp/metrics HTTP/1.1",
            with_token("proxy-secret"),
            200,
        ),
        ("GET /tamp/healthz HTTP/1.1", local(), 200),
    ] {
        let answer = raw(&proxy, line, &head, "").await;
        assert_eq!(answer.status, status, "{line} {head:?}");
    }
    // A provider route carries the client's own key in the same header: passed upstream
    // untouched, never taken for the proxy's token.
    let answer = raw(
        &proxy,
        "GET /v1/models HTTP/1.1",
        &with_token("sk-upstream-key"),
        "",
    )
    .await;
    assert_ne!(
        answer.status,
        401,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].header("authorization"),
        Some("Bearer sk-upstream-key")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_the_request_target_as_sent_or_not_at_all() {
    let dir = ScratchDir::new("access-targets");
    let upstream = MockUpstream::start();
    let config = proxy_chain(&dir, &upstream);
    let proxy = Server::start_command("proxy", &config, &[], &[]);
    let anthropic = || {
        vec![
            "host: 127.0.0.1".to_string(),
            "x-api-key: k".into(),
            "anthropic-version: 2023-06-01".into(),
        ]
    };
    let openai = || {
        vec![
            "host: 127.0.0.1".to_string(),
            "authorization: Bearer k".into(),
        ]
    };

    // Odd but valid targets arrive exactly as sent; an OpenAI path outside /v1 gets no /v1.
    for (target, head) in [
        ("//127.0.0.1:18002/v1/models", anthropic()),
        ("/v1/models?after=a%2Fb&q=..", anthropic()),
        ("/v1/files/a%2Fb", anthropic()),
        ("/models", openai()),
        ("/v1/models", openai()),
    ] {
        let before = upstream.count();
        let answer = raw(&proxy, &format!("GET {target} HTTP/1.1"), &head, "").await;
        let received = upstream.received();
        assert_eq!(received.len(), before + 1, "{target}: {}", answer.status);
        assert_eq!(received[before].target, target, "{target}");
    }

    // Targets the HTTP client would rewrite: refused with 400 in the provider's shape, and
    // nothing goes upstream (not `/tamp/healthz`, which is no provider's path).
    let before = upstream.count();
    for target in [
        "/v1/../tamp/healthz",
        "/v1/%2e%2e/tamp/healthz",
        "/v1/%2E%2e/v1/messages",
        "/v1/./models",
    ] {
        let answer = raw(&proxy, &format!("GET {target} HTTP/1.1"), &anthropic(), "").await;
        assert_eq!(answer.status, 400, "{target}");
        let body: Value = answer.json();
        assert_eq!(body["type"], "error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(target) && message.contains("as it was sent"),
            "{message}"
        );
    }
    assert_eq!(upstream.count(), before, "{:?}", upstream.received());

    // tamp's routes match the raw path only: no trailing slash, no doubled slash, no
    // other case; what is under /tamp/ but no route is tamp's 404, never forwarded.
    for target in ["/tamp/healthz/", "/tamp//healthz", "/tamp/v1/../healthz"] {
        let answer = raw(&proxy, &format!("GET {target} HTTP/1.1"), &anthropic(), "").await;
        assert_eq!(answer.status, 404, "{target}");
        assert_eq!(error_code(&answer), "not_found", "{target}");
    }
    assert_eq!(upstream.count(), before);
}
