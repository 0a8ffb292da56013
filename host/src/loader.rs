//! Loading plugin libraries.
//!
//! Each plugin is loaded with `lib_header_from_path(..).init_root_module()` rather than
//! `RootModule::load_from_file`, because the latter caches one module per interface for the
//! whole process and so could hold only one plugin. Loading checks the ABI before any plugin
//! code runs. A loaded library is never unloaded (abi_stable leaks it on purpose): types and
//! function pointers from it may live anywhere in the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use serde::Serialize;
use tamp_plugin_api::{PluginModuleRef, StrategyBox, PLUGIN_API_VERSION};

use crate::logging::plugin_log_sink;

/// Why a plugin could not be loaded or instantiated. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {path}: no such file")]
    NotFound { path: PathBuf },
    #[error("plugin {path}: not a tamp plugin ({detail})")]
    NotAPlugin { path: PathBuf, detail: String },
    #[error(
        "plugin {path}: built against tamp-plugin-api {plugin_version}, but this host uses \
         tamp-plugin-api {host_version}; rebuild the plugin against {host_version}"
    )]
    IncompatibleVersion {
        path: PathBuf,
        plugin_version: String,
        host_version: String,
    },
    #[error(
        "plugin {path}: its ABI layout does not match tamp-plugin-api {host_version} \
         (same version number, different types: was it built from a modified plugin-api?): {summary}"
    )]
    LayoutMismatch {
        path: PathBuf,
        host_version: String,
        summary: String,
    },
    #[error("plugin {path}: {detail}")]
    Other { path: PathBuf, detail: String },
}

/// What a plugin says about itself (host-side copy of its `PluginInfo`).
#[derive(Debug, Clone, Serialize)]
pub struct PluginMeta {
    pub name: String,
    pub version: String,
    pub description: String,
    pub plugin_api_version: String,
    pub config_schema: serde_json::Value,
    pub default_config: serde_json::Value,
}

/// A loaded plugin library: its metadata and its constructor.
pub struct LoadedPlugin {
    path: PathBuf,
    meta: PluginMeta,
    module: PluginModuleRef,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("path", &self.path)
            .field("name", &self.meta.name)
            .field("version", &self.meta.version)
            .finish()
    }
}

impl LoadedPlugin {
    /// Loads the plugin at `path`, checking its ABI, and reads its metadata.
    pub fn load(path: &Path) -> Result<Arc<LoadedPlugin>, LoadError> {
        if !path.is_file() {
            return Err(LoadError::NotFound {
                path: path.to_path_buf(),
            });
        }
        let module = load_module(path)?;
        let info = (module.info())()
            .into_result()
            .map_err(|e| LoadError::Other {
                path: path.to_path_buf(),
                detail: format!("its info entry point failed: {e}"),
            })?;
        let parse = |what: &str, json: &str| {
            serde_json::from_str(json).map_err(|e| LoadError::Other {
                path: path.to_path_buf(),
                detail: format!("its {what} is not valid JSON: {e}"),
            })
        };
        let meta = PluginMeta {
            name: info.name.into(),
            version: info.version.into(),
            description: info.description.into(),
            plugin_api_version: info.plugin_api_version.into(),
            config_schema: parse("config schema", &info.config_schema_json)?,
            default_config: parse("default config", &info.default_config_json)?,
        };
        (module.set_log_sink())(plugin_log_sink());
        tracing::debug!(path = %path.display(), name = %meta.name, version = %meta.version, "plugin loaded");
        Ok(Arc::new(LoadedPlugin {
            path: path.to_path_buf(),
            meta,
            module,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn meta(&self) -> &PluginMeta {
        &self.meta
    }

    /// Builds a strategy instance from a config (already validated against the schema).
    /// The plugin's constructor runs behind `catch_unwind` on its side, so a panic comes
    /// back as an error.
    pub fn instantiate(
        &self,
        config: &serde_json::Value,
    ) -> Result<StrategyBox, tamp_plugin_api::PluginError> {
        let json = config.to_string();
        (self.module.new_strategy())(json.as_str().into()).into_result()
    }
}

fn load_module(path: &Path) -> Result<PluginModuleRef, LoadError> {
    let not_a_plugin = |detail: String| LoadError::NotAPlugin {
        path: path.to_path_buf(),
        detail,
    };
    let header = lib_header_from_path(path).map_err(|e| match e {
        LibraryError::OpenError { err, .. } => not_a_plugin(format!("cannot be loaded as a shared library: {err}")),
        LibraryError::GetSymbolError { .. } => {
            not_a_plugin("it exports no tamp root module; was it built with `export_plugin!`?".to_string())
        }
        LibraryError::InvalidAbiHeader(h) => not_a_plugin(format!(
            "its abi_stable header is incompatible (ABI {}.{}); rebuild it against tamp-plugin-api {PLUGIN_API_VERSION}",
            h.abi_major, h.abi_minor
        )),
        other => not_a_plugin(first_line(&other.to_string())),
    })?;
    check_plugin_api_version(path, header.version_strings().version.as_ref())?;
    header
        .init_root_module::<PluginModuleRef>()
        .map_err(|e| classify_init_error(path, e))
}

/// tamp's compatibility rule, checked before abi_stable's (which, for 0.x, also accepts a
/// plugin built against a *newer* minor and leaves the rest to the layout check): on 0.x the
/// minor must match; from 1.0 the major must match and the plugin's minor may not be newer
/// than the host's (a plugin may only rely on host services this host has).
fn check_plugin_api_version(path: &Path, plugin_version: &str) -> Result<(), LoadError> {
    let host_version = PLUGIN_API_VERSION;
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    let compatible = match (parse(plugin_version), parse(host_version)) {
        (Some((0, p_minor)), Some((0, h_minor))) => p_minor == h_minor,
        (Some((p_major, p_minor)), Some((h_major, h_minor))) => {
            p_major == h_major && p_minor <= h_minor
        }
        _ => false,
    };
    if compatible {
        Ok(())
    } else {
        Err(LoadError::IncompatibleVersion {
            path: path.to_path_buf(),
            plugin_version: plugin_version.to_string(),
            host_version: host_version.to_string(),
        })
    }
}

fn classify_init_error(path: &Path, error: LibraryError) -> LoadError {
    let host_version = PluginModuleRef::VERSION_STRINGS.version.to_string();
    match error {
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            LoadError::IncompatibleVersion {
                path: path.to_path_buf(),
                plugin_version: actual_version.to_string(),
                host_version,
            }
        }
        LibraryError::AbiInstability(details) => {
            let full = details.to_string();
            tracing::debug!(path = %path.display(), "full ABI layout report:\n{full}");
            LoadError::LayoutMismatch {
                path: path.to_path_buf(),
                host_version,
                summary: summarize_layout_error(&full),
            }
        }
        other => LoadError::Other {
            path: path.to_path_buf(),
            detail: first_line(&other.to_string()),
        },
    }
}

/// abi_stable's layout report runs to a thousand lines; keep the first few that say what
/// differs and point to the full one.
fn summarize_layout_error(full: &str) -> String {
    let lines: Vec<&str> = full
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let head: Vec<&str> = lines.iter().copied().take(4).collect();
    let mut out = head.join(" | ");
    if lines.len() > head.len() {
        out.push_str(&format!(
            " … ({} more lines; TAMP_LOG=debug prints the whole report)",
            lines.len() - head.len()
        ));
    }
    out
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("unknown error")
        .to_string()
}

/// Resolves a chain file's `plugin = "..."`: a path (containing `/` or ending in `.so`,
/// relative to `base_dir`), or a name looked up as `lib<name>.so` (dashes as underscores) in
/// `search_dirs`, then in `TAMP_PLUGIN_PATH` (colon-separated), then next to the running
/// executable (where cargo puts the workspace's plugins).
pub fn resolve_plugin(
    spec: &str,
    base_dir: &Path,
    search_dirs: &[PathBuf],
) -> Result<PathBuf, LoadError> {
    if spec.contains('/') || spec.ends_with(std::env::consts::DLL_SUFFIX) {
        let path = base_dir.join(spec);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(LoadError::NotFound { path })
        };
    }
    let file = format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        spec.replace('-', "_"),
        std::env::consts::DLL_SUFFIX
    );
    let mut dirs: Vec<PathBuf> = search_dirs.iter().map(|d| base_dir.join(d)).collect();
    if let Some(env) = std::env::var_os("TAMP_PLUGIN_PATH") {
        dirs.extend(std::env::split_paths(&env));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        // Test and bench binaries live one level down, in target/<profile>/deps.
        if exe_dir.ends_with("deps") {
            dirs.extend(exe_dir.parent().map(Path::to_path_buf));
        }
        dirs.push(exe_dir);
    }
    dirs.iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
        .ok_or_else(|| LoadError::NotFound {
            path: PathBuf::from(format!(
                "{file} (plugin \"{spec}\" looked up in: {})",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_rule_is_semver_for_plugins() {
        let p = Path::new("x.so");
        let host = PLUGIN_API_VERSION;
        assert!(check_plugin_api_version(p, host).is_ok());
        let (major, minor) = {
            let mut it = host.split('.').map(|n| n.parse::<u64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        };
        assert!(check_plugin_api_version(p, &format!("{major}.{minor}.999")).is_ok());
        let err = check_plugin_api_version(p, &format!("{major}.{}.0", minor + 1)).unwrap_err();
        assert!(err.to_string().contains(host), "{err}");
        assert!(check_plugin_api_version(p, &format!("{}.0.0", major + 1)).is_err());
        assert!(check_plugin_api_version(p, "garbage").is_err());
    }
}
