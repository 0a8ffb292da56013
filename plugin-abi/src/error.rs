//! Errors that cross the plugin boundary.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};
use std::fmt;

crate::code::extensible_code! {
    /// What kind of failure a [`PluginError`] or [`HostError`] reports; kinds may be added
    /// (see `code.rs`), so a `match` needs a `_` arm.
    pub struct ErrorKind, "error kind" {
        /// The stage config does not fit the plugin's schema or rules.
        InvalidConfig = 0, "invalid_config";
        /// The conversation is not something the plugin can work on.
        InvalidInput = 1, "invalid_input";
        /// An LLM call failed (after the host's retries) or answered something unusable.
        Llm = 2, "llm";
        /// A host service (store, tokenizer) failed.
        Host = 3, "host";
        /// The plugin panicked; the message is the panic payload.
        Panicked = 4, "panicked";
        /// Anything else inside the plugin.
        Internal = 5, "internal";
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
