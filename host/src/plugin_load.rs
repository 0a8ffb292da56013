//! What the two plugin loaders share, a leaf: the native one (`loader`, shared libraries) and
//! the WebAssembly one (`wasm`, components) both describe a plugin with [`PluginMeta`],
//! refuse one with [`LoadError`], follow [`versions_compatible`] and keep their private copies
//! in a directory [`ensure_private_dir`] makes. `loader` re-exports the two types, which its
//! callers know it by.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Why a plugin could not be loaded or instantiated. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {path}: no such file")]
    NotFound { path: PathBuf },
    /// Something that is there but is no regular file: a directory, a device, a FIFO.
    #[error("plugin {path}: it is {kind}, not a plugin file (a shared library)")]
    NotAFile { path: PathBuf, kind: &'static str },
    /// An ELF file whose headers promise more than it holds (cut short), checked before the
    /// dynamic linker maps it: mapped, it would kill the process with SIGBUS.
    #[error("plugin {path}: damaged or incomplete shared library, refused, not loaded: {detail}")]
    Damaged { path: PathBuf, detail: String },
    #[error("plugin {path}: not a tamp plugin ({detail})")]
    NotAPlugin { path: PathBuf, detail: String },
    #[error(
        "plugin {path}: built against plugin ABI {plugin_version}, but this host uses plugin ABI \
         {host_version} (tamp-plugin-abi); rebuild the plugin against tamp-plugin-api \
         {host_version}"
    )]
    IncompatibleVersion {
        path: PathBuf,
        plugin_version: String,
        host_version: String,
    },
    #[error(
        "plugin {path}: its ABI layout does not match plugin ABI {host_version} \
         (same version number, different types: was it built from a modified tamp-plugin-abi?): \
         {summary}"
    )]
    LayoutMismatch {
        path: PathBuf,
        host_version: String,
        summary: String,
    },
    #[error(
        "plugin {path}: its SHA-256 is {actual}, but the chain file pins sha256 = \"{pinned}\"; \
         refused, not loaded (rebuilt or replaced? if this build is the one to run, pin it \
         with the line `tamp plugins hash {path}` prints)"
    )]
    PinMismatch {
        path: PathBuf,
        pinned: String,
        actual: String,
    },
    #[error(
        "plugin {path}: resolves to {resolved}, which is outside [plugins] allow_dirs \
         ({allowed}); refused, not loaded"
    )]
    NotAllowed {
        path: PathBuf,
        resolved: PathBuf,
        allowed: String,
    },
    #[error("plugin {path}: {detail}")]
    Other { path: PathBuf, detail: String },
}

impl LoadError {
    /// The same error about `user_file` instead of `copy`: a plugin loaded from a private
    /// copy is reported under the file the user named, never the copy in a temporary
    /// directory (which the dynamic linker's messages name too).
    pub(crate) fn naming(self, copy: &Path, user_file: &Path) -> LoadError {
        let copy_text = copy.display().to_string();
        let user_text = user_file.display().to_string();
        let fix = |text: String| text.replace(&copy_text, &user_text);
        let path = user_file.to_path_buf();
        match self {
            LoadError::NotFound { .. } => LoadError::NotFound { path },
            LoadError::NotAFile { kind, .. } => LoadError::NotAFile { path, kind },
            LoadError::Damaged { detail, .. } => LoadError::Damaged {
                path,
                detail: fix(detail),
            },
            LoadError::NotAPlugin { detail, .. } => LoadError::NotAPlugin {
                path,
                detail: fix(detail),
            },
            LoadError::IncompatibleVersion {
                plugin_version,
                host_version,
                ..
            } => LoadError::IncompatibleVersion {
                path,
                plugin_version,
                host_version,
            },
            LoadError::LayoutMismatch {
                host_version,
                summary,
                ..
            } => LoadError::LayoutMismatch {
                path,
                host_version,
                summary: fix(summary),
            },
            LoadError::Other { detail, .. } => LoadError::Other {
                path,
                detail: fix(detail),
            },
            // Raised before any copy exists: they already name the user's file.
            e @ (LoadError::PinMismatch { .. } | LoadError::NotAllowed { .. }) => e,
        }
    }
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

/// tamp's rule for a plugin built against `plugin_version` on a host of `host_version` (see
/// `check_plugin_api_version`; a WebAssembly component's WIT world follows it too).
pub(crate) fn versions_compatible(plugin_version: &str, host_version: &str) -> bool {
    let parse = |v: &str| semver::Version::parse(v).ok();
    match (parse(plugin_version), parse(host_version)) {
        (Some(p), Some(h)) if p.major == 0 && h.major == 0 => p.minor == h.minor,
        (Some(p), Some(h)) => p.major == h.major && p.minor <= h.minor,
        _ => false,
    }
}

/// Creates `dir` for this user alone, or checks that it is so. Libraries are loaded from the
/// copies in it, so whoever could write it could put other code under a pinned stage (the
/// name under the temporary directory is predictable).
pub(crate) fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(dir)?;
        // Linux: /proc/self belongs to the process's effective user.
        let own_uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
        if !meta.is_dir()
            || meta.mode() & 0o077 != 0
            || own_uid.is_some_and(|uid| uid != meta.uid())
        {
            return Err(std::io::Error::other(format!(
                "it exists but is not a directory private to this user (mode {:o}, owner {}); \
                 remove it",
                meta.mode() & 0o7777,
                meta.uid()
            )));
        }
        Ok(())
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}
