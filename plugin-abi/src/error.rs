//! Errors that cross the plugin boundary.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What kind of failure a [`PluginError`] or [`HostError`] reports.
///
/// A code, not a Rust enum, so that a later ABI version may add kinds without breaking
/// plugins built earlier: a kind this version does not know reads as `unknown` (its code is
/// kept), and a `match` on it needs a `_` arm. The known kinds are associated constants named
/// like enum variants, and match like them.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorKind(u8);

#[allow(non_upper_case_globals)]
impl ErrorKind {
    /// The stage config does not fit the plugin's schema or rules.
    pub const InvalidConfig: ErrorKind = ErrorKind(0);
    /// The conversation is not something the plugin can work on.
    pub const InvalidInput: ErrorKind = ErrorKind(1);
    /// An LLM call failed (after the host's retries) or answered something unusable.
    pub const Llm: ErrorKind = ErrorKind(2);
    /// A host service (store, tokenizer) failed.
    pub const Host: ErrorKind = ErrorKind(3);
    /// The plugin panicked; the message is the panic payload.
    pub const Panicked: ErrorKind = ErrorKind(4);
    /// Anything else inside the plugin.
    pub const Internal: ErrorKind = ErrorKind(5);

    const NAMES: [(&'static str, &'static str); 6] = [
        ("invalid_config", "InvalidConfig"),
        ("invalid_input", "InvalidInput"),
        ("llm", "Llm"),
        ("host", "Host"),
        ("panicked", "Panicked"),
        ("internal", "Internal"),
    ];

    /// The kind with this code (one this version may not know).
    pub const fn from_code(code: u8) -> Self {
        ErrorKind(code)
    }

    pub const fn code(self) -> u8 {
        self.0
    }

    /// `snake_case` name, or `unknown` for a kind a later version added.
    pub fn as_str(self) -> &'static str {
        Self::NAMES
            .get(usize::from(self.0))
            .map_or("unknown", |n| n.0)
    }

    /// The kind named `name` (as [`Self::as_str`] spells it), if this version knows it.
    pub fn from_name(name: &str) -> Option<Self> {
        (0u8..)
            .zip(Self::NAMES)
            .find(|(_, (snake, _))| *snake == name)
            .map(|(code, _)| ErrorKind(code))
    }
}

impl fmt::Debug for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Self::NAMES.get(usize::from(self.0)) {
            Some((_, variant)) => f.write_str(variant),
            None => write!(f, "Unknown({})", self.0),
        }
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        ErrorKind::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error kind `{name}`")))
    }
}

/// An error a plugin returns to the host.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginError {
    pub kind: ErrorKind,
    pub message: RString,
}

impl PluginError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        PluginError {
            kind,
            message: RString::from(message.into()),
        }
    }
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidConfig, message)
    }
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for PluginError {}

/// An error the host returns from a host service call.
pub type HostError = PluginError;

impl From<serde_json::Error> for PluginError {
    fn from(e: serde_json::Error) -> Self {
        PluginError::internal(format!("JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_their_names_and_codes_and_a_later_kind_reads_as_unknown() {
        for kind in [
            ErrorKind::InvalidConfig,
            ErrorKind::InvalidInput,
            ErrorKind::Llm,
            ErrorKind::Host,
            ErrorKind::Panicked,
            ErrorKind::Internal,
        ] {
            assert_eq!(ErrorKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(ErrorKind::from_code(kind.code()), kind);
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), kind);
        }
        assert_eq!(format!("{:?}", ErrorKind::Llm), "Llm");
        let later = ErrorKind::from_code(200);
        assert_eq!(later.as_str(), "unknown");
        assert_eq!(format!("{later:?}"), "Unknown(200)");
        assert!(matches!(ErrorKind::Host, ErrorKind::Host));
        assert!(serde_json::from_str::<ErrorKind>("\"nope\"").is_err());
    }
}
