//! The map-reduce-adaptive plugin, built as a `.so`, loaded by the real loader and run through
//! the real chain with the scripted provider (and the offline extractive one on the corpus):
//! level selection at the thresholds, chunking at semantic boundaries with overlap, collapse
//! depth and its limit, the prior summary carried forward, order under out-of-order
//! completion, failures rolled back, prefix stability, and real conversations in both wire
//! formats.
//!
//! Tests that need exact token counts use the `chars_per_token` tokenizer: with
//! `chars_per_token:1` a message rendered as `user: <text>\n` counts `text.len() + 7` tokens.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::chain_run::{compact, stage};
use tamp_e2e::rt;
use tamp_e2e::{
    assert_wire_round_trip, corpus, corpus_mix, corpus_names, plugin, without_ledger, StageChain,
};
use tamp_host::budget::BudgetConfig;
use tamp_host::chain::{Chain, ChainBuilder, CompactOptions, Compacted, StageStatus};
use tamp_host::config::Trigger;
use tamp_host::loader::load_plugin;
use tamp_host::providers::{
    ExtractiveSummarizer, Provider, ProviderErrorKind, ScriptedProvider, ScriptedResponse,
};
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire;
use tamp_plugin_api::{sdk, ContentBlock, Conversation, LlmRequest, Message, Role, SummaryStatus};

const NAME: &str = "map-reduce-adaptive";

/// A chain of one map-reduce-adaptive stage that always runs.
fn stage_chain(
    config: Value,
    provider: Arc<dyn Provider>,
    encoding: Encoding,
    keep_recent: u32,
) -> Chain {
    // These tests look at the requests the plugin makes, in the order it makes them, so no
    // cache answers any (and no cache lookup delays one); tests/e2e/summary_cache.rs covers
    // the cache with this plugin.
    StageChain::new("tamp_map_reduce_adaptive", without_ledger(config), provider)
        .encoding(encoding)
        .keep_recent(keep_recent)
        .without_cache()
        .build()
}

/// The material of a prompt: inside its last `<content>` pair.
fn material(request: &LlmRequest) -> &str {
    let prompt = request.prompt.as_str();
    let close = prompt.rfind("\n</content>").expect("closing tag");
    let open = prompt[..close].rfind("<content>\n").expect("opening tag");
    &prompt[open + "<content>\n".len()..close]
}

fn labels(requests: &[LlmRequest]) -> Vec<String> {
    requests.iter().map(|r| r.label.to_string()).collect()
}

fn maps(requests: &[LlmRequest]) -> Vec<&LlmRequest> {
    requests
        .iter()
        .filter(|r| r.label.starts_with("map "))
        .collect()
}

/// This strategy's summaries in `conversation`.
fn our_summaries(conversation: &Conversation) -> Vec<&Message> {
    conversation
        .messages
        .iter()
        .filter(|m| {
            m.summary_info()
                .is_some_and(|s| s.strategy.as_str() == NAME)
        })
        .collect()
}

/// Real prose from the corpus: the text blocks of user and assistant messages, joined.
fn corpus_prose(min_chars: usize) -> String {
    let mut out = String::new();
    let mix = corpus_mix(2_000);
    for m in mix.messages.iter().filter(|m| m.role != Role::System) {
        for text in m.content.iter().filter_map(ContentBlock::as_text) {
            if text.len() > 40 {
                out.push_str(text.trim());
                out.push_str("\n\n");
            }
        }
        if out.len() >= min_chars {
            break;
        }
    }
    assert!(
        out.len() >= min_chars,
        "the corpus has {} chars of prose",
        out.len()
    );
    out
}

/// The task: the user's opening turn, which no stage may summarize (`sdk::protected_head`).
fn task() -> Message {
    Message::text(Role::User, "Help me with this.")
}

/// The assistant's first reply, which ends the opening turn: a user message right after the
/// task would be part of it.
fn reply() -> Message {
    Message::text(Role::Assistant, "Sure.")
}

/// A system prompt, the task and its reply, user messages carrying `texts`, and a protected
/// two-message tail.
fn conversation_of(texts: &[String]) -> Conversation {
    let mut messages = vec![
        Message::text(Role::System, "You are a helpful assistant."),
        task(),
        reply(),
    ];
    messages.extend(alternating(texts));
    messages.push(Message::text(Role::User, "And now?"));
    messages.push(Message::text(Role::Assistant, "Carrying on."));
    Conversation::new(messages)
}

#[test]
fn levels_at_99_100_499_500_tokens() {
    let prose = corpus_prose(1_000).replace('\n', " ");
    for (tokens, level, calls) in [
        (99, "none", 0),
        (100, "brief", 1),
        (499, "brief", 1),
        (500, "map-reduce", 1),
    ] {
        // `assistant: Sure.\n` and `user: <text>\n` count text + 24 with one character per
        // token.
        let text: String = prose.chars().take(tokens - 24).collect();
        let input = Conversation::new(vec![
            Message::text(Role::System, "sys"),
            task(),
            reply(),
            Message::text(Role::User, text),
            Message::text(Role::Assistant, "ok"),
        ]);
        let provider = Arc::new(ScriptedProvider::always("A brief."));
        let chain = stage_chain(json!({}), provider.clone(), Encoding::CharsPerToken(1.0), 1);
        let out = compact(&chain, &input);
        let run = stage(&out);
        assert_eq!(run.details["level"], level, "{tokens}: {run:?}");
        assert_eq!(run.details["content_tokens"], tokens, "{tokens}");
        let requests = provider.requests();
        assert_eq!(requests.len(), calls, "{tokens}: {:?}", labels(&requests));
        match level {
            "none" => {
                assert_eq!(run.status, StageStatus::Skipped, "{tokens}");
                assert!(
                    run.reason.contains("below none_below (100)"),
                    "{}",
                    run.reason
                );
                assert_eq!(out.conversation, input);
            }
            _ => {
                assert_eq!(run.status, StageStatus::Acted, "{tokens}: {run:?}");
                let expected_label = if level == "brief" { "brief" } else { "map 1" };
                assert_eq!(labels(&requests), [expected_label]);
                if level == "brief" {
                    assert!(requests[0].prompt.contains("single sentence"));
                }
                assert_eq!(run.details["calls"], 1);
                assert_eq!(run.details["depth"], 0);
                assert_eq!(run.details["input_tokens"], tokens);
                assert_eq!(run.details["output_tokens"], 8);
                let ratio = run.details["compression_ratio"].as_f64().unwrap();
                assert!((ratio - 8.0 / tokens as f64).abs() < 1e-3, "{ratio}");
                let summaries = our_summaries(&out.conversation);
                assert_eq!(summaries.len(), 1);
                assert_eq!(summaries[0].joined_text(), "A brief.");
                // System prompt, task, summary, and the protected last message.
                assert_eq!(out.conversation.messages.len(), 4);
            }
        }
    }
}

/// A tool exchange in the Anthropic shape.
fn exchange(id: &str, tool: &str, input: &str, output: &str) -> [Message; 2] {
    tamp_e2e::tool_round_trip(id, tool, input, output)
}

/// `let value_N = compute value_N with input_N`, indented or not: a line of the generated code
/// in one piece.
fn whole_code_line(line: &str) -> bool {
    // The first line follows the rendering's `read_file returned: `.
    let line = line.strip_prefix("read_file returned: ").unwrap_or(line);
    let Some(rest) = line.trim_start().strip_prefix("let value_") else {
        return false;
    };
    let Some((n, rest)) = rest.split_once(' ') else {
        return false;
    };
    !n.is_empty()
        && n.chars().all(|c| c.is_ascii_digit())
        && rest == format!("= compute value_{n} with input_{n}")
}

#[test]
fn chunks_at_semantic_boundaries_with_overlap_and_keeps_tool_exchanges_whole() {
    let prose = corpus_prose(80_000);
    let paragraphs: Vec<&str> = prose.split("\n\n").filter(|p| !p.is_empty()).collect();
    // 30 KB of code with no punctuation at all: only lines to cut at.
    let mut code = String::new();
    let mut line = 0;
    while code.len() < 30 * 1024 {
        code.push_str(&format!(
            "    let value_{line} = compute value_{line} with input_{line}\n"
        ));
        line += 1;
    }
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        task(),
        reply(),
    ];
    let mut small_exchanges = Vec::new();
    for (i, chunk) in paragraphs.chunks(20).enumerate() {
        messages.push(Message::text(Role::User, chunk.join("\n\n")));
        let id = format!("toolu_{i}");
        let output = format!("src/module_{i}.rs: 3 matches\nsrc/lib.rs: 1 match");
        let pair = exchange(
            &id,
            "grep",
            &format!("{{\"pattern\":\"item_{i}\"}}"),
            &output,
        );
        small_exchanges.push(format!(
            "assistant called grep({{\"pattern\":\"item_{i}\"}})\ngrep returned: {output}\n"
        ));
        messages.extend(pair);
        if i == 3 {
            messages.extend(exchange(
                "toolu_code",
                "read_file",
                "{\"path\":\"gen.rs\"}",
                &code,
            ));
        }
    }
    messages.push(Message::text(Role::User, "Thanks."));
    messages.push(Message::text(Role::Assistant, "You're welcome."));
    let input = Conversation::new(messages);

    let provider = Arc::new(ScriptedProvider::always("Summary of part {n}."));
    let config = json!({"chunk_size": 1000, "chunk_overlap": 100});
    let chain = stage_chain(config, provider.clone(), Encoding::O200kBase, 2);
    let out = compact(&chain, &input);
    assert_eq!(stage(&out).status, StageStatus::Acted, "{:?}", stage(&out));
    let requests = provider.requests();
    let maps = maps(&requests);
    assert!(maps.len() > 15, "{} chunks", maps.len());
    let tokens = TokenCounter::new(Encoding::O200kBase).unwrap();
    let mut code_chunks = 0;
    for (i, map) in maps.iter().enumerate() {
        let text = material(map);
        assert!(
            tokens.count_text(text) <= 1000,
            "chunk {i}: {} tokens",
            tokens.count_text(text)
        );
        if text.contains("let value_") {
            code_chunks += 1;
            // The code is cut between lines (overlap included): every line of it is whole.
            for line in text.lines().filter(|l| l.contains("value_")) {
                assert!(whole_code_line(line), "chunk {i} cuts a line: {line:?}");
            }
        }
        if i > 0 {
            // The overlap: the chunk opens with a passage from the end of the one before.
            assert!(map
                .prompt
                .contains("repeated from the end of the previous part"));
            let previous = material(maps[i - 1]);
            // (All of it when the chunk before is shorter: the task's one-line reply.)
            let opening: String = text
                .chars()
                .take(60.min(previous.chars().count()))
                .collect();
            assert!(
                previous.contains(&opening),
                "chunk {i} does not open with the end of chunk {}: {opening:?}",
                i - 1
            );
        } else {
            assert!(!map.prompt.contains("repeated from the end"));
        }
    }
    // 30 KB of code at ~4 bytes a token cannot fit in fewer than 8 chunks of 900 new tokens.
    assert!(code_chunks >= 8, "{code_chunks}");
    // Every small tool exchange reaches the LLM whole, in one chunk.
    for rendering in &small_exchanges {
        assert!(
            maps.iter()
                .any(|m| material(m).contains(rendering.trim_end())),
            "cut: {rendering:?}"
        );
    }
    // Paragraphs that fit in a chunk are never cut, even in messages too big for one.
    let mut whole = 0;
    for paragraph in &paragraphs {
        let paragraph = paragraph.trim();
        if paragraph.is_empty() || tokens.count_text(paragraph) > 900 {
            continue;
        }
        assert!(
            maps.iter().any(|m| material(m).contains(paragraph)),
            "cut: {paragraph:?}"
        );
        whole += 1;
    }
    assert!(whole > 50, "{whole}");
    let split_messages = input
        .messages
        .iter()
        .filter(|m| m.role == Role::User && tokens.count_text(&m.joined_text()) > 900)
        .count();
    assert!(
        split_messages > 0,
        "no message needed cutting between paragraphs"
    );
}

/// The answer of every scripted call: about 40 tokens at 4 characters a token, so two fit in a
/// `token_max` of 100 and three do not.
const FORTY_TOKENS: &str = "Summary from request {n}: the user asked for the build to be fixed, \
     the assistant changed the config, ran the tests and reported that all of them pass.";

/// Collapse rounds for `n` map summaries of ~40 tokens with `token_max` 100 (two per group),
/// stopping at `limit`: (depth, collapse calls).
fn expected_collapse(mut n: usize, limit: u32) -> (u32, usize) {
    let (mut depth, mut calls) = (0, 0);
    while n > 2 && depth < limit {
        n = n.div_ceil(2);
        depth += 1;
        calls += n;
    }
    (depth, calls)
}

fn long_input() -> Conversation {
    let prose = corpus_prose(60_000);
    let texts: Vec<String> = prose
        .split("\n\n")
        .collect::<Vec<_>>()
        .chunks(4)
        .map(|c| c.join("\n\n"))
        .collect();
    conversation_of(&texts)
}

fn collapse_config(max_collapse_depth: u32) -> Value {
    json!({
        "chunk_size": 400, "chunk_overlap": 40, "token_max": 100,
        "min_summary_tokens": 50, "max_summary_tokens": 50,
        "max_collapse_depth": max_collapse_depth,
    })
}

/// `long_input()` compacted with collapse limit `limit` and forty-token answers (four
/// characters a token, the last two messages kept), failing unless the stage acted; the
/// output, the requests the model got, and how many were maps with the collapse depth and
/// collapse calls [`expected_collapse`] gives for that many.
fn collapsed(limit: u32) -> (Compacted, Vec<LlmRequest>, (usize, u32, usize)) {
    let provider = Arc::new(ScriptedProvider::always(FORTY_TOKENS));
    let chain = stage_chain(
        collapse_config(limit),
        provider.clone(),
        Encoding::CharsPerToken(4.0),
        2,
    );
    let out = compact(&chain, &long_input());
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    let requests = provider.requests();
    let map_count = maps(&requests).len();
    let (depth, collapse_calls) = expected_collapse(map_count, limit);
    (out, requests, (map_count, depth, collapse_calls))
}

#[test]
fn collapse_depth_grows_with_a_long_input() {
    let (out, requests, (map_count, depth, collapse_calls)) = collapsed(10);
    let run = stage(&out);
    assert!(depth >= 4, "{map_count} chunks give depth {depth}");
    assert_eq!(run.details["depth"], depth, "{map_count} chunks");
    assert_eq!(run.details["chunks"], map_count);
    assert_eq!(run.details["calls"], map_count + collapse_calls + 1);
    assert_eq!(requests.len(), map_count + collapse_calls + 1);
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    // Rounds in order, then the synthesis; each round merges neighbours in order.
    let all = labels(&requests);
    assert_eq!(all.last().unwrap(), "synthesis");
    assert_eq!(all[map_count], "collapse 1.1");
    let first_collapse = material(&requests[map_count]);
    assert!(
        first_collapse.starts_with("Summary from request 1:")
            && first_collapse.contains("\n\nSummary from request 2:"),
        "{first_collapse}"
    );
    let synthesis = material(requests.last().unwrap());
    assert_eq!(synthesis.matches("Summary from request").count(), 2);
}

#[test]
fn the_depth_limit_stops_collapsing_and_still_synthesizes() {
    let (out, requests, (map_count, depth, collapse_calls)) = collapsed(2);
    let run = stage(&out);
    assert_eq!(depth, 2);
    assert_eq!(run.details["depth"], 2);
    assert_eq!(requests.len(), map_count + collapse_calls + 1);
    assert_eq!(labels(&requests).last().unwrap(), "synthesis");
    assert!(
        run.warnings
            .iter()
            .any(|w| w.contains("collapse depth limit (2)")),
        "{:?}",
        run.warnings
    );
    // The synthesis gets every summary left after the second round.
    let left = map_count.div_ceil(2).div_ceil(2);
    assert_eq!(
        material(requests.last().unwrap())
            .matches("Summary from request")
            .count(),
        left
    );
    assert_eq!(our_summaries(&out.conversation).len(), 1);
}

#[test]
fn a_folded_prior_summary_goes_to_the_synthesis_only_and_into_the_new_summary() {
    let provider = Arc::new(ScriptedProvider::always("Summary written by request {n}."));
    // keep_summaries_share 0: earlier summaries are always folded into the new one.
    let config = json!({"chunk_size": 400, "chunk_overlap": 40, "keep_summaries_share": 0.0});
    let chain = stage_chain(config, provider.clone(), Encoding::O200kBase, 2);
    let prose = corpus_prose(20_000);
    let paragraphs: Vec<String> = prose.split("\n\n").map(str::to_string).collect();
    let (first, second) = paragraphs.split_at(paragraphs.len() / 2);

    // First compaction: no prior summary.
    let input = conversation_of(first);
    let out = compact(&chain, &input);
    assert_eq!(stage(&out).status, StageStatus::Acted, "{:?}", stage(&out));
    let first_requests = provider.requests();
    assert!(first_requests
        .iter()
        .all(|r| !r.prompt.contains("summary-so-far")));
    let prior = our_summaries(&out.conversation)[0].clone();
    let prior_text = prior.joined_text();
    assert_eq!(
        prior_text,
        format!("Summary written by request {}.", first_requests.len())
    );

    // The conversation goes on after the compacted one; compact again.
    let grown = grow(&out, second);
    let out2 = compact(&chain, &grown);
    let run = stage(&out2);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    let second_requests = provider.requests()[first_requests.len()..].to_vec();
    let maps = maps(&second_requests);
    assert!(maps.len() >= 2);
    for map in &maps {
        // Each map request depends on its chunk alone, so it is the same request (a cache
        // hit) whatever the prior summary says.
        assert!(!map.prompt.contains(&prior_text), "{}", map.prompt);
    }
    let synthesis = second_requests.last().unwrap();
    assert_eq!(synthesis.label.as_str(), "synthesis");
    assert!(
        material(synthesis).starts_with(&format!("Summary so far:\n{prior_text}\n\n")),
        "{}",
        material(synthesis)
    );
    assert!(run.details["prior_summary_tokens"].as_u64().unwrap() > 0);

    // The new summary replaced the old one, and its page holds the old one (whose page is
    // still reachable through it): nothing is lost.
    let summaries = our_summaries(&out2.conversation);
    assert_eq!(summaries.len(), 1);
    assert_ne!(summaries[0], &prior);
    let page_ref = summaries[0].summary_info().unwrap().page_ref.to_string();
    let page = rt()
        .block_on(chain.store().get_page(&page_ref))
        .unwrap()
        .page;
    // As they were sent, but for the MAC the summary travels with.
    let head = tamp_plugin_api::sdk::protected_head(&grown.messages);
    let span = head..head + run.messages_removed as usize;
    let mut archived = grown.messages[span].to_vec();
    tamp_host::summary_mac::strip(&mut archived);
    assert_eq!(archived[0].joined_text(), prior.joined_text());
    assert_eq!(page.messages.as_slice(), &archived[..]);
    assert_eq!(page.strategy.as_str(), NAME);
    let metadata: Value = serde_json::from_str(&page.metadata_json).unwrap();
    assert_eq!(metadata["level"], "map-reduce");
    let old_page = prior.summary_info().unwrap().page_ref.to_string();
    assert!(rt().block_on(chain.store().get_page(&old_page)).is_ok());
}

#[test]
fn new_material_of_one_chunk_updates_a_folded_prior_in_one_call() {
    let provider = Arc::new(ScriptedProvider::always("Summary written by request {n}."));
    let config = json!({"keep_summaries_share": 0.0});
    let chain = stage_chain(config, provider.clone(), Encoding::O200kBase, 2);
    let prose = corpus_prose(12_000);
    let paragraphs: Vec<String> = prose.split("\n\n").map(str::to_string).collect();
    let (first, second) = paragraphs.split_at(paragraphs.len() / 2);
    let out = compact(&chain, &conversation_of(first));
    let prior_text = our_summaries(&out.conversation)[0].joined_text();
    let before = provider.request_count();

    // The new material (~1,500 tokens) fits one 4,096-token chunk: one call reads it, with
    // the prior summary, where a map call and a synthesis would read it twice.
    let grown = grow(&out, second);
    let out2 = compact(&chain, &grown);
    let run = stage(&out2);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.details["calls"], 1, "{:#}", run.details);
    let requests = provider.requests()[before..].to_vec();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].label.as_str(), "update");
    let material = material(&requests[0]);
    assert!(
        material.starts_with(&format!("Summary so far:\n{prior_text}\n\nNew material:\n")),
        "{material}"
    );
    assert!(material.contains(second[0].trim()), "{material}");
    assert_eq!(
        our_summaries(&out2.conversation)[0].joined_text(),
        format!("Summary written by request {}.", before + 1)
    );
}

#[test]
fn order_is_kept_when_answers_arrive_out_of_order() {
    // Four messages of ~150 tokens, each its own chunk (two do not fit in 200). Each starts
    // with a marker the overlap (the end of the previous message) does not repeat; the first
    // chunk's answer comes last and the last chunk's first.
    let prose = corpus_prose(10_000).replace("\n\n", " ");
    let words: Vec<&str> = prose.split_whitespace().collect();
    let markers = [
        "alpha-marker",
        "bravo-marker",
        "charlie-marker",
        "delta-marker",
    ];
    let texts: Vec<String> = markers
        .iter()
        .enumerate()
        .map(|(i, marker)| {
            let mut text = marker.to_string();
            for word in &words[i * 200..] {
                if text.len() + word.len() + 1 > 590 {
                    break;
                }
                text.push(' ');
                text.push_str(word);
            }
            text
        })
        .collect();
    let answers = ["First part.", "Second part.", "Third part.", "Fourth part."];
    let provider = Arc::new(
        ScriptedProvider::matching(markers.iter().zip(answers).enumerate().map(
            |(i, (marker, answer))| {
                ScriptedResponse::text(answer)
                    .matching(*marker)
                    .with_delay(Duration::from_millis(400 - 100 * i as u64))
            },
        ))
        .with_default(ScriptedResponse::text("Final summary.")),
    );
    let config = json!({"chunk_size": 200, "chunk_overlap": 20, "max_concurrency": 4});
    let chain = stage_chain(config, provider.clone(), Encoding::CharsPerToken(4.0), 2);
    let out = compact(&chain, &conversation_of(&texts));
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    let requests = provider.requests();
    assert_eq!(
        labels(&requests),
        ["map 1", "map 2", "map 3", "map 4", "synthesis"]
    );
    for (i, map) in requests[..4].iter().enumerate() {
        // Each chunk holds its own marker, and the overlap does not repeat the one before.
        for (j, marker) in markers.iter().enumerate() {
            assert_eq!(material(map).contains(marker), i == j, "map {}", i + 1);
        }
    }
    assert_eq!(
        material(&requests[4]),
        "First part.\n\nSecond part.\n\nThird part.\n\nFourth part."
    );
    assert_eq!(
        our_summaries(&out.conversation)[0].joined_text(),
        "Final summary."
    );
    // The four map calls ran at once: about the longest delay, not the 1 s sum.
    assert!(run.duration_ms < 950.0, "{} ms", run.duration_ms);
}

/// Runs a failing provider on a multi-chunk conversation; checks the stage was rolled back
/// and the conversation came back unchanged. Returns the error message.
fn rolled_back(provider: ScriptedProvider) -> String {
    let input = long_input();
    let provider = Arc::new(provider);
    let chain = stage_chain(
        json!({"chunk_size": 1000, "chunk_overlap": 100}),
        provider.clone(),
        Encoding::O200kBase,
        2,
    );
    let out = compact(&chain, &input);
    assert_eq!(
        out.conversation, input,
        "the conversation must come back unchanged"
    );
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::RolledBack, "{run:?}");
    assert!(run.pages.is_empty());
    let failure = run.error.as_ref().unwrap();
    assert_eq!(failure.kind.as_str(), "error", "{failure:?}");
    // Fail fast: no collapse or synthesis after a failed map batch.
    assert!(provider
        .requests()
        .iter()
        .all(|r| r.label.starts_with("map ")));
    failure.message.clone()
}

#[test]
fn an_llm_error_rolls_the_stage_back() {
    let provider = ScriptedProvider::sequence([
        ScriptedResponse::text("Part one."),
        ScriptedResponse::error(ProviderErrorKind::Server, "the backend fell over"),
    ])
    .with_default(ScriptedResponse::text("Another part."));
    let message = rolled_back(provider);
    assert!(
        message.contains("map ") && message.contains("the backend fell over"),
        "{message}"
    );
}

#[test]
fn an_empty_answer_rolls_the_stage_back() {
    let message = rolled_back(ScriptedProvider::always("  \n "));
    assert!(
        message.contains("map 1") && message.contains("answered nothing"),
        "{message}"
    );
}

#[test]
fn answers_are_cut_to_a_bound_before_entering_the_conversation() {
    let prose = corpus_prose(3_000).replace('\n', " ");
    let text: String = prose.chars().take(1_600).collect();
    let runaway = "word ".repeat(5_000);
    let provider = Arc::new(ScriptedProvider::always(runaway));
    let chain = stage_chain(json!({}), provider.clone(), Encoding::CharsPerToken(4.0), 2);
    let out = compact(&chain, &conversation_of(&[text]));
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.details["level"], "brief");
    // 400 tokens of content: a brief of 50 tokens aimed at, an output limit of 75, cut at
    // twice the limit.
    let summary = our_summaries(&out.conversation)[0].joined_text();
    assert!(summary.ends_with('…'), "{summary}");
    assert!(
        summary.chars().count() <= 601,
        "{}",
        summary.chars().count()
    );
    assert!(run.details["output_tokens"].as_u64().unwrap() <= 150);
    assert_eq!(provider.requests()[0].max_output_tokens, 75);
}

#[test]
fn a_summary_longer_than_its_input_is_flagged() {
    // 100 tokens of content (the reply's 17 and the user's 83), a brief asked of 50 and
    // answered with 80: not a compression.
    let input = Conversation::new(vec![
        Message::text(Role::System, "sys"),
        task(),
        reply(),
        Message::text(Role::User, "x".repeat(76)),
        Message::text(Role::Assistant, "ok"),
    ]);
    let provider = Arc::new(ScriptedProvider::always("y".repeat(80)));
    let chain = stage_chain(json!({}), provider, Encoding::CharsPerToken(1.0), 1);
    let out = rt()
        .block_on(chain.compact(input, &CompactOptions::default()))
        .unwrap();
    let run = stage(&out);
    // 80 < 100 tokens: a compression, no warning.
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);

    // A prior summary of 200 tokens and 125 of content (100 of text and an image, which
    // renders as a short note): a summary of 330 tokens is longer than the 325 it stands for.
    // (The conversation still shrinks, as the host counts the image's encoding.)
    let image = format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}"#,
        "A".repeat(4_000)
    );
    let input = Conversation::new(vec![
        Message::text(Role::System, "sys"),
        sdk::summary_message(&"p".repeat(200), "pg_prior", NAME, SummaryStatus::Final),
        Message::text(Role::User, "x".repeat(93)),
        Message::new(
            Role::User,
            vec![ContentBlock::Opaque { json: image.into() }],
        ),
        Message::text(Role::Assistant, "ok"),
    ]);
    let provider = Arc::new(ScriptedProvider::always("y".repeat(330)));
    // The prior summary is folded into the new one (keep_summaries_share 0).
    let config = json!({"keep_summaries_share": 0.0});
    let chain = stage_chain(config, provider, Encoding::CharsPerToken(1.0), 1);
    let mut input = input;
    chain.seal_summaries(input.messages.as_mut_slice());
    let out = rt()
        .block_on(chain.compact(input, &CompactOptions::default()))
        .unwrap();
    let run = stage(&out);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.details["level"], "brief");
    assert_eq!(run.details["input_tokens"], 325);
    assert_eq!(run.details["output_tokens"], 330);
    assert!(
        run.warnings
            .iter()
            .any(|w| w.contains("compression ratio 1.02 > 1")),
        "{run:?}"
    );
}

#[test]
fn a_growing_conversation_repeats_its_older_map_requests_exactly() {
    let full = corpus_mix(200);
    let units = sdk::units(&full.messages);
    let cut = units
        .iter()
        .map(|u| u.range.end)
        .find(|&end| end >= full.messages.len() * 2 / 3)
        .unwrap();
    let short = full.with_messages(full.messages[..cut].to_vec());
    let provider = Arc::new(ScriptedProvider::matching([ScriptedResponse::echo()]));
    let chain = stage_chain(json!({}), provider.clone(), Encoding::O200kBase, 4);

    let out_short = compact(&chain, &short);
    assert_eq!(stage(&out_short).status, StageStatus::Acted);
    let short_requests = provider.requests();
    let out_full = compact(&chain, &full);
    assert_eq!(stage(&out_full).status, StageStatus::Acted);
    let full_requests = provider.requests()[short_requests.len()..].to_vec();

    let short_maps = maps(&short_requests);
    let full_maps = maps(&full_requests);
    assert!(short_maps.len() >= 4, "{}", short_maps.len());
    assert!(full_maps.len() > short_maps.len());
    let settled = short_maps.len() - 1;
    for i in 0..settled {
        assert_eq!(
            short_maps[i],
            full_maps[i],
            "map request {} changed when the conversation grew",
            i + 1
        );
    }

    // Determinism: the same input and answers give the same requests and output.
    let again = compact(&chain, &full);
    let again_requests = provider.requests()[short_requests.len() + full_requests.len()..].to_vec();
    assert_eq!(again_requests, full_requests);
    assert_eq!(again.conversation, out_full.conversation);
}

#[test]
fn real_conversations_in_both_wire_formats() {
    let provider: Arc<dyn Provider> = Arc::new(ExtractiveSummarizer::default());
    let chain = stage_chain(json!({}), provider, Encoding::O200kBase, 10);
    let rt = rt();
    for name in corpus_names() {
        for format in ["anthropic", "openai"] {
            let ctx = format!("{name} ({format})");
            let (input, fmt) = wire::parse_str(&corpus(format, &name), None).unwrap();
            let options = CompactOptions {
                format: Some(fmt),
                ..Default::default()
            };
            let out = rt.block_on(chain.compact(input.clone(), &options)).unwrap();
            let run = stage(&out);
            assert_eq!(run.status, StageStatus::Acted, "{ctx}: {run:?}");
            assert_eq!(run.details["level"], "map-reduce", "{ctx}");
            assert!(
                run.details["compression_ratio"].as_f64().unwrap() < 1.0,
                "{ctx}"
            );
            assert!(run.warnings.is_empty(), "{ctx}: {:?}", run.warnings);
            assert!(out.report.tokens_after < out.report.tokens_before, "{ctx}");

            // One summary where the span was; the span is in its page, in order.
            // After the system prompt and the task.
            let lead = tamp_plugin_api::sdk::protected_head(&input.messages);
            let removed = run.messages_removed as usize;
            assert_eq!(
                out.conversation.messages.len(),
                input.messages.len() - removed + 1,
                "{ctx}"
            );
            let summary = &out.conversation.messages[lead];
            let info = summary
                .summary_info()
                .expect("a summary after the system prompt and the task");
            assert_eq!(info.strategy.as_str(), NAME);
            assert_eq!(info.status, SummaryStatus::Final);
            assert!(!summary.joined_text().trim().is_empty());
            let page = rt.block_on(chain.store().get_page(&info.page_ref)).unwrap();
            assert_eq!(
                page.page.messages.as_slice(),
                &input.messages[lead..lead + removed],
                "{ctx}"
            );
            assert_eq!(
                out.conversation.messages[lead + 1..],
                input.messages[lead + removed..],
                "{ctx}"
            );

            // Valid in its wire format, and reads back to the same conversation.
            assert_wire_round_trip(&out.conversation, fmt, &ctx);
        }
    }
}

#[test]
fn invalid_configs_are_refused_naming_the_field() {
    let plugin = load_plugin(&plugin("tamp_map_reduce_adaptive")).unwrap();
    for (config, field) in [
        (json!({"chunk_overlap": 3500}), "chunk_overlap"),
        (json!({"content_type": "poetry"}), "content_type"),
        (json!({"chunk_sise": 10}), "chunk_sise"),
        (json!({"none_below": 900}), "brief_below"),
    ] {
        let err = tamp_e2e::refusal(&plugin, &config);
        assert!(err.contains(field), "{config}: {err}");
    }
    for content_type in ["conversation", "document", "journal", "general"] {
        ChainBuilder::new(BudgetConfig::default())
            .stage(
                "s",
                plugin.clone(),
                json!({ "content_type": content_type }),
                Trigger::Always,
                Duration::from_secs(1),
            )
            .unwrap_or_else(|e| panic!("{content_type}: {e}"));
    }
}

/// `texts` as turns, the user's first, then the assistant's, and so on.
fn alternating(texts: &[String]) -> impl Iterator<Item = Message> + '_ {
    texts.iter().enumerate().map(|(i, text)| {
        let role = if i % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        Message::text(role, text.as_str())
    })
}

/// The conversation going on after a compaction: `more` turns inserted before its last two
/// messages (the protected tail of these tests).
fn grow(out: &Compacted, more: &[String]) -> Conversation {
    let mut messages: Vec<Message> = out.conversation.messages.to_vec();
    let tail = messages.split_off(messages.len() - 2);
    messages.extend(alternating(more));
    messages.extend(tail);
    Conversation::new(messages)
}

/// Prefix-preserving compaction (issue 16, part 3): an earlier summary that fits in
/// `keep_summaries_share` of the budget stays byte for byte where it was and the new summary
/// goes after it; once the summaries outgrow that share they are folded into one.
#[test]
fn earlier_summaries_stay_in_place_until_they_outgrow_their_share() {
    let provider = Arc::new(ScriptedProvider::always("Summary written by request {n}."));
    let config = json!({"chunk_size": 400, "chunk_overlap": 40});
    let chain = stage_chain(config, provider.clone(), Encoding::O200kBase, 2);
    let prose = corpus_prose(30_000);
    let paragraphs: Vec<String> = prose.split("\n\n").map(str::to_string).collect();
    let thirds: Vec<&[String]> = paragraphs.chunks(paragraphs.len() / 3 + 1).collect();

    let first = compact(&chain, &conversation_of(thirds[0]));
    let s1 = our_summaries(&first.conversation)[0].clone();
    let head = tamp_plugin_api::sdk::protected_head(&first.conversation.messages);
    assert_eq!(first.conversation.messages[head], s1);

    let sent_before = provider.requests().len();
    let second = compact(&chain, &grow(&first, thirds[1]));
    let run = stage(&second);
    assert_eq!(run.status, StageStatus::Acted, "{run:?}");
    assert_eq!(run.details["summaries_kept"], 1);
    // The prefix up to and including the first summary is unchanged; the new one follows.
    assert_eq!(
        second.conversation.messages[..=head],
        first.conversation.messages[..=head]
    );
    let summaries = our_summaries(&second.conversation);
    assert_eq!(summaries.len(), 2);
    assert_eq!(summaries[0], &s1);
    assert!(second.conversation.messages[head + 1].is_summary());
    // Nothing of the first summary was sent again.
    assert!(provider.requests()[sent_before..]
        .iter()
        .all(|r| !r.prompt.contains(&s1.joined_text())));

    // Summaries that outgrow their share (here: any) are folded into one again.
    let tight = stage_chain(
        json!({"chunk_size": 400, "chunk_overlap": 40, "keep_summaries_share": 0.0}),
        provider.clone(),
        Encoding::O200kBase,
        2,
    );
    let third = compact(&tight, &grow(&second, thirds[2]));
    assert_eq!(stage(&third).details["summaries_kept"], 0);
    assert_eq!(our_summaries(&third.conversation).len(), 1);
}
