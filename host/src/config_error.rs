//! The errors of the chain file, a leaf every section's component uses: [`FieldError`], a
//! broken rule of one key that the section's own checks find, and [`ConfigError`], an error
//! located in the file (`config` turns the one into the other with the key's line).

use std::fmt;
use std::path::PathBuf;

/// A broken rule of one key of a chain-file table, found by the table's own checks: the
/// table and key say where it is (so its line can be found), the message what is wrong.
/// Shown as `budget.max_tokens: must be greater than 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The table (`budget`).
    pub table: &'static str,
    /// The key inside it (`max_tokens`).
    pub key: &'static str,
    pub message: String,
}

impl FieldError {
    pub fn new(table: &'static str, key: &'static str, message: impl Into<String>) -> Self {
        FieldError {
            table,
            key,
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}: {}", self.table, self.key, self.message)
    }
}

impl std::error::Error for FieldError {}

/// A config error: the file, the line where known, and what is wrong (naming the field).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file.display(), line, self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Whether `var` can name an environment variable. Config keys ending in `_env` take names,
/// never secrets: an error about one never echoes its value.
pub fn is_env_var_name(var: &str) -> bool {
    !var.is_empty()
        && !var.starts_with(|c: char| c.is_ascii_digit())
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
