//! Deciding whether to summarize: which tool exchanges are buffered, whether either trigger
//! fires, and how the buffer is cut into groups. Pure functions of the messages and config,
//! so the decision is deterministic and testable without a host.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::{distance_from_end, group_adjacent, units_within, Group};

use crate::config::Config;

/// Which trigger fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Size,
    Age,
    /// Both at once.
    SizeAndAge,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Size => "size",
            Trigger::Age => "age",
            Trigger::SizeAndAge => "size+age",
        }
    }
}

/// The buffered exchanges to summarize, and why now.
#[derive(Debug)]
pub struct Plan {
    pub trigger: Trigger,
    /// Eligible tool exchanges (the buffer).
    pub eligible: usize,
    /// Messages after the oldest eligible exchange.
    pub oldest_distance: usize,
    /// The buffer cut into groups, in conversation order.
    pub groups: Vec<Group>,
    /// Which trigger fired and by what measure, for the report.
    pub why: String,
}

/// Summarize now, or wait and say why.
#[derive(Debug)]
pub enum Decision {
    Summarize(Plan),
    Wait(String),
}

/// Whether a unit is a tool exchange this strategy may summarize away: calls and their
/// results, with nothing a user wrote on its own and no earlier summary inside. A user
/// message counts as part of the exchange only when it carries tool results (the Anthropic
/// shape of a tool answer).
pub fn is_summarizable(messages: &[Message], unit: &Unit) -> bool {
    if unit.kind != UnitKind::ToolExchange {
        return false;
    }
    let span = &messages[unit.range.clone()];
    let answers_a_call = |m: &Message| m.tool_result_ids().next().is_some();
    span.iter().any(answers_a_call)
        && span.iter().all(|m| {
            !m.is_summary()
                && match m.role {
                    Role::Assistant | Role::Tool => true,
                    Role::User => answers_a_call(m),
                    Role::System => false,
                }
        })
}

/// Applies the dual trigger to `messages`, never looking at the leading system messages or
/// the protected last `keep_recent` messages. `tokens` measures messages as the host counts
/// them.
pub fn decide(
    messages: &[Message],
    keep_recent: usize,
    config: &Config,
    tokens: &dyn Fn(&[Message]) -> u64,
) -> Decision {
    let len = messages.len();
    let allowed = sdk::compactable_range(messages, keep_recent);
    let units = sdk::units(messages);
    // Tool exchanges the strategy may touch, oldest first. Age only grows toward the start,
    // so the eligible ones are a prefix of these.
    let (candidates, too_small): (Vec<Unit>, Vec<Unit>) = units_within(&units, &allowed)
        .filter(|u| is_summarizable(messages, u))
        .cloned()
        .partition(|u| tokens(&messages[u.range.clone()]) >= config.min_exchange_tokens);
    let small_note = match too_small.len() {
        0 => String::new(),
        n => format!(
            "; {n} tool exchange(s) under min_exchange_tokens ({}) are not buffered",
            config.min_exchange_tokens
        ),
    };
    let eligible: Vec<Unit> = candidates
        .iter()
        .take_while(|u| distance_from_end(&u.range, len) >= config.messages_old_threshold)
        .cloned()
        .collect();

    let min_count = config.min_tool_calls_to_summarize;
    let max_distance = config.max_tool_call_distance;
    let Some(oldest) = eligible.first() else {
        let reason = nothing_eligible(&candidates, len, keep_recent, config);
        return Decision::Wait(reason + &small_note);
    };
    let oldest_distance = distance_from_end(&oldest.range, len);
    let size = eligible.len() >= min_count;
    let age = oldest_distance >= max_distance;
    let size_why = format!(
        "size trigger: {} tool exchange(s) eligible, {min_count} needed",
        eligible.len()
    );
    let age_why = format!(
        "age trigger: the oldest eligible exchange is {oldest_distance} message(s) from the end, \
         {max_distance} needed"
    );
    let (trigger, why) = match (size, age) {
        (true, true) => (Trigger::SizeAndAge, format!("{size_why}; {age_why}")),
        (true, false) => (Trigger::Size, size_why),
        (false, true) => (Trigger::Age, age_why),
        (false, false) => {
            return Decision::Wait(format!(
                "waiting: size trigger missed by {}: {} tool exchange(s) eligible, {min_count} needed; \
                 age trigger missed by {}: the oldest eligible exchange is {oldest_distance} message(s) \
                 from the end, {max_distance} needed{small_note}",
                min_count - eligible.len(),
                eligible.len(),
                max_distance - oldest_distance,
            ))
        }
    };
    Decision::Summarize(Plan {
        trigger,
        eligible: eligible.len(),
        oldest_distance,
        groups: group_adjacent(&eligible, config.group_size),
        why,
    })
}

/// Why nothing is buffered yet, with how far each trigger is.
fn nothing_eligible(
    candidates: &[Unit],
    len: usize,
    keep_recent: usize,
    config: &Config,
) -> String {
    let threshold = config.messages_old_threshold;
    let triggers = format!(
        "size trigger missed by {min}: 0 tool exchanges eligible, {min} needed; age trigger missed: \
         no exchange is eligible",
        min = config.min_tool_calls_to_summarize,
    );
    match candidates.first() {
        None => format!(
            "waiting: {triggers} (no tool exchange outside the system prompt and the protected \
             last {keep_recent} message(s))"
        ),
        Some(oldest) => {
            let distance = distance_from_end(&oldest.range, len);
            format!(
                "waiting: {triggers} (the oldest of {} tool exchange(s) is {distance} message(s) \
                 from the end; exchanges become eligible at {threshold}, {} short)",
                candidates.len(),
                threshold - distance,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(n: usize) -> [Message; 2] {
        let id = format!("call_{n}");
        [
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(id.as_str(), "bash", "{}")],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result(id.as_str(), "ok", false)],
            ),
        ]
    }

    /// System prompt, a user task, `exchanges` tool exchanges, then `tail` chat messages.
    fn conversation(exchanges: usize, tail: usize) -> Vec<Message> {
        let mut messages = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
        ];
        for i in 0..exchanges {
            messages.extend(exchange(i));
        }
        for i in 0..tail {
            let role = if i % 2 == 0 {
                Role::Assistant
            } else {
                Role::User
            };
            messages.push(Message::text(role, format!("chat {i}")));
        }
        messages
    }

    /// Every exchange is big enough to buffer.
    fn big(_: &[Message]) -> u64 {
        1_000
    }

    fn config(threshold: usize) -> Config {
        Config {
            messages_old_threshold: threshold,
            ..Config::default()
        }
    }

    #[test]
    fn size_trigger() {
        // 12 exchanges then 8 messages: the oldest has 22 + 8 = 30 messages after it.
        let messages = conversation(12, 8);
        let Decision::Summarize(plan) = decide(&messages, 4, &config(8), &big) else {
            panic!("should summarize")
        };
        assert_eq!(plan.trigger, Trigger::Size);
        assert_eq!((plan.eligible, plan.oldest_distance), (12, 30));
        assert_eq!(plan.groups.len(), 12);
        assert_eq!(plan.groups[0].range, 2..4);
    }

    #[test]
    fn age_trigger_and_the_miss_by_how_much() {
        let Decision::Summarize(plan) = decide(&conversation(6, 40), 4, &config(8), &big) else {
            panic!("should summarize")
        };
        assert_eq!(plan.trigger, Trigger::Age);
        assert_eq!((plan.eligible, plan.oldest_distance), (6, 50));

        let Decision::Wait(reason) = decide(&conversation(5, 22), 4, &config(8), &big) else {
            panic!("should wait")
        };
        assert!(
            reason.contains("size trigger missed by 5: 5 tool exchange(s) eligible, 10 needed"),
            "{reason}"
        );
        assert!(
            reason.contains("age trigger missed by 10: the oldest eligible exchange is 30"),
            "{reason}"
        );
    }

    #[test]
    fn both_triggers_and_group_size() {
        let Decision::Summarize(plan) = decide(
            &conversation(12, 40),
            4,
            &Config {
                group_size: 5,
                ..config(8)
            },
            &big,
        ) else {
            panic!("should summarize")
        };
        assert_eq!(plan.trigger, Trigger::SizeAndAge);
        let sizes: Vec<usize> = plan.groups.iter().map(|g| g.units.len()).collect();
        assert_eq!(sizes, [5, 5, 2]);
    }

    #[test]
    fn the_protected_tail_is_never_buffered() {
        // Every exchange is old enough, but keep_recent covers them all.
        let messages = conversation(12, 0);
        let Decision::Wait(reason) = decide(&messages, 100, &config(0), &big) else {
            panic!("should wait")
        };
        assert!(reason.contains("protected last 100"), "{reason}");
        // Not eligible yet: says how far from eligibility the oldest one is.
        let Decision::Wait(reason) = decide(&conversation(3, 0), 0, &config(20), &big) else {
            panic!("should wait")
        };
        assert!(
            reason.contains("the oldest of 3 tool exchange(s) is 4 message(s)"),
            "{reason}"
        );
        assert!(reason.contains("at 20, 16 short"), "{reason}");
    }

    #[test]
    fn small_exchanges_are_not_buffered_and_end_runs() {
        // Exchange 2 is small: 11 big exchanges remain eligible, in two runs.
        let messages = conversation(12, 8);
        let small = |m: &[Message]| -> u64 {
            let is_exchange_2 = m.iter().any(|m| m.tool_use_ids().any(|id| id == "call_2"));
            if is_exchange_2 {
                10
            } else {
                1_000
            }
        };
        let Decision::Summarize(plan) = decide(&messages, 4, &config(8), &small) else {
            panic!("should summarize")
        };
        assert_eq!(plan.eligible, 11);
        let ranges: Vec<_> = plan.groups.iter().map(|g| g.range.clone()).collect();
        assert_eq!(ranges[..3], [2..4, 4..6, 8..10]);
        let Decision::Wait(reason) = decide(&conversation(5, 22), 4, &config(8), &|_| 10) else {
            panic!("should wait")
        };
        assert!(
            reason.ends_with("5 tool exchange(s) under min_exchange_tokens (100) are not buffered"),
            "{reason}"
        );
    }

    #[test]
    fn user_turns_and_summaries_are_not_exchanges() {
        let mut messages = conversation(2, 0);
        // A tool answer that also carries a note is still part of its exchange.
        messages[5]
            .content
            .push(ContentBlock::text("note beside the result"));
        // A call answered only after a user spoke: the unit holds a user turn, so it stays.
        let [call, answer] = exchange(9);
        messages.extend([call, Message::text(Role::User, "wait, stop"), answer]);
        messages.push(sdk::summary_message("s", "pg_1", "x", SummaryStatus::Final));
        let units = sdk::units(&messages);
        let picked: Vec<bool> = units
            .iter()
            .map(|u| is_summarizable(&messages, u))
            .collect();
        assert_eq!(picked, [false, false, true, true, false, false]);
    }
}
