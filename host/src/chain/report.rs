//! What a compaction reports: the chain's totals, each stage's run, and why a stage failed.

use serde::Serialize;
use tamp_plugin_api::rules;
use tamp_plugin_api::{Conversation, Message, StageReport, Usage};

use super::Stage;
use crate::invariants::Violation;
use crate::store::threads::ThreadReport;

/// The compacted conversation and the report of how it came about.
#[derive(Debug, Clone)]
pub struct Compacted {
    pub conversation: Conversation,
    pub report: ChainReport,
}

/// What the chain did, stage by stage.
#[derive(Debug, Clone, Serialize)]
pub struct ChainReport {
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub messages_before: usize,
    pub messages_after: usize,
    pub budget: BudgetReport,
    /// Why over-budget stages ran or not.
    pub reason: String,
    pub stages: Vec<StageRun>,
    pub llm_calls: u32,
    /// LLM requests answered from the summary cache (no call made).
    pub cache_hits: u32,
    pub usage: Usage,
    /// The estimated cost of the calls, in US dollars, when the chain file has a price table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub duration_ms: f64,
    /// Thread continuity, when the call had a thread and the chain keeps thread states.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadReport>,
    /// Why a compaction ended above the low watermark, when it did: the next compaction is
    /// then near (hysteresis lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_watermark_missed: Option<String>,
    /// What the conversation held that tamp does not know (roles, block or item types): kept
    /// verbatim where it stood, given to no strategy (`rules::pinned`), compacted around.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub opaque: Vec<OpaqueCount>,
    /// Messages that read as a summary but carry no MAC of this chain's store (written by
    /// someone else, or altered since): read as the ordinary text they are
    /// ([`crate::summary_mac`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub unrecognized_summaries: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How many of one kind of thing tamp did not know a conversation held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpaqueCount {
    /// `item` (a Responses item type), `role` (a message role) or `block` (a content block
    /// or part type, in a message that is otherwise read).
    pub kind: &'static str,
    /// The type or role, as sent.
    pub name: String,
    pub count: u32,
}

impl OpaqueCount {
    /// Counts what `messages` held that tamp did not know, by kind and name, sorted.
    pub fn of(messages: &[Message]) -> Vec<OpaqueCount> {
        let mut counts: std::collections::BTreeMap<rules::pinned::Opaque, u32> = Default::default();
        for found in messages.iter().flat_map(rules::pinned::opaque) {
            *counts.entry(found).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|(o, count)| OpaqueCount {
                kind: o.kind.as_str(),
                name: o.name,
                count,
            })
            .collect()
    }

    /// `1 item of type "web_search_call"`, `2 messages of role "critic"`.
    pub fn describe(&self) -> String {
        let n = self.count;
        let s = if n == 1 { "" } else { "s" };
        match self.kind {
            "role" => format!("{n} message{s} of role \"{}\"", self.name),
            kind => format!("{n} {kind}{s} of type \"{}\"", self.name),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BudgetReport {
    pub max_tokens: u64,
    pub high_watermark: u64,
    pub low_watermark: u64,
    pub keep_recent: u32,
    /// The messages the protected tail held for this call: `keep_recent`, or fewer where
    /// `keep_recent_tokens` bounds it.
    pub protected_tail: u32,
}

/// How a stage run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// Changed the conversation.
    Acted,
    /// Ran and chose not to act.
    Skipped,
    /// Not run (trigger not met, or already under the low watermark).
    NotRun,
    /// Failed or broke an invariant; its output was discarded.
    RolledBack,
}

/// One stage's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct StageRun {
    pub stage: String,
    pub plugin: String,
    pub plugin_version: String,
    pub status: StageStatus,
    /// What it did and why, or why it did not run, or why it was rolled back.
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<StageFailure>,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub duration_ms: f64,
    pub llm_calls: u32,
    pub failed_llm_calls: u32,
    /// LLM requests answered from the summary cache (no call made).
    pub cache_hits: u32,
    pub usage: Usage,
    /// The estimated cost of the stage's calls, in US dollars, when priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The providers' own words for calls that failed (secrets removed), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub llm_errors: Vec<String>,
    pub pages: Vec<String>,
    pub messages_removed: u32,
    pub summaries_added: u32,
    /// Messages whose tool output (or input) was cleared in place, each original archived.
    pub messages_cleared: u32,
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

/// What kind of failure rolled a stage back; serialized as [`Self::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageFailureKind {
    /// The plugin returned an error, or its edits could not be carried out (a page not
    /// archived).
    Error,
    Panicked,
    Timeout,
    /// Its output broke an invariant (the failure's `rule`).
    Invariant,
}

impl StageFailureKind {
    pub const ALL: [StageFailureKind; 4] = [
        StageFailureKind::Error,
        StageFailureKind::Panicked,
        StageFailureKind::Timeout,
        StageFailureKind::Invariant,
    ];

    /// The name in reports and logs (`panicked`).
    pub fn as_str(self) -> &'static str {
        match self {
            StageFailureKind::Error => "error",
            StageFailureKind::Panicked => "panicked",
            StageFailureKind::Timeout => "timeout",
            StageFailureKind::Invariant => "invariant",
        }
    }
}

impl std::fmt::Display for StageFailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a stage was rolled back.
#[derive(Debug, Clone, Serialize)]
pub struct StageFailure {
    pub kind: StageFailureKind,
    pub message: String,
    /// The invariant's id, for `invariant`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl StageFailure {
    /// A failure of kind `error`: the plugin's error, or edits the host could not carry out.
    pub(super) fn error(message: String) -> StageFailure {
        StageFailure {
            kind: StageFailureKind::Error,
            message,
            rule: None,
        }
    }
}

pub(super) fn invariant_failure(v: Violation) -> StageFailure {
    StageFailure {
        kind: StageFailureKind::Invariant,
        message: v.to_string(),
        rule: Some(v.rule.id()),
    }
}

impl StageRun {
    pub(super) fn not_run(stage: &Stage, reason: String, tokens: u64) -> StageRun {
        StageRun {
            stage: stage.name.clone(),
            plugin: stage.plugin.meta().name.clone(),
            plugin_version: stage.plugin.meta().version.clone(),
            status: StageStatus::NotRun,
            reason,
            error: None,
            tokens_before: tokens,
            tokens_after: tokens,
            duration_ms: 0.0,
            llm_calls: 0,
            failed_llm_calls: 0,
            cache_hits: 0,
            usage: Usage::default(),
            cost_usd: None,
            llm_errors: Vec::new(),
            pages: Vec::new(),
            messages_removed: 0,
            summaries_added: 0,
            messages_cleared: 0,
            warnings: Vec::new(),
            details: serde_json::Value::Null,
        }
    }

    pub(super) fn apply_report(&mut self, report: StageReport) {
        self.status = if report.acted {
            StageStatus::Acted
        } else {
            StageStatus::Skipped
        };
        self.reason = report.reason.into();
        self.warnings = report.warnings.into_iter().map(String::from).collect();
        self.details = if report.details_json.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&report.details_json)
                .unwrap_or(serde_json::Value::String(report.details_json.into()))
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failure_kind_is_written_as_its_name() {
        for kind in StageFailureKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.as_str()));
        }
        let failure = StageFailure {
            kind: StageFailureKind::Panicked,
            message: "boom".into(),
            rule: None,
        };
        assert_eq!(
            serde_json::to_value(&failure).unwrap(),
            json!({"kind": "panicked", "message": "boom"})
        );
    }
}
