//! Building the root module from a [`Strategy`], and the macro that exports it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::std_types::{RResult, RStr};

use crate::error::PluginError;
use crate::logging::{install_log_bridge, LogSink};
use crate::strategy::{new_strategy, panic_message, Strategy};
use crate::StrategyBox;
use crate::{PluginInfo, PluginModule, PluginModuleRef, ABI_VERSION};

/// The plugin's crate version, recorded by the export macro (each plugin library has its own
/// copy of this static).
static PLUGIN_VERSION: OnceLock<&'static str> = OnceLock::new();

/// Builds a plugin's info from its [`Strategy`] impl.
pub fn plugin_info<S: Strategy>(version: &str) -> Result<PluginInfo, PluginError> {
    let schema = schemars::schema_for!(S::Config);
    let default_config = serde_json::to_string(&S::Config::default())?;
    Ok(PluginInfo {
        name: S::NAME.into(),
        version: version.into(),
        description: S::DESCRIPTION.into(),
        plugin_api_version: ABI_VERSION.into(),
        config_schema_json: serde_json::to_string(&schema)?.into(),
        default_config_json: default_config.into(),
    })
}

extern "C" fn info_entry<S: Strategy>() -> RResult<PluginInfo, PluginError> {
    let version = PLUGIN_VERSION.get().copied().unwrap_or("0.0.0");
    catch_unwind(|| plugin_info::<S>(version))
        .unwrap_or_else(|p| {
            Err(PluginError::new(
                crate::ErrorKind::Panicked,
                panic_message(&*p),
            ))
        })
        .into()
}

extern "C" fn set_log_sink_entry<S: Strategy>(sink: LogSink) {
    // Nothing useful can be done with a panic here; swallowing it keeps the host alive.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        install_log_bridge(S::NAME, sink);
        // The host calls this once, at load: the library's panics are told through it from
        // now on, not on stderr.
        crate::panics::install_hook();
    }));
}

extern "C" fn new_strategy_entry<S: Strategy>(
    config: RStr<'_>,
) -> RResult<StrategyBox, PluginError> {
    new_strategy::<S>(config.as_str()).into()
}

/// Builds the root module for `S`. Called once, by the code [`export_plugin!`] generates.
///
/// [`export_plugin!`]: crate::export_plugin
pub fn plugin_module<S: Strategy>(version: &'static str) -> PluginModuleRef {
    let _ = PLUGIN_VERSION.set(version);
    PluginModule {
        info: info_entry::<S>,
        set_log_sink: set_log_sink_entry::<S>,
        new_strategy: new_strategy_entry::<S>,
    }
    .leak_into_prefix()
}

/// Re-exports for the code plugins generate with [`export_plugin!`], beside the macro that
/// names them; not a public API. At the crate root as `__private` (`$crate::__private`).
///
/// [`export_plugin!`]: crate::export_plugin
#[doc(hidden)]
pub mod __private {
    pub use super::plugin_module;
    pub use abi_stable::library::{
        __call_root_module_loader as call_root_module_loader, CheckTypeLayout, LibHeader,
        RootModuleResult,
    };
}

/// Exports a [`Strategy`] as a tamp plugin. Put it once in a `cdylib` crate:
///
/// ```ignore
/// tamp_plugin_api::export_plugin!(MyStrategy);
/// ```
///
/// The plugin's version is its crate version (`CARGO_PKG_VERSION`).
#[macro_export]
macro_rules! export_plugin {
    ($strategy:ty) => {
        // The symbol abi_stable's loader looks up (abi_stable's `ROOT_MODULE_LOADER_NAME`; a
        // unit test in plugin-api keeps the two equal). Spelled here so plugin crates need not
        // depend on abi_stable themselves.
        #[doc(hidden)]
        #[export_name = "_1as_0lib_1header_0root_bmodule_bloader"]
        pub static __TAMP_PLUGIN_LIB_HEADER: $crate::__private::LibHeader = {
            extern "C" fn __tamp_root_module_loader() -> $crate::__private::RootModuleResult {
                fn build() -> $crate::PluginModuleRef {
                    $crate::__private::plugin_module::<$strategy>(env!("CARGO_PKG_VERSION"))
                }
                $crate::__private::call_root_module_loader(build)
            }
            // SAFETY: the constructor returns the `PluginModuleRef` the header is typed with.
            unsafe {
                $crate::__private::LibHeader::from_constructor::<$crate::PluginModuleRef>(
                    __tamp_root_module_loader,
                    $crate::__private::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_symbol_matches_abi_stable() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
