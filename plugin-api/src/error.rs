//! Errors that cross the plugin boundary.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What kind of failure a [`PluginError`] or [`HostError`] reports.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The stage config does not fit the plugin's schema or rules.
    InvalidConfig,
    /// The conversation is not something the plugin can work on.
    InvalidInput,
    /// An LLM call failed (after the host's retries) or answered something unusable.
    Llm,
    /// A host service (store, tokenizer) failed.
    Host,
    /// The plugin panicked; the message is the panic payload.
    Panicked,
    /// Anything else inside the plugin.
    Internal,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::Llm => "llm",
            ErrorKind::Host => "host",
            ErrorKind::Panicked => "panicked",
            ErrorKind::Internal => "internal",
        }
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
