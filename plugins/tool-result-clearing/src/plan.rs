//! What to clear: a pure decision over the conversation, so it is tested without a host.
//!
//! Eligible are the tool results inside the compactable range, outside pinned units
//! (`sdk::pinned`: a tool exchange holding a message tamp does not know is kept verbatim),
//! that belong to none of the
//! `keep` most recent tool uses, whose tool is not excluded, that are not cleared already and
//! that hold at least `min_result_tokens` (and, with `clear_tool_inputs`, the inputs of those
//! calls). All of them are cleared at once, or none when together they free less than
//! `clear_at_least`. Since the eligible set only grows at its newer end as a conversation
//! grows, and a message is always cleared the same way (its placeholders name its own
//! content address), what was cleared once stays cleared byte for byte: the prefix before the
//! oldest newly cleared result is unchanged.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use tamp_plugin_api::page::PAGE_ID_HEX_LEN;
use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::clearing::{self, Clearing};

use crate::config::{note, Config};

/// How the decision counts tokens (the host's tokenizer, in the plugin).
pub trait Tokens {
    /// Tokens of one whole message (the host memoizes these).
    fn message(&self, message: &Message) -> u64;
    fn text(&self, text: &str) -> u64;
}

/// One block to clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub index: usize,
    pub block: usize,
    /// The tool's name ("" when its call is not in the conversation).
    pub tool: String,
    /// A tool result (else the call's input).
    pub result: bool,
    /// The block's tokens as it is.
    pub tokens: u64,
}

/// What the stage will do.
#[derive(Debug)]
pub enum Decision {
    /// Nothing, and why.
    Leave(String),
    /// These clearings, one per message, and the tokens they free in all.
    Clear {
        clearings: Vec<Clearing>,
        freed: u64,
        results: usize,
        inputs: usize,
    },
}

/// A tool call: where it is, and which tool.
#[derive(Clone, Copy)]
struct Call<'a> {
    index: usize,
    block: usize,
    tool: &'a str,
}

/// The conversation's calls by id, and the ids of the `keep` most recent.
struct Calls<'a> {
    by_id: HashMap<&'a str, Call<'a>>,
    kept: HashSet<&'a str>,
}

impl<'a> Calls<'a> {
    fn of(messages: &'a [Message], keep: usize) -> Self {
        let mut by_id = HashMap::new();
        let mut order = Vec::new();
        for (index, m) in messages.iter().enumerate() {
            for (block, b) in m.content.iter().enumerate() {
                if let ContentBlock::ToolUse { id, name, .. } = b {
                    by_id.insert(
                        id.as_str(),
                        Call {
                            index,
                            block,
                            tool: name.as_str(),
                        },
                    );
                    order.push(id.as_str());
                }
            }
        }
        let kept = order.iter().rev().take(keep).copied().collect();
        Calls { by_id, kept }
    }
}

/// The tokens of block `b` of `m`: the whole message's (memoized by the host) when it is the
/// only block, which is the common case; else its own text's.
fn block_tokens(m: &Message, b: usize, tokens: &dyn Tokens) -> u64 {
    if m.content.len() == 1 {
        return tokens.message(m);
    }
    match &m.content[b] {
        ContentBlock::ToolResult { content, .. } => content
            .iter()
            .map(|part| match part {
                ToolResultPart::Text { text } => tokens.text(text),
                ToolResultPart::Opaque { json } => tokens.text(json),
            })
            .sum(),
        ContentBlock::ToolUse { input_json, .. } => tokens.text(input_json),
        _ => 0,
    }
}

/// Decides what to clear in `messages`, whose compactable range is `range`; `note_template`
/// is the config's, checked when the stage was built.
pub fn decide(
    messages: &[Message],
    range: Range<usize>,
    config: &Config,
    note_template: &Template,
    tokens: &dyn Tokens,
) -> Decision {
    let calls = Calls::of(messages, config.keep);
    let pinned: HashSet<usize> = sdk::units(messages)
        .into_iter()
        .filter(|u| u.is_pinned())
        .flat_map(|u| u.range)
        .collect();
    let clearable = |i: usize| range.contains(&i) && !pinned.contains(&i);
    let mut targets: Vec<Target> = Vec::new();
    let mut inputs: Vec<Target> = Vec::new();
    for i in range.clone().filter(|&i| clearable(i)) {
        let m = &messages[i];
        for (b, block) in m.content.iter().enumerate() {
            let ContentBlock::ToolResult { tool_use_id, .. } = block else {
                continue;
            };
            let id = tool_use_id.as_str();
            let call = calls.by_id.get(id).copied();
            let tool = call.map_or("", |c| c.tool);
            if calls.kept.contains(id)
                || config.exclude_tools.iter().any(|t| t == tool)
                || clearing::is_cleared(block)
            {
                continue;
            }
            let size = block_tokens(m, b, tokens);
            if size < config.min_result_tokens {
                continue;
            }
            targets.push(Target {
                index: i,
                block: b,
                tool: tool.to_string(),
                result: true,
                tokens: size,
            });
            if let Some(Call {
                index: ci,
                block: cb,
                ..
            }) = call.filter(|_| config.clear_tool_inputs)
            {
                let call_block = &messages[ci].content[cb];
                if clearable(ci) && !clearing::is_cleared(call_block) {
                    let size = block_tokens(&messages[ci], cb, tokens);
                    inputs.push(Target {
                        index: ci,
                        block: cb,
                        tool: tool.to_string(),
                        result: false,
                        tokens: size,
                    });
                }
            }
        }
    }
    if targets.is_empty() {
        return Decision::Leave(format!(
            "no tool result to clear (the {} most recent tool uses are kept; results under {} \
             tokens, excluded tools and cleared ones are left)",
            config.keep, config.min_result_tokens
        ));
    }
    targets.extend(inputs);

    // A placeholder's size, counted once per tool (with the widest number and a page id's
    // length), not once per block: the tokenizer is the costly part of a first compaction that
    // clears hundreds of outputs. A block no larger than its placeholder is left alone.
    let sample_page = format!("pg_{}", "0".repeat(PAGE_ID_HEX_LEN));
    let mut sizes: HashMap<(String, bool), u64> = HashMap::new();
    let mut worth: Vec<(&Target, u64)> = Vec::with_capacity(targets.len());
    for t in &targets {
        let key = (t.tool.clone(), t.result);
        let size = match sizes.get(&key) {
            Some(&size) => size,
            None => {
                let text = if t.result {
                    let note = note(note_template, &t.tool, u64::MAX, &sample_page);
                    clearing::result_placeholder(&sample_page, &note)
                } else {
                    clearing::input_placeholder(&sample_page)
                };
                *sizes.entry(key).or_insert(tokens.text(&text))
            }
        };
        if t.tokens > size {
            worth.push((t, t.tokens - size));
        }
    }
    let results = worth.iter().filter(|(t, _)| t.result).count();
    let input_count = worth.len() - results;
    if results == 0 {
        return Decision::Leave("no tool result is larger than its placeholder would be".into());
    }

    // One clearing per message, oldest first.
    let mut by_message: BTreeMap<usize, Clearing> = BTreeMap::new();
    let mut freed = 0u64;
    for (t, gain) in worth {
        let clearing = by_message
            .entry(t.index)
            .or_insert_with(|| Clearing::new(&messages[t.index], t.index));
        if t.result {
            let note = note(note_template, &t.tool, t.tokens, clearing.page());
            clearing.clear_result(t.block, &note);
        } else {
            clearing.clear_input(t.block);
        }
        freed += gain;
    }
    if freed < config.clear_at_least {
        return Decision::Leave(format!(
            "clearing {results} tool result(s) would free about {freed} tokens, less than \
             clear_at_least ({})",
            config.clear_at_least
        ));
    }
    Decision::Clear {
        clearings: by_message.into_values().collect(),
        freed,
        results,
        inputs: input_count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::sdk::pinned::{mark_opaque, Opaque};

    /// A word per token, and a message is its blocks' words plus 3.
    struct Words;
    impl Tokens for Words {
        fn message(&self, m: &Message) -> u64 {
            3 + m
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { text, .. } => self.text(text),
                    ContentBlock::ToolUse { input_json, .. } => self.text(input_json),
                    ContentBlock::ToolResult { content, .. } => content
                        .iter()
                        .map(|p| match p {
                            ToolResultPart::Text { text } => self.text(text),
                            ToolResultPart::Opaque { json } => self.text(json),
                        })
                        .sum(),
                    ContentBlock::Opaque { json } => self.text(json),
                })
                .sum::<u64>()
        }
        fn text(&self, text: &str) -> u64 {
            text.split_whitespace().count() as u64
        }
    }

    fn call(id: &str, tool: &str) -> Message {
        let input = format!("{{\"cmd\": \"{}\"}}", "word ".repeat(30));
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(id, tool, input)],
        )
    }

    fn result(id: &str, words: usize) -> Message {
        let output = "out ".repeat(words);
        Message::new(
            Role::Tool,
            vec![ContentBlock::tool_result(id, output, false)],
        )
    }

    /// System, task, then `n` exchanges of `words`-word results (tool `bash`, the third `memory`).
    fn session(n: usize, words: usize) -> Vec<Message> {
        let mut m = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
        ];
        for k in 0..n {
            let id = format!("c{k}");
            m.push(call(&id, if k == 2 { "memory" } else { "bash" }));
            m.push(result(&id, words));
        }
        m
    }

    /// The defaults, but clearing whatever is eligible however little it frees.
    fn eager() -> Config {
        Config {
            clear_at_least: 0,
            ..Config::default()
        }
    }

    /// The decision with `config`'s own note template.
    fn run(m: &[Message], range: Range<usize>, config: &Config) -> Decision {
        decide(m, range, config, &config.note_template().unwrap(), &Words)
    }

    fn cleared(decision: Decision) -> Vec<(usize, Message)> {
        match decision {
            Decision::Clear { clearings, .. } => clearings
                .into_iter()
                .map(|c| (c.index(), c.message().clone()))
                .collect(),
            Decision::Leave(why) => panic!("left: {why}"),
        }
    }

    #[test]
    fn old_results_are_cleared_except_the_kept_and_excluded_ones() {
        let m = session(8, 200);
        let config = Config {
            exclude_tools: vec!["memory".into()],
            ..eager()
        };
        let done = cleared(run(&m, 2..m.len(), &config));
        // 8 results at 3, 5, ..., 17: the last 3 kept, c2 (memory) excluded.
        let indices: Vec<usize> = done.iter().map(|(i, _)| *i).collect();
        assert_eq!(indices, [3, 5, 9, 11]);
        for (i, message) in &done {
            assert_eq!(
                message.tool_result_ids().collect::<Vec<_>>(),
                m[*i].tool_result_ids().collect::<Vec<_>>()
            );
            assert!(clearing::is_cleared(&message.content[0]));
            let ContentBlock::ToolResult { content, .. } = &message.content[0] else {
                panic!()
            };
            let ToolResultPart::Text { text } = &content[0] else {
                panic!()
            };
            assert!(
                text.contains("Output of bash (203 tokens) cleared; recall this page to read it."),
                "{text}"
            );
        }
    }

    #[test]
    fn an_exchange_holding_an_opaque_message_is_left_whole() {
        let mut m = session(8, 200);
        // The result of c1 (at 5) also holds a block tamp does not know: its exchange is pinned.
        let fancy = Opaque::parse("block:fancy").unwrap();
        m[5] = mark_opaque(m[5].clone(), &fancy);
        let config = Config {
            clear_tool_inputs: true,
            ..eager()
        };
        let done = cleared(run(&m, 2..m.len(), &config));
        let indices: Vec<usize> = done.iter().map(|(i, _)| *i).collect();
        assert!(
            !indices.contains(&4) && !indices.contains(&5),
            "{indices:?}"
        );
        assert!(indices.contains(&3), "{indices:?}");
    }

    #[test]
    fn small_results_the_protected_tail_and_clear_at_least_hold_it_back() {
        let m = session(8, 50);
        let leave = run(&m, 2..m.len(), &eager());
        assert!(
            matches!(leave, Decision::Leave(ref why) if why.contains("no tool result")),
            "{leave:?}"
        );
        let m = session(8, 200);
        // Only messages before 7 are compactable: results 3 and 5.
        let done = cleared(run(&m, 2..7, &eager()));
        assert_eq!(done.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [3, 5]);
        // The default clear_at_least (2,000) holds back the 5 results' ~1,000 tokens.
        let leave = run(&m, 2..m.len(), &Config::default());
        assert!(
            matches!(leave, Decision::Leave(ref why) if why.contains("clear_at_least")),
            "{leave:?}"
        );
    }

    #[test]
    fn inputs_are_cleared_when_asked_and_nothing_twice() {
        let m = session(6, 200);
        let config = Config {
            clear_tool_inputs: true,
            keep: 1,
            ..eager()
        };
        let Decision::Clear {
            results, inputs, ..
        } = run(&m, 2..m.len(), &config)
        else {
            panic!()
        };
        assert_eq!((results, inputs), (5, 5));
        let mut once = m.clone();
        for (i, message) in cleared(run(&m, 2..m.len(), &config)) {
            once[i] = message;
        }
        assert!(
            clearing::is_cleared(&once[2].content[0]),
            "the first call's input"
        );
        let again = run(&once, 2..once.len(), &config);
        assert!(matches!(again, Decision::Leave(_)), "{again:?}");
        // Grown by two exchanges: only what aged is cleared, and the rest stays byte for byte.
        let mut grown = once.clone();
        grown.extend(session(8, 200).split_off(14));
        let done = cleared(run(&grown, 2..grown.len(), &config));
        assert_eq!(
            done.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [12, 13, 14, 15]
        );
        let mut direct = m.clone();
        direct.extend(session(8, 200).split_off(14));
        for (i, message) in cleared(run(&direct, 2..direct.len(), &config)) {
            direct[i] = message;
        }
        for (i, message) in done {
            grown[i] = message;
        }
        assert_eq!(
            grown, direct,
            "cleared step by step or at once, the same bytes"
        );
    }
}
