//! What a stage returns: edits of a few kinds, which the host checks, archives and applies.
//!
//! A stage reads the conversation shared (it never copies it) and says what to change; the
//! host does the mechanics every strategy used to redo (archive the span as a page, build the
//! summary message with its ref, splice, recount) and checks each edit against the input
//! before it applies any: a span inside the compactable range, on unit boundaries, spans
//! disjoint. So a stage cannot lose a message or split a tool exchange, and rolling a stage
//! back is simply not applying its edits.

// `#[derive(StableAbi)]` on a non-exhaustive enum expands to impls lints object to.
#![allow(non_local_definitions)]

use abi_stable::nonexhaustive_enum::{NonExhaustive, NonExhaustiveFor};
use abi_stable::std_types::RString;
use abi_stable::StableAbi;

use crate::conversation::{Message, SummaryStatus};

/// Messages `start..end` of the conversation the stage was given.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn len(self) -> usize {
        self.end.saturating_sub(self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.end <= self.start
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

impl From<std::ops::Range<usize>> for Span {
    fn from(range: std::ops::Range<usize>) -> Self {
        let clamp = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        Span {
            start: clamp(range.start),
            end: clamp(range.end),
        }
    }
}

/// One change a stage asks for. The enum is non-exhaustive across the boundary
/// ([`EditFfi`]): a later ABI version may add kinds, and a host refuses, with a clear error,
/// a kind it does not know.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 32], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum Edit {
    /// The host archives exactly the messages of `span` as one page (with `metadata_json`, a
    /// JSON object or empty, kept with the page), builds the summary message (`text`,
    /// `status`, the page's ref, this strategy's name) and puts it in the span's place.
    Summarize {
        span: Span,
        text: RString,
        status: SummaryStatus,
        metadata_json: RString,
    },
    /// For a strategy that archived the span itself (batch-deferred defers a request naming
    /// its page): `message` is a summary message whose page ref names a page holding exactly
    /// the messages of `span` (pages are content-addressed, so the host checks it with one
    /// hash of the span); it takes the span's place.
    Replace { span: Span, message: Message },
    /// The pending summary at `index` (one of this strategy's) becomes final: same place,
    /// same page, `text` as its text.
    Finalize { index: u32, text: RString },
    /// A clearing (TAMP-INV-10): `message` is the message at `index` with some of its tool
    /// results' content (or tool calls' input) replaced in place by placeholders naming the
    /// page of the original message, and nothing else changed: same role, same blocks in the
    /// same order, same tool ids, names and `is_error`. The SDK's `sdk::clearing::Clearing`
    /// builds it. The host checks the structure and the page the placeholders name (pages
    /// are content-addressed: it is the page of exactly the original message), archives the
    /// original under it, and puts `message` in its place.
    Clear { index: u32, message: Message },
}

/// An [`Edit`] as it crosses the boundary.
pub type EditFfi = NonExhaustiveFor<Edit>;

impl Edit {
    /// Summarize `span` into `text`, a final summary.
    pub fn summarize(span: impl Into<Span>, text: impl Into<String>) -> Edit {
        Edit::summary(span.into(), text.into(), SummaryStatus::Final)
    }

    /// Summarize `span` into a pending summary (its final text comes later, by
    /// [`Edit::finalize`]).
    pub fn summarize_pending(span: impl Into<Span>, text: impl Into<String>) -> Edit {
        Edit::summary(span.into(), text.into(), SummaryStatus::Pending)
    }

    fn summary(span: Span, text: String, status: SummaryStatus) -> Edit {
        Edit::Summarize {
            span,
            text: text.into(),
            status,
            metadata_json: RString::new(),
        }
    }

    /// The same edit with `metadata` kept with its page (a `Summarize` only; others are
    /// returned as they are).
    pub fn with_metadata(self, metadata: &serde_json::Value) -> Edit {
        match self {
            Edit::Summarize {
                span, text, status, ..
            } => Edit::Summarize {
                span,
                text,
                status,
                metadata_json: metadata.to_string().into(),
            },
            other => other,
        }
    }

    /// Put `message` (a summary message whose page holds exactly `span`) in `span`'s place.
    pub fn replace(span: impl Into<Span>, message: Message) -> Edit {
        Edit::Replace {
            span: span.into(),
            message,
        }
    }

    /// Make the pending summary at `index` final with `text`.
    pub fn finalize(index: usize, text: impl Into<String>) -> Edit {
        Edit::Finalize {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            text: RString::from(text.into()),
        }
    }

    /// Put `message`, a clearing of the message at `index`, in its place.
    pub fn clear(index: usize, message: Message) -> Edit {
        Edit::Clear {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            message,
        }
    }

    /// Wraps the edit for the boundary.
    pub fn into_ffi(self) -> EditFfi {
        NonExhaustive::new(self)
    }

    /// The messages the edit replaces (a `Finalize` or a `Clear` replaces its one message).
    pub fn span(&self) -> Span {
        match self {
            Edit::Summarize { span, .. } | Edit::Replace { span, .. } => *span,
            Edit::Finalize { index, .. } | Edit::Clear { index, .. } => Span {
                start: *index,
                end: index.saturating_add(1),
            },
        }
    }
}
