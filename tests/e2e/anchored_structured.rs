//! The anchored-structured plugin, built as a `.so`, loaded by the real loader and run through
//! the real chain: with the scripted provider (structured answers, invalid and incomplete
//! answers, errors), with the offline extractive provider (its structured fill), and on real
//! corpus conversations in both wire formats.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::chain_run::{compact, stage};
use tamp_e2e::rt;
use tamp_e2e::{assert_wire_round_trip, corpus, corpus_names, plugin, without_ledger, StageChain};
use tamp_host::chain::{Chain, CompactOptions, Compacted, StageStatus};
use tamp_host::loader::load_plugin;
use tamp_host::providers::{
    ExtractiveSummarizer, Provider, ProviderErrorKind, ScriptedProvider, ScriptedResponse,
};
use tamp_host::wire;
use tamp_plugin_api::{
    ContentBlock, Conversation, FfiOption, Message, Role, SummaryStatus, ToolResultPart,
};

const NAME: &str = "anchored-structured";

/// What the prompts of each kind of call contain (the scripted provider matches on it).
const STRUCTURED_CALL: &str = "Write the anchored summary";
const PROSE_CALL: &str = "Summarize the agent session above";
const PROSE_OF_CHUNKS_CALL: &str = "Summarize the summaries above";
const CHUNK_CALL: &str = "Summarize the part above";

fn stage_chain(config: Value, provider: Arc<dyn Provider>) -> Chain {
    chain_with_ledger(without_ledger(config), provider)
}

/// `stage_chain` with the ledger as `config` sets it (on unless it says otherwise).
fn chain_with_ledger(config: Value, provider: Arc<dyn Provider>) -> Chain {
    StageChain::new("tamp_anchored_structured", config, provider)
        .llm_concurrency(64)
        .timeout(Duration::from_secs(60))
        .build()
}

/// `compacted` grown by `topic`'s session (without its system prompt) before its last two
/// messages, so the next compaction meets the summary in it.
fn grown_by(compacted: Conversation, topic: &str) -> Conversation {
    let mut messages: Vec<Message> = compacted.messages.into();
    let tail = messages.split_off(messages.len() - 2);
    messages.extend(session(topic).messages.into_iter().skip(1));
    messages.extend(tail);
    Conversation::new(messages)
}

/// A coding session: a request, tool exchanges touching files, a decision, a question, a
/// plan; then a protected two-message tail.
fn session(topic: &str) -> Conversation {
    let mut messages = vec![Message::text(Role::System, "You are a coding agent.")];
    messages.push(Message::text(
        Role::User,
        format!("The {topic} tests fail on CI; please find out why and fix them."),
    ));
    for (i, path) in ["src/config/loader.rs", "tests/loader_test.rs"]
        .iter()
        .enumerate()
    {
        messages.extend(tamp_e2e::tool_round_trip(
            &format!("call_{topic}_{i}"),
            "read_file",
            &json!({ "path": path }).to_string(),
            // Long enough that the span after the task outweighs a no-LLM summary.
            &format!(
                "// {path}\nfn load() {{ /* {} lines of code */ }}\n{}",
                40 + i,
                "// configuration loading, validation and defaults\n".repeat(4)
            ),
        ));
    }
    messages.push(Message::text(
        Role::Assistant,
        "We decided to apply defaults before validation because the optional table may be \
         missing. I edited src/config/loader.rs accordingly. Should the ini format get the same \
         fix? Next I will add a regression test.",
    ));
    messages.push(Message::text(Role::User, "Sounds good, go on."));
    messages.push(Message::text(Role::Assistant, "Working on it."));
    Conversation::new(messages)
}

fn anchored(intent: &str, files: &[&str], next: &[&str]) -> Value {
    json!({
        "session_intent": intent,
        "files_modified": files,
        "decisions_made": ["Decision: defaults before validation — Reason: optional table may be missing"],
        "open_questions": ["Should the ini format get the same fix?"],
        "next_steps": next,
    })
}

/// A structured answer as the model gives it with the ledger on: the ledger holds the files and
/// decisions, so the schema asks for the intent and the two lists only.
fn ledger_answer(intent: &str, questions: &[&str], next: &[&str]) -> Value {
    json!({
        "session_intent": intent,
        "open_questions": questions,
        "next_steps": next,
    })
}

fn summary_of(out: &Compacted) -> &Message {
    out.conversation
        .messages
        .iter()
        .find(|m| {
            m.summary_info()
                .is_some_and(|s| s.strategy.as_str() == NAME)
        })
        .expect("an anchored summary")
}

fn page_metadata(chain: &Chain, out: &Compacted) -> Value {
    let page_ref = summary_of(out).summary_info().unwrap().page_ref.to_string();
    let page = rt().block_on(chain.store().get_page(&page_ref)).unwrap();
    serde_json::from_str(page.page.metadata_json.as_str()).unwrap()
}

/// Checks what every acting run must hold: one summary with its page, holding exactly the
/// messages removed, and the rest untouched.
fn check_replacement(chain: &Chain, input: &Conversation, out: &Compacted) {
    let run = stage(out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    let removed = run.messages_removed as usize;
    assert_eq!(
        out.conversation.messages.len(),
        input.messages.len() - removed + 1
    );
    // The system prompt and the task stay first; the summary follows them.
    let head = tamp_plugin_api::sdk::protected_head(&input.messages);
    assert_eq!(out.conversation.messages[..head], input.messages[..head]);
    let summary = &out.conversation.messages[head];
    let info = summary
        .summary_info()
        .expect("summary after the system prompt and the task");
    assert_eq!(info.status, SummaryStatus::Final);
    let page = rt()
        .block_on(chain.store().get_page(&info.page_ref))
        .unwrap();
    // A summary among them is archived without the MAC it travels with.
    let mut archived = input.messages[head..head + removed].to_vec();
    tamp_host::summary_mac::strip(&mut archived);
    assert_eq!(page.page.messages.as_slice(), &archived[..]);
    assert_eq!(
        out.conversation.messages[head + 1..],
        input.messages[head + removed..]
    );
    assert!(summary.joined_text().starts_with("# Anchored summary"));
    // The page is the summary's ref (the host archives it): the text points there.
    assert!(summary
        .joined_text()
        .contains("are in the page this summary refers to"));
}

#[test]
fn structured_answer_is_rendered_and_kept_in_the_page() {
    let answer = anchored(
        "Fix the failing loader tests.",
        &["src/config/loader.rs"],
        &["Add a regression test."],
    );
    let provider = Arc::new(ScriptedProvider::sequence([ScriptedResponse::structured(
        answer.clone(),
    )]));
    let chain = stage_chain(json!({}), provider.clone());
    let input = session("loader");
    let out = compact(&chain, &input);
    check_replacement(&chain, &input, &out);
    let run = stage(&out);
    assert_eq!(run.details["path"], "structured");
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);

    // One structured call, carrying the plugin's schema, which the host validated against.
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let FfiOption::RSome(schema) = &requests[0].response_schema_json else {
        panic!("no schema in the request")
    };
    let schema: Value = serde_json::from_str(schema).unwrap();
    assert_eq!(schema["required"].as_array().unwrap().len(), 5);
    assert!(requests[0]
        .prompt
        .contains("An empty list is the right answer"));
    assert!(requests[0].prompt.contains("Never invent"));

    let text = summary_of(&out).joined_text();
    assert_contains(&text, "## Session intent\nFix the failing loader tests.");
    assert_contains(&text, "## Files modified\n- src/config/loader.rs\n");
    assert_contains(&text, "## Decisions made\n- Decision: defaults");
    assert_contains(&text, "## Open questions\n- Should the ini");
    assert!(
        text.ends_with("## Next steps\n- Add a regression test."),
        "{text}"
    );
    // The JSON reads back section by section from the page.
    let metadata = page_metadata(&chain, &out);
    assert_eq!(metadata["anchored_summary"], answer);
    assert_eq!(metadata["path"], "structured");
}

#[test]
fn long_tool_output_and_narration_are_shown_by_head_and_tail_and_kept_whole_in_the_page() {
    // A small local model's time is mostly reading, and tool output and the agent's own
    // narration are most of what an agent session holds: the model is shown how each starts
    // and how it ends; the page keeps them whole and the ledger quotes the messages themselves.
    let mut input = session("loader");
    let middle = "    at frame in the middle of the trace\n".repeat(60);
    let output = format!("Running 12 tests\n{middle}test result: 3 failed; 9 passed");
    let Some(ContentBlock::ToolResult { content, .. }) =
        input.messages[3].content.iter_mut().next()
    else {
        panic!("message 3 is the first tool result")
    };
    *content = vec![ToolResultPart::Text {
        text: output.clone().into(),
    }]
    .into();
    let decision = "We decided to apply defaults before validation because the optional table \
                    may be missing.";
    let narration = format!(
        "{decision} {}Next I will add a regression test.",
        "I read the loader and its tests once more, line by line. ".repeat(40)
    );
    assert_eq!(input.messages[6].role, Role::Assistant);
    input.messages[6] = Message::text(Role::Assistant, narration.as_str());
    let answer = anchored("Fix the loader tests.", &[], &["Add a regression test."]);
    for (config, whole) in [
        (json!({}), false),
        (json!({"max_tool_chars": 0, "max_assistant_chars": 0}), true),
    ] {
        let provider = Arc::new(ScriptedProvider::sequence([ScriptedResponse::structured(
            answer.clone(),
        )]));
        let chain = chain_with_ledger(config.clone(), provider.clone());
        let out = compact(&chain, &input);
        check_replacement(&chain, &input, &out);
        let prompt = provider.requests()[0].prompt.to_string();
        assert_eq!(prompt.contains(&output), whole, "{config}: {prompt}");
        assert_eq!(prompt.contains(&narration), whole, "{config}: {prompt}");
        for kept in [
            "read_file returned: Running 12 tests",
            "test result: 3 failed; 9 passed",
            &format!("assistant: {decision}"),
            "Next I will add a regression test.",
        ] {
            assert!(prompt.contains(kept), "{config}: {kept:?} in {prompt}");
        }
        if !whole {
            for (text, shown) in [(&output, 200), (&narration, 1_000)] {
                let cut = text.chars().count() - shown;
                assert_contains(&prompt, &format!("[…{cut} characters…]"));
            }
            assert!(
                prompt.len() < output.len() + narration.len(),
                "{} characters",
                prompt.len()
            );
        }
        // The ledger quotes the decision from the message, cut or not.
        assert!(
            summary_of(&out).joined_text().contains(decision),
            "{config}"
        );
        // The page holds both whole either way (check_replacement compared it).
    }
}

#[test]
fn empty_sections_are_omitted() {
    let provider = Arc::new(ScriptedProvider::sequence([ScriptedResponse::structured(
        json!({
            "session_intent": "Fix the loader.",
            "files_modified": [],
            "decisions_made": [],
            "open_questions": [],
            "next_steps": ["Run the suite."],
        }),
    )]));
    let chain = stage_chain(json!({}), provider);
    let out = compact(&chain, &session("loader"));
    let text = summary_of(&out).joined_text();
    assert!(
        !text.contains("## Files") && !text.contains("## Decisions"),
        "{text}"
    );
    assert!(!text.contains("## Open questions"), "{text}");
    assert_contains(&text, "## Next steps\n- Run the suite.");
}

#[test]
fn incomplete_answer_falls_back_to_prose() {
    let incomplete = anchored("Fix the loader.", &["src/config/loader.rs"], &[]);
    let provider = Arc::new(ScriptedProvider::sequence([
        ScriptedResponse::structured(incomplete),
        ScriptedResponse::text("The agent fixed the loader defaults.").matching(PROSE_CALL),
    ]));
    let chain = stage_chain(json!({}), provider.clone());
    let input = session("loader");
    let out = compact(&chain, &input);
    check_replacement(&chain, &input, &out);
    let run = stage(&out);
    assert_eq!(run.details["path"], "prose");
    assert!(
        run.warnings
            .iter()
            .any(|w| w.contains("incomplete answer: next_steps empty")
                && w.contains("falling back to a prose summary")),
        "{:?}",
        run.warnings
    );
    assert_eq!(provider.requests().len(), 2);
    assert!(matches!(
        provider.requests()[1].response_schema_json,
        FfiOption::RNone
    ));
    // A short session: the floor of 150 tokens is aimed at, named in words, with room above.
    let prose = &provider.requests()[1];
    assert!(
        prose
            .prompt
            .contains("in about 112 words (at most 150 tokens)"),
        "{}",
        prose.prompt
    );
    assert_eq!(prose.max_output_tokens, 225);
    let text = summary_of(&out).joined_text();
    assert_contains(&text, "## Summary\nThe agent fixed the loader defaults.");
    // No structured answer was accepted and there is no prior: no JSON claimed in the page.
    assert!(page_metadata(&chain, &out)["anchored_summary"].is_null());
}

#[test]
fn invalid_json_falls_back_to_prose() {
    // Three ways an answer is not the JSON asked for: no structured JSON at all, a value of
    // the wrong shape (a string), and an entry over the schema's length limit.
    let too_long = anchored("Fix.", &[&"x".repeat(501)], &["Go on."]);
    for (bad, why) in [
        (ScriptedResponse::text("{not json"), "no structured JSON"),
        (
            ScriptedResponse::structured(json!("{not json")),
            "does not satisfy the schema",
        ),
        (ScriptedResponse::structured(too_long), "/files_modified/0"),
    ] {
        let provider = Arc::new(ScriptedProvider::sequence([
            bad,
            ScriptedResponse::text("Prose summary of the session.").matching(PROSE_CALL),
        ]));
        let chain = stage_chain(json!({}), provider);
        let out = compact(&chain, &session("loader"));
        let run = stage(&out);
        assert_eq!(run.details["path"], "prose", "{why}");
        assert!(
            run.warnings.iter().any(|w| w.contains(why)),
            "{why}: {:?}",
            run.warnings
        );
    }
}

#[test]
fn llm_errors_fall_back_down_to_the_no_llm_summary() {
    let provider = Arc::new(ScriptedProvider::failing(
        ProviderErrorKind::Server,
        "overloaded",
    ));
    let chain = stage_chain(json!({}), provider.clone());
    let input = session("loader");
    let out = compact(&chain, &input);
    check_replacement(&chain, &input, &out);
    let run = stage(&out);
    assert_eq!(run.details["path"], "no_llm");
    assert_eq!(provider.requests().len(), 2, "structured, then prose");
    assert_eq!(run.warnings.len(), 2, "{:?}", run.warnings);
    assert!(run.warnings[0].contains("structured summary unusable"));
    assert!(run.warnings[1].contains("prose summary failed"));
    assert!(run.warnings[1].contains("built without the LLM"));
    let text = summary_of(&out).joined_text();
    assert_contains(&text, "## What the messages show");
    assert_contains(&text, "2 tool call(s): read_file ×2");
    assert_contains(
        &text,
        "file paths mentioned: src/config/loader.rs, tests/loader_test.rs",
    );
}

#[test]
fn structured_false_starts_at_prose() {
    let provider = Arc::new(ScriptedProvider::always("A prose summary."));
    let chain = stage_chain(
        json!({"structured": false, "extra_instruction": "keep every error message"}),
        provider.clone(),
    );
    let out = compact(&chain, &session("loader"));
    assert_eq!(stage(&out).details["path"], "prose");
    assert_eq!(provider.requests().len(), 1);
    assert!(provider.requests()[0]
        .prompt
        .contains("Also: keep every error message"));
    assert!(stage(&out).warnings.is_empty());
}

/// A session long enough to be chunked at `chunk_tokens = 256`.
fn long_session() -> Conversation {
    let mut messages: Vec<Message> = session("loader").messages.into();
    let filler: Vec<Message> = (0..12)
        .map(|i| {
            Message::text(
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                format!(
                    "Step {i}: looked at module_{i} in src/mod_{i}.rs and found that the \
                     configuration is read twice, once at startup and once per request, which \
                     is slow but correct; nothing to change there for now, moving on."
                ),
            )
        })
        .collect();
    let tail = messages.split_off(messages.len() - 2);
    messages.extend(filler);
    messages.extend(tail);
    Conversation::new(messages)
}

#[test]
fn chunked_path_summarizes_chunks_then_validates_the_consolidation() {
    let good = anchored("Fix the loader.", &["src/config/loader.rs"], &["Test it."]);
    let provider = Arc::new(ScriptedProvider::matching([
        ScriptedResponse::text("Chunk summary {n}.").matching(CHUNK_CALL),
        ScriptedResponse::structured(good.clone()).matching(STRUCTURED_CALL),
    ]));
    let chain = stage_chain(
        json!({"chunk_tokens": 256, "max_concurrency": 2}),
        provider.clone(),
    );
    let input = long_session();
    let out = compact(&chain, &input);
    check_replacement(&chain, &input, &out);
    let run = stage(&out);
    assert_eq!(run.details["path"], "structured");
    let chunks = run.details["chunks"].as_u64().unwrap() as usize;
    assert!(chunks >= 2, "{chunks}");
    let requests = provider.requests();
    assert_eq!(requests.len(), chunks + 1);
    assert!(requests[..chunks]
        .iter()
        .all(|r| matches!(r.response_schema_json, FfiOption::RNone)));
    let last = &requests[chunks];
    assert!(matches!(last.response_schema_json, FfiOption::RSome(_)));
    assert!(last.prompt.contains("Part 1:\nChunk summary"));
    assert_eq!(page_metadata(&chain, &out)["anchored_summary"], good);

    // The consolidation is validated like a single pass: an incomplete one falls back to a
    // prose summary of the chunk summaries.
    let incomplete = anchored("Fix the loader.", &[], &[]);
    let provider = Arc::new(ScriptedProvider::matching([
        ScriptedResponse::text("Chunk summary {n}.").matching(CHUNK_CALL),
        ScriptedResponse::structured(incomplete).matching(STRUCTURED_CALL),
        ScriptedResponse::text("Prose of the chunks.").matching(PROSE_OF_CHUNKS_CALL),
    ]));
    let chain = stage_chain(json!({"chunk_tokens": 256}), provider);
    let out = compact(&chain, &input);
    let run = stage(&out);
    assert_eq!(run.details["path"], "prose");
    assert!(
        run.warnings[0].contains("incomplete answer"),
        "{:?}",
        run.warnings
    );
    assert!(summary_of(&out)
        .joined_text()
        .contains("Prose of the chunks."));

    // A failed chunk call skips to the summary built without the LLM.
    let provider = Arc::new(ScriptedProvider::matching([ScriptedResponse::error(
        ProviderErrorKind::Server,
        "down",
    )
    .matching(CHUNK_CALL)]));
    let chain = stage_chain(json!({"chunk_tokens": 256}), provider);
    let out = compact(&chain, &input);
    assert_eq!(stage(&out).details["path"], "no_llm");
}

#[test]
fn the_cap_holds_on_every_path() {
    let huge = "word ".repeat(2_000);
    let big_answer = json!({
        "session_intent": "i".repeat(2_000),
        "files_modified": (0..50).map(|i| format!("src/{i}/{}.rs", "f".repeat(400))).collect::<Vec<_>>(),
        "decisions_made": [],
        "open_questions": [],
        "next_steps": ["n".repeat(500)],
    });
    let mut input = long_session();
    // Enough content that even a 500-character summary is smaller than the span.
    input
        .messages
        .insert(1, Message::text(Role::User, huge.clone()));
    let providers: [(Arc<dyn Provider>, &str); 3] = [
        (
            Arc::new(ScriptedProvider::sequence([ScriptedResponse::structured(
                big_answer,
            )])),
            "structured",
        ),
        (Arc::new(ScriptedProvider::always(huge.clone())), "prose"),
        (
            Arc::new(ScriptedProvider::failing(ProviderErrorKind::Server, "down")),
            "no_llm",
        ),
    ];
    for (provider, path) in providers {
        let config = if path == "prose" {
            json!({"max_summary_chars": 500, "structured": false, "chunk_tokens": 100000})
        } else {
            json!({"max_summary_chars": 500, "chunk_tokens": 100000})
        };
        let chain = stage_chain(config, provider);
        let out = compact(&chain, &input);
        assert_eq!(stage(&out).details["path"], path);
        let chars = summary_of(&out).joined_text().chars().count();
        assert!(chars <= 500, "{path}: {chars} characters");
    }
}

#[test]
fn a_prior_anchored_summary_is_merged() {
    let first = anchored(
        "Fix the loader.",
        &["src/config/loader.rs"],
        &["Add a test."],
    );
    let second = json!({
        "session_intent": "Fix the loader and the ini format.",
        "files_modified": ["src/config/loader.rs", "src/config/ini.rs"],
        "decisions_made": [],
        "open_questions": [],
        "next_steps": ["Add a test.", "Release 1.2."],
    });
    let provider = Arc::new(ScriptedProvider::sequence([
        ScriptedResponse::structured(first.clone()),
        ScriptedResponse::structured(second),
    ]));
    let chain = stage_chain(json!({}), provider.clone());
    // The conversation grows; the next compaction meets the first summary.
    let grown = grown_by(compact(&chain, &session("loader")).conversation, "ini");
    let out = compact(&chain, &grown);
    check_replacement(&chain, &grown, &out);
    assert_eq!(stage(&out).details["prior_merged"], true);

    // The prior's JSON is shown to the model, not its Markdown as material.
    let request = &provider.requests()[1];
    assert!(request.prompt.contains("An earlier anchored summary"));
    let material = request.prompt.rsplit("<content>").next().unwrap();
    assert!(!material.contains("# Anchored summary"), "{material}");

    let merged = &page_metadata(&chain, &out)["anchored_summary"];
    assert_eq!(
        merged["session_intent"],
        "Fix the loader and the ini format."
    );
    assert_eq!(
        merged["files_modified"],
        json!(["src/config/loader.rs", "src/config/ini.rs"])
    );
    assert_eq!(merged["decisions_made"], first["decisions_made"]);
    assert_eq!(merged["open_questions"], first["open_questions"]);
    assert_eq!(merged["next_steps"], json!(["Add a test.", "Release 1.2."]));
    // The prior summary message went into the new page with the rest of the span.
    let page_ref = summary_of(&out)
        .summary_info()
        .unwrap()
        .page_ref
        .to_string();
    let page = rt().block_on(chain.store().get_page(&page_ref)).unwrap();
    assert!(page.page.messages[0]
        .summary_info()
        .is_some_and(|s| s.strategy.as_str() == NAME));

    let text = summary_of(&out).joined_text();
    assert_contains(&text, "- src/config/ini.rs");

    // Asked again, the same request is answered from the summary cache: no call is made.
    let again = compact(&chain, &grown);
    assert_eq!(again.report.llm_calls, 0);
    assert_eq!(again.report.cache_hits, 1);
    assert_eq!(again.conversation, out.conversation);

    // Without the cache (same pages), with the script exhausted every call fails: the
    // summary built without the LLM still carries the prior's sections forward.
    let uncached = StageChain::new(
        "tamp_anchored_structured",
        without_ledger(json!({})),
        provider.clone(),
    )
    .store(Arc::clone(chain.store()))
    .build();
    let down = compact(&uncached, &grown);
    assert_eq!(stage(&down).details["path"], "no_llm");
    let text = summary_of(&down).joined_text();
    assert_contains(&text, "## Files modified\n- src/config/loader.rs");
    assert_contains(&text, "## Next steps\n- Add a test.");
}

/// With the ledger on, the model is shown the prior's intent and not its lists: a small
/// model shown them wrote them back word for word (7 of the 12 structured answers recorded
/// on the planted session), so the anchor stopped changing. The plugin merges them instead.
#[test]
fn with_the_ledger_the_model_is_shown_the_prior_s_intent_and_the_plugin_merges_its_lists() {
    let first = ledger_answer(
        "Fix the loader so the CI tests pass.",
        &["Does the ini parser drop trailing comments?"],
        &["Bisect the loader change."],
    );
    let second = ledger_answer("Fix the loader and the ini format.", &[], &["Release 1.2."]);
    let provider = Arc::new(ScriptedProvider::sequence([
        ScriptedResponse::structured(first),
        ScriptedResponse::structured(second),
    ]));
    let chain = chain_with_ledger(json!({}), provider.clone());
    let grown = grown_by(compact(&chain, &session("loader")).conversation, "ini");
    let out = compact(&chain, &grown);
    check_replacement(&chain, &grown, &out);
    assert_eq!(stage(&out).details["prior_merged"], true);
    assert_eq!(stage(&out).details["path"], "structured");

    let request = &provider.requests()[1];
    let after_material = request.prompt.rsplit("</content>").next().unwrap();
    assert_contains(after_material, "Fix the loader so the CI tests pass.");
    assert!(
        !request
            .prompt
            .contains("Does the ini parser drop trailing comments?")
            && !request.prompt.contains("Bisect the loader change.")
            && !request.prompt.contains("An earlier anchored summary"),
        "{}",
        request.prompt
    );
    let merged = &page_metadata(&chain, &out)["anchored_summary"];
    assert_eq!(
        merged["session_intent"],
        "Fix the loader and the ini format."
    );
    assert_eq!(
        merged["open_questions"],
        json!(["Does the ini parser drop trailing comments?"])
    );
    assert_eq!(
        merged["next_steps"],
        json!(["Bisect the loader change.", "Release 1.2."])
    );
    let text = summary_of(&out).joined_text();
    assert_contains(&text, "- Bisect the loader change.");
}

/// An answer that names no next step is complete once merged over a prior that has some, as
/// the page keeps it: the structured path, not a prose call. Without a prior it is not.
#[test]
fn an_answer_without_next_steps_carries_the_prior_s_and_stays_structured() {
    let first = ledger_answer(
        "Fix the loader so the CI tests pass.",
        &[],
        &["Bisect the loader change."],
    );
    let no_steps = ledger_answer(
        "Fix the loader and the ini format.",
        &["Does the ini parser drop trailing comments?"],
        &[],
    );
    let provider = Arc::new(ScriptedProvider::sequence([
        ScriptedResponse::structured(first),
        ScriptedResponse::structured(no_steps.clone()),
    ]));
    let chain = chain_with_ledger(json!({}), provider.clone());
    let grown = grown_by(compact(&chain, &session("loader")).conversation, "ini");
    let out = compact(&chain, &grown);
    check_replacement(&chain, &grown, &out);
    assert_eq!(provider.request_count(), 2, "no prose call");
    assert_eq!(stage(&out).details["path"], "structured");
    let merged = &page_metadata(&chain, &out)["anchored_summary"];
    assert_eq!(
        merged["session_intent"],
        "Fix the loader and the ini format."
    );
    assert_eq!(merged["next_steps"], json!(["Bisect the loader change."]));
    assert_eq!(
        merged["open_questions"],
        json!(["Does the ini parser drop trailing comments?"])
    );

    // The same answer with no prior to carry steps from: the prose fallback.
    let provider = Arc::new(ScriptedProvider::sequence([
        ScriptedResponse::structured(no_steps),
        ScriptedResponse::text("The loader and the ini format are being fixed."),
    ]));
    let chain = chain_with_ledger(json!({}), provider.clone());
    let out = compact(&chain, &session("loader"));
    assert_eq!(provider.request_count(), 2);
    assert_eq!(
        stage(&out).details["path"],
        "prose",
        "{:#}",
        stage(&out).details
    );
}

/// A prior made on the prose fallback is shown by its prose: the sections it carried (in its
/// JSON, merged like any prior's) are not material a model can copy back past their cap.
#[test]
fn a_fallback_prior_is_shown_by_its_prose_and_its_carried_lists_are_merged() {
    let first = ledger_answer(
        "Fix the loader so the CI tests pass.",
        &[],
        &["Bisect the loader change."],
    );
    let third = ledger_answer("Fix the loader and the ini format.", &[], &["Release 1.2."]);
    for mode in [json!({}), json!({"ledger": {"enabled": false}})] {
        // Without the ledger the schema asks for the two lists it would hold.
        let answer = |summary: &Value| {
            let mut summary = summary.clone();
            if mode.get("ledger").is_some() {
                summary["files_modified"] = json!([]);
                summary["decisions_made"] = json!([]);
            }
            ScriptedResponse::structured(summary)
        };
        let provider = Arc::new(ScriptedProvider::sequence([
            answer(&first),
            // The second compaction's structured answer is no JSON: the prose fallback.
            ScriptedResponse::text("not an object"),
            ScriptedResponse::text("The agent found the ini parser dropping comments."),
            answer(&third),
        ]));
        let chain = chain_with_ledger(mode.clone(), provider.clone());
        let mut conversation = session("loader");
        for (i, topic) in ["ini", "yaml"].into_iter().enumerate() {
            conversation = grown_by(compact(&chain, &conversation).conversation, topic);
            if i == 1 {
                let out = compact(&chain, &conversation);
                assert_eq!(stage(&out).details["path"], "structured", "{mode}");
                let merged = &page_metadata(&chain, &out)["anchored_summary"];
                assert_eq!(
                    merged["next_steps"],
                    json!(["Bisect the loader change.", "Release 1.2."]),
                    "{mode}"
                );
            }
        }
        let requests = provider.requests();
        let last = requests.last().unwrap();
        let material = last.prompt.split("</content>").next().unwrap();
        assert!(
            material.contains("The agent found the ini parser dropping comments."),
            "{mode}: {material}"
        );
        assert!(
            !material.contains("Bisect the loader change."),
            "{mode}: {material}"
        );
    }
}

/// A client that resends its whole history: the first conversation, then the same messages
/// with a second session appended.
fn resent_history() -> (Conversation, Conversation) {
    let first = session("loader");
    let mut messages: Vec<Message> = first.messages.clone().into();
    messages.extend(session("ini").messages.into_iter().skip(1));
    (first, Conversation::new(messages))
}

/// Tool results of one `session()`: their filler line appears 4 times in each of its 2.
const FILLER: &str = "configuration loading, validation and defaults";

#[test]
fn a_resent_history_is_summarized_only_in_its_new_part() {
    let first = anchored(
        "Fix the loader.",
        &["src/config/loader.rs"],
        &["Add a test."],
    );
    let second = json!({
        "session_intent": "Fix the loader and the ini format.",
        "files_modified": ["src/config/ini.rs"],
        "decisions_made": [],
        "open_questions": [],
        "next_steps": ["Release 1.2."],
    });
    let provider = Arc::new(ScriptedProvider::sequence([
        ScriptedResponse::structured(first.clone()),
        ScriptedResponse::structured(second),
    ]));
    // Tool output shown whole, so the material's filler can be counted.
    let chain = stage_chain(json!({"max_tool_chars": 0}), provider.clone());
    let (short, long) = resent_history();
    let out1 = compact(&chain, &short);
    check_replacement(&chain, &short, &out1);
    assert_eq!(stage(&out1).details["reused_messages"], 0);
    let covered = stage(&out1).messages_removed;

    // The longer history arrives raw: no summary in it, yet only its new part is sent, with
    // the cached sections shown to the model and merged under the answer.
    let out2 = compact(&chain, &long);
    check_replacement(&chain, &long, &out2);
    let run = stage(&out2);
    assert_eq!(run.details["reused_messages"], covered, "{:#}", run.details);
    assert_eq!(run.details["path"], "structured");
    let request = &provider.requests()[1];
    let material = request.prompt.rsplit("<content>").next().unwrap();
    assert_eq!(material.matches(FILLER).count(), 8, "{material}");
    assert_contains(material, "The ini tests fail");
    assert!(request.prompt.contains("An earlier anchored summary"));
    let merged = &page_metadata(&chain, &out2)["anchored_summary"];
    assert_eq!(
        merged["files_modified"],
        json!(["src/config/loader.rs", "src/config/ini.rs"])
    );
    assert_eq!(merged["decisions_made"], first["decisions_made"]);
    assert_eq!(merged["next_steps"], json!(["Add a test.", "Release 1.2."]));

    // The first history again: its whole span is cached, no call is made.
    let calls = provider.request_count();
    let again = compact(&chain, &short);
    assert_eq!(provider.request_count(), calls);
    assert_eq!(stage(&again).details["reused_messages"], covered);
    assert_eq!(again.conversation, out1.conversation);

    // With `reuse = "off"` the whole history is sent again.
    let off_provider =
        Arc::new(ScriptedProvider::sequence([]).with_default(ScriptedResponse::structured(first)));
    let off = stage_chain(
        json!({ "reuse": "off", "max_tool_chars": 0 }),
        off_provider.clone(),
    );
    compact(&off, &short);
    compact(&off, &long);
    let request = &off_provider.requests()[1];
    let material = request.prompt.rsplit("<content>").next().unwrap();
    assert_eq!(material.matches(FILLER).count(), 16, "{material}");
}

#[test]
fn extractive_provider_fills_the_schema_offline() {
    let chain = stage_chain(json!({}), Arc::new(ExtractiveSummarizer::default()));
    let input = long_session();
    let out = compact(&chain, &input);
    check_replacement(&chain, &input, &out);
    let run = stage(&out);
    assert_eq!(run.details["path"], "structured", "{:?}", run.warnings);
    let merged = &page_metadata(&chain, &out)["anchored_summary"];
    let files = merged["files_modified"].as_array().unwrap();
    assert!(files.contains(&json!("src/config/loader.rs")), "{merged}");
    assert!(merged["decisions_made"][0]
        .as_str()
        .unwrap()
        .starts_with("We decided to apply defaults"));
    assert_eq!(
        merged["open_questions"],
        json!(["Should the ini format get the same fix?"])
    );
    assert_eq!(
        merged["next_steps"],
        json!(["Next I will add a regression test."])
    );
}

#[test]
fn real_conversations_in_both_wire_formats() {
    let chain = stage_chain(json!({}), Arc::new(ExtractiveSummarizer::default()));
    let rt = rt();
    let name = &corpus_names()[0];
    for format in ["anthropic", "openai"] {
        let ctx = format!("{name} ({format})");
        let (input, fmt) = wire::parse_str(&corpus(format, name), None).unwrap();
        let options = CompactOptions {
            format: Some(fmt),
            ..Default::default()
        };
        let out = rt.block_on(chain.compact(input.clone(), &options)).unwrap();
        let run = &out.report.stages[0];
        assert_eq!(run.status, StageStatus::Acted, "{ctx}: {run:?}");
        assert!(out.report.tokens_after < out.report.tokens_before, "{ctx}");
        let summary = summary_of(&out);
        assert!(
            summary.joined_text().starts_with("# Anchored summary"),
            "{ctx}"
        );
        assert_wire_round_trip(&out.conversation, fmt, &ctx);
    }
}

#[test]
fn invalid_configs_are_refused_naming_the_field() {
    let plugin = load_plugin(&plugin("tamp_anchored_structured")).unwrap();
    for (config, field) in [
        (json!({"chunk_tokens": 10}), "chunk_tokens"),
        (json!({"max_concurrency": 0}), "max_concurrency"),
        (json!({"max_tool_chars": 50}), "max_tool_chars"),
        (json!({"max_assistant_chars": 99}), "max_assistant_chars"),
        (json!({"structured": "yes"}), "structured"),
        (json!({"extra": "x"}), "extra"),
    ] {
        let err = tamp_e2e::refusal(&plugin, &config);
        assert!(err.contains(field), "{config}: {err}");
    }
}
