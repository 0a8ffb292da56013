//! A chain built from a chain file: its provider, store and stages wired into a
//! [`ChainBuilder`], each error located in the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Chain, ChainBuilder, ChainError};
use crate::config::LoadedChainFile;
use crate::loader::{load_trusted, resolve_plugin, LoadError, PluginTrust};
use crate::providers::Provider;
use crate::services::ProgressFn;
use crate::tokens::TokenCounter;

/// A plugin path that names no file, said as the chain file wrote it and as it resolved (a
/// relative path is read from the chain file's directory, not the working directory, which is
/// what a user who ran tamp from elsewhere needs to hear). Other errors as they are.
fn missing_plugin(error: LoadError, written: &str, base: &Path) -> String {
    match error {
        LoadError::NotFound { path } if crate::loader::is_path_spec(written) => {
            let resolved = std::path::absolute(&path).unwrap_or(path);
            format!(
                "plugin \"{written}\": no such file {} (a plugin path is relative to the \
                 chain file's directory, {})",
                resolved.display(),
                std::path::absolute(base)
                    .unwrap_or_else(|_| base.to_path_buf())
                    .display()
            )
        }
        other => other.to_string(),
    }
}

/// Settings a caller may impose on a chain built from a file.
#[derive(Clone, Default)]
pub struct FileOverrides {
    /// Use this store file instead of the chain file's.
    pub store_path: Option<PathBuf>,
    pub progress: Option<ProgressFn>,
    /// Refuse a stage without a `sha256` pin (`tamp serve --require-pins`).
    pub require_pins: bool,
    /// Check the chain without creating anything (`tamp check-config`): a SQLite store file
    /// that does not exist yet is not created (see [`crate::store::open_without_creating`]).
    pub check_only: bool,
    /// Wraps the chain file's provider: `tamp eval` hears of each call as it is answered,
    /// for its progress bar.
    pub wrap_provider: Option<ProviderWrap>,
}

/// A provider around a provider (see [`FileOverrides::wrap_provider`]).
pub type ProviderWrap = Arc<dyn Fn(Arc<dyn Provider>) -> Arc<dyn Provider> + Send + Sync>;

impl Chain {
    /// Reads a chain file, loads its plugins, validates every stage config against its
    /// plugin's schema and builds the chain. Errors name the file, line and field.
    pub fn from_file(path: &Path, overrides: FileOverrides) -> Result<Chain, ChainError> {
        let file = LoadedChainFile::read(path)?;
        Self::from_loaded(&file, overrides)
    }

    pub fn from_loaded(
        file: &LoadedChainFile,
        overrides: FileOverrides,
    ) -> Result<Chain, ChainError> {
        let cfg = &file.file;
        let mut provider = file.provider()?;
        if let Some(wrap) = &overrides.wrap_provider {
            provider = wrap(provider);
        }
        let encoding = cfg
            .tokenizer
            .encoding
            .parse()
            .map_err(|e| file.error(None, format!("tokenizer.encoding: {e}")))?;
        let tokens =
            TokenCounter::new(encoding).map_err(|e| file.error(None, format!("tokenizer: {e}")))?;
        let spec = file.store_spec(overrides.store_path.as_deref())?;
        let opened = if overrides.check_only {
            crate::store::open_without_creating(&spec)
        } else {
            crate::store::open(&spec)
        };
        let store = opened.map_err(|e| match &overrides.store_path {
            // `--store`: nothing in the file to point at.
            Some(_) => ChainError::Store(e),
            None => file.store_error(e.to_string()).into(),
        })?;
        let cache = cfg.cache.enabled.then(|| Arc::clone(&store.cache));
        let mut builder = ChainBuilder::new(cfg.budget)
            .provider(provider)
            .threads(store.threads, cfg.threads)
            .store(store.pages)
            .search(store.search)
            .activity(store.activity)
            .cache(cache)
            .queue(Some(store.queue))
            .tokens(Arc::new(tokens))
            .llm_concurrency(cfg.provider.max_concurrency)
            .llm_timeout(cfg.provider.overall_timeout());
        if let Some(price) = cfg.provider.price {
            builder = builder.price(price);
        }
        if let Some(p) = overrides.progress {
            builder = builder.progress(p);
        }
        let base = file.base_dir();
        let allow_dirs = file.allow_dirs()?;
        for (i, spanned) in cfg.stages.iter().enumerate() {
            let stage = spanned.get_ref();
            // Each error on the line of the key at fault (`plugin =`, `sha256 =`).
            let stage_error = |key: &str, e: &dyn std::fmt::Display| {
                file.error(
                    file.stage_key_line(i, key),
                    format!("stage \"{}\": {e}", stage.name),
                )
            };
            let path = resolve_plugin(&stage.plugin, &base, &cfg.plugin_dirs)
                .map_err(|e| stage_error("plugin", &missing_plugin(e, &stage.plugin, &base)))?;
            if overrides.require_pins && stage.sha256.is_none() {
                return Err(stage_error(
                    "plugin",
                    &format_args!(
                        "sha256: required (--require-pins), and this stage has no pin; \
                         `tamp plugins hash {}` prints the line to add",
                        path.display()
                    ),
                )
                .into());
            }
            let trust = PluginTrust {
                sha256: stage.sha256.clone(),
                allow_dirs: allow_dirs.clone(),
            };
            let plugin = load_trusted(&path, &trust).map_err(|e| {
                let key = match e {
                    LoadError::PinMismatch { .. } => "sha256",
                    _ => "plugin",
                };
                stage_error(key, &e)
            })?;
            let limits = stage.wasm.unwrap_or_default().over(cfg.plugins.wasm);
            builder = builder
                .sandboxed_stage(
                    &stage.name,
                    plugin,
                    stage.config_json(),
                    stage.trigger,
                    stage.timeout(),
                    &limits,
                )
                .map_err(|e| {
                    file.error(
                        file.stage_config_line(i, &e.path),
                        format!("stage \"{}\": {}", stage.name, e.message),
                    )
                })?;
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_given_outside_the_file_that_cannot_open_is_a_store_error() {
        let file = LoadedChainFile::parse(
            Path::new("chain.toml"),
            "[budget]\nmax_tokens = 100\n".into(),
        )
        .unwrap();
        // A directory cannot be created under /proc, even by root.
        let overrides = FileOverrides {
            store_path: Some("/proc/no-such/s.sqlite3".into()),
            ..FileOverrides::default()
        };
        match Chain::from_loaded(&file, overrides) {
            Err(ChainError::Store(e @ crate::store::StoreError::Backend { .. })) => {
                // The text is the store's own, as it was when this was a setup error.
                assert!(
                    e.to_string()
                        .starts_with("page store /proc/no-such/s.sqlite3: cannot"),
                    "{e}"
                );
            }
            Err(other) => panic!("not a store error: {other:?}"),
            Ok(_) => panic!("the store opened"),
        }
    }

    #[test]
    fn a_store_that_cannot_be_opened_is_located_at_its_setting() {
        // A directory cannot be created under /proc, even by root.
        let text = "[budget]\nmax_tokens = 100\n\n[store]\npath = \"/proc/no-such/s.sqlite3\"\n";
        let file = LoadedChainFile::parse(Path::new("chain.toml"), text.into()).unwrap();
        let err = match Chain::from_loaded(&file, Default::default()) {
            Err(ChainError::Config(e)) => e,
            Err(other) => panic!("not a config error: {other}"),
            Ok(_) => panic!("the store opened"),
        };
        assert_eq!(err.line, Some(5), "{err}");
        assert!(
            err.message
                .starts_with("store.path: page store /proc/no-such/s.sqlite3: cannot"),
            "{err}"
        );
    }
}
