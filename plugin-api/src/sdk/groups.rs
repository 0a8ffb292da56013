//! Grouping units for summarization, and measuring where they sit in a conversation.
//!
//! Strategies that summarize old parts of a conversation in batches all need the same few
//! things: how far a unit is from the end (its age), the units inside a range, runs of units
//! that sit next to each other, those runs cut into groups of at most N units, and which tools
//! a run of messages called and whether any call failed. Which units to pick, and when, is the
//! strategy's policy; the helpers here only measure and cut.

use std::collections::HashMap;
use std::ops::Range;

use crate::conversation::{ContentBlock, Message};
use crate::sdk::exchanges::Unit;
use crate::sdk::failure::failed;
use crate::sdk::prompt::result_text;

/// How many messages come after the messages in `range`, in a conversation of `len` messages:
/// 0 for a unit that ends the conversation. This is a unit's age measured in messages: it only
/// grows as the conversation grows at its end.
pub fn distance_from_end(range: &Range<usize>, len: usize) -> usize {
    len.saturating_sub(range.end)
}

/// The units lying wholly inside `range`, in order (a unit straddling either edge is left out).
pub fn units_within<'a>(
    units: &'a [Unit],
    range: &'a Range<usize>,
) -> impl Iterator<Item = &'a Unit> + 'a {
    units
        .iter()
        .filter(move |u| range.start <= u.range.start && u.range.end <= range.end)
}

/// Consecutive units, covering the messages `range` with no gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// From the first unit's first message to the last unit's last message.
    pub range: Range<usize>,
    /// The units, in order.
    pub units: Vec<Unit>,
}

impl Group {
    fn starting_with(unit: &Unit) -> Self {
        Group {
            range: unit.range.clone(),
            units: vec![unit.clone()],
        }
    }

    fn push(&mut self, unit: &Unit) {
        self.range.end = unit.range.end;
        self.units.push(unit.clone());
    }
}

/// Splits `units` (in conversation order, e.g. a strategy's picks) into maximal runs of
/// adjacent units: a unit continues the current run when it starts where the previous one
/// ended, so any message that was not picked (a user turn, an earlier summary) ends a run.
pub fn adjacent_runs(units: &[Unit]) -> Vec<Group> {
    let mut runs: Vec<Group> = Vec::new();
    for unit in units {
        match runs.last_mut() {
            Some(run) if run.range.end == unit.range.start => run.push(unit),
            _ => runs.push(Group::starting_with(unit)),
        }
    }
    runs
}

/// Cuts each run of adjacent units (see [`adjacent_runs`]) into groups of `group_size` units;
/// `0` keeps each run whole. A group never spans a gap.
///
/// Groups are counted from the start of their run, so only a run's last group can be short.
/// When a conversation grows at its end, the groups of its unchanged older part therefore stay
/// the same groups (prefix stability: the requests a strategy makes for them repeat exactly).
pub fn group_adjacent(units: &[Unit], group_size: usize) -> Vec<Group> {
    let mut groups = Vec::new();
    for run in adjacent_runs(units) {
        if group_size == 0 {
            groups.push(run);
            continue;
        }
        for chunk in run.units.chunks(group_size) {
            let mut group = Group::starting_with(&chunk[0]);
            for unit in &chunk[1..] {
                group.push(unit);
            }
            groups.push(group);
        }
    }
    groups
}

/// The tool calls made in some messages, by tool, and the calls whose result was an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolActivity {
    /// Each tool called, with how many times, in the order of its first call.
    pub tools: Vec<(String, usize)>,
    /// Each tool with an error result, with how many, in the order of its first error. A
    /// result answering a call outside the messages is counted under the name `tool`.
    pub failed: Vec<(String, usize)>,
}

impl ToolActivity {
    /// How many tool calls were made.
    pub fn calls(&self) -> usize {
        self.tools.iter().map(|(_, n)| n).sum()
    }

    /// How many tool results were errors.
    pub fn errors(&self) -> usize {
        self.failed.iter().map(|(_, n)| n).sum()
    }

    /// The tools called, e.g. `bash ×2, read_file`.
    pub fn tool_list(&self) -> String {
        list_counts(&self.tools)
    }

    /// The tools whose results were errors, in the same form (empty when none failed).
    pub fn failed_list(&self) -> String {
        list_counts(&self.failed)
    }
}

fn bump(counts: &mut Vec<(String, usize)>, name: &str) {
    match counts.iter_mut().find(|(n, _)| n == name) {
        Some((_, count)) => *count += 1,
        None => counts.push((name.to_string(), 1)),
    }
}

fn list_counts(counts: &[(String, usize)]) -> String {
    counts
        .iter()
        .map(|(name, n)| {
            if *n == 1 {
                name.clone()
            } else {
                format!("{name} ×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tools `messages` call and which of their results are failures ([`failed`]: the
/// `is_error` flag, or the exit code the output reports where the wire has no flag, as
/// Codex's Responses outputs), matched by tool-call id so that parallel calls answered in any
/// order are named right.
pub fn tool_activity(messages: &[Message]) -> ToolActivity {
    let mut activity = ToolActivity::default();
    let mut names: HashMap<&str, &str> = HashMap::new();
    for message in messages {
        for block in message.content.iter() {
            match block {
                ContentBlock::ToolUse { id, name, .. } => {
                    names.insert(id.as_str(), name.as_str());
                    bump(&mut activity.tools, name);
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } if *is_error || failed(&result_text(content), false) => {
                    let name = names.get(tool_use_id.as_str()).copied().unwrap_or("tool");
                    bump(&mut activity.failed, name);
                }
                _ => {}
            }
        }
    }
    activity
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Role, ToolResultPart};
    use crate::sdk::exchanges::{units, UnitKind};

    fn call(id: &str, tool: &str) -> Message {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: tool.into(),
                input_json: "{}".into(),
                extra_json: Default::default(),
            }],
        )
    }

    fn answer(id: &str, is_error: bool) -> Message {
        answer_with(id, "out", is_error)
    }

    fn answer_with(id: &str, text: &str, is_error: bool) -> Message {
        Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: vec![ToolResultPart::Text { text: text.into() }].into(),
                is_error,
                extra_json: Default::default(),
            }],
        )
    }

    fn unit(range: Range<usize>) -> Unit {
        Unit {
            range,
            kind: UnitKind::ToolExchange,
        }
    }

    #[test]
    fn distance_counts_the_messages_after_a_unit() {
        assert_eq!(distance_from_end(&(8..10), 10), 0);
        assert_eq!(distance_from_end(&(2..4), 10), 6);
        assert_eq!(distance_from_end(&(0..1), 1), 0);
        // A range past the end (a caller's bug) is not a panic.
        assert_eq!(distance_from_end(&(3..12), 10), 0);
    }

    #[test]
    fn units_within_leaves_out_straddlers() {
        let us = vec![unit(0..2), unit(2..4), unit(4..6)];
        let inside: Vec<_> = units_within(&us, &(1..6))
            .map(|u| u.range.clone())
            .collect();
        assert_eq!(inside, vec![2..4, 4..6]);
        assert_eq!(units_within(&us, &(0..0)).count(), 0);
    }

    #[test]
    fn runs_break_at_gaps() {
        // 0..2 and 2..4 touch; 5..7 follows a message that was not picked.
        let runs = adjacent_runs(&[unit(0..2), unit(2..4), unit(5..7), unit(7..9)]);
        let ranges: Vec<_> = runs.iter().map(|g| g.range.clone()).collect();
        assert_eq!(ranges, vec![0..4, 5..9]);
        assert_eq!(runs[0].units.len(), 2);
        assert!(adjacent_runs(&[]).is_empty());
    }

    #[test]
    fn groups_are_cut_from_the_start_of_each_run() {
        let picks: Vec<Unit> = (0..5)
            .map(|i| unit(2 * i..2 * i + 2))
            .chain([unit(11..13)])
            .collect();
        let ranges = |size| {
            group_adjacent(&picks, size)
                .into_iter()
                .map(|g| (g.range, g.units.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ranges(2),
            vec![(0..4, 2), (4..8, 2), (8..10, 1), (11..13, 1)]
        );
        assert_eq!(ranges(1).len(), 6);
        assert_eq!(ranges(0), vec![(0..10, 5), (11..13, 1)]);
        assert_eq!(ranges(100), vec![(0..10, 5), (11..13, 1)]);
    }

    #[test]
    fn groups_of_an_unchanged_prefix_survive_growth() {
        // The same run, one unit longer at its end: every earlier group is unchanged.
        let short: Vec<Unit> = (0..7).map(|i| unit(2 * i..2 * i + 2)).collect();
        let long: Vec<Unit> = (0..8).map(|i| unit(2 * i..2 * i + 2)).collect();
        let (a, b) = (group_adjacent(&short, 3), group_adjacent(&long, 3));
        assert_eq!(a[..2], b[..2]);
        assert_eq!(a[2].range, 12..14);
        assert_eq!(b[2].range, 12..16);
    }

    #[test]
    fn activity_names_tools_and_failures_across_parallel_calls() {
        let parallel = Message::new(
            Role::Assistant,
            vec![
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "grep".into(),
                    input_json: "{}".into(),
                    extra_json: Default::default(),
                },
                ContentBlock::ToolUse {
                    id: "b".into(),
                    name: "bash".into(),
                    input_json: "{}".into(),
                    extra_json: Default::default(),
                },
            ],
        );
        let msgs = vec![
            call("x", "bash"),
            answer("x", false),
            parallel,
            // Answered out of order; only the bash call failed.
            answer("b", true),
            answer("a", false),
            answer("zz", true),
        ];
        let activity = tool_activity(&msgs);
        assert_eq!(activity.tool_list(), "bash ×2, grep");
        assert_eq!(activity.calls(), 3);
        assert_eq!(activity.failed_list(), "bash, tool");
        assert_eq!(activity.errors(), 2);

        // A Responses output has no error flag: Codex says so in its text.
        let codex = tool_activity(&[
            call("c", "exec_command"),
            answer_with(
                "c",
                "Process exited with code 1\nOutput:\ncat: a.txt: No such file or directory",
                false,
            ),
        ]);
        assert_eq!(codex.failed_list(), "exec_command");

        let quiet = tool_activity(&[call("y", "ls"), answer("y", false)]);
        assert_eq!(quiet.errors(), 0);
        assert_eq!(quiet.failed_list(), "");
    }

    #[test]
    fn works_on_real_units() {
        let msgs = vec![
            Message::text(Role::User, "go"),
            call("1", "ls"),
            answer("1", false),
            call("2", "cat"),
            answer("2", false),
            Message::text(Role::User, "next"),
            call("3", "ls"),
            answer("3", false),
        ];
        let exchanges: Vec<Unit> = units(&msgs)
            .into_iter()
            .filter(|u| u.kind == UnitKind::ToolExchange)
            .collect();
        let groups = group_adjacent(&exchanges, 0);
        let ranges: Vec<_> = groups.iter().map(|g| g.range.clone()).collect();
        assert_eq!(ranges, vec![1..5, 6..8]);
        assert_eq!(distance_from_end(&groups[0].range, msgs.len()), 3);
    }
}
