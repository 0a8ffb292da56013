//! Helpers every strategy needs, written once: tool-exchange-aware grouping, whether a tool
//! call failed ([`failure`]), the protected
//! and pinned parts of a conversation ([`pinned`]: instructions, opaque units, compaction
//! boundaries), summary messages, clearings ([`clearing`]), prompt rendering and templates ([`prompt`]),
//! stage reports from plain values ([`report`]), typed structured output ([`structured`]),
//! summary lengths ([`length`]), reuse of cached summaries ([`incremental`]), and the ledger
//! of what summaries carry verbatim ([`ledger`], read with [`statements`], leaving out what an
//! agent's harness adds: [`harness`]), and the config
//! checks a schema states but a config built in Rust can break ([`config`]).

pub mod chunk;
pub mod config;
pub mod failure;
pub mod groups;
pub mod harness;
pub mod incremental;
pub mod ledger;
pub mod length;
pub mod lists;
pub mod prompt;
pub mod report;
pub mod span;
pub mod splice;
pub mod statements;
pub mod structured;
pub mod summary;

/// The rules a compaction keeps live with the ABI (`tamp_plugin_abi::rules`), so that the
/// host and every plugin it loads read them alike; here under their SDK names.
pub use tamp_plugin_abi::rules::{clearing, exchanges, pinned, protect};

pub use exchanges::{units, Unit, UnitKind};
pub use prompt::{render_messages, render_template, RenderOptions, Template};
pub use protect::{compactable_range, compactable_range_of, opening_turn, protected_head};
pub use report::ReportExt;
#[allow(deprecated)]
pub use splice::{splice, Replacement};
pub use structured::{SchemaRequest, StructuredAnswer, StructuredError};
pub use summary::{cap_chars, summary_message, SUMMARY_ROLE};
