//! The real Anthropic and OpenAI-compatible clients against a local server speaking each API's
//! wire format (`tamp_e2e::mock_llm`, replies from `tests/fixtures/providers/`): through
//! chain files and real plugins (`tamp_custom_strategy` for text, `tamp_anchored_structured`
//! for structured answers) where a plugin is involved, and through `providers::from_config`
//! (the same provider a chain file builds, retries included) for the wire-level behaviours:
//! retries and their waits, timeouts, malformed bodies, authentication, quotas, the OpenAI
//! fallback to "reply with JSON only", and the key staying out of every log and report.

use std::path::Path;
use std::sync::{Arc, Once};
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::mock_llm::{MockLlm, Reply};
use tamp_e2e::rt;
use tamp_e2e::{corpus, fifty_message_conversation, plugin, scratch_dir, tamp_bin, write_chain};
use tamp_host::chain::{Chain, CompactOptions, Compacted, FileOverrides, StageStatus};
use tamp_host::config::LoadedChainFile;
use tamp_host::providers::{Provider, ProviderError, ProviderErrorKind};
use tamp_plugin_api::{FfiOption, LlmRequest};

/// The variable the chain files name, and the key in it.
const KEY_VAR: &str = "TAMP_E2E_PROVIDERS_KEY";
const KEY: &str = "sk-ant-e2e-0123456789abcdefSECRET";

/// Sets the key variable once, before any test does anything else (every test calls this
/// first), so no thread reads the environment while it changes.
fn with_key() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var(KEY_VAR, KEY));
}

/// A `[provider]` section for `kind` talking to `mock`, with short retry waits; `extra` is
/// more keys.
fn provider_section(kind: &str, mock: &MockLlm, extra: &str) -> String {
    let (base_url, key) = match kind {
        "anthropic" => (mock.url(), format!("api_key_env = \"{KEY_VAR}\"\n")),
        _ => (mock.openai_base_url(), String::new()),
    };
    format!(
        "[provider]\nkind = \"{kind}\"\nmodel = \"e2e-model\"\nbase_url = \"{base_url}\"\n{key}\
         retry_initial_ms = 20\nretry_max_ms = 200\n{extra}\n"
    )
}

/// The provider a chain file with this `[provider]` section builds.
fn provider_from(section: &str) -> Arc<dyn Provider> {
    let file = LoadedChainFile::parse(Path::new("chain.toml"), section.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    file.provider().unwrap_or_else(|e| panic!("{e}"))
}

fn call(
    provider: &Arc<dyn Provider>,
    request: &LlmRequest,
) -> Result<tamp_plugin_api::LlmResponse, ProviderError> {
    rt().block_on(provider.complete(request))
}

fn structured_request() -> LlmRequest {
    let mut r = LlmRequest::new(
        "You summarize.",
        "Summarize <content>the session</content>",
        500,
    )
    .with_label("e2e");
    r.response_schema_json = FfiOption::RSome(
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "session_intent": {"type": "string", "maxLength": 2000},
                "next_steps": {"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 50}
            },
            "required": ["session_intent", "next_steps"]
        })
        .to_string()
        .into(),
    );
    r
}

/// A chain file: `section`, a budget that makes the stage run, and one stage.
fn chain_file(dir: &Path, section: &str, plugin_lib: &str, config: &str) -> std::path::PathBuf {
    write_chain(
        dir,
        &format!(
            "[budget]\nmax_tokens = 1000000\nkeep_recent = 2\n\n{section}\n[store]\npath = \"store.sqlite3\"\n\n\
             [[stage]]\nname = \"stage\"\nplugin = \"{}\"\ntrigger = \"always\"\n[stage.config]\n{config}\n",
            plugin(plugin_lib).display()
        ),
    )
}

fn compact_with(chain_path: &Path, input: tamp_plugin_api::Conversation) -> Compacted {
    let chain =
        Chain::from_file(chain_path, FileOverrides::default()).unwrap_or_else(|e| panic!("{e}"));
    rt().block_on(chain.compact(input, &CompactOptions::default()))
        .expect("compacts")
}

fn text_of(out: &Compacted) -> String {
    serde_json::to_string(&out.conversation).unwrap()
}

// --- through the chain -------------------------------------------------------------------

#[test]
fn anthropic_text_answers_through_a_chain_file() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(Reply::fixture(200, "anthropic/message_text.json"));
    let dir = scratch_dir("prov-text");
    let path = chain_file(
        &dir,
        &provider_section("anthropic", &mock, ""),
        "tamp_custom_strategy",
        "keep_exchanges = 1\nsummary_tokens = 150",
    );
    let input = tamp_e2e::corpus_conversation("anthropic", "taubench_gpt4o_airline_task23_trial3");
    let out = compact_with(&path, input);
    let stage = &out.report.stages[0];
    assert_eq!(stage.status, StageStatus::Acted, "{}", stage.reason);
    assert!(stage.llm_calls >= 1);
    assert!(
        text_of(&out).contains("confirmed the flight details"),
        "the fixture's answer is in the summary"
    );
    let requests = mock.requests();
    assert_eq!(
        requests.len() as u32,
        stage.llm_calls,
        "one request per call, no retries"
    );
    // Usage from the fixture, every field, per call.
    let calls = u64::from(stage.llm_calls);
    assert_eq!(stage.usage.input_tokens, 2095 * calls);
    assert_eq!(stage.usage.output_tokens, 503 * calls);
    assert_eq!(stage.usage.cache_read_tokens, 1800 * calls);
    assert_eq!(stage.usage.cache_write_tokens, 120 * calls);
    for r in &requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/v1/messages")
        );
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body["model"], "e2e-model");
        assert_eq!(r.body["max_tokens"], 150);
        assert_eq!(r.body["messages"][0]["role"], "user");
        assert!(r.body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("<content>"));
        assert!(r.body.get("output_config").is_none() && r.body.get("tools").is_none());
    }
}

/// The schema the anchored-structured plugin asks for, as sent: every object closed, no
/// `$schema`, no length or count keywords anywhere, the plugin's five sections.
fn assert_sent_schema_suits_the_provider(schema: &Value) {
    fn walk(node: &Value, at: &str) {
        let Value::Object(map) = node else { return };
        for keyword in ["$schema", "maxLength", "maxItems", "minLength", "minItems"] {
            assert!(!map.contains_key(keyword), "{keyword} sent at {at}");
        }
        if map.get("type") == Some(&json!("object")) {
            assert_eq!(
                map.get("additionalProperties"),
                Some(&json!(false)),
                "open object at {at}"
            );
        }
        for (key, sub) in map {
            match key.as_str() {
                "properties" => {
                    for (name, prop) in sub.as_object().unwrap() {
                        walk(prop, &format!("{at}/{name}"));
                    }
                }
                "items" => walk(sub, &format!("{at}/items")),
                _ => {}
            }
        }
    }
    walk(schema, "");
    let mut keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "decisions_made",
            "files_modified",
            "next_steps",
            "open_questions",
            "session_intent"
        ]
    );
}

/// The ledger off: these tests check the wire of the whole five-list schema (the ledger's
/// narrower request is tested in `ledger::anchored_structured_asks_a_bounded_answer_...`).
const ANCHORED_CONFIG: &str = "chunk_tokens = 200000\nledger = { enabled = false }";

/// anchored-structured, through a chain file on `provider` (its section's `extra` lines) at
/// `mock`, compacting the fifty-message conversation.
fn anchored_through(provider: &str, mock: &MockLlm, extra: &str, dir: &str) -> Compacted {
    let path = chain_file(
        &scratch_dir(dir),
        &provider_section(provider, mock, extra),
        "tamp_anchored_structured",
        ANCHORED_CONFIG,
    );
    compact_with(&path, fifty_message_conversation())
}

#[test]
fn anthropic_tool_use_structured_answer_through_the_chain() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(Reply::fixture(200, "anthropic/message_tool_use.json"));
    let out = anchored_through(
        "anthropic",
        &mock,
        "structured_output = \"tool\"",
        "prov-tool",
    );
    let stage = &out.report.stages[0];
    assert_eq!(
        stage.status,
        StageStatus::Acted,
        "{}: {:?}",
        stage.reason,
        stage.error
    );
    let text = text_of(&out);
    assert_contains(&text, "Make the loader resolve paths from the config file");
    assert!(text.contains("Why does CI use another working directory?"));
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "record_answer"})
    );
    assert_eq!(body["tools"][0]["name"], "record_answer");
    assert_sent_schema_suits_the_provider(&body["tools"][0]["input_schema"]);
    assert!(body.get("output_config").is_none());
}

#[test]
fn anthropic_json_schema_answer_through_the_chain() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(Reply::fixture(200, "anthropic/message_json.json"));
    let out = anchored_through("anthropic", &mock, "", "prov-native");
    let stage = &out.report.stages[0];
    assert_eq!(
        stage.status,
        StageStatus::Acted,
        "{}: {:?}",
        stage.reason,
        stage.error
    );
    assert!(text_of(&out).contains("resolve paths from the config file's folder"));
    // Null cache fields count as 0.
    assert_eq!(stage.usage.input_tokens, 1500);
    assert_eq!(stage.usage.cache_read_tokens, 0);
    let body = &mock.requests()[0].body;
    assert_eq!(body["output_config"]["format"]["type"], "json_schema");
    assert_sent_schema_suits_the_provider(&body["output_config"]["format"]["schema"]);
    assert!(body.get("tools").is_none());
}

#[test]
fn openai_json_schema_answer_through_the_chain() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(Reply::fixture(200, "openai/chat_completion_json.json"));
    let out = anchored_through("openai", &mock, "", "prov-openai");
    let stage = &out.report.stages[0];
    assert_eq!(
        stage.status,
        StageStatus::Acted,
        "{}: {:?}",
        stage.reason,
        stage.error
    );
    assert!(text_of(&out).contains("Run the loader tests again on CI"));
    let r = &mock.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(
        r.header("authorization"),
        None,
        "no key configured, none sent"
    );
    assert!(
        r.body["max_tokens"].as_u64().is_some(),
        "max_tokens for a compatible server"
    );
    let format = &r.body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["strict"], true);
    let schema = &format["json_schema"]["schema"];
    assert_sent_schema_suits_the_provider(schema);
    // Every property required, in the order the plugin's schema lists them: as the summary
    // reads, intent first.
    assert_eq!(
        schema["required"],
        json!([
            "session_intent",
            "files_modified",
            "decisions_made",
            "open_questions",
            "next_steps"
        ])
    );
    let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect::<Vec<_>>()
    );
}

/// A structured answer cut at its output limit (`finish_reason: "length"`, the JSON unclosed)
/// is taken up to its last finished value; the schema check still asks for every key.
#[test]
fn an_openai_answer_cut_at_its_limit_keeps_what_it_finished() {
    with_key();
    let cut = |content: &str| {
        json!({
            "id": "chatcmpl-cut",
            "object": "chat.completion",
            "created": 1741569953,
            "model": "qwen2.5-coder",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "length"
            }],
            "usage": {"prompt_tokens": 1500, "completion_tokens": 300, "total_tokens": 1800}
        })
        .to_string()
    };
    let mock = MockLlm::start();
    mock.set_default(Reply::raw(
        200,
        &cut("{\"session_intent\": \"Fix the failing loader tests on CI.\", \"files_modified\": [], \
              \"decisions_made\": [], \"open_questions\": [], \"next_steps\": [\"Run the loader \
              tests again on CI\", \"Check the loader again\", \"Check the lo"),
    ));
    let out = anchored_through("openai", &mock, "", "prov-openai-cut");
    let stage = &out.report.stages[0];
    assert_eq!(stage.details["path"], "structured", "{:#}", stage.details);
    let text = out
        .conversation
        .messages
        .iter()
        .find(|m| m.summary_info().is_some())
        .expect("a summary")
        .joined_text();
    let steps: Vec<&str> = text.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(
        steps,
        [
            "- Run the loader tests again on CI",
            "- Check the loader again"
        ],
        "{text}"
    );

    // Cut before any list was finished: a required key is missing, so the prose fallback.
    let mock = MockLlm::start();
    mock.set_default(Reply::raw(
        200,
        &cut("{\"session_intent\": \"Fix the failing loader tests on CI.\", \"files_mod"),
    ));
    let out = anchored_through("openai", &mock, "", "prov-openai-cut-early");
    assert_ne!(out.report.stages[0].details["path"], "structured");
}

#[test]
fn a_401_reaches_the_report_verbatim_and_is_not_retried() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(Reply::fixture(401, "anthropic/error_authentication.json"));
    let out = anchored_through("anthropic", &mock, "max_retries = 3", "prov-401");
    let stage = &out.report.stages[0];
    // The plugin tries a structured summary, then prose, then falls back to its own.
    assert_eq!(stage.failed_llm_calls, 2, "{stage:?}");
    assert_eq!(stage.llm_calls, 2);
    let report = serde_json::to_string(&out.report).unwrap();
    assert_contains(&report, "HTTP 401 authentication_error: invalid x-api-key");
    assert_eq!(mock.requests().len(), 2, "a 401 is not retried");
}

// --- retries and errors, through the provider a chain file builds ---------------------------

#[test]
fn a_429_waits_as_long_as_retry_after_says() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(429, "anthropic/error_rate_limit.json").header("retry-after", "1"));
    mock.push(Reply::fixture(200, "anthropic/message_text.json"));
    let p = provider_from(&provider_section("anthropic", &mock, ""));
    let r = call(&p, &LlmRequest::new("", "hi", 10)).unwrap();
    assert_eq!(r.model.as_str(), "anthropic/claude-sonnet-4-5-20250929");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(950) && gap < Duration::from_secs(3),
        "waited {gap:?} for retry-after: 1"
    );
}

#[test]
fn retry_after_ms_is_honoured() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(429, "openai/error_rate_limit.json").header("retry-after-ms", "300"));
    mock.push(Reply::fixture(200, "openai/chat_completion.json"));
    let p = provider_from(&provider_section("openai", &mock, ""));
    let r = call(&p, &LlmRequest::new("", "hi", 10)).unwrap();
    // prompt_tokens counts the cached part: input is the rest.
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.cache_read_tokens,
            r.usage.output_tokens
        ),
        (876, 1024, 40)
    );
    assert_eq!(r.model.as_str(), "openai/gpt-4.1-2025-04-14");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(290) && gap < Duration::from_millis(900),
        "{gap:?}"
    );
}

#[test]
fn overloaded_529_then_success() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(529, "anthropic/error_overloaded.json"));
    mock.push(Reply::fixture(529, "anthropic/error_overloaded.json"));
    mock.push(Reply::fixture(200, "anthropic/message_text.json"));
    let p = provider_from(&provider_section("anthropic", &mock, ""));
    let r = call(&p, &LlmRequest::new("", "hi", 10)).unwrap();
    assert!(r.text.as_str().contains("confirmed the flight details"));
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    // Backoff from retry_initial_ms = 20 (less up to a quarter of jitter), doubling.
    assert!(requests[1].at - requests[0].at >= Duration::from_millis(15));
    assert!(requests[2].at - requests[1].at >= Duration::from_millis(30));
}

#[test]
fn server_error_500_then_success() {
    with_key();
    for (kind, error_fixture, ok_fixture) in [
        (
            "anthropic",
            "anthropic/error_api.json",
            "anthropic/message_text.json",
        ),
        (
            "openai",
            "anthropic/error_api.json",
            "openai/chat_completion.json",
        ),
    ] {
        let mock = MockLlm::start();
        mock.push(Reply::fixture(500, error_fixture));
        mock.push(Reply::raw(502, "<html>Bad Gateway</html>"));
        mock.push(Reply::fixture(200, ok_fixture));
        let p = provider_from(&provider_section(kind, &mock, ""));
        call(&p, &LlmRequest::new("", "hi", 10)).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(mock.requests().len(), 3, "{kind}");
    }
}

#[test]
fn retries_stop_at_max_retries_with_the_servers_last_words() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(Reply::fixture(529, "anthropic/error_overloaded.json"));
    let p = provider_from(&provider_section("anthropic", &mock, "max_retries = 2"));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Overloaded);
    assert_eq!(
        e.to_string(),
        "anthropic/e2e-model: overloaded: HTTP 529 overloaded_error: Overloaded"
    );
    assert_eq!(mock.requests().len(), 3, "one attempt and two retries");
}

#[test]
fn each_attempt_times_out_and_is_retried() {
    with_key();
    let mock = MockLlm::start();
    mock.set_default(
        Reply::fixture(200, "anthropic/message_text.json").delay(Duration::from_secs(3)),
    );
    let p = provider_from(&provider_section(
        "anthropic",
        &mock,
        "max_retries = 1\ntimeout_secs = 0.3",
    ));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Timeout, "{e}");
    assert!(
        e.to_string().starts_with("anthropic/e2e-model: timeout: "),
        "{e}"
    );
    assert_eq!(mock.requests().len(), 2);
}

#[test]
fn malformed_bodies_are_errors_naming_what_is_missing() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::raw(200, "<html>not json</html>"));
    mock.push(Reply::json(
        200,
        &json!({"id": "msg_1", "type": "message", "content": [{"type": "text", "text": "hi"}]}),
    ));
    mock.push(Reply::json(
        200,
        &json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": []}),
    ));
    let p = provider_from(&provider_section("anthropic", &mock, ""));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Malformed);
    assert!(
        e.to_string()
            .starts_with("anthropic/e2e-model: malformed: HTTP 200 answer is not JSON"),
        "{e}"
    );
    assert!(e.message.contains("<html>not json</html>"), "{e}");
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "anthropic/e2e-model: malformed: the answer has no `usage.input_tokens`"
    );
    let openai = provider_from(&provider_section("openai", &mock, ""));
    let e = call(&openai, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "openai/e2e-model: malformed: the answer has no `choices.0.message`"
    );
    assert_eq!(
        mock.requests().len(),
        3,
        "malformed answers are not retried"
    );
}

#[test]
fn an_answer_past_64_mib_is_not_read_further() {
    // A broken server streaming far more than any answer: tamp stops at its bound.
    with_key();
    let mock = MockLlm::start();
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(65 << 20));
    mock.push(Reply::raw(200, &huge));
    let p = provider_from(&provider_section("anthropic", &mock, ""));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Malformed, "{e}");
    assert!(e.message.contains("answer is larger than 64 MiB"), "{e}");
    assert_eq!(mock.requests().len(), 1, "not retried");
}

#[test]
fn authentication_and_invalid_requests_are_not_retried() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(401, "anthropic/error_authentication.json"));
    let p = provider_from(&provider_section("anthropic", &mock, ""));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Authentication);
    assert_eq!(
        e.message,
        "HTTP 401 authentication_error: invalid x-api-key"
    );
    // OpenAI quotes part of a wrong key back; it is redacted.
    mock.push(Reply::fixture(401, "openai/error_invalid_api_key.json"));
    let openai = provider_from(&provider_section(
        "openai",
        &mock,
        &format!("api_key_env = \"{KEY_VAR}\""),
    ));
    let e = call(&openai, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Authentication);
    assert!(
        e.message.starts_with(
            "HTTP 401 invalid_request_error: Incorrect API key provided: [redacted]. You can find"
        ),
        "{e}"
    );
    mock.push(Reply::json(400, &json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}})));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidRequest);
    assert_eq!(
        e.message,
        "HTTP 400 invalid_request_error: max_tokens: Field required"
    );
    assert_eq!(mock.requests().len(), 3);
}

#[test]
fn an_exhausted_quota_is_not_retried() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(429, "anthropic/error_spend_limit.json").header("retry-after", "1"));
    mock.push(Reply::fixture(429, "openai/error_insufficient_quota.json"));
    let p = provider_from(&provider_section("anthropic", &mock, ""));
    let e = call(&p, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::QuotaExhausted, "{e}");
    assert!(e.message.contains("spend limit"), "{e}");
    let openai = provider_from(&provider_section("openai", &mock, ""));
    let e = call(&openai, &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::QuotaExhausted, "{e}");
    assert!(
        e.message
            .starts_with("HTTP 429 insufficient_quota: You exceeded your current quota"),
        "{e}"
    );
    assert_eq!(mock.requests().len(), 2);
}

#[test]
fn connection_failures_are_retried_then_reported() {
    with_key();
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let section = format!(
        "[provider]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
         retry_initial_ms = 5\nretry_max_ms = 10\nmax_retries = 2\n"
    );
    let e = call(&provider_from(&section), &LlmRequest::new("", "hi", 10)).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Connection, "{e}");
    assert!(e.to_string().starts_with("openai/m: connection: "), "{e}");
}

#[test]
fn openai_server_without_response_format_falls_back_to_prompt_json() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(400, "openai/error_response_format.json"));
    mock.push(Reply::fixture(
        200,
        "openai/chat_completion_fenced_json.json",
    ));
    mock.push(Reply::fixture(
        200,
        "openai/chat_completion_fenced_json.json",
    ));
    let p = provider_from(&provider_section(
        "openai",
        &mock,
        "structured_output = \"auto\"",
    ));
    let r = call(&p, &structured_request()).unwrap();
    let answer: Value = serde_json::from_str(r.structured_json.as_ref().unwrap().as_str()).unwrap();
    assert_eq!(answer["next_steps"], json!(["Rerun CI"]));
    let r2 = call(&p, &structured_request()).unwrap();
    assert_eq!(r2.structured_json, r.structured_json);
    let requests = mock.requests();
    assert_eq!(
        requests.len(),
        3,
        "one rejected, its retry, then straight to prompt mode"
    );
    assert!(requests[0].body.get("response_format").is_some());
    for r in &requests[1..] {
        assert!(r.body.get("response_format").is_none(), "{}", r.body);
        let prompt = r.body["messages"][1]["content"].as_str().unwrap();
        assert!(
            prompt.starts_with("Summarize <content>the session</content>\n\nReply with JSON only"),
            "{prompt}"
        );
        assert!(
            prompt.contains("\"maxLength\": 2000"),
            "the prompt quotes the limits"
        );
    }
}

#[test]
fn native_mode_does_not_fall_back() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(400, "openai/error_response_format.json"));
    let p = provider_from(&provider_section(
        "openai",
        &mock,
        "structured_output = \"native\"",
    ));
    let e = call(&p, &structured_request()).unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidRequest);
    assert_eq!(
        e.message,
        "HTTP 400 invalid_request_error: Unsupported param: response_format of type json_schema"
    );
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn openai_sends_the_key_as_a_bearer_token() {
    with_key();
    let mock = MockLlm::start();
    mock.push(Reply::fixture(200, "openai/chat_completion.json"));
    let p = provider_from(&provider_section(
        "openai",
        &mock,
        &format!("api_key_env = \"{KEY_VAR}\""),
    ));
    call(&p, &LlmRequest::new("sys", "hi", 10)).unwrap();
    let r = &mock.requests()[0];
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        r.body["messages"],
        json!([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])
    );
}

#[test]
fn a_missing_key_variable_is_named_when_the_chain_is_built() {
    with_key();
    let text = "[provider]\nkind = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"TAMP_E2E_NO_SUCH_KEY_VAR\"\n";
    let file = LoadedChainFile::parse(Path::new("chain.toml"), text.into()).unwrap();
    let e = file.provider().err().expect("no key, no provider");
    assert_eq!(
        e.to_string(),
        "chain.toml:4: provider.api_key_env: the environment variable TAMP_E2E_NO_SUCH_KEY_VAR is not set"
    );
}

// --- the key stays secret ------------------------------------------------------------------

#[test]
fn the_key_appears_in_no_log_output_or_report() {
    with_key();
    let mock = MockLlm::start();
    // A server that echoes the key back in its error, the worst case.
    mock.set_default(Reply::json(
        401,
        &json!({"type": "error", "error": {"type": "authentication_error", "message": format!("invalid x-api-key {KEY}")}}),
    ));
    let dir = scratch_dir("prov-secret");
    let chain = chain_file(
        &dir,
        &provider_section("anthropic", &mock, ""),
        "tamp_custom_strategy",
        "keep_exchanges = 1",
    );
    let input = dir.join("conversation.json");
    std::fs::write(
        &input,
        corpus("anthropic", "taubench_gpt4o_airline_task23_trial3"),
    )
    .unwrap();
    let report = dir.join("report.json");
    let out = std::process::Command::new(tamp_bin())
        .args([
            "compact",
            input.to_str().unwrap(),
            "--config",
            chain.to_str().unwrap(),
            "--report",
            "--report-json",
        ])
        .arg(&report)
        .env("TAMP_LOG", "debug")
        .env(KEY_VAR, KEY)
        .current_dir(&dir)
        .output()
        .expect("tamp runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = std::fs::read_to_string(&report).expect("the report is written");
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("DEBUG"), "debug logging is on: {stderr}");
    for (what, text) in [
        ("stdout", &*stdout),
        ("stderr", &*stderr),
        ("report", report.as_str()),
    ] {
        assert!(!text.contains(KEY), "the key is in {what}");
        assert!(
            !text.contains("0123456789abcdefSECRET"),
            "part of the key is in {what}"
        );
    }
    assert!(
        report.contains("HTTP 401 authentication_error: invalid x-api-key [redacted]"),
        "the server's message reaches the report, key redacted: {report}"
    );
    let calls = serde_json::from_str::<Value>(&report).unwrap()["llm_calls"]
        .as_u64()
        .unwrap();
    assert!(calls >= 1);
    assert_eq!(mock.requests().len() as u64, calls, "no call retried");
}

// --- the documentation ---------------------------------------------------------------------

#[test]
fn docs_examples_are_valid_chain_files() {
    with_key();
    let path = tamp_e2e::workspace_root().join("docs/providers.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 4, "{} toml blocks", blocks.len());
    // Relative paths (`record`, `answers`) resolve in a scratch folder, as if each block were
    // a chain file there: the recording example writes the file the replay example reads.
    let path = tamp_e2e::scratch_dir("docs-examples").join("chain.toml");
    for block in blocks {
        let file = LoadedChainFile::parse(&path, block.to_string())
            .unwrap_or_else(|e| panic!("{e}\n{block}"));
        assert!(
            matches!(
                file.file.provider.kind.as_str(),
                "anthropic" | "openai" | "replay"
            ),
            "{block}"
        );
        // With the key variables pointed at a set variable, each builds its provider.
        let built = block
            .replace("\"ANTHROPIC_API_KEY\"", &format!("\"{KEY_VAR}\""))
            .replace("\"OPENAI_API_KEY\"", &format!("\"{KEY_VAR}\""));
        let file = LoadedChainFile::parse(&path, built).unwrap();
        file.provider().unwrap_or_else(|e| panic!("{e}\n{block}"));
    }
}

#[test]
fn retries_are_logged_at_warn_with_attempt_and_wait() {
    with_key();
    let mock = MockLlm::start();
    mock.push(
        Reply::fixture(529, "anthropic/error_overloaded.json").header("retry-after-ms", "50"),
    );
    mock.set_default(Reply::fixture(200, "anthropic/message_text.json"));
    let dir = scratch_dir("prov-warn");
    let chain = chain_file(
        &dir,
        &provider_section("anthropic", &mock, ""),
        "tamp_custom_strategy",
        "keep_exchanges = 1\nmax_concurrency = 1",
    );
    let input = dir.join("conversation.json");
    std::fs::write(
        &input,
        corpus("anthropic", "taubench_gpt4o_airline_task23_trial3"),
    )
    .unwrap();
    let out = std::process::Command::new(tamp_bin())
        .args([
            "compact",
            input.to_str().unwrap(),
            "--config",
            chain.to_str().unwrap(),
        ])
        .env("TAMP_LOG", "warn")
        .env(KEY_VAR, KEY)
        .current_dir(&dir)
        .output()
        .expect("tamp runs");
    let stderr = strip_ansi(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("retrying in"))
        .unwrap_or_else(|| panic!("no retry logged: {stderr}"));
    assert_contains(line, "WARN");
    assert!(
        line.contains("attempt=1") && line.contains("wait_ms=50"),
        "{line}"
    );
    assert_contains(line, "HTTP 529 overloaded_error: Overloaded");
    assert!(String::from_utf8_lossy(&out.stdout).contains("confirmed the flight details"));
}

/// `text` without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
