//! One built chain as the server holds it: the chain, the config it came from, and the hash
//! that says whether a reload would change anything.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::chain::{Chain, ChainError, FileOverrides};
use crate::config::{ConfigError, LoadedChainFile, Trigger};

/// A chain built from the config file, ready to serve.
pub struct ActiveChain {
    pub chain: Chain,
    /// The config file as the server was told (not canonicalized: a symlink stays one).
    pub config_path: PathBuf,
    /// SHA-256 (hex, 32 digits) of the config text and the identity of every plugin file the
    /// chain loaded: a rebuilt plugin with the same config is a different chain.
    pub config_hash: String,
    pub loaded_at: SystemTime,
    /// How long reading the file and building the chain took.
    pub build_time: std::time::Duration,
}

/// Why a config could not become the active chain: the file, the line where known, and
/// the message naming the field.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigProblem {
    pub file: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigProblem {
    fn from_chain_error(path: &Path, error: ChainError) -> ConfigProblem {
        match error {
            ChainError::Config(e) => e.into(),
            other => ConfigProblem {
                file: path.to_path_buf(),
                line: None,
                message: other.to_string(),
            },
        }
    }
}

impl From<ConfigError> for ConfigProblem {
    fn from(e: ConfigError) -> Self {
        ConfigProblem {
            file: e.file,
            line: e.line,
            message: e.message,
        }
    }
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl ActiveChain {
    /// Reads the config and builds the whole chain: parse (unknown fields rejected), load
    /// every plugin, validate every stage config against its plugin's schema, instantiate.
    /// Blocking (file reads, library loads): run it off the async workers.
    pub fn build(path: &Path, overrides: FileOverrides) -> Result<ActiveChain, ConfigProblem> {
        let started = std::time::Instant::now();
        let file = LoadedChainFile::read(path)?;
        let chain = Chain::from_loaded(&file, overrides)
            .map_err(|e| ConfigProblem::from_chain_error(path, e))?;
        let mut hasher = Sha256::new();
        hasher.update(file.source.as_bytes());
        for stage in chain.stages() {
            hasher.update([0]);
            hasher.update(stage.plugin.source_path().as_os_str().as_encoded_bytes());
            hasher.update([0]);
            hasher.update(stage.plugin.identity().as_bytes());
        }
        let digest = hasher.finalize();
        Ok(ActiveChain {
            chain,
            config_path: path.to_path_buf(),
            config_hash: hex::encode(&digest[..16]),
            loaded_at: SystemTime::now(),
            build_time: started.elapsed(),
        })
    }

    /// Seconds since the Unix epoch when this chain was built.
    pub fn loaded_at_unix(&self) -> f64 {
        self.loaded_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }

    /// The chain's stages for `GET /v1/chain` and `tamp check-config`.
    pub fn stages(&self) -> Vec<StageInfo> {
        self.chain
            .stages()
            .iter()
            .map(|s| StageInfo {
                name: s.name.clone(),
                plugin: s.plugin.meta().name.clone(),
                version: s.plugin.meta().version.clone(),
                trigger: s.trigger,
                timeout_secs: s.timeout.as_secs_f64(),
                config: s.config.clone(),
                plugin_file: s.plugin.source_path().to_path_buf(),
                plugin_identity: s.plugin.identity().to_string(),
            })
            .collect()
    }

    /// One line: `chain.toml: 2 stages (a: custom-strategy 0.1.0, ...), config hash ...`.
    pub fn summary(&self) -> String {
        let stages: Vec<String> = self
            .stages()
            .iter()
            .map(|s| format!("{}: {} {}", s.name, s.plugin, s.version))
            .collect();
        format!(
            "{}: {} stage{} ({}), config hash {}, built in {:.1} ms",
            self.config_path.display(),
            stages.len(),
            if stages.len() == 1 { "" } else { "s" },
            stages.join(", "),
            self.config_hash,
            self.build_time.as_secs_f64() * 1e3
        )
    }
}

/// A stage as `GET /v1/chain` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StageInfo {
    pub name: String,
    pub plugin: String,
    pub version: String,
    pub trigger: Trigger,
    pub timeout_secs: f64,
    pub config: serde_json::Value,
    /// The plugin file the config names (canonical path).
    pub plugin_file: PathBuf,
    /// What identifies the loaded bytes of that file (`sha256:...`).
    pub plugin_identity: String,
}
