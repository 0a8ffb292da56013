//! Pages: immutable archives of the original messages a stage replaced.

use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

use crate::conversation::Message;

/// What a plugin hands the host to archive.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageDraft {
    /// The original messages, in conversation order.
    pub messages: RVec<Message>,
    /// The strategy archiving them.
    pub strategy: RString,
    /// Plugin-defined JSON object stored with the page (e.g. a structured summary), or empty.
    pub metadata_json: RString,
}

/// An archived page, as loaded back from the store.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Content-addressed id (`pg_` + hex digest): the same messages give the same id.
    pub id: RString,
    pub thread_id: ROption<RString>,
    pub strategy: RString,
    pub messages: RVec<Message>,
    pub metadata_json: RString,
    /// Seconds since the Unix epoch when the page was first written.
    pub created_at: u64,
}
