//! What a run defers and finalizes, and the text of a pending summary: pure functions of the
//! conversation, tested without a host.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::cap_chars;
use tamp_plugin_api::sdk::ledger::LedgerConfig;

use crate::NAME;

/// The first line of every pending summary starts with this.
pub const PENDING_HEADER: &str = "[Pending summary: ";
/// The first line of a finalized summary starts with this.
pub const FINAL_HEADER: &str = "[Summary: ";
/// What a header says of the ledger entries no ledger lists, after their count.
pub const UNLISTED: &str = "ledger entries only in its page";

/// `[Pending summary: N messages, <label>]` and the first and last messages' openings, each
/// cut to `preview_chars` (0: no preview). `unlisted`: the ledger entries of the run that
/// no ledger lists (the cap is taken by the summaries before it), said in the header, since
/// a ledger's note line would not fit either (`; 3 ledger entries only in its page`).
pub fn pending_text(run: &[Message], label: &str, preview_chars: usize, unlisted: usize) -> String {
    let mut text = format!("{PENDING_HEADER}{} messages, {label}", run.len());
    if unlisted > 0 {
        text.push_str(&format!("; {unlisted} {UNLISTED}"));
    }
    text.push(']');
    let limit = preview_chars;
    if limit > 0 {
        if let Some(first) = run.first() {
            text.push_str(&format!(
                "\nFirst ({}): {}",
                first.role.as_str(),
                snippet(first, limit)
            ));
        }
        if let Some(last) = run.last().filter(|_| run.len() > 1) {
            text.push_str(&format!(
                "\nLast ({}): {}",
                last.role.as_str(),
                snippet(last, limit)
            ));
        }
    }
    text
}

/// The message's words on one line, cut to `limit` characters: its text, or (a tool call
/// or result without text) its rendering.
fn snippet(message: &Message, limit: usize) -> String {
    let text = message.joined_text();
    let source = if text.trim().is_empty() {
        sdk::render_messages(
            std::slice::from_ref(message),
            &sdk::RenderOptions::cut_at(limit),
        )
    } else {
        text
    };
    let one_line = source.split_whitespace().collect::<Vec<_>>().join(" ");
    cap_chars(&one_line, limit)
}

/// What a run holds, in a few words: its summaries (a fold), its tool calls by name, or its
/// turns.
pub fn label_of(run: &[Message]) -> String {
    if !run.is_empty() && run.iter().all(Message::is_summary) {
        return format!("{} summaries", run.len());
    }
    let mut tools: BTreeMap<&str, usize> = BTreeMap::new();
    for message in run {
        for block in message.content.iter() {
            if let ContentBlock::ToolUse { name, .. } = block {
                *tools.entry(name.as_str()).or_default() += 1;
            }
        }
    }
    if tools.is_empty() {
        let users = run.iter().filter(|m| m.role == Role::User).count();
        return format!("{users} user and {} other turns", run.len() - users);
    }
    let calls: usize = tools.values().sum();
    let mut by_count: Vec<(&str, usize)> = tools.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let names: Vec<String> = by_count
        .iter()
        .take(4)
        .map(|(name, n)| match n {
            1 => name.to_string(),
            n => format!("{name} ×{n}"),
        })
        .collect();
    let more = if by_count.len() > 4 { ", …" } else { "" };
    format!("{calls} tool calls: {}{more}", names.join(", "))
}

/// A run as its summary request and preview show it: each summary in it (a fold's run) as
/// its narrative, since the fold carries their ledgers itself and a ledger is never sent to
/// the summarizer (`LedgerConfig::shown`); a run without summaries as it is.
pub fn shown_run<'a>(run: &'a [Message], ledger: &LedgerConfig) -> Cow<'a, [Message]> {
    if !run.iter().any(Message::is_summary) {
        return Cow::Borrowed(run);
    }
    Cow::Owned(
        run.iter()
            .map(|m| {
                if m.is_summary() {
                    Message::text(m.role, ledger.shown(&m.joined_text()))
                } else {
                    m.clone()
                }
            })
            .collect(),
    )
}

/// Our pending summaries (index, page ref) that a run may finalize: those before the
/// protected recent tail. A tail bounded in tokens can reach further back on one request than
/// on the one before (when the newest messages are short), over a pending summary placed
/// earlier; that one is finalized once it has left the tail again, since the tail is not
/// changed.
pub fn finalizable(messages: &[Message], keep_recent: usize) -> Vec<(usize, String)> {
    let tail_start = sdk::compactable_range(messages, keep_recent).end;
    messages[..tail_start]
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let info = m.summary_info()?;
            (info.status == SummaryStatus::Pending && info.is_by(NAME))
                .then(|| (i, info.page().to_string()))
        })
        .collect()
}

/// The summaries to fold into one, when those at the start of the compactable range no
/// longer `fit` (see `LedgerConfig::kept_summaries_fit`): the leading run of this stage's
/// final summaries, if it has at least two. A pending summary waits for its answer before it
/// can be folded (its text is only a preview), and another stage's summary is that stage's
/// to fold, so either ends the run. Pinned messages among them (the system messages a page
/// kept after its summary) do not end it: the host keeps them after the fold's summary.
pub fn fold_span(
    messages: &[Message],
    keep_recent: usize,
    fit: impl Fn(&[&Message]) -> bool,
) -> Option<Range<usize>> {
    let range = sdk::compactable_range(messages, keep_recent);
    let leading: Vec<(usize, &Message)> = messages[range.clone()]
        .iter()
        .enumerate()
        .take_while(|(_, m)| m.is_summary() || sdk::pinned::is_pinned(m))
        .filter(|(_, m)| m.is_summary())
        .collect();
    let summaries: Vec<&Message> = leading.iter().map(|(_, m)| *m).collect();
    if fit(&summaries) {
        return None;
    }
    let ours: Vec<usize> = leading
        .iter()
        .take_while(|(_, m)| {
            m.summary_info()
                .is_some_and(|info| info.status == SummaryStatus::Final && info.is_by(NAME))
        })
        .map(|(at, _)| *at)
        .collect();
    (ours.len() >= 2).then(|| range.start..range.start + ours[ours.len() - 1] + 1)
}

/// The pages to defer: runs of plain messages and tool exchanges (no summary) inside the
/// compactable range, each cut at unit boundaries into pages of at most `max_page` messages
/// (a single larger unit is a page of its own); pages shorter than `min_messages` are left
/// alone. A pinned unit (a system message: Claude Code sends one every few tool calls) does
/// not end a page: the host keeps it, after the page's summary.
pub fn plan_pages(
    messages: &[Message],
    keep_recent: usize,
    min_messages: usize,
    max_page: usize,
) -> Vec<Range<usize>> {
    let range = sdk::compactable_range(messages, keep_recent);
    let mut pages = Vec::new();
    let mut current: Option<Range<usize>> = None;
    // The end of the pinned units right after the current page: a unit starting there
    // continues it.
    let mut bridged: Option<usize> = None;
    let close = |current: &mut Option<Range<usize>>, pages: &mut Vec<Range<usize>>| {
        if let Some(page) = current.take() {
            if page.len() >= min_messages {
                pages.push(page);
            }
        }
    };
    for unit in sdk::units(messages) {
        if unit.range.start < range.start || unit.range.end > range.end {
            continue;
        }
        match unit.kind {
            UnitKind::System => {
                if current.is_some() {
                    bridged = Some(unit.range.end);
                }
            }
            UnitKind::Summary => {
                close(&mut current, &mut pages);
                bridged = None;
            }
            UnitKind::Message | UnitKind::ToolExchange => {
                let continues = |page: &Range<usize>| {
                    (page.end == unit.range.start || bridged == Some(unit.range.start))
                        && unit.range.end - page.start <= max_page
                };
                match current.as_mut() {
                    Some(page) if continues(page) => page.end = unit.range.end,
                    _ => {
                        close(&mut current, &mut pages);
                        current = Some(unit.range.clone());
                    }
                }
                bridged = None;
            }
        }
    }
    close(&mut current, &mut pages);
    pages
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::sdk::summary_message;

    fn call(id: &str, name: &str) -> Message {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(id, name, "{}")],
        )
    }

    fn result(id: &str) -> Message {
        Message::new(Role::User, vec![ContentBlock::tool_result(id, "ok", false)])
    }

    #[test]
    fn pages_keep_exchanges_whole_skip_summaries_and_respect_sizes() {
        let mut m = vec![Message::text(Role::System, "sys")];
        // An assistant first: no task message is pinned, so the runs start right after the
        // system prompt.
        for i in 0..6 {
            let role = if i == 0 { Role::Assistant } else { Role::User };
            m.push(Message::text(role, format!("u{i}")));
        }
        m.push(summary_message(
            "s",
            "pg_x",
            "batch-deferred",
            SummaryStatus::Pending,
        ));
        m.push(call("a", "bash"));
        m.push(result("a"));
        for i in 0..5 {
            m.push(Message::text(Role::Assistant, format!("a{i}")));
        }
        m.push(Message::text(Role::User, "recent"));
        // keep_recent 1: the last message is protected; the summary splits two runs.
        assert_eq!(plan_pages(&m, 1, 2, 100), vec![1..7, 8..15]);
        // Pages of at most 4 messages, never splitting the exchange at 8..10.
        assert_eq!(plan_pages(&m, 1, 2, 4), vec![1..5, 5..7, 8..12, 12..15]);
        // Too short runs are left alone.
        assert_eq!(plan_pages(&m, 1, 7, 100), vec![8..15]);
    }

    #[test]
    fn a_system_message_inside_a_run_does_not_end_its_page() {
        // Claude Code's: one every few tool calls. The page runs past it (the host keeps it
        // after the page's summary); one at a page's end stays out of it.
        let mut m = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
        ];
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            m.push(call(id, "bash"));
            m.push(result(id));
            if i % 2 == 1 {
                m.push(Message::text(Role::System, "keep them updated"));
            }
        }
        m.push(Message::text(Role::User, "recent"));
        // 2..4 a, 4..6 b, 6 system, 7..9 c, 9..11 d, 11 system, 12 recent.
        assert_eq!(plan_pages(&m, 1, 2, 100), vec![2..11]);
        // A page's size counts the pinned messages it runs past.
        assert_eq!(plan_pages(&m, 1, 2, 6), vec![2..6, 7..11]);
    }

    #[test]
    fn pending_summaries_inside_the_protected_tail_wait() {
        let pending =
            |page: &str| summary_message("s", page, "batch-deferred", SummaryStatus::Pending);
        let m = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
            pending("pg_old"),
            summary_message("s", "pg_other", "someone-else", SummaryStatus::Pending),
            Message::text(Role::Assistant, "a"),
            pending("pg_new"),
            Message::text(Role::User, "recent"),
        ];
        // A tail of 2 covers pg_new: only pg_old may be finalized.
        assert_eq!(finalizable(&m, 2), vec![(2, "pg_old".to_string())]);
        // Once the tail no longer covers it, pg_new is finalized too.
        assert_eq!(
            finalizable(&m, 1),
            vec![(2, "pg_old".to_string()), (5, "pg_new".to_string())]
        );
    }

    #[test]
    fn only_this_stage_s_final_summaries_at_the_start_fold_and_only_when_they_do_not_fit() {
        let summary = |status, strategy: &str| summary_message("s", "pg_x", strategy, status);
        let final_ours = || summary(SummaryStatus::Final, "batch-deferred");
        let m = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
            final_ours(),
            final_ours(),
            final_ours(),
            summary(SummaryStatus::Pending, "batch-deferred"),
            final_ours(),
            Message::text(Role::Assistant, "a"),
            Message::text(Role::User, "recent"),
        ];
        // Five summaries lead the range; the three final ones before the pending one fold.
        assert_eq!(fold_span(&m, 1, |s| s.len() < 5), Some(2..5));
        assert_eq!(fold_span(&m, 1, |_| true), None);
        // A single final summary is not a fold.
        let mut one = m.clone();
        one.drain(3..5);
        assert_eq!(fold_span(&one, 1, |_| false), None);
        // Pinned messages between our summaries (kept after each page's summary) do not end
        // the run, nor count as summaries.
        let mut pinned = m.clone();
        pinned.insert(3, Message::text(Role::System, "keep them updated"));
        pinned.insert(5, Message::text(Role::System, "keep them updated"));
        assert_eq!(fold_span(&pinned, 1, |s| s.len() < 5), Some(2..7));
        // Another stage's summary first: that one is not ours to fold, nor what follows it.
        let mut theirs = m.clone();
        theirs.insert(2, summary(SummaryStatus::Final, "map-reduce-adaptive"));
        assert_eq!(fold_span(&theirs, 1, |_| false), None);
    }

    #[test]
    fn labels_name_tools_by_frequency() {
        let run = vec![
            call("a", "bash"),
            result("a"),
            call("b", "bash"),
            result("b"),
            call("c", "read"),
            result("c"),
        ];
        assert_eq!(label_of(&run), "3 tool calls: bash ×2, read");
        let turns = vec![
            Message::text(Role::User, "q"),
            Message::text(Role::Assistant, "a"),
        ];
        assert_eq!(label_of(&turns), "1 user and 1 other turns");
        let fold = vec![
            summary_message("s", "pg_1", NAME, SummaryStatus::Final),
            summary_message("t", "pg_2", NAME, SummaryStatus::Final),
        ];
        assert_eq!(label_of(&fold), "2 summaries");
    }

    #[test]
    fn pending_text_has_header_and_both_ends() {
        let run = vec![
            Message::text(Role::User, "first message here and more"),
            Message::text(Role::Assistant, "middle"),
            Message::text(Role::Assistant, "the last one\nwith lines"),
        ];
        let text = pending_text(&run, "x", 10, 0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "[Pending summary: 3 messages, x]");
        assert!(lines[1].starts_with("First (user): "), "{text}");
        assert!(
            lines[1].chars().count() <= "First (user): ".len() + 10,
            "{text}"
        );
        assert!(lines[2].starts_with("Last (assistant): "), "{text}");
        assert!(!text.contains("middle"));
    }

    #[test]
    fn a_pending_header_counts_the_ledger_entries_no_ledger_lists() {
        let run = vec![Message::text(Role::User, "Use integer cents.")];
        let text = pending_text(&run, "1 turn", 0, 3);
        assert_eq!(
            text,
            "[Pending summary: 1 messages, 1 turn; 3 ledger entries only in its page]"
        );
    }
}
