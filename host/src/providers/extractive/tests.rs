use super::*;
use crate::providers::wrap_content;

pub(super) fn material() -> String {
    let mut s = String::new();
    s.push_str("user: The deploy script keeps failing on the staging cluster.\n");
    s.push_str("assistant: Let me look at the deploy configuration first.\n");
    s.push_str("assistant called read_file({\"path\": \"deploy/config/staging.yaml\"})\n");
    s.push_str("read_file returned: replicas: 3\n");
    for i in 0..40 {
        s.push_str(&format!(
            "The weather today is nice and sunny number {i}. Nothing else happened here.\n"
        ));
    }
    s.push_str("ERROR 2024-05-01 deploy failed: connection refused to db.internal port 5432\n");
    s.push_str("    at DeployRunner.connect(src/deploy/runner.py:88)\n");
    s.push_str("The fix was to raise max_connections to 250 in /etc/postgresql/postgresql.conf.\n");
    s.push_str("user: Great, the staging deploy works now.\n");
    s
}

fn request(prompt: &str, max_tokens: u32) -> LlmRequest {
    LlmRequest::new("You summarize.", prompt, max_tokens)
}

#[test]
fn deterministic() {
    let m = material();
    let a = summarize(&m, 800);
    for _ in 0..5 {
        assert_eq!(summarize(&m, 800), a);
    }
    let p = ExtractiveSummarizer::new();
    let r1 = p.answer(&request(&m, 200)).unwrap();
    let r2 = p.answer(&request(&m, 200)).unwrap();
    assert_eq!(r1, r2);
}

#[test]
fn header_and_mentions_present() {
    let s = summarize(&material(), 1200);
    let first = s.text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "[extractive summary: {} of {} sentences]",
            s.units_kept, s.units_total
        )
    );
    assert!(s.units_kept > 0 && s.units_kept < s.units_total);
    let last = s.text.lines().last().unwrap();
    assert!(last.starts_with("Mentions: "), "{last}");
}

#[test]
fn within_budget_for_many_budgets() {
    let m = material();
    for tokens in [0u32, 1, 5, 10, 11, 12, 20, 50, 100, 300, 1000, 100_000] {
        let r = ExtractiveSummarizer::new()
            .answer(&request(&m, tokens))
            .unwrap();
        let budget = tokens as usize * 4;
        let chars = r.text.chars().count();
        assert!(
            chars <= budget,
            "{tokens} tokens: {chars} chars > {budget}\n{}",
            r.text
        );
    }
    for budget in 0..400 {
        let s = summarize(&m, budget);
        assert!(
            s.text.chars().count() <= budget,
            "budget {budget}: {}",
            s.text
        );
    }
}

#[test]
fn big_budget_keeps_everything_once() {
    let m = material();
    let s = summarize(&m, 1_000_000);
    // The 40 weather lines differ only in a number: one of them is kept.
    assert_eq!(s.text.matches("The weather today").count(), 1, "{}", s.text);
    assert!(s.text.contains("max_connections"));
}

#[test]
fn keeps_paths_numbers_and_errors() {
    // Small budget: the answer still carries a path and a number of the material.
    let s = summarize(&material(), 600);
    assert!(
        s.text.contains("/etc/postgresql/postgresql.conf"),
        "{}",
        s.text
    );
    assert!(s.text.contains("5432"), "{}", s.text);
    // The error line and the fix outrank the weather.
    assert!(
        s.text.contains("deploy failed: connection refused"),
        "{}",
        s.text
    );
    assert!(s.text.contains("max_connections to 250"), "{}", s.text);

    // With room, the mentions line lists them all, paths first.
    let s = summarize(&material(), 1500);
    let mentions = s.text.lines().last().unwrap();
    for item in [
        "/etc/postgresql/postgresql.conf",
        "src/deploy/runner.py",
        "deploy/config/staging.yaml",
        "5432",
        "250",
        "max_connections",
        "DeployRunner.connect()",
        "read_file()",
    ] {
        assert!(mentions.contains(item), "{item}: {mentions}");
    }
    let items: Vec<&str> = mentions
        .trim_start_matches("Mentions: ")
        .split(", ")
        .collect();
    assert!(items[..3].iter().all(|i| i.contains('/')), "{mentions}");
    // Numbers of the error line rank before the weather's.
    let pos = |x: &str| items.iter().position(|i| *i == x).unwrap();
    assert!(pos("5432") < pos("17"), "{mentions}");
}

#[test]
fn the_user_and_the_assistants_statements_beat_tool_output() {
    let material = "user: The nightly report is wrong; do not touch the billing module.\n\
        assistant: Let me look at the report code.\n\
        assistant called bash({\"command\":\"cat -n src/report.py\"})\n\
        bash returned:   12\ttotal = round(sum(rows), 2) + adjustment_factor\n\
        \x20 13\treturn total_rows_formatted_for_output\n\
        \x20 14\tdef aggregate_rows(rows, adjustment_factor, currency_code):\n\
        assistant: I found the cause: the rounding happens before the adjustment, so I will fix the order.\n";
    let summary = summarize(material, 330);
    let text = summary.text;
    assert!(text.contains("do not touch the billing module"), "{text}");
    assert!(text.contains("I found the cause"), "{text}");
    assert!(!text.contains("14\tdef aggregate_rows"), "{text}");
    // The same material without its transcript prefixes is scored as before: no unit is
    // told apart by where it comes from.
    let (_, sources) = split_units_with_sources("plain text. More text.\n");
    assert!(sources.iter().all(|s| *s == Source::Unknown));
    assert_eq!(
        Source::of_line("bash returned: x"),
        Some(Source::ToolOutput)
    );
    assert_eq!(
        Source::of_line("assistant called read_file({})"),
        Some(Source::ToolCall)
    );
    assert_eq!(Source::of_line("the tool returned: x"), None);
}

#[test]
fn a_decision_taken_beats_plans_and_keeps_who_said_it() {
    let material = "assistant: I will look at the aggregation module next, since the totals are computed there.\n\
        assistant: I will need to check the fixtures as well because they may be stale.\n\
        assistant: The totals are off by a cent. Decision D-007: we decided to store amounts as integer cents.\n";
    let text = summarize(material, 150).text;
    assert!(
        text.contains("assistant: Decision D-007: we decided to store amounts"),
        "{text}"
    );
    assert!(
        !text.contains("fixtures") && !text.contains("aggregation"),
        "{text}"
    );
    // A sentence after the first of a turn is written with its speaker.
    let text = summarize(
        "user: Hello. Keep the CSV exporter as it is, please.\n",
        400,
    )
    .text;
    assert!(text.contains("\nuser: Keep the CSV exporter"), "{text}");
}

#[test]
fn repeats_differ_in_numbers_not_in_names() {
    let same = |a: &str, b: &str| normalized_hash("", a) == normalized_hash("", b);
    assert!(same("Attempt 1 failed.", "attempt 12 FAILED"));
    assert!(same("took 3.5s at 12:00", "took 4.25s at 13:01"));
    assert!(!same("Booked HAT268.", "Booked HAT270."));
    assert!(!same("Decision D-017: cache.", "Decision D-018: cache."));
    assert!(!same("call parse_v2()", "call parse_v3()"));
}

#[test]
fn a_summary_of_summaries_skips_their_headers_and_mention_lines() {
    let part = |n: usize| {
        format!(
            "[extractive summary: 3 of 40 sentences]\n\
             assistant: Decision D-0{n}: we decided to batch the queries of part {n}.\n\
             user: Part {n} is done when the tests pass.\n\
             Mentions: src/part_{n}/a.rs, src/part_{n}/b.rs, src/part_{n}/c.rs, parse_rows_{n}, \
             RowReader{n}, 2024-05-{n:02}"
        )
    };
    let material = format!("{}\n\n{}", part(1), part(2));
    let text = summarize(&material, 600).text;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("[extractive summary:"), "{text}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("[extractive"))
            .count(),
        1,
        "{text}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("Mentions:")).count(),
        1,
        "{text}"
    );
    assert!(text.contains("D-01:") && text.contains("D-02:"), "{text}");
    // The parts' mentions are still the summary's.
    let mentions = lines.last().unwrap();
    assert!(mentions.contains("src/part_1/a.rs"), "{text}");
}

#[test]
fn output_in_original_order() {
    let s = summarize(&material(), 2000);
    let body: Vec<&str> = s
        .text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("Mentions:"))
        .collect();
    let m = material();
    let positions: Vec<usize> = body.iter().map(|l| m.find(l).expect(l)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body:?}");
}

#[test]
fn empty_material_is_not_an_error() {
    let p = ExtractiveSummarizer::new();
    for prompt in [
        "",
        "   \n\n",
        "---\n***\n",
        "Summarize:\n<content>\n</content>",
    ] {
        let r = p.answer(&request(prompt, 100)).unwrap();
        assert_eq!(r.text.as_str(), NOTHING_TO_SUMMARIZE, "{prompt:?}");
        assert_eq!(r.stop_reason.as_str(), "end_turn");
    }
}

#[test]
fn unicode_does_not_panic_and_counts_chars() {
    let mut m = String::new();
    for i in 0..60 {
        m.push_str(&format!(
            "مرحبا بالعالم هذا نص تجريبي {i}. 🎉🚀 emoji line number {i} with café and ñ and e\u{301}\u{302} marks.\n"
        ));
        m.push_str("日本語の文です。これは二番目の文です！もう一つ？\n");
        m.push_str("👨‍👩‍👧‍👦 family 🏳️‍🌈 flags ש\u{5B8}לוֹם עולם src/ユニコード/ファイル.rs\n");
    }
    for budget in [0, 1, 5, 30, 41, 42, 43, 60, 100, 400, 1000, 5000] {
        let s = summarize(&m, budget);
        assert!(s.text.chars().count() <= budget, "{budget}: {}", s.text);
    }
    let s = summarize(&m, 400);
    assert!(
        s.text.len() > 400,
        "bytes {} should exceed the char budget",
        s.text.len()
    );
    assert!(s.units_kept > 0);
    // Cuts of a single long unit fall on char boundaries too.
    let long = "é".repeat(5000);
    for budget in [20, 50, 100, 700] {
        let s = summarize(&long, budget);
        assert!(s.text.chars().count() <= budget, "{budget}: {}", s.text);
    }
}

#[test]
fn only_last_content_section_is_used() {
    let prompt = format!(
        "Instructions mention pancakes.\n{}\nMore instructions.\n{}\nEnd.",
        wrap_content("The first section talks about bananas and src/banana.rs."),
        wrap_content("The second section talks about oranges and src/orange.rs.")
    );
    let r = ExtractiveSummarizer::new()
        .answer(&request(&prompt, 200))
        .unwrap();
    assert!(r.text.contains("oranges"), "{}", r.text);
    assert!(r.text.contains("src/orange.rs"));
    assert!(!r.text.contains("banana"), "{}", r.text);
    assert!(!r.text.contains("pancakes"), "{}", r.text);
    assert!(
        r.text.starts_with("[extractive summary: 1 of 1 sentence]"),
        "{}",
        r.text
    );
}

#[test]
fn an_agent_s_harness_text_is_not_material() {
    // Claude Code's reminder in the user's turn, as `render_messages` writes it: it would
    // score as what the user wrote.
    let prompt = wrap_content(
        "user: <system-reminder>\nThe TodoWrite tool hasn't been used recently. If you are \
         working on tasks that would benefit from tracking progress, consider using it.\n\
         </system-reminder>\nRename the report module to src/reports/totals.py.\n\
         assistant: I renamed it.",
    );
    let r = ExtractiveSummarizer::new()
        .answer(&request(&prompt, 200))
        .unwrap();
    assert!(r.text.contains("src/reports/totals.py"), "{}", r.text);
    assert!(!r.text.contains("TodoWrite"), "{}", r.text);
    assert!(!r.text.contains("system-reminder"), "{}", r.text);
}

const ANCHORED_SCHEMA: &str = r#"{"type": "object",
    "required": ["session_intent", "files_modified", "decisions_made", "open_questions",
                 "next_steps", "owners"],
    "properties": {
        "session_intent": {"type": "string", "maxLength": 200},
        "files_modified": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "decisions_made": {"type": "array", "items": {"type": "string", "maxLength": 40}},
        "open_questions": {"type": "array", "items": {"type": "string"}},
        "next_steps": {"type": "array", "items": {"type": "string"}},
        "owners": {"type": "array", "items": {"type": "string"}}
    }}"#;

fn structured_request(material: &str, schema: &str) -> LlmRequest {
    let prompt = format!("Fill the schema.\n{}", wrap_content(material));
    let mut req = request(&prompt, 500);
    req.response_schema_json = FfiOption::RSome(schema.into());
    req
}

#[test]
fn a_cut_decisions_list_keeps_the_decisions_stated_as_such() {
    let schema = r#"{"type": "object", "required": ["decisions"], "properties": {
        "decisions": {"type": "array", "maxItems": 1, "items": {"type": "string"}}}}"#;
    let material = "assistant: The test fails because the fixture is stale.\n\
        assistant: We decided to regenerate the fixtures.\n";
    let fill = fill_schema(schema, material, 400).unwrap();
    let decisions = fill.value["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1);
    assert!(
        decisions[0]
            .as_str()
            .unwrap()
            .contains("decided to regenerate"),
        "{decisions:?}"
    );
}

#[test]
fn a_decisions_list_past_max_items_packs_the_oldest_and_keeps_every_decision() {
    let schema = r#"{"type": "object", "required": ["decisions", "next_steps"], "properties": {
        "decisions": {"type": "array", "maxItems": 3,
                      "items": {"type": "string", "maxLength": 120}},
        "next_steps": {"type": "array", "items": {"type": "string"}}}}"#;
    let mut material = String::new();
    for n in 1..=7 {
        material.push_str(&format!("assistant: Decision {n}: we will pin step {n}.\n"));
    }
    material.push_str("assistant: Next I will rerun the pipeline.\n");
    let fill = fill_schema(schema, &material, 4_000).unwrap();
    let decisions: Vec<&str> = fill.value["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    let all = decisions.join("\n");
    for n in 1..=7 {
        assert!(
            all.contains(&format!("Decision {n}: we will pin step {n}.")),
            "{all}"
        );
    }
    assert_eq!(decisions[2], "Decision 7: we will pin step 7.");
    // A decision stated as such is not a next step as well.
    assert_eq!(
        fill.value["next_steps"],
        serde_json::json!(["Next I will rerun the pipeline."])
    );
}

#[test]
fn with_no_step_said_as_such_the_next_step_is_where_the_work_stood() {
    let schema = r#"{"type": "object", "required": ["decisions", "next_steps"], "properties": {
        "decisions": {"type": "array", "items": {"type": "string"}},
        "next_steps": {"type": "array", "items": {"type": "string"}}}}"#;
    let material = "user: The totals are wrong.\n\
        assistant: Decision 1: we will round half-even because the ledger does.\n\
        read_file returned: totals = sum(rows)\n\
        assistant: The report sums the rows before rounding them.\n\
        assistant: Decision 2: we chose integer cents.\n";
    let fill = fill_schema(schema, material, 4_000).unwrap();
    // Not a decision repeated, not a tool's output: the last statement that is neither.
    assert_eq!(
        fill.value["next_steps"],
        serde_json::json!(["The report sums the rows before rounding them."])
    );
}

#[test]
fn lists_and_the_intent_come_from_statements_not_tool_output() {
    let schema = r#"{"type": "object", "properties": {
        "session_intent": {"type": "string", "maxLength": 2000},
        "decisions_made": {"type": "array", "items": {"type": "string"}},
        "files_modified": {"type": "array", "items": {"type": "string"}}}}"#;
    let material = "user: Fix the loader. It crashes on empty files. Keep the API. Hurry.\n\
        assistant called read_file({\"path\": \"/usr/lib/python3/site-packages/yaml/a.py\"})\n\
        read_file returned: # we decided to skip this because the spec says so\n\
        assistant: The loader fails because the file is empty.\n\
        assistant: I will guard loader.py in src/app/loader.py because empty files are valid.\n";
    let fill = fill_schema(schema, material, 4_000).unwrap();
    // A reason without a commitment is a finding; a tool's output decides nothing.
    assert_eq!(
        fill.value["decisions_made"],
        serde_json::json!([
            "I will guard loader.py in src/app/loader.py because empty files are valid."
        ])
    );
    // Installed code and a shorter form of a listed path are not files of the session.
    assert_eq!(
        fill.value["files_modified"],
        serde_json::json!(["src/app/loader.py"])
    );
    // An aim: a few of the user's sentences.
    let intent = fill.value["session_intent"].as_str().unwrap();
    assert!(intent.starts_with("Fix the loader."), "{intent}");
    assert_eq!(intent.matches(". ").count() + 1, 3, "{intent}");
    assert!(!intent.contains("decided"), "{intent}");
}

#[test]
fn a_string_is_picked_by_where_its_sentences_come_from() {
    // The tool's output repeats the terms of the span: scored without its source it wins.
    let schema = r#"{"type": "object", "properties": {
        "session_intent": {"type": "string", "maxLength": 80}}}"#;
    let material = "tool returned: report_totals 1204.50 1204.49 account 7731 totals report\n\
        user: Fix the wrong report totals.\n";
    let fill = fill_schema(schema, material, 400).unwrap();
    let intent = fill.value["session_intent"].as_str().unwrap();
    assert_eq!(intent, "Fix the wrong report totals.");
}

#[test]
fn schema_is_filled_from_the_material_only() {
    let material = "user: Please fix the flaky deploy in deploy/run.sh and src/app/main.py.\n\
        assistant: We decided to pin the image because latest broke the build.\n\
        assistant: I edited deploy/run.sh and config/app.toml.\n\
        user: Should we also pin the base image?\n\
        assistant: Next I will rerun the pipeline.\n";
    let r = ExtractiveSummarizer::new()
        .answer(&structured_request(material, ANCHORED_SCHEMA))
        .unwrap();
    assert!(
        r.text.starts_with("[extractive structured fill: 5 of 6"),
        "{}",
        r.text
    );
    let FfiOption::RSome(json) = &r.structured_json else {
        panic!("no structured answer")
    };
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let intent = v["session_intent"].as_str().unwrap();
    assert!(
        !intent.is_empty() && intent.chars().count() <= 200,
        "{intent}"
    );
    assert!(
        material.contains(intent.split(". ").next().unwrap()),
        "{intent}"
    );
    // maxItems 2 and duplicates removed.
    assert_eq!(
        v["files_modified"],
        serde_json::json!(["deploy/run.sh", "src/app/main.py"])
    );
    let decision = v["decisions_made"][0].as_str().unwrap();
    assert_eq!(decision.chars().count(), 40);
    assert!(decision.starts_with("We decided to pin the image") && decision.ends_with('…'));
    assert_eq!(
        v["open_questions"],
        serde_json::json!(["Should we also pin the base image?"])
    );
    assert_eq!(
        v["next_steps"],
        serde_json::json!(["Next I will rerun the pipeline."])
    );
    // Nothing in the material says who owns what: an empty list, never a guess.
    assert_eq!(v["owners"], serde_json::json!([]));
}

#[test]
fn tags_escapes_and_urls_are_not_files() {
    for not_a_file in ["/error", "e:\\n", "https://example.com/a/b.html"] {
        assert!(!looks_like_a_file(not_a_file), "{not_a_file}");
    }
    for file in [
        "/etc/hosts",
        "/setup.py",
        "src/a.rs",
        "C:\\work\\main.rs",
        "Cargo.toml",
    ] {
        assert!(looks_like_a_file(file), "{file}");
    }
}

#[test]
fn lists_stay_empty_when_nothing_fits() {
    let r = ExtractiveSummarizer::new()
        .answer(&structured_request(
            "user: The sky is blue today.\n",
            ANCHORED_SCHEMA,
        ))
        .unwrap();
    let FfiOption::RSome(json) = &r.structured_json else {
        panic!("no structured answer")
    };
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["session_intent"], "The sky is blue today.");
    for list in [
        "files_modified",
        "decisions_made",
        "open_questions",
        "next_steps",
    ] {
        assert_eq!(v[list], serde_json::json!([]), "{list}");
    }
}

#[test]
fn unfillable_schemas_are_refused() {
    for schema in [
        r#"{"type":"object"}"#,
        r#"{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}"#,
        "not json",
    ] {
        let err = ExtractiveSummarizer::new()
            .answer(&structured_request("hello world", schema))
            .unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::InvalidRequest);
        assert_eq!(err.provider, "extractive");
        assert!(err.message.contains("cannot fill"), "{err}");
    }
    // An optional property of another type is left out rather than refused.
    let schema = r#"{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}}}"#;
    let r = ExtractiveSummarizer::new()
        .answer(&structured_request("Hello world.", schema))
        .unwrap();
    assert_eq!(
        r.structured_json,
        FfiOption::RSome(r#"{"s":"Hello world."}"#.into())
    );
}

#[test]
fn usage_and_metadata() {
    let prompt = "x".repeat(400);
    let r = ExtractiveSummarizer::new()
        .answer(&LlmRequest::new("abcd", prompt, 100))
        .unwrap();
    assert_eq!(r.usage.input_tokens, 101);
    assert_eq!(r.usage.output_tokens, estimate_tokens(&r.text));
    assert_eq!(r.model.as_str(), "extractive");
    assert_eq!(r.stop_reason.as_str(), "end_turn");
    assert!(matches!(r.structured_json, FfiOption::RNone));
}

#[test]
fn code_is_kept_whole_when_splitting() {
    let units =
        split_units("```\nfn main() { println!(\"Hi. There.\"); }\n```\n    let x = 1. Also y;\n");
    assert_eq!(
        units,
        [
            "fn main() { println!(\"Hi. There.\"); }",
            "let x = 1. Also y;"
        ]
    );
}

#[test]
fn long_units_are_cut() {
    let line = "word ".repeat(1000);
    let units = split_units(&line);
    assert!(units.len() >= 8);
    assert!(units.iter().all(|u| u.chars().count() <= MAX_UNIT_CHARS));
    let no_space = "x".repeat(1500);
    let units = split_units(&no_space);
    assert_eq!(
        units.iter().map(|u| u.len()).collect::<Vec<_>>(),
        [600, 600, 300]
    );
}

#[test]
fn mention_detection() {
    let mut m = Mentions::default();
    m.scan(
        "see src/foo/bar.py:12:3, Runner.run(lib/x.py:88) open(\"data/in.csv\") --config=/etc/x.toml /etc/hosts and Cargo.toml (or ./run.sh) at https://x.io/a?b=1 \
         or C:\\Users\\me\\file.txt; and/or 3/4 e.g. v1.2.3 call foo.bar(x) HashMap std::mem::take \
         parse_config MAX_LEN plain Word took 200ms 3.14 7 2nd 50% 0x1f utf8",
        0,
    );
    let got = m.ordered(&[1.0]);
    assert_eq!(
        got,
        [
            "src/foo/bar.py",
            "lib/x.py",
            "data/in.csv",
            "/etc/x.toml",
            "/etc/hosts",
            "Cargo.toml",
            "./run.sh",
            "https://x.io/a?b=1",
            "C:\\Users\\me\\file.txt",
            "Runner.run()",
            "open()",
            "foo.bar()",
            "HashMap",
            "std::mem::take",
            "parse_config",
            "MAX_LEN",
            "200ms",
            "3.14",
            "50%",
        ]
    );
}

#[test]
fn mentions_line_cuts_whole_items() {
    let items: Vec<String> = ["src/a.rs", "src/b.rs", "foo_bar"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        mentions_line(&items, 1000).unwrap(),
        "Mentions: src/a.rs, src/b.rs, foo_bar"
    );
    assert_eq!(
        mentions_line(&items, 31).unwrap(),
        "Mentions: src/a.rs, src/b.rs, …"
    );
    assert_eq!(mentions_line(&items, 25).unwrap(), "Mentions: src/a.rs, …");
    assert_eq!(mentions_line(&items, 15), None);
    assert_eq!(mentions_line(&[], 100).unwrap(), "Mentions: none");
    assert_eq!(mentions_line(&[], 5), None);
}

#[test]
fn large_input_is_fast() {
    const WORDS: [&str; 24] = [
        "cache", "parser", "socket", "thread", "buffer", "config", "request", "response", "worker",
        "queue", "token", "stream", "index", "schema", "record", "session", "client", "server",
        "bucket", "shard", "lease", "commit", "replica", "ledger",
    ];
    let mut m = String::new();
    let mut i = 0u64;
    while m.len() < 200_000 {
        i += 1;
        let x = i.wrapping_mul(2654435761);
        let w = |k: u64| WORDS[((x >> (k * 5)) % 24) as usize];
        m.push_str(&format!(
            "Step {i}: the {} {} handled the {} {} for {} in src/{}/{}.rs with status {}. ",
            w(1),
            w(2),
            w(3),
            w(4),
            w(5),
            w(6),
            w(7),
            if matches!(x % 17, 0) {
                "error: timeout"
            } else {
                "ok"
            }
        ));
        if matches!(i % 5, 0) {
            m.push('\n');
        }
    }
    let start = std::time::Instant::now();
    let s = summarize(&m, 4_000);
    let small = start.elapsed();
    let start = std::time::Instant::now();
    let all = summarize(&m, 1_000_000);
    let big = start.elapsed();
    assert!(s.text.chars().count() <= 4_000);
    assert!(all.units_kept > 100);
    // Loose bounds so that debug builds on slow machines pass; release takes a few ms.
    assert!(small.as_millis() < 2_000, "{small:?}");
    assert!(big.as_millis() < 2_000, "{big:?}");
}

#[tokio::test]
async fn provider_trait() {
    let p = ExtractiveSummarizer::new();
    assert_eq!(p.name(), "extractive");
    let req = request(&wrap_content(&material()), 150);
    let r = p.complete(&req).await.unwrap();
    assert!(r.text.starts_with("[extractive summary: "));
    assert!(r.text.chars().count() <= 600);
}
