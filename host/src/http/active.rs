//! One built chain as the server holds it: the chain, the config it came from, and the hash
//! that says whether a reload would change anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::chain::{Chain, ChainError, FileOverrides};
use crate::config::{ChainFile, HttpConfig, LoadedChainFile, Trigger};
use crate::config_error::ConfigError;
use crate::store::StoreSpec;

/// How many stages [`ActiveChain::summary`] names before it counts the rest.
const SUMMARY_STAGES: usize = 8;

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
    /// Which store the chain's pages are in ([`StoreSpec::location`]): a reload may not
    /// move them.
    pub store_location: String,
    /// The file the chain was built from, as parsed. Each server reads its own tables from it
    /// per request, so they reload with the chain: this layer reads `[http]`
    /// ([`ActiveChain::http`]); `tamp proxy` and the console read theirs in their own
    /// modules.
    file: Arc<ChainFile>,
    /// Each stage's `sha256` pin, in stage order (`None`: not pinned).
    pub pins: Vec<Option<String>>,
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
        let store = file.store_spec(overrides.store_path.as_deref())?;
        Self::build_from(file, &store, overrides, started)
    }

    /// Builds the chain the config file holds now, to replace this one (a reload). Besides
    /// everything [`ActiveChain::build`] checks, it refuses what would lose work silently:
    ///
    /// - **a file with no stages** (while this chain has some): an editor or deploy tool that
    ///   truncates the file before writing it would otherwise stop all compaction, with the
    ///   default budget and the default store; the write that follows is applied as usual;
    /// - **another store** (a changed `[store]`, or one removed so the default applies):
    ///   every page archived so far would answer 404. Moving stores takes a restart.
    ///
    /// The store is compared before it is opened, so a refused file creates nothing.
    pub fn rebuild(&self, overrides: FileOverrides) -> Result<ActiveChain, ConfigProblem> {
        let started = std::time::Instant::now();
        let path = &self.config_path;
        let file = LoadedChainFile::read(path)?;
        if file.file.stages.is_empty() && !self.chain.stages().is_empty() {
            let what = if file.source.trim().is_empty() {
                "the file is empty"
            } else {
                "the file has no [[stage]]"
            };
            return Err(ConfigProblem {
                file: path.clone(),
                line: None,
                message: format!(
                    "{what}: a reload to a chain that compacts nothing is refused (a file saved \
                     half-way, or truncated before it is written?); the previous chain stays \
                     active. To serve a chain without stages, restart tamp serve with it"
                ),
            });
        }
        let store = file.store_spec(overrides.store_path.as_deref())?;
        let location = store.location();
        if location != self.store_location {
            let names_store = file.file.store != Default::default();
            let problem = file.store_error(format!(
                "a reload cannot move the page store from {} to {location}{}: the pages \
                 archived so far would no longer be served. The previous chain stays active; \
                 restart tamp serve to use the new store",
                self.store_location,
                if names_store {
                    ""
                } else {
                    " (the file names no store, so the default applies)"
                },
            ));
            return Err(problem.into());
        }
        Self::build_from(file, &store, overrides, started)
    }

    fn build_from(
        file: LoadedChainFile,
        store: &StoreSpec,
        overrides: FileOverrides,
        started: std::time::Instant,
    ) -> Result<ActiveChain, ConfigProblem> {
        let path = file.path.as_path();
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
            store_location: store.location(),
            pins: file
                .file
                .stages
                .iter()
                .map(|s| s.get_ref().sha256.clone())
                .collect(),
            file: Arc::new(file.file),
        })
    }

    /// The chain file as parsed, for a server to read its own tables from.
    pub(crate) fn file(&self) -> &ChainFile {
        &self.file
    }

    /// The file's `[http]` table: the hosts answered beyond loopback.
    pub fn http(&self) -> &HttpConfig {
        &self.file.http
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
        let all = self.stages();
        // A line, not a page: past a few stages the rest is counted (GET /v1/chain lists
        // every one).
        let mut named: Vec<String> = all
            .iter()
            .take(SUMMARY_STAGES)
            .map(|s| format!("{}: {} {}", s.name, s.plugin, s.version))
            .collect();
        if all.len() > SUMMARY_STAGES {
            named.push(format!("and {} more", all.len() - SUMMARY_STAGES));
        }
        let stages = if all.is_empty() {
            "0 stages (none: nothing is compacted)".to_string()
        } else {
            format!(
                "{} stage{} ({})",
                all.len(),
                if all.len() == 1 { "" } else { "s" },
                named.join(", ")
            )
        };
        format!(
            "{}: {stages}, config hash {}, built in {:.1} ms",
            self.config_path.display(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_that_moves_the_store_is_refused_before_the_new_store_is_opened() {
        let dir = std::env::temp_dir().join(format!(
            "tamp-active-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("chain.toml");
        std::fs::write(&config, "[store]\npath = \"a.sqlite3\"\n").unwrap();
        let active = ActiveChain::build(&config, FileOverrides::default()).unwrap();
        assert!(active.store_location.ends_with("/a.sqlite3"));

        // The same file spelled otherwise is the same store.
        std::fs::write(&config, "[store]\npath = \"./a.sqlite3\"\n").unwrap();
        active.rebuild(FileOverrides::default()).unwrap();

        std::fs::write(
            &config,
            "[budget]\nmax_tokens = 9\n\n[store]\npath = \"b.sqlite3\"\n",
        )
        .unwrap();
        let problem = active.rebuild(FileOverrides::default()).err().unwrap();
        assert_eq!(problem.line, Some(5), "{problem}");
        assert!(
            problem
                .message
                .starts_with("store.path: a reload cannot move the page store from sqlite:"),
            "{problem}"
        );
        assert!(problem.message.contains("restart tamp serve"), "{problem}");
        assert!(!dir.join("b.sqlite3").exists(), "the new store was opened");

        // A `[store]` removed: the default store would apply.
        std::fs::write(&config, "[budget]\nmax_tokens = 9\n").unwrap();
        let problem = active.rebuild(FileOverrides::default()).err().unwrap();
        assert!(
            problem.message.contains("the file names no store"),
            "{problem}"
        );

        // `--store` fixes the store whatever the file says.
        let pinned = FileOverrides {
            store_path: Some(dir.join("pinned.sqlite3")),
            ..Default::default()
        };
        let active = ActiveChain::build(&config, pinned.clone()).unwrap();
        std::fs::write(&config, "[store]\npath = \"c.sqlite3\"\n").unwrap();
        active.rebuild(pinned).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
