//! The chain file's `[store]` (where pages, the summary cache, thread states and the deferred
//! queue live) and `[cache]` (whether the summary cache answers).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config_error::{is_env_var_name, FieldError};

/// `[store]` (or `store = { ... }`): where pages, the summary cache and the deferred queue
/// live.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (the embedded default: one file, no server) or `postgres` (one database
    /// shared by several hosts).
    pub kind: StoreKind,
    /// The SQLite file; default `.tamp/store.sqlite3` under the current directory.
    pub path: Option<PathBuf>,
    /// The environment variable holding the PostgreSQL URL (`kind = "postgres"`). The URL
    /// itself is never written in the file: it usually carries a password.
    pub url_env: Option<String>,
    /// Connections kept open to PostgreSQL by each host.
    pub pool_size: usize,
    /// The CA certificate(s) (PEM) that sign the PostgreSQL server's certificate, relative to
    /// the chain file's directory; the URL's `sslrootcert` says the same (one or the other).
    /// With it, the URL's `sslmode` defaults to `verify-full`.
    pub ca_file: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Sqlite,
            path: None,
            url_env: None,
            pool_size: 8,
            ca_file: None,
        }
    }
}

/// The store backends.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    #[default]
    Sqlite,
    Postgres,
}

/// The store used when no chain file names one.
pub const DEFAULT_STORE_PATH: &str = ".tamp/store.sqlite3";

impl StoreConfig {
    /// The checks of `[store]` on its own; each error names the field. Whether the URL's
    /// variable is set is checked when the store is opened ([`LoadedChainFile::store_spec`]).
    pub fn validate(&self) -> Result<(), FieldError> {
        let error = |key, message: &str| Err(FieldError::new("store", key, message));
        match self.kind {
            StoreKind::Sqlite => {
                for (key, set) in [
                    ("url_env", self.url_env.is_some()),
                    ("ca_file", self.ca_file.is_some()),
                ] {
                    if set {
                        return error(key, "only for kind = \"postgres\"");
                    }
                }
            }
            StoreKind::Postgres => {
                if self.path.is_some() {
                    return error(
                        "path",
                        "only for kind = \"sqlite\"; a PostgreSQL store is named by url_env",
                    );
                }
                let Some(var) = &self.url_env else {
                    return error("url_env", "required when kind = \"postgres\": the name of the environment variable that holds the database URL, e.g. \"TAMP_DATABASE_URL\"");
                };
                if !is_env_var_name(var) {
                    return error("url_env", "must be the name of an environment variable (letters, digits and _), not the URL itself");
                }
            }
        }
        if self.pool_size == 0 || self.pool_size > 1_000 {
            return error(
                "pool_size",
                &format!("must be between 1 and 1000, got {}", self.pool_size),
            );
        }
        Ok(())
    }
}

/// `[cache]`: the summary cache (no summary paid for twice).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Answer repeated LLM requests and already-summarized message ranges from the store.
    pub enabled: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { enabled: true }
    }
}
