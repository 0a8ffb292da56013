//! What a compaction left, read the same way by every test that checks it: the summaries'
//! texts, the first page a summary points at, the first stage's status.

use tamp_host::chain::{ChainReport, StageStatus};
use tamp_plugin_api::{Conversation, Message};

/// The texts of the summaries in `conversation`, in order.
pub fn summary_texts(conversation: &Conversation) -> Vec<String> {
    conversation
        .messages
        .iter()
        .filter(|m| m.is_summary())
        .map(|m| m.joined_text())
        .collect()
}

/// The page ref of the first summary among `messages` (failing the test when there is none).
pub fn first_page_ref(messages: &[Message]) -> String {
    messages
        .iter()
        .find_map(|m| m.summary_info())
        .unwrap()
        .page_ref
        .to_string()
}

/// Fails the test, with that stage's report, unless the first stage acted.
#[track_caller]
pub fn assert_first_stage_acted(report: &ChainReport) {
    assert_eq!(
        report.stages[0].status,
        StageStatus::Acted,
        "{:?}",
        report.stages[0]
    );
}
