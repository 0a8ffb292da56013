//! Deferred work: summaries the host finishes later (through a batch API) while the
//! compaction that asked for them returns at once. The types the host and a plugin exchange;
//! the page-transcript prompt encoding is in `tamp-plugin-api`'s `deferred` module.

use std::fmt;

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

use crate::llm::LlmRequest;

/// Where a deferred request stands.
///
/// A code, not a Rust enum, so that a later ABI version may add states without breaking
/// plugins built earlier (see [`crate::ErrorKind`]): a state this version does not know reads
/// as `unknown`.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeferredStatus(u8);

#[allow(non_upper_case_globals)]
impl DeferredStatus {
    /// Waiting for the next batch.
    pub const Queued: DeferredStatus = DeferredStatus(0);
    /// Sent in a batch that has not ended yet.
    pub const Submitted: DeferredStatus = DeferredStatus(1);
    /// Finished: `text` holds the answer.
    pub const Done: DeferredStatus = DeferredStatus(2);
    /// Given up: `reason` says why.
    pub const Failed: DeferredStatus = DeferredStatus(3);
    /// The host knows no request for this page (never deferred, or a host without the
    /// deferred service).
    pub const Unknown: DeferredStatus = DeferredStatus(4);

    const NAMES: [(&'static str, &'static str); 5] = [
        ("queued", "Queued"),
        ("submitted", "Submitted"),
        ("done", "Done"),
        ("failed", "Failed"),
        ("unknown", "Unknown"),
    ];

    pub const fn from_code(code: u8) -> Self {
        DeferredStatus(code)
    }

    pub const fn code(self) -> u8 {
        self.0
    }

    /// `snake_case` name; a state a later version added is `unknown`.
    pub fn as_str(self) -> &'static str {
        Self::NAMES
            .get(usize::from(self.0))
            .map_or("unknown", |n| n.0)
    }

    /// The state named `name`, if this version knows it.
    pub fn from_name(name: &str) -> Option<Self> {
        (0u8..)
            .zip(Self::NAMES)
            .find(|(_, (snake, _))| *snake == name)
            .map(|(code, _)| DeferredStatus(code))
    }
}

impl fmt::Debug for DeferredStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Self::NAMES.get(usize::from(self.0)) {
            Some((_, variant)) => f.write_str(variant),
            None => write!(f, "Unknown({})", self.0),
        }
    }
}

impl Serialize for DeferredStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DeferredStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        DeferredStatus::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown deferred status `{name}`")))
    }
}

/// A summary request to defer, for one page.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeferredRequest {
    /// The page the answer will summarize (its id, as in the pending summary's page ref).
    pub page_id: RString,
    pub request: LlmRequest,
}

/// The state of the deferred request of one page.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredState {
    pub page_id: RString,
    pub status: DeferredStatus,
    /// The answer when `status` is `Done`, else empty.
    pub text: RString,
    /// Why it failed when `status` is `Failed`, else empty.
    pub reason: RString,
}

impl DeferredState {
    /// The state of a page the host knows nothing about.
    pub fn unknown(page_id: impl Into<RString>) -> Self {
        DeferredState {
            page_id: page_id.into(),
            status: DeferredStatus::Unknown,
            text: RString::new(),
            reason: RString::new(),
        }
    }
}
