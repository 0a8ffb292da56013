//! Test fixture for the conformance kit. With the default config it is a correct strategy:
//! it replaces the oldest run of compactable units with an LLM summary (capped, and only
//! when that makes the conversation smaller) through a `Summarize` edit, and returns an error
//! when the LLM fails. With plugin-api 0.2 a stage returns edits that the host checks, so
//! most rules can only be broken by asking for an edit the host refuses. `break` names the one rule of `docs/plugin-spec.md` it should break, so the
//! kit can show that each check catches what it should and nothing else:
//!
//! | `break` | what it does wrong |
//! | --- | --- |
//! | `TAMP-CFG-02` | panics in its constructor on a `max_summary_chars` above the schema's maximum |
//! | `TAMP-INV-01` | archives the run without its last message, and replaces the whole run by a summary of that page |
//! | `TAMP-INV-02` | summarizes a tool exchange without its last result message |
//! | `TAMP-INV-03` | summarizes through the last (protected) message |
//! | `TAMP-INV-04` | returns two edits that overlap |
//! | `TAMP-INV-05` | on an LLM error, acts anyway with a stand-in text and says nothing |
//! | `TAMP-INV-06` | pads its summary until the conversation is larger than it was |
//! | `TAMP-INV-07` | numbers its summaries with a per-instance counter |
//! | `TAMP-INV-09` | puts the LLM's answer into the conversation uncapped |
//! | `TAMP-EDGE-03` | cuts a preview of the first replaced text at a byte index |
//! | `TAMP-CONC-01` | keeps the conversation in instance state across an await |
//! | `TAMP-INV-10:no-page` | clears a tool result to a placeholder that names no page |
//! | `TAMP-INV-10:tool-id` | clears a tool result and changes its tool id |
//! | `TAMP-INV-10:dropped-block` | clears a tool message and drops its last block |
//! | `TAMP-INV-01:clearing` | clears a tool result to a placeholder naming another page |
//! | `TAMP-INV-03:clearing` | clears the last tool message, inside the protected tail |
//! | `TAMP-INV-11` | summarizes a mid-conversation system message (a pinned unit) not said again later |
//! | `TAMP-INV-12` | summarizes an opaque unit (a message tamp's reader did not know) |
//! | `TAMP-INV-13` | summarizes what lies between the task and the end of a compaction boundary |
//! | `abort` | aborts the process in `compact` |
//! | `hang` | blocks its thread forever in `compact` (not even the host's timeout fires) |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::clearing::{self, Clearing};
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};

const BREAKS: &[&str] = &[
    "TAMP-CFG-02",
    "TAMP-INV-01",
    "TAMP-INV-02",
    "TAMP-INV-03",
    "TAMP-INV-04",
    "TAMP-INV-05",
    "TAMP-INV-06",
    "TAMP-INV-07",
    "TAMP-INV-09",
    "TAMP-EDGE-03",
    "TAMP-CONC-01",
    "TAMP-INV-10:no-page",
    "TAMP-INV-10:tool-id",
    "TAMP-INV-10:dropped-block",
    "TAMP-INV-01:clearing",
    "TAMP-INV-03:clearing",
    "TAMP-INV-11",
    "TAMP-INV-12",
    "TAMP-INV-13",
    "abort",
    "hang",
];

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// The rule to break (see the crate docs), or none.
    #[serde(rename = "break")]
    pub break_rule: Option<String>,
    /// Cap on the summary text, in characters.
    #[schemars(range(min = 16, max = 100000))]
    pub max_summary_chars: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            break_rule: None,
            max_summary_chars: 400,
        }
    }
}

pub struct RuleBreaker {
    config: Config,
    breaks: &'static str,
    counter: AtomicU64,
    /// Only used by the `TAMP-CONC-01` break: state shared by every call on this instance.
    slot: Mutex<Option<Vec<Message>>>,
}

impl Strategy for RuleBreaker {
    type Config = Config;
    const NAME: &'static str = "rule-breaker";
    const DESCRIPTION: &'static str =
        "Test fixture: summarizes the oldest messages, breaking the rule its config names.";

    fn new(config: Config) -> Result<Self, PluginError> {
        let breaks = match config.break_rule.as_deref() {
            None => "",
            Some(rule) => BREAKS.iter().copied().find(|b| *b == rule).ok_or_else(|| {
                PluginError::invalid_config(format!(
                    "break: unknown rule {rule:?}; one of {}",
                    BREAKS.join(", ")
                ))
            })?,
        };
        if breaks == "TAMP-CFG-02" {
            // The bug: trusting that the host validated the config against the schema.
            assert!(
                config.max_summary_chars <= 100_000,
                "max_summary_chars out of range"
            );
        }
        Ok(RuleBreaker {
            config,
            breaks,
            counter: AtomicU64::new(0),
            slot: Mutex::new(None),
        })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        match self.breaks {
            "abort" => std::process::abort(),
            "hang" => loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            },
            _ => {}
        }
        let mut messages = conversation.messages.to_vec();
        let range = sdk::compactable_range(&messages, budget.keep_recent as usize);
        if self.breaks.contains(":") {
            return Ok(bad_clearing(&messages, range, self.breaks));
        }
        if let Some(span) = pinned_span(&messages, range.clone(), self.breaks) {
            return Ok(CompactOutcome::with_edits(
                vec![Edit::summarize(span, "summary")],
                StageReport::acted("summarized what it must leave alone"),
            ));
        }
        let candidates: Vec<Unit> = sdk::units(&messages)
            .into_iter()
            .filter(|u| {
                range.start <= u.range.start
                    && u.range.end <= range.end
                    && u.kind != UnitKind::System
            })
            .collect();
        let Some(first) = candidates.first() else {
            return Ok(CompactOutcome::unchanged("nothing compactable"));
        };
        // The first run of adjacent compactable units.
        let mut end = first.range.end;
        for unit in &candidates[1..] {
            if unit.range.start != end {
                break;
            }
            end = unit.range.end;
        }
        let run = first.range.start..end;

        if self.breaks == "TAMP-CONC-01" {
            *self.slot.lock().unwrap() = Some(messages.clone());
            yield_once().await;
            if let Some(stashed) = self.slot.lock().unwrap().take() {
                messages = stashed;
            }
        }
        let material = render_messages(&messages[run.clone()], &RenderOptions::default());
        let request = LlmRequest::new(
            "",
            format!(
                "Summarize this conversation excerpt briefly.\n<content>\n{material}</content>"
            ),
            200,
        );
        let mut text = match host.complete(request).await {
            Ok(answer) if self.breaks == "TAMP-INV-09" => answer.text.to_string(),
            Ok(answer) => sdk::cap_chars(answer.text.trim(), self.config.max_summary_chars),
            Err(_) if self.breaks == "TAMP-INV-05" => "summary unavailable".to_string(),
            Err(e) => return Err(e),
        };
        if self.breaks == "TAMP-EDGE-03" {
            // The first replaced message that has text (a tool call may have none).
            let first_text = messages[run.clone()]
                .iter()
                .map(|m| m.joined_text())
                .find(|t| !t.is_empty())
                .unwrap_or_default();
            let preview = &first_text[..first_text.len().min(9)];
            text = format!("{preview}: {text}");
        }
        if self.breaks == "TAMP-INV-07" {
            let n = self.counter.fetch_add(1, Ordering::Relaxed);
            text = format!("summary #{n}: {text}");
        }

        let summary_edit = |span: std::ops::Range<usize>, text: &str| Edit::summarize(span, text);
        let edits = match self.breaks {
            "TAMP-INV-01" => {
                // The page misses the run's last message, yet the summary stands for all of it.
                let mut archived = messages[run.clone()].to_vec();
                archived.pop();
                let page = if archived.is_empty() {
                    "pg_missing".to_string()
                } else {
                    host.archive_page(archived, None).await?
                };
                let summary = sdk::summary_message(&text, &page, Self::NAME, SummaryStatus::Final);
                vec![Edit::replace(run.clone(), summary)]
            }
            "TAMP-INV-02" => {
                let exchange = candidates
                    .iter()
                    .find(|u| u.kind == UnitKind::ToolExchange && u.range.len() > 1);
                match exchange {
                    // The call and all but the last result message.
                    Some(u) => vec![summary_edit(u.range.start..u.range.end - 1, &text)],
                    None => vec![summary_edit(run.clone(), &text)],
                }
            }
            "TAMP-INV-03" => vec![summary_edit(run.start..messages.len(), &text)],
            "TAMP-INV-04" => vec![
                summary_edit(run.clone(), &text),
                summary_edit(first.range.clone(), &text),
            ],
            "TAMP-INV-06" => {
                let before = host.count_message_tokens(&messages[run.clone()]);
                while !summary_bigger(&host, &text, before) {
                    // Whole stretches at a time: a run may be a 400 kB message.
                    let now = summary_tokens(&host, &text);
                    text.push_str(&" pad".repeat((before + 1 - now.min(before)) as usize + 1));
                }
                vec![summary_edit(run.clone(), &text)]
            }
            _ => {
                if !host.summary_is_smaller(&text, &messages[run.clone()]) {
                    return Ok(CompactOutcome::unchanged(
                        "a summary would not make the conversation smaller",
                    ));
                }
                vec![summary_edit(run.clone(), &text)]
            }
        };
        let report = StageReport::acted(format!("summarized {} message(s)", run.len()));
        Ok(CompactOutcome::with_edits(edits, report))
    }
}

/// The span the pinning breaks summarize, if the conversation has what they break: a
/// pinned unit inside the compactable range or at its start (a system message for
/// `TAMP-INV-11`, an opaque unit for `TAMP-INV-12`), or what lies between the protected head
/// and the end of the last compaction boundary's unit (`TAMP-INV-13`).
fn pinned_span(
    messages: &[Message],
    range: std::ops::Range<usize>,
    breaks: &str,
) -> Option<std::ops::Range<usize>> {
    let units = sdk::units(messages);
    let head = sdk::protected_head(messages);
    let boundary = sdk::pinned::boundary_end(messages, &units);
    let opaque = |u: &Unit| {
        messages[u.range.clone()]
            .iter()
            .any(|m| !sdk::pinned::opaque(m).is_empty())
    };
    // A system message said again later may go into a page (`sdk::pinned::repeated_later`):
    // summarizing that copy breaks nothing.
    let repeated = sdk::pinned::repeated_later(messages);
    let pinned = |want_opaque: bool| {
        units
            .iter()
            .find(|u| {
                u.is_pinned()
                    && u.range.start >= head.max(boundary)
                    && u.range.end <= range.end
                    && opaque(u) == want_opaque
                    && !repeated[u.range.start]
            })
            .map(|u| u.range.clone())
    };
    match breaks {
        "TAMP-INV-11" => pinned(false),
        "TAMP-INV-12" => pinned(true),
        "TAMP-INV-13" => (boundary > head && boundary <= range.end).then_some(head..boundary),
        _ => None,
    }
}

/// A clearing broken as `breaks` says: of the first tool message in `range` (or, for the
/// protected tail, of the last tool message of all).
fn bad_clearing(
    messages: &[Message],
    range: std::ops::Range<usize>,
    breaks: &str,
) -> CompactOutcome {
    let has_tool_blocks =
        |m: &Message| m.tool_result_ids().next().is_some() || m.tool_use_ids().next().is_some();
    let target = if breaks == "TAMP-INV-03:clearing" {
        // The last tool message in the protected tail.
        messages
            .iter()
            .rposition(has_tool_blocks)
            .filter(|&i| i >= range.end)
    } else {
        (range.start..range.end).find(|&i| {
            has_tool_blocks(&messages[i]) && !messages[i].content.iter().any(clearing::is_cleared)
        })
    };
    let Some(index) = target else {
        return CompactOutcome::unchanged("no tool message to clear");
    };
    let original = &messages[index];
    let mut cleared = Clearing::new(original, index);
    for b in 0..original.content.len() {
        cleared.clear_result(b, "Output cleared.");
        cleared.clear_input(b);
    }
    let mut message = cleared.message().clone();
    let changed: Vec<usize> = (0..message.content.len())
        .filter(|&b| message.content[b] != original.content[b])
        .collect();
    let elsewhere = tamp_plugin_api::page::page_id(&messages[..index]);
    for (n, &b) in changed.iter().enumerate() {
        match (breaks, &mut message.content[b]) {
            ("TAMP-INV-10:no-page", ContentBlock::ToolResult { content, .. }) if n == 0 => {
                *content = vec![ToolResultPart::Text {
                    text: "[output cleared]".into(),
                }]
                .into();
            }
            ("TAMP-INV-10:no-page", ContentBlock::ToolUse { input_json, .. }) if n == 0 => {
                *input_json = "{}".into();
            }
            (
                "TAMP-INV-10:tool-id",
                ContentBlock::ToolResult {
                    tool_use_id: id, ..
                },
            )
            | ("TAMP-INV-10:tool-id", ContentBlock::ToolUse { id, .. })
                if n == 0 =>
            {
                *id = format!("{id}_changed").into();
            }
            // Every placeholder names the same page, but not the original's.
            ("TAMP-INV-01:clearing", ContentBlock::ToolResult { content, .. }) => {
                *content = vec![ToolResultPart::Text {
                    text: clearing::result_placeholder(&elsewhere, "Output cleared.").into(),
                }]
                .into();
            }
            ("TAMP-INV-01:clearing", ContentBlock::ToolUse { input_json, .. }) => {
                *input_json = clearing::input_placeholder(&elsewhere).into();
            }
            _ => {}
        }
    }
    if breaks == "TAMP-INV-10:dropped-block" {
        let mut blocks = message.content.to_vec();
        blocks.pop();
        message.content = blocks.into();
    }
    CompactOutcome::with_edits(
        vec![Edit::clear(index, message)],
        StageReport::acted(format!("cleared messages[{index}]")),
    )
}

/// Whether a summary of `text` would cost more than `tokens`.
fn summary_bigger(host: &Host, text: &str, tokens: u64) -> bool {
    summary_tokens(host, text) > tokens
}

fn summary_tokens(host: &Host, text: &str) -> u64 {
    let summary = sdk::summary_message(text, "", RuleBreaker::NAME, SummaryStatus::Final);
    host.count_message_tokens(std::slice::from_ref(&summary))
}

/// Yields once to the executor (the plugin carries no runtime of its own).
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

export_plugin!(RuleBreaker);
