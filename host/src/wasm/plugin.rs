//! A loaded component: compiled, checked against the host's world, linked to the host's
//! imports, and asked what it is.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::Store;

use super::bindings::{Plugin, PluginPre};
use super::engine::engine;
use super::sandbox::{failure, GuestState};
use super::{cache, WasmLimits, WORLD_VERSION};
use crate::plugin_load::{LoadError, PluginMeta};

/// The interface a strategy component exports, and the one it may import.
const EXPORT: &str = "tamp:strategy/strategy";
const PACKAGE: &str = "tamp:strategy/";

/// How long a component's `info` and `new-strategy` may run when it is loaded and checked.
const SETUP_DEADLINE: Duration = Duration::from_secs(30);

/// A component ready to be instantiated.
pub struct WasmComponent {
    pub(super) pre: PluginPre<GuestState>,
    /// The strategy's name (its pages' strategy, its log events' tag).
    pub(super) name: Arc<str>,
    /// Bytes of linear memory and tables its live instances hold.
    pub(super) memory_in_use: Arc<AtomicUsize>,
}

impl WasmComponent {
    /// Compiles `bytes` (the file at `path`, whose SHA-256 is `sha256`; a compiled copy is
    /// reused from the cache), checks its world and imports, and reads its metadata. Nothing
    /// in it runs but its `info`, in the sandbox.
    pub fn load(path: &Path, bytes: &[u8], sha256: &str) -> Result<(Self, PluginMeta), LoadError> {
        let other = |detail: String| LoadError::Other {
            path: path.to_path_buf(),
            detail,
        };
        // Checked from the file's outer sections before anything is compiled (which takes
        // seconds): a component for another world or with other imports is refused at once.
        let not_a_plugin = |detail: String| LoadError::NotAPlugin {
            path: path.to_path_buf(),
            detail,
        };
        let (imports, exports) = outer_names(bytes).map_err(not_a_plugin)?;
        let world = check_world(exports.iter().map(String::as_str)).map_err(not_a_plugin)?;
        if !crate::plugin_load::versions_compatible(&world, WORLD_VERSION) {
            return Err(other(format!(
                "built against the WIT world tamp:strategy@{world}, but this host implements \
                 tamp:strategy@{WORLD_VERSION} (tamp-plugin-abi's version); rebuild it against \
                 this host's plugin-abi/wit"
            )));
        }
        if let Some(import) = imports.iter().find(|name| !name.starts_with(PACKAGE)) {
            return Err(other(format!(
                "imports {import}, which tamp gives no guest: a guest gets tamp:strategy/host \
                 alone (no filesystem, network, environment or clock). Build it with its WASI \
                 stubbed (componentize-py --stub-wasi; componentize-js --disable stdio random \
                 clocks http fetch-event)"
            )));
        }
        let engine = engine().map_err(other)?;
        let component = cache::compile(engine, bytes, sha256).map_err(|e| {
            not_a_plugin(format!(
                "a WebAssembly component wasmtime cannot compile: {e}"
            ))
        })?;
        let mut linker = Linker::new(engine);
        Plugin::add_to_linker::<_, HasSelf<GuestState>>(&mut linker, |state| state)
            .map_err(|e| other(format!("cannot link the host's imports: {e}")))?;
        let pre = linker
            .instantiate_pre(&component)
            .and_then(PluginPre::new)
            .map_err(|e| {
                other(format!(
                    "it does not fit this host's tamp:strategy@{WORLD_VERSION}: {e}"
                ))
            })?;
        let loading = WasmComponent {
            pre,
            name: Arc::from("(loading)"),
            memory_in_use: Arc::default(),
        };
        let info = futures::executor::block_on(loading.info())
            .map_err(|e| other(format!("its info entry point failed: {}", e.message)))?;
        let parse = |what: &str, json: &str| {
            serde_json::from_str(json)
                .map_err(|e| other(format!("its {what} is not valid JSON: {e}")))
        };
        let meta = PluginMeta {
            config_schema: parse("config schema", &info.config_schema_json)?,
            default_config: parse("default config", &info.default_config_json)?,
            name: info.name,
            version: info.version,
            description: info.description,
            plugin_api_version: world,
        };
        tracing::debug!(path = %path.display(), name = %meta.name, version = %meta.version, "component loaded");
        Ok((
            WasmComponent {
                pre: loading.pre,
                name: Arc::from(meta.name.as_str()),
                memory_in_use: loading.memory_in_use,
            },
            meta,
        ))
    }

    /// Bytes of linear memory and tables its live instances hold (idle ones included): what
    /// the host gets back as instances are dropped (after a trap or an overrun, at once).
    pub fn memory_in_use(&self) -> usize {
        self.memory_in_use.load(Ordering::Relaxed)
    }

    /// A new instance in a store of its own, its memory capped at `memory_bytes` and its
    /// first call (the caller's) due within `deadline`.
    pub(super) async fn instance(
        &self,
        memory_bytes: usize,
        deadline: Duration,
    ) -> Result<(Store<GuestState>, Plugin), tamp_plugin_api::PluginError> {
        let engine = engine().map_err(tamp_plugin_api::PluginError::internal)?;
        let mut store = GuestState::store(
            engine,
            Arc::clone(&self.name),
            memory_bytes,
            Arc::clone(&self.memory_in_use),
        );
        store.data_mut().start_call(deadline);
        let plugin = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| failure(&e))?;
        Ok((store, plugin))
    }

    async fn info(
        &self,
    ) -> Result<super::bindings::tamp::strategy::types::PluginInfo, tamp_plugin_api::PluginError>
    {
        let memory_bytes = (WasmLimits::default().memory_mib() as usize) << 20;
        let (mut store, plugin) = self.instance(memory_bytes, SETUP_DEADLINE).await?;
        plugin
            .tamp_strategy_strategy()
            .call_info(&mut store)
            .await
            .map_err(|e| failure(&e))
    }
}

/// The names a component imports and exports at its outer level, read without compiling it.
fn outer_names(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
    use wasmtime::wasmparser::{Encoding, Parser, Payload};
    let unreadable =
        |e: wasmtime::wasmparser::BinaryReaderError| format!("not a WebAssembly component: {e}");
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    // Nested modules and components each begin with a header and end with an `End`.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(unreadable)? {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err("a core WebAssembly module, not a component: build it with \
                                componentize-py or componentize-js against tamp's WIT"
                        .into());
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section {
                    imports.push(import.map_err(unreadable)?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    exports.push(export.map_err(unreadable)?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

/// The version of the `tamp:strategy/strategy` interface among a component's exports, or
/// why it has none.
fn check_world<'a>(exports: impl Iterator<Item = &'a str>) -> Result<String, String> {
    let names: Vec<&str> = exports.collect();
    names
        .iter()
        .find_map(|name| name.strip_prefix(EXPORT)?.strip_prefix('@'))
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "a WebAssembly component that exports no {EXPORT} interface (it exports: {}); \
                 build it against tamp's WIT package (plugin-abi/wit, world plugin)",
                if names.is_empty() {
                    "nothing".to_string()
                } else {
                    names.join(", ")
                }
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_or_garbage_is_not_a_component() {
        let core_module = b"\0asm\x01\0\0\0";
        let err = outer_names(core_module).unwrap_err();
        assert!(err.starts_with("a core WebAssembly module"), "{err}");
        let err = outer_names(b"#!/bin/sh\necho hi\n").unwrap_err();
        assert!(err.starts_with("not a WebAssembly component"), "{err}");
        // An empty component: readable, with nothing in or out.
        let empty_component = b"\0asm\x0d\0\x01\0";
        assert_eq!(outer_names(empty_component).unwrap(), (vec![], vec![]));
    }

    #[test]
    fn the_world_version_is_read_from_the_export_name() {
        let exports = ["exports", "tamp:strategy/strategy@0.2.0"];
        assert_eq!(check_world(exports.into_iter()).unwrap(), "0.2.0");
        let err = check_world(["wasi:cli/run@0.2.0"].into_iter()).unwrap_err();
        assert!(err.contains("exports no tamp:strategy/strategy"), "{err}");
        assert!(err.contains("wasi:cli/run@0.2.0"), "{err}");
        // Unversioned: not built from tamp's package.
        assert!(check_world(["tamp:strategy/strategy"].into_iter()).is_err());
    }
}
