use super::*;
use crate::providers::wrap_content;
use std::sync::Arc;
use std::time::Instant;

fn req(prompt: &str) -> LlmRequest {
    LlmRequest::new("sys", prompt, 100)
}

fn temp_dir(name: &str) -> PathBuf {
    crate::scratch::dir(&format!("scripted-{name}"))
}

const EXAMPLE: &str = r#"{ "default": {"text": "summary"},
  "responses": [
{"match": "substring of the prompt", "text": "answer", "delay_ms": 200},
{"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 1000}},
{"text": "garbage { not json", "usage": {"input_tokens": 10, "output_tokens": 3}}
  ],
  "mode": "sequence" }"#;

#[test]
fn parses_the_documented_example() {
    let script = parse_script(EXAMPLE).unwrap();
    assert_eq!(script.mode, ScriptMode::Sequence);
    assert_eq!(script.responses.len(), 3);
    assert_eq!(script.responses[0].delay_ms, Some(200));
    let e = script.responses[1].error.as_ref().unwrap();
    assert_eq!(e.kind, ProviderErrorKind::RateLimited);
    assert_eq!(e.retry_after_ms, Some(1000));
    // The module docs' larger example parses too.
    let doc = r#"{
      "default": {"text": "summary"},
      "responses": [
        {"match": "substring of the prompt", "text": "answer", "delay_ms": 200},
        {"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 1000}},
        {"text": "garbage { not json", "usage": {"input_tokens": 10, "output_tokens": 3}},
        {"structured": {"facts": ["a", "b"]}},
        {"echo": true, "stop_reason": "max_tokens"}
      ],
      "mode": "sequence", "delay_ms": 0, "record_to": "requests.jsonl", "name": "scripted"
    }"#;
    let script = parse_script(doc).unwrap();
    assert_eq!(script.responses.len(), 5);
    // Round trip.
    let back: Script = serde_json::from_str(&serde_json::to_string(&script).unwrap()).unwrap();
    assert_eq!(back, script);
}

#[tokio::test]
async fn sequence_mode_then_default() {
    let mut script = parse_script(EXAMPLE).unwrap();
    script.responses[0].delay_ms = None;
    let p = ScriptedProvider::from_script(script).unwrap();
    let r = p
        .complete(&req("a substring of the prompt here"))
        .await
        .unwrap();
    assert_eq!(r.text.as_str(), "answer");
    assert_eq!(r.model.as_str(), "scripted");
    assert_eq!(r.stop_reason.as_str(), "end_turn");
    let e = p.complete(&req("two")).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::RateLimited);
    assert_eq!(e.retry_after, Some(Duration::from_millis(1000)));
    assert_eq!(e.message, "slow down");
    assert_eq!(e.provider, "scripted");
    assert!(e.is_retryable());
    let r = p.complete(&req("three")).await.unwrap();
    assert_eq!(r.text.as_str(), "garbage { not json");
    assert_eq!(r.usage.input_tokens, 10);
    assert_eq!(r.usage.output_tokens, 3);
    for _ in 0..3 {
        assert_eq!(
            p.complete(&req("more")).await.unwrap().text.as_str(),
            "summary"
        );
    }
    assert_eq!(p.request_count(), 6);
}

#[tokio::test]
async fn sequence_without_default_errors_when_exhausted() {
    let p = ScriptedProvider::sequence([ScriptedResponse::text("one")]);
    assert_eq!(p.complete(&req("x")).await.unwrap().text.as_str(), "one");
    let e = p.complete(&req("x")).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Other);
    assert!(e.message.contains("exhausted"), "{e}");
}

#[tokio::test]
async fn sequence_match_is_an_expectation() {
    let p = ScriptedProvider::sequence([ScriptedResponse::text("ok").matching("group 1")]);
    let e = p.complete(&req("group 2")).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidRequest);
    assert!(e.message.contains("group 1"), "{e}");
}

#[tokio::test]
async fn match_mode_and_default() {
    let p = ScriptedProvider::matching([
        ScriptedResponse::text("apples!").matching("apple"),
        ScriptedResponse::text("pears!").matching("pear"),
        ScriptedResponse::error(ProviderErrorKind::Overloaded, "busy").matching("SYSTEM-X"),
    ]);
    assert_eq!(
        p.complete(&req("an apple and a pear"))
            .await
            .unwrap()
            .text
            .as_str(),
        "apples!"
    );
    assert_eq!(
        p.complete(&req("a pear")).await.unwrap().text.as_str(),
        "pears!"
    );
    let e = p
        .complete(&LlmRequest::new("SYSTEM-X", "plum", 10))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Overloaded);
    let e = p.complete(&req("plum")).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Other);
    let p = p.with_default(ScriptedResponse::text("fallback {n}"));
    assert_eq!(
        p.complete(&req("plum")).await.unwrap().text.as_str(),
        "fallback 5"
    );
    // A response without `match` matches everything.
    let p = ScriptedProvider::matching([
        ScriptedResponse::text("specific").matching("zzz"),
        ScriptedResponse::text("catch-all"),
    ]);
    assert_eq!(
        p.complete(&req("abc")).await.unwrap().text.as_str(),
        "catch-all"
    );
}

#[tokio::test]
async fn structured_echo_placeholders_and_usage() {
    let p = ScriptedProvider::sequence([
        ScriptedResponse::structured(serde_json::json!({"facts": ["a"]})),
        ScriptedResponse::echo(),
        ScriptedResponse::text("n={n} chars={prompt_chars} label={label} {other}")
            .with_stop_reason("max_tokens"),
    ]);
    let r = p.complete(&req("x")).await.unwrap();
    assert_eq!(r.text.as_str(), r#"{"facts":["a"]}"#);
    assert_eq!(
        r.structured_json,
        FfiOption::RSome(r#"{"facts":["a"]}"#.into())
    );

    let material = "é".repeat(300);
    let prompt = format!("Summarize this.\n{}", wrap_content(&material));
    let r = p.complete(&req(&prompt)).await.unwrap();
    assert_eq!(r.text.as_str(), "é".repeat(200));
    assert_eq!(r.usage.output_tokens, 50);
    assert_eq!(r.usage.input_tokens, 1 + estimate_tokens(&prompt));

    let r = p.complete(&req("abcdef").with_label("g1")).await.unwrap();
    assert_eq!(r.text.as_str(), "n=3 chars=6 label=g1 {other}");
    assert_eq!(r.stop_reason.as_str(), "max_tokens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_is_honoured() {
    let p = ScriptedProvider::always("slow").with_delay(Duration::from_millis(150));
    let start = Instant::now();
    p.complete(&req("x")).await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(150));
    // A response's own delay wins over the script's.
    let p = ScriptedProvider::sequence([
        ScriptedResponse::text("fast").with_delay(Duration::from_millis(0))
    ])
    .with_delay(Duration::from_secs(10));
    let start = Instant::now();
    p.complete(&req("x")).await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    // Errors are delayed too.
    let p = ScriptedProvider::failing(ProviderErrorKind::Timeout, "late")
        .with_delay(Duration::from_millis(100));
    let start = Instant::now();
    let e = p.complete(&req("x")).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Timeout);
    assert!(start.elapsed() >= Duration::from_millis(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_delayed_requests() {
    let p = Arc::new(ScriptedProvider::always("done").with_delay(Duration::from_millis(200)));
    let requests: Vec<LlmRequest> = (0..10_000).map(|i| req(&format!("request {i}"))).collect();
    let start = Instant::now();
    let results = futures::future::join_all(requests.iter().map(|r| p.complete(r))).await;
    let elapsed = start.elapsed();
    assert!(results
        .iter()
        .all(|r| r.as_ref().unwrap().text.as_str() == "done"));
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    // 1,000 through spawned tasks, across threads.
    let start = Instant::now();
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move { p.complete(&req(&format!("spawned {i}"))).await })
        })
        .collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    assert_eq!(p.request_count(), 11_000);
}

#[tokio::test]
async fn records_in_memory_and_to_file() {
    let dir = temp_dir("record");
    let script_path = dir.join("script.json");
    std::fs::write(
        &script_path,
        r#"{"default": {"text": "ok"}, "record_to": "asked.jsonl"}"#,
    )
    .unwrap();
    let p = ScriptedProvider::from_file(&script_path).unwrap();
    let a = req("first").with_label("one");
    let mut b = req("second <content>x</content>");
    b.response_schema_json = FfiOption::RSome("{}".into());
    p.complete(&a).await.unwrap();
    // Recorded at the call, even before the future is awaited.
    let pending = p.complete(&b);
    assert_eq!(p.requests(), vec![a.clone(), b.clone()]);
    pending.await.unwrap();
    let lines: Vec<LlmRequest> = std::fs::read_to_string(dir.join("asked.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, vec![a.clone(), b.clone()]);

    let path = dir.join("builder.jsonl");
    let p = ScriptedProvider::always("ok")
        .with_record_path(&path)
        .unwrap();
    p.complete(&a).await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_script_file_names_file_line_and_field() {
    let dir = temp_dir("bad");
    let path = dir.join("bad.json");
    std::fs::write(
        &path,
        "{\n  \"responses\": [\n    {\"text\": \"a\"},\n    {\"error\": {\"kind\": \"rate_limit\"}}\n  ]\n}\n",
    )
    .unwrap();
    let e = ScriptedProvider::from_file(&path).unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("bad.json"), "{shown}");
    assert!(shown.contains("line 4"), "{shown}");
    assert!(shown.contains("responses[1].error.kind"), "{shown}");
    assert!(shown.contains("rate_limit"), "{shown}");
    assert_eq!(e.line, Some(4));
    assert_eq!(e.field.as_deref(), Some("responses[1].error.kind"));

    std::fs::write(&path, r#"{"responses": [{"txt": "a"}]}"#).unwrap();
    let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
    assert!(
        shown.contains("txt") && shown.contains("responses[0]"),
        "{shown}"
    );

    std::fs::write(
        &path,
        r#"{"responses": [{"text": "a", "error": {"kind": "server"}}]}"#,
    )
    .unwrap();
    let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
    assert!(
        shown.contains("bad.json") && shown.contains("responses[0]"),
        "{shown}"
    );

    std::fs::write(&path, r#"{"default": {"delay_ms": 5}}"#).unwrap();
    let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
    assert!(
        shown.contains("default") && shown.contains("needs one of"),
        "{shown}"
    );

    std::fs::write(&path, "{\"mode\": \"random\"}").unwrap();
    let shown = ScriptedProvider::from_file(&path).unwrap_err().to_string();
    assert!(
        shown.contains("mode") && shown.contains("random"),
        "{shown}"
    );

    std::fs::write(&path, "{\"default\": {\"text\": \"a\"}} trailing").unwrap();
    assert!(ScriptedProvider::from_file(&path).is_err());

    let missing = dir.join("missing.json");
    let shown = ScriptedProvider::from_file(&missing)
        .unwrap_err()
        .to_string();
    assert!(
        shown.contains("missing.json") && shown.contains("cannot read"),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_numbers_follow_call_order_under_concurrency() {
    let p = ScriptedProvider::sequence((0..200).map(|i| {
        ScriptedResponse::text(format!("r{i}")).with_delay(Duration::from_millis(200 - i))
    }));
    let requests: Vec<LlmRequest> = (0..200).map(|i| req(&format!("q{i}"))).collect();
    let results = futures::future::join_all(requests.iter().map(|r| p.complete(r))).await;
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap().text.as_str(), format!("r{i}"));
    }
    let prompts: Vec<String> = p.requests().iter().map(|r| r.prompt.to_string()).collect();
    assert_eq!(
        prompts,
        (0..200).map(|i| format!("q{i}")).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn name_and_model() {
    let p = ScriptedProvider::always("x").with_name("anthropic/fake");
    assert_eq!(p.name(), "anthropic/fake");
    let r = p.complete(&req("y")).await.unwrap();
    assert_eq!(r.model.as_str(), "anthropic/fake");
    let e = ScriptedProvider::failing(ProviderErrorKind::QuotaExhausted, "no credit")
        .with_name("n")
        .complete(&req("y"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "n: quota_exhausted: no credit");
    assert!(!e.is_retryable());
}
