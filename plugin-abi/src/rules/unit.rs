//! A unit: a run of messages that must never be split, and what it holds. The type alone,
//! below both [`exchanges`](super::exchanges), which splits a conversation into units, and
//! [`pinned`](super::pinned), whose rules read them.

use std::ops::Range;

/// What a unit holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    /// Pinned: a system message (instructions, wherever it stands), an opaque unit, or a run
    /// that holds one (a tool exchange with a message tamp does not know in it). Never
    /// summarized, replaced or cleared ([`pinned`](super::pinned)).
    System,
    /// A summary a stage inserted earlier.
    Summary,
    /// Tool calls with their results (and anything between them).
    ToolExchange,
    /// One ordinary message.
    Message,
}

/// A run of messages `range` that a strategy keeps or replaces as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub range: Range<usize>,
    pub kind: UnitKind,
}

impl Unit {
    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Whether no stage may touch it ([`UnitKind::System`]).
    pub fn is_pinned(&self) -> bool {
        self.kind == UnitKind::System
    }
}
