//! Contract tests: every kind of request the two provider clients build goes to Prism
//! (`@stoplight/prism-cli`, `prism mock`) serving the providers' official OpenAPI specs
//! (`tests/fixtures/specs/`), which answers 422 with an `sl-violations` header when a request
//! breaks the spec. Each kind is checked twice: its body (as the client builds it, with the
//! client's headers) posted directly, so a violation is shown in full, and a real call through
//! the client. A deliberately broken request shows that Prism does refuse.
//!
//! Prism is installed on first use into `target/tools/prism` (`npm install`, under a lock
//! file so parallel test binaries do not race); Node.js and npm must be on the machine. One
//! Prism per spec is started per test and stopped when the test ends.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::tools::{install_once, tools_dir};
use tamp_e2e::workspace_root;
use tamp_host::providers::{
    anthropic, openai, AnthropicProvider, ApiKey, ClientSettings, OpenAiProvider, Provider,
    ProviderErrorKind, StructuredMode,
};
use tamp_plugin_api::{FfiOption, LlmRequest};

const PRISM_PACKAGE: &str = "@stoplight/prism-cli@5.14.2";
const TEST_KEY: &str = "contract-test-key";

/// `target/tools/prism/node_modules/.bin/prism`, installed if absent.
fn prism_bin() -> PathBuf {
    let dir = tools_dir("prism");
    let bin = dir.join("node_modules/.bin/prism");
    install_once(&dir, &bin, PRISM_PACKAGE, || install_prism(&dir))
}

fn install_prism(dir: &Path) -> Result<(), String> {
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(dir)
        .arg(PRISM_PACKAGE)
        .status()
        .map_err(|e| {
            format!(
                "the contract tests need Node.js (20 or later) and npm to install Prism ({PRISM_PACKAGE}): \
                 running npm failed: {e}. Install them (e.g. `apt-get install nodejs npm`) and run the tests again."
            )
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "npm install --prefix {} {PRISM_PACKAGE} failed ({status})",
            dir.display()
        ))
    }
}

/// A running `prism mock`, stopped when dropped.
struct Prism {
    child: Child,
    url: String,
}

impl Prism {
    fn start(spec: &str) -> Prism {
        let bin = prism_bin();
        let spec = workspace_root().join("tests/fixtures/specs").join(spec);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(&bin)
            .args(["mock", "-h", "127.0.0.1", "-p", &port.to_string()])
            .arg(&spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        // Reads Prism's log to the end (so its pipe never fills) and says when it listens.
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("Prism is listening") {
                    let _ = ready_tx.send(Ok(()));
                }
                tail.push(line);
                if tail.len() > 20 {
                    tail.remove(0);
                }
            }
            let _ = ready_tx.send(Err(tail.join("\n")));
        });
        let mut prism = Prism {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        match ready_rx.recv_timeout(Duration::from_secs(180)) {
            Ok(Ok(())) => prism,
            Ok(Err(log)) => {
                let mut stderr = String::new();
                if let Some(mut e) = prism.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
                }
                panic!("prism mock {} exited:\n{log}\n{stderr}", spec.display())
            }
            Err(_) => panic!("prism mock {} did not start within 180 s", spec.display()),
        }
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One thread is enough: each test makes its calls one after another against Prism.
fn current_thread_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn settings(base_url: &str, structured: StructuredMode) -> ClientSettings {
    ClientSettings {
        model: "contract-model".into(),
        base_url: base_url.into(),
        key: Some(ApiKey::new(TEST_KEY)),
        structured,
        timeout: Duration::from_secs(30),
    }
}

fn plain_request() -> LlmRequest {
    let mut r = LlmRequest::new(
        "You summarize conversations.",
        "Summarize <content>user: hi\nassistant: hello</content>",
        256,
    );
    r.temperature = FfiOption::RSome(0.2);
    r
}

/// A request with the kind of schema plugins send (schemars output: `$schema`, limits,
/// nested arrays, an optional field).
fn structured_request() -> LlmRequest {
    let mut r = plain_request();
    r.response_schema_json = FfiOption::RSome(
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Summary",
            "type": "object",
            "properties": {
                "session_intent": {"type": "string", "maxLength": 2000},
                "files_modified": {"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 50},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1, "format": "double"}
            },
            "required": ["session_intent", "files_modified"]
        })
        .to_string()
        .into(),
    );
    r
}

/// Posts `body` with `headers` to `url`: `None` when Prism accepts it (2xx), else what it
/// said (for a 422, the spec violations it found in the request).
async fn request_violations(url: &str, headers: &[(&str, String)], body: &Value) -> Option<String> {
    let client = reqwest::Client::new();
    let mut request = client.post(url).json(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("Prism answers");
    let status = response.status();
    if status.is_success() {
        return None;
    }
    let violations = response
        .headers()
        .get("sl-violations")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let answer = response.text().await.unwrap_or_default();
    Some(format!(
        "HTTP {status}, sl-violations: {violations}\nanswer: {answer}\nrequest body: {body}"
    ))
}

/// Checks one kind of request both ways; the failures found, described.
async fn check(
    kind: &str,
    provider: &dyn Provider,
    body: Value,
    url: &str,
    headers: &[(&str, String)],
    request: &LlmRequest,
) -> Vec<String> {
    let mut failures = Vec::new();
    if let Some(v) = request_violations(url, headers, &body).await {
        failures.push(format!("{kind}: the body breaks the spec: {v}"));
    }
    match provider.complete(request).await {
        Ok(_) => {}
        // Prism answers with the spec's example, whose text is not the JSON a structured
        // request asked for: that is the example's doing, not a contract failure.
        Err(e)
            if e.kind == ProviderErrorKind::Malformed && request.response_schema_json.is_some() => {
        }
        Err(e) => failures.push(format!("{kind}: the call through the client failed: {e}")),
    }
    failures
}

#[test]
fn anthropic_requests_satisfy_the_official_spec() {
    let prism = Prism::start("anthropic-openapi.json");
    let url = format!("{}/v1/messages", prism.url);
    let headers = [
        ("x-api-key", TEST_KEY.to_string()),
        ("anthropic-version", anthropic::API_VERSION.to_string()),
    ];
    let rt = current_thread_rt();
    let mut failures = Vec::new();
    for (kind, mode, request) in [
        ("plain", StructuredMode::Auto, plain_request()),
        (
            "native structured",
            StructuredMode::Native,
            structured_request(),
        ),
        (
            "auto structured",
            StructuredMode::Auto,
            structured_request(),
        ),
        (
            "tool-forced structured",
            StructuredMode::Tool,
            structured_request(),
        ),
        (
            "prompt-JSON structured",
            StructuredMode::Prompt,
            structured_request(),
        ),
    ] {
        let client = AnthropicProvider::new(settings(&prism.url, mode)).unwrap();
        let body = client.request_body(&request).unwrap();
        failures.extend(rt.block_on(check(kind, &client, body, &url, &headers, &request)));
    }
    // The plain answer, read through the client, is the spec's own example.
    let client = AnthropicProvider::new(settings(&prism.url, StructuredMode::Auto)).unwrap();
    let answer = rt.block_on(client.complete(&plain_request())).unwrap();
    assert!(answer.model.as_str().starts_with("anthropic/"));
    assert!(answer.usage.input_tokens > 0, "{answer:?}");

    // Prism does refuse a request that breaks the spec, so the checks above can fail.
    let broken =
        json!({"model": "contract-model", "messages": [{"role": "user", "content": "hi"}]});
    let refused = rt.block_on(request_violations(&url, &headers, &broken));
    assert!(
        refused
            .as_deref()
            .is_some_and(|v| v.starts_with("HTTP 422") && v.contains("max_tokens")),
        "a body without max_tokens was accepted: {refused:?}"
    );
    // The mistake these checks exist for: an OpenAI-style field sent to Anthropic.
    let mut foreign = client.request_body(&plain_request()).unwrap();
    foreign["response_format"] = json!({"type": "json_object"});
    let refused = rt.block_on(request_violations(&url, &headers, &foreign));
    assert!(
        refused
            .as_deref()
            .is_some_and(|v| v.starts_with("HTTP 422")),
        "a field the Messages API does not have was accepted: {refused:?}"
    );
    let mut bad_tool = client.request_body(&plain_request()).unwrap();
    bad_tool["tools"] = json!([{"name": "not a valid name!", "input_schema": {"type": "object"}}]);
    let refused = rt.block_on(request_violations(&url, &headers, &bad_tool));
    assert!(
        refused.is_some(),
        "a tool name against the spec's pattern was accepted"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn openai_requests_satisfy_the_official_spec() {
    let prism = Prism::start("openai-openapi.json");
    // The spec's server is `https://api.openai.com/v1`; Prism serves its paths at the root, so
    // the root is the base URL here.
    let base_url = prism.url.clone();
    let url = format!("{base_url}/chat/completions");
    let headers = [("authorization", format!("Bearer {TEST_KEY}"))];
    let rt = current_thread_rt();
    let mut failures = Vec::new();
    for (kind, mode, request) in [
        ("plain", StructuredMode::Auto, plain_request()),
        (
            "json_schema structured",
            StructuredMode::Native,
            structured_request(),
        ),
        (
            "prompt-JSON fallback",
            StructuredMode::Prompt,
            structured_request(),
        ),
    ] {
        let client = OpenAiProvider::new(settings(&base_url, mode)).unwrap();
        let body = client.request_body(&request).unwrap();
        failures.extend(rt.block_on(check(kind, &client, body, &url, &headers, &request)));
    }
    // OpenAI's own endpoint gets `max_completion_tokens`; that body must suit the spec too.
    let public =
        OpenAiProvider::new(settings(openai::DEFAULT_BASE_URL, StructuredMode::Auto)).unwrap();
    for (kind, request) in [
        ("plain (api.openai.com)", plain_request()),
        ("json_schema (api.openai.com)", structured_request()),
    ] {
        let body = public.request_body(&request).unwrap();
        assert!(body.get("max_completion_tokens").is_some());
        if let Some(v) = rt.block_on(request_violations(&url, &headers, &body)) {
            failures.push(format!("{kind}: the body breaks the spec: {v}"));
        }
    }
    let native = OpenAiProvider::new(settings(&base_url, StructuredMode::Native)).unwrap();
    let mut nameless = native.request_body(&structured_request()).unwrap();
    nameless["response_format"]["json_schema"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let refused = rt.block_on(request_violations(&url, &headers, &nameless));
    assert!(
        refused
            .as_deref()
            .is_some_and(|v| v.starts_with("HTTP 422")),
        "a json_schema response_format without its name was accepted: {refused:?}"
    );
    let broken = json!({"model": "contract-model", "messages": "hi"});
    let refused = rt.block_on(request_violations(&url, &headers, &broken));
    assert!(
        refused.is_some(),
        "a body with messages as a string was accepted"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
