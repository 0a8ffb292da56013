//! Loading plugin libraries.
//!
//! Each plugin is loaded with `lib_header_from_path(..).init_root_module()` rather than
//! `RootModule::load_from_file`, because the latter caches one module per interface for the
//! whole process and so could hold only one plugin. Loading checks the ABI before any plugin
//! code runs. A loaded library is never unloaded (abi_stable leaks it on purpose): types and
//! function pointers from it may live anywhere in the host.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use sha2::Digest as _;
use tamp_plugin_api::{PluginModuleRef, StrategyBox, PLUGIN_API_VERSION};

use crate::logging::plugin_log_sink;
use crate::plugin_load::{ensure_private_dir, versions_compatible};
pub use crate::plugin_load::{LoadError, PluginMeta};

pub mod elf;

/// A stage's time limit, in seconds, when the chain file sets none (`timeout_secs`), and an
/// instance's made outside a chain ([`LoadedPlugin::instantiate`]).
pub const DEFAULT_STAGE_TIMEOUT_SECS: f64 = 60.0;

/// A loaded plugin library: its metadata and its constructor.
pub struct LoadedPlugin {
    /// The file the library was loaded from: `source` itself, or a private copy of it.
    path: PathBuf,
    /// The plugin file the chain named (canonical).
    source: PathBuf,
    /// What identifies the loaded bytes (see [`LoadedPlugin::identity`]).
    identity: String,
    /// The full SHA-256 (hex) of the loaded bytes, when they were read and hashed before
    /// loading (private copies); `None` for a library loaded in place.
    sha256: Option<String>,
    meta: PluginMeta,
    code: Code,
}

/// What runs a plugin's strategies: a library's root module, or a WebAssembly component.
enum Code {
    Native(PluginModuleRef),
    #[cfg(feature = "wasm")]
    Component(Arc<crate::wasm::WasmComponent>),
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
    ///
    /// The dynamic linker knows a library by its path: loading a path again returns the
    /// library already loaded from it, whatever the file holds now. Use
    /// [`load_plugin`] to load a file that may have changed since.
    pub fn load(path: &Path) -> Result<Arc<LoadedPlugin>, LoadError> {
        let stamp = regular_file_stamp(path)?;
        if crate::wasm::is_component_path(path) {
            return load_component(path, path, stamp, &PluginTrust::default());
        }
        Self::load_as(path, path, stamp, stamp.to_string(), None)
    }

    /// Loads the library at `path`, whose stamp was `stamp` when the caller looked at it:
    /// the file is checked first ([`check_before_mapping`]), so a file cut short, or one
    /// that changed since, never reaches the dynamic linker.
    fn load_as(
        path: &Path,
        source: &Path,
        stamp: FileStamp,
        identity: String,
        sha256: Option<String>,
    ) -> Result<Arc<LoadedPlugin>, LoadError> {
        check_before_mapping(path, stamp)?;
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
            source: source.to_path_buf(),
            identity,
            sha256,
            meta,
            code: Code::Native(module),
        }))
    }

    /// A WebAssembly component loaded from `source` (its bytes hashed to `sha256`).
    #[cfg(feature = "wasm")]
    pub(crate) fn component(
        source: &Path,
        sha256: String,
        meta: PluginMeta,
        component: crate::wasm::WasmComponent,
    ) -> Arc<LoadedPlugin> {
        Arc::new(LoadedPlugin {
            path: source.to_path_buf(),
            source: source.to_path_buf(),
            identity: format!("sha256:{}", &sha256[..32]),
            sha256: Some(sha256),
            meta,
            code: Code::Component(Arc::new(component)),
        })
    }

    /// `native` (a shared library) or `wasm` (a WebAssembly component, sandboxed).
    pub fn kind(&self) -> &'static str {
        match self.code {
            Code::Native(_) => "native",
            #[cfg(feature = "wasm")]
            Code::Component(_) => "wasm",
        }
    }

    /// For a WebAssembly component, the bytes of linear memory its live instances hold (in
    /// every stage that runs it); `None` for a native library, whose memory is the host's.
    pub fn sandbox_memory_in_use(&self) -> Option<usize> {
        match &self.code {
            Code::Native(_) => None,
            #[cfg(feature = "wasm")]
            Code::Component(component) => Some(component.memory_in_use()),
        }
    }

    /// The file the library was loaded from (a private copy in `tamp serve`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin file as the chain named it (canonical path).
    pub fn source_path(&self) -> &Path {
        &self.source
    }

    /// What identifies the loaded bytes: their SHA-256 prefix when they were read (private
    /// copies), else the file's device, inode, size and modification time at load.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The full SHA-256 (64 hex digits) of the loaded bytes, when they were hashed before
    /// they were loaded (every load in `tamp serve`, and every pinned one).
    pub fn sha256(&self) -> Option<&str> {
        self.sha256.as_deref()
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
        let stage_default = crate::bounded::saturating_seconds(DEFAULT_STAGE_TIMEOUT_SECS);
        self.instantiate_stage(config, &crate::wasm::WasmLimits::default(), stage_default)
    }

    /// [`LoadedPlugin::instantiate`] for a chain stage: a component's instances get the
    /// sandbox's `limits` and the stage's `timeout` as each call's deadline (a native
    /// plugin ignores both).
    pub fn instantiate_stage(
        &self,
        config: &serde_json::Value,
        limits: &crate::wasm::WasmLimits,
        timeout: std::time::Duration,
    ) -> Result<StrategyBox, tamp_plugin_api::PluginError> {
        match &self.code {
            Code::Native(module) => {
                let _ = (limits, timeout);
                let json = config.to_string();
                (module.new_strategy())(json.as_str().into()).into_result()
            }
            #[cfg(feature = "wasm")]
            Code::Component(component) => component.instantiate(config, limits, timeout),
        }
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
    if versions_compatible(plugin_version, host_version) {
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

/// Where a plugin named without a path is looked for, in order: the chain file's
/// `plugin_dirs` (`search_dirs`, relative to `base_dir`), `TAMP_PLUGIN_PATH`
/// (colon-separated), then next to the running executable (where cargo puts the workspace's
/// plugins; for test and bench binaries, in `target/<profile>/deps`, one level up too).
/// `tamp plugins list` lists these same directories.
pub fn plugin_search_dirs(base_dir: &Path, search_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = search_dirs.iter().map(|d| base_dir.join(d)).collect();
    if let Some(env) = std::env::var_os("TAMP_PLUGIN_PATH") {
        dirs.extend(std::env::split_paths(&env));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        if exe_dir.ends_with("deps") {
            dirs.extend(exe_dir.parent().map(Path::to_path_buf));
        }
        dirs.push(exe_dir);
    }
    dirs
}

/// Whether a `plugin =` value is a path (to a file, relative to the chain file's directory)
/// rather than a name looked up in the plugin directories.
pub fn is_path_spec(spec: &str) -> bool {
    spec.contains('/')
        || spec.ends_with(std::env::consts::DLL_SUFFIX)
        || crate::wasm::is_component_path(Path::new(spec))
}

/// Resolves a chain file's `plugin = "..."`: a path (containing `/` or ending in `.so` or
/// `.wasm`, relative to `base_dir`), or a name looked up as `lib<name>.so` (dashes as
/// underscores) in [`plugin_search_dirs`].
pub fn resolve_plugin(
    spec: &str,
    base_dir: &Path,
    search_dirs: &[PathBuf],
) -> Result<PathBuf, LoadError> {
    if is_path_spec(spec) {
        // Collected from its components: `.` joined to `./x` is `./x`, not `././x`.
        let path: PathBuf = base_dir.join(spec).components().collect();
        return regular_file_stamp(&path).map(|_| path);
    }
    let stem = spec.replace('-', "_");
    // The name a chain file gives, then the shipped plugins' file names: `tamp_` and the
    // plugin's own name (`tool-result-clearing` is `libtamp_tool_result_clearing.so`).
    let files: Vec<String> = [stem.clone(), format!("{SHIPPED_PREFIX}{stem}")]
        .iter()
        .map(|stem| library_file(stem))
        .collect();
    let dirs = plugin_search_dirs(base_dir, search_dirs);
    for dir in &dirs {
        if let Some(found) = files.iter().map(|f| dir.join(f)).find(|p| p.is_file()) {
            return Ok(found);
        }
    }
    let names: Vec<String> = dirs.iter().flat_map(|d| chain_names_in(d)).collect();
    let hint = if names.is_empty() {
        String::new()
    } else {
        format!("; the names there: {}", names.join(", "))
    };
    Err(LoadError::NotFound {
        path: PathBuf::from(format!(
            "{} (plugin \"{spec}\" looked up in: {}{hint})",
            files[0],
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    })
}

/// The file-name prefix of the plugins tamp ships (`libtamp_…`).
const SHIPPED_PREFIX: &str = "tamp_";
/// The file-name prefix of tamp's own test fixtures (`libtamp_test_…`), built with the
/// workspace and never meant for a chain.
pub const FIXTURE_PREFIX: &str = "tamp_test_";

/// The library file of a plugin named `stem` (`lib<stem>.so` on Linux).
fn library_file(stem: &str) -> String {
    format!(
        "{}{stem}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// The name a chain file's `plugin = "..."` gives for the library at `path` (its file name
/// less the platform's prefix and suffix), if it is a library.
pub fn chain_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let stem = file
        .strip_prefix(std::env::consts::DLL_PREFIX)?
        .strip_suffix(std::env::consts::DLL_SUFFIX)?;
    (!stem.is_empty()).then(|| stem.to_string())
}

/// The chain names of the libraries in `dir` (test fixtures left out), sorted; none when it
/// cannot be read.
fn chain_names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| chain_name(&e.path()))
        .filter(|n| !n.starts_with(FIXTURE_PREFIX))
        .collect();
    names.sort();
    names
}

/// The stamp of `path` when it is a regular file (symlinks followed); otherwise the error
/// says what it is: missing, a directory, a device (`/dev/zero`), a FIFO or a socket. Looked
/// at before the file is opened: reading a device or a FIFO could block or never end.
pub fn regular_file_stamp(path: &Path) -> Result<FileStamp, LoadError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, "read its metadata", e))?;
    if let Some(kind) = crate::input_file::not_a_file_kind(&meta.file_type()) {
        return Err(LoadError::NotAFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    Ok(FileStamp::from_metadata(&meta))
}

/// Checks the file at `path` before the dynamic linker maps it: still the regular file of
/// `stamp`, an ELF shared library whose headers, segments and sections lie within its bytes
/// ([`elf::check`], by plain reads of the headers), and unchanged while it was checked.
/// A file being written (an unfinished `cp`) fails one of these and is refused with the
/// reason; the next change event tries again.
fn check_before_mapping(path: &Path, stamp: FileStamp) -> Result<(), LoadError> {
    let changed = || LoadError::Other {
        path: path.to_path_buf(),
        detail: "the file changed while it was being read (still being written?)".into(),
    };
    if regular_file_stamp(path)? != stamp {
        return Err(changed());
    }
    let file = std::fs::File::open(path).map_err(|e| LoadError::Other {
        path: path.to_path_buf(),
        detail: format!("cannot open: {e}"),
    })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len != stamp.len {
        return Err(changed());
    }
    #[cfg(unix)]
    let checked = elf::check(&file, len);
    #[cfg(not(unix))]
    let checked = std::fs::read(path)
        .map_err(|e| elf::ElfProblem::Damaged(format!("cannot read: {e}")))
        .and_then(|bytes| elf::check(&bytes[..], len));
    checked.map_err(|problem| elf_error(path, problem))?;
    if regular_file_stamp(path)? != stamp {
        return Err(changed());
    }
    Ok(())
}

fn elf_error(path: &Path, problem: elf::ElfProblem) -> LoadError {
    match problem {
        elf::ElfProblem::NotElf(detail) => LoadError::NotAPlugin {
            path: path.to_path_buf(),
            detail: format!("cannot be loaded as a shared library: {detail}"),
        },
        elf::ElfProblem::Damaged(detail) => LoadError::Damaged {
            path: path.to_path_buf(),
            detail,
        },
    }
}

/// A file's identity on disk without reading it: device, inode, size and modification time.
/// `cargo build` (new inode), `cp` over it (same inode, new size or time) and a rename onto
/// the path all change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified_ns: i128,
}

impl FileStamp {
    pub fn of(path: &Path) -> std::io::Result<FileStamp> {
        Ok(Self::from_metadata(&std::fs::metadata(path)?))
    }

    fn from_metadata(meta: &std::fs::Metadata) -> FileStamp {
        let modified_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt as _;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        FileStamp {
            dev,
            ino,
            len: meta.len(),
            modified_ns,
        }
    }
}

impl std::fmt::Display for FileStamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "file:{}:{}:{}:{}",
            self.dev, self.ino, self.len, self.modified_ns
        )
    }
}

/// Every plugin loaded in this process. A library is never unloaded (types and function
/// pointers from it may live anywhere in the host), so each distinct file content is loaded
/// once and shared by every chain that names it.
#[derive(Default)]
struct Registry {
    /// By canonical path and the file's stamp when it was loaded: the fast path, no reading.
    by_stamp: HashMap<(PathBuf, FileStamp), Arc<LoadedPlugin>>,
    /// By canonical path and content hash: a file touched or copied over with the same bytes
    /// is not loaded a second time.
    by_content: HashMap<(PathBuf, String), Arc<LoadedPlugin>>,
    /// Paths some library was loaded from in place.
    loaded_in_place: HashSet<PathBuf>,
    /// Where private copies go, when every load must use one (`tamp serve`).
    private_dir: Option<PathBuf>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The directory private copies of plugin files go to in this process:
/// `<temp>/tamp-plugins-<pid>`.
pub fn private_copy_dir() -> PathBuf {
    std::env::temp_dir().join(format!("tamp-plugins-{}", std::process::id()))
}

/// From now on, load every plugin from a private copy of its file (what `tamp serve` does).
///
/// Why always, not only once a file has changed: a library loaded in place keeps the file
/// mapped, and writing new bytes into that same file (`cp new.so plugin.so` truncates and
/// rewrites the inode) changes the code under the running process, which then crashes. A
/// private copy is never written again, so whatever happens to the original, the loaded code
/// stays intact, and a changed original is loaded as a new copy beside the old one (which
/// stays loaded for the requests still using it).
pub fn load_from_private_copies() {
    registry().private_dir = Some(private_copy_dir());
}

/// Deletes the private-copy directories of processes that no longer run (a server killed
/// without a chance to clean up leaves its copies behind). Linux only: elsewhere there is no
/// cheap way to tell whether a pid is alive, and the directories are left to the system.
pub fn remove_stale_private_copies() {
    #[cfg(target_os = "linux")]
    {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("tamp-plugins-"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Deletes this process's private copies, at exit (the loaded libraries stay mapped: Linux
/// keeps an unlinked file's pages until they are unmapped).
pub fn remove_private_copies() {
    let _ = std::fs::remove_dir_all(private_copy_dir());
}

/// What a chain file demands of a plugin file before any of its code runs (see
/// docs/security.md): a content pin, directories it must live in, or neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginTrust {
    /// The SHA-256 (64 hex digits) the file's bytes must have: a stage's `sha256 = "..."`.
    pub sha256: Option<String>,
    /// The directories (canonical) the file must be in once symlinks are resolved:
    /// `[plugins] allow_dirs`. `None`: anywhere.
    pub allow_dirs: Option<Vec<PathBuf>>,
}

impl PluginTrust {
    /// Refuses `canonical` (the file `path` resolves to) when it is outside `allow_dirs`.
    fn check_dir(&self, path: &Path, canonical: &Path) -> Result<(), LoadError> {
        let Some(dirs) = &self.allow_dirs else {
            return Ok(());
        };
        // Path components, not text: /srv/plugins-evil is not inside /srv/plugins.
        if dirs.iter().any(|d| canonical.starts_with(d)) {
            return Ok(());
        }
        Err(LoadError::NotAllowed {
            path: path.to_path_buf(),
            resolved: canonical.to_path_buf(),
            allowed: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Refuses bytes whose SHA-256 (`actual`) is not the pinned one.
    pub(crate) fn check_pin(&self, path: &Path, actual: &str) -> Result<(), LoadError> {
        match &self.sha256 {
            Some(pinned) if !pinned.eq_ignore_ascii_case(actual) => Err(LoadError::PinMismatch {
                path: path.to_path_buf(),
                pinned: pinned.clone(),
                actual: actual.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

/// The SHA-256 of the file at `path`, as a stage's `sha256 = "..."` takes it (64 lowercase
/// hex digits). Reads the file only: nothing in it runs.
pub fn sha256_of_file(path: &Path) -> Result<String, LoadError> {
    // `/dev/zero` would be read forever.
    regular_file_stamp(path)?;
    let bytes = std::fs::read(path).map_err(|e| io_error(path, "read", e))?;
    Ok(sha256_hex(&bytes))
}

/// An I/O error on the plugin file `path`: [`LoadError::NotFound`] when it is not there,
/// else `cannot <what>: <error>`.
fn io_error(path: &Path, what: &str, e: std::io::Error) -> LoadError {
    match e.kind() {
        std::io::ErrorKind::NotFound => LoadError::NotFound {
            path: path.to_path_buf(),
        },
        _ => LoadError::Other {
            path: path.to_path_buf(),
            detail: format!("cannot {what}: {e}"),
        },
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Loads the plugin at `path`, or returns the one already loaded from the same file content.
///
/// The first load of a path is in place (what `tamp compact` and embedding hosts do), unless
/// [`load_from_private_copies`] was called. A path loaded before whose file has changed since
/// is loaded from a private copy at a unique path (`<stem>-<sha256 prefix>.so` in
/// [`private_copy_dir`]): the dynamic linker matches libraries by path, so loading the same
/// path again would return the old library.
pub fn load_plugin(path: &Path) -> Result<Arc<LoadedPlugin>, LoadError> {
    load_trusted(path, &PluginTrust::default())
}

/// [`load_plugin`], refusing a file outside `trust.allow_dirs` or whose bytes are not the
/// pinned ones before any of its code runs. A pinned library is always loaded from a private
/// copy of the very bytes that were hashed: loaded in place, the file could change between
/// the check and the dynamic linker's read.
pub fn load_trusted(path: &Path, trust: &PluginTrust) -> Result<Arc<LoadedPlugin>, LoadError> {
    // What the path is, before anything opens it: a device or a FIFO is named as such.
    regular_file_stamp(path)?;
    let canonical = path.canonicalize().map_err(|_| LoadError::NotFound {
        path: path.to_path_buf(),
    })?;
    // Checked on the path this function reads, so a symlink swapped after the chain file
    // was checked cannot lead elsewhere.
    trust.check_dir(path, &canonical)?;
    let stamp = regular_file_stamp(&canonical)?;
    if crate::wasm::is_component_path(&canonical) {
        return load_component(path, &canonical, stamp, trust);
    }
    // Held across the load: two chains naming the same new file load it once.
    let mut reg = registry();
    if let Some(p) = reg.by_stamp.get(&(canonical.clone(), stamp)) {
        match (&trust.sha256, p.sha256()) {
            (None, _) => return Ok(Arc::clone(p)),
            // The bytes loaded were hashed when they were read; whatever the file holds
            // now under the same stamp, the code that runs is theirs.
            (Some(_), Some(actual)) => {
                trust.check_pin(path, actual)?;
                return Ok(Arc::clone(p));
            }
            // Loaded in place, never hashed: read and hash it below.
            (Some(_), None) => {}
        }
    }
    let private_dir = match &reg.private_dir {
        Some(dir) => Some(dir.clone()),
        None if trust.sha256.is_some() || reg.loaded_in_place.contains(&canonical) => {
            Some(private_copy_dir())
        }
        None => None,
    };
    let plugin = match private_dir {
        None => {
            let plugin =
                LoadedPlugin::load_as(&canonical, &canonical, stamp, stamp.to_string(), None)?;
            reg.loaded_in_place.insert(canonical.clone());
            plugin
        }
        Some(dir) => {
            let (bytes, sha256) = read_stable(&canonical, stamp)?;
            trust.check_pin(path, &sha256)?;
            // The bytes the copy will hold, checked before it is written; the copy itself is
            // checked again before it is mapped (`load_as`).
            elf::check(&bytes[..], bytes.len() as u64)
                .map_err(|problem| elf_error(&canonical, problem))?;
            let key = (canonical.clone(), sha256.clone());
            if let Some(p) = reg.by_content.get(&key) {
                let p = Arc::clone(p);
                reg.by_stamp.insert((canonical, stamp), Arc::clone(&p));
                return Ok(p);
            }
            let copy = write_private_copy(&dir, &canonical, &sha256, &bytes)?;
            let identity = format!("sha256:{}", &sha256[..32]);
            let copy_stamp = regular_file_stamp(&copy).map_err(|e| e.naming(&copy, &canonical))?;
            let plugin =
                LoadedPlugin::load_as(&copy, &canonical, copy_stamp, identity, Some(sha256))
                    .map_err(|e| e.naming(&copy, &canonical))?;
            reg.by_content.insert(key, Arc::clone(&plugin));
            plugin
        }
    };
    reg.by_stamp.insert((canonical, stamp), Arc::clone(&plugin));
    Ok(plugin)
}

/// A WebAssembly component: no dynamic linker is involved, so no private copy is needed. Its
/// bytes are read and hashed (the pin is checked on them), then compiled from them
/// (`crate::wasm`); the same bytes at the same path load once.
fn load_component(
    path: &Path,
    canonical: &Path,
    stamp: FileStamp,
    trust: &PluginTrust,
) -> Result<Arc<LoadedPlugin>, LoadError> {
    let (bytes, sha256) = read_stable(canonical, stamp)?;
    trust.check_pin(path, &sha256)?;
    #[cfg(feature = "wasm")]
    {
        /// Components loaded, by canonical path and the SHA-256 of their bytes.
        type Components = HashMap<(PathBuf, String), Arc<LoadedPlugin>>;
        static COMPONENTS: OnceLock<Mutex<Components>> = OnceLock::new();
        let mut loaded = COMPONENTS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (canonical.to_path_buf(), sha256);
        if let Some(plugin) = loaded.get(&key) {
            return Ok(Arc::clone(plugin));
        }
        let (component, meta) = crate::wasm::WasmComponent::load(canonical, &bytes, &key.1)?;
        let plugin = LoadedPlugin::component(canonical, key.1.clone(), meta, component);
        loaded.insert(key, Arc::clone(&plugin));
        Ok(plugin)
    }
    #[cfg(not(feature = "wasm"))]
    {
        let _ = bytes;
        Err(LoadError::NotAPlugin {
            path: path.to_path_buf(),
            detail: crate::wasm::unsupported()
                .unwrap_or("a WebAssembly component")
                .to_string(),
        })
    }
}

/// The file's bytes and their SHA-256 (64 hex digits), refusing a file that changed while it
/// was read (a `cp` still writing it): the next change event retries.
fn read_stable(path: &Path, stamp: FileStamp) -> Result<(Vec<u8>, String), LoadError> {
    let bytes = std::fs::read(path).map_err(|e| LoadError::Other {
        path: path.to_path_buf(),
        detail: format!("cannot read: {e}"),
    })?;
    if FileStamp::of(path).ok() != Some(stamp) || bytes.len() as u64 != stamp.len {
        return Err(LoadError::Other {
            path: path.to_path_buf(),
            detail: "the file changed while it was being read (still being written?)".into(),
        });
    }
    let hash = sha256_hex(&bytes);
    Ok((bytes, hash))
}

fn write_private_copy(
    dir: &Path,
    source: &Path,
    hash: &str,
    bytes: &[u8],
) -> Result<PathBuf, LoadError> {
    let fail = |what: &str, e: std::io::Error| LoadError::Other {
        path: source.to_path_buf(),
        detail: format!("cannot {what} a private copy in {}: {e}", dir.display()),
    };
    ensure_private_dir(dir).map_err(|e| fail("create the directory for", e))?;
    let stem = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    let copy = dir.join(format!(
        "{stem}-{}{}",
        &hash[..16],
        std::env::consts::DLL_SUFFIX
    ));
    if !copy.is_file() {
        // Written aside and renamed, so the copy at its final path is always complete.
        let partial = copy.with_extension("partial");
        std::fs::write(&partial, bytes).map_err(|e| fail("write", e))?;
        std::fs::rename(&partial, &copy).map_err(|e| fail("write", e))?;
    }
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_copies_are_named_by_content_and_written_once() {
        let dir = std::env::temp_dir().join(format!("tamp-loader-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("libthing.so");
        std::fs::write(&source, b"first bytes").unwrap();
        let (bytes, hash) = read_stable(&source, FileStamp::of(&source).unwrap()).unwrap();
        assert_eq!(bytes, b"first bytes");
        let copies = dir.join("copies");
        let copy = write_private_copy(&copies, &source, &hash, &bytes).unwrap();
        assert_eq!(
            copy.file_name().unwrap().to_string_lossy(),
            format!("libthing-{}{}", &hash[..16], std::env::consts::DLL_SUFFIX)
        );
        assert_eq!(std::fs::read(&copy).unwrap(), b"first bytes");
        // The same content maps to the same copy; new content to another one.
        assert_eq!(
            write_private_copy(&copies, &source, &hash, &bytes).unwrap(),
            copy
        );
        std::fs::write(&source, b"second, longer bytes").unwrap();
        let stamp = FileStamp::of(&source).unwrap();
        let (bytes2, hash2) = read_stable(&source, stamp).unwrap();
        assert_ne!(hash2, hash);
        assert_ne!(
            write_private_copy(&copies, &source, &hash2, &bytes2).unwrap(),
            copy
        );
        assert_eq!(std::fs::read(&copy).unwrap(), b"first bytes");
        // A file that changed since it was stamped is refused (it may be half-written).
        std::fs::write(&source, b"third").unwrap();
        let err = read_stable(&source, stamp).unwrap_err();
        assert!(err.to_string().contains("changed while"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn allow_dirs_compare_path_components_and_pins_ignore_case() {
        let trust = PluginTrust {
            sha256: Some("AB".repeat(32)),
            allow_dirs: Some(vec![PathBuf::from("/srv/plugins")]),
        };
        let user = Path::new("plugins/x.so");
        assert!(trust
            .check_dir(user, Path::new("/srv/plugins/sub/x.so"))
            .is_ok());
        let err = trust
            .check_dir(user, Path::new("/srv/plugins-evil/x.so"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin plugins/x.so: resolves to /srv/plugins-evil/x.so, which is outside \
             [plugins] allow_dirs (/srv/plugins); refused, not loaded"
        );
        assert!(trust.check_pin(user, &"ab".repeat(32)).is_ok());
        let err = trust.check_pin(user, &"cd".repeat(32)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&"cd".repeat(32)), "{text}");
        assert!(text.contains(&"AB".repeat(32)), "{text}");
        // No trust demanded: anything goes.
        let none = PluginTrust::default();
        assert!(none.check_dir(user, Path::new("/anywhere/x.so")).is_ok());
        assert!(none.check_pin(user, "00").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn a_private_copy_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("tamp-loader-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Already there and private: accepted.
        ensure_private_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err =
            write_private_copy(&dir, Path::new("/p/libx.so"), &"0".repeat(64), b"x").unwrap_err();
        assert!(
            err.to_string()
                .contains("not a directory private to this user"),
            "{err}"
        );
        assert!(!dir.join(format!("libx-{}.so", "0".repeat(16))).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_error_about_a_private_copy_names_the_users_file() {
        let copy = Path::new("/tmp/tamp-plugins-1/fake-0123456789abcdef.so");
        let user = Path::new("/srv/plugins/fake.so");
        let err = LoadError::NotAPlugin {
            path: copy.to_path_buf(),
            detail: format!(
                "cannot be loaded as a shared library: {}: file too short",
                copy.display()
            ),
        }
        .naming(copy, user);
        let text = err.to_string();
        assert_eq!(
            text,
            "plugin /srv/plugins/fake.so: not a tamp plugin (cannot be loaded as a shared \
             library: /srv/plugins/fake.so: file too short)"
        );
    }

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
