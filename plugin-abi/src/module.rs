//! The root module every plugin exports: its entry points, and what it says about itself.

use abi_stable::library::RootModule;
use abi_stable::std_types::{RResult, RStr, RString};
use abi_stable::{declare_root_module_statics, package_version_strings, StableAbi};
use serde::{Deserialize, Serialize};

use crate::error::PluginError;
use crate::logging::LogSink;
use crate::strategy::StrategyBox;

/// The version of this ABI crate: the one tamp's loader checks (through abi_stable's root
/// module version, and [`PluginInfo::plugin_api_version`]). A 0.x release with a new minor
/// number is a new ABI; a patch release is not.
pub const ABI_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a plugin says about itself.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: RString,
    /// The plugin's own version (its crate version, semver).
    pub version: RString,
    pub description: RString,
    /// The ABI version it was built against ([`ABI_VERSION`]).
    pub plugin_api_version: RString,
    /// JSON Schema of the stage config.
    pub config_schema_json: RString,
    /// The default stage config, as JSON.
    pub default_config_json: RString,
}

/// The root module: the plugin's exported entry points.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    /// Name, versions, description, config schema and default config.
    pub info: extern "C" fn() -> RResult<PluginInfo, PluginError>,
    /// Routes the plugin's `tracing` events to the host (called once, right after loading).
    pub set_log_sink: extern "C" fn(LogSink),
    /// Builds an instance from a JSON stage config.
    #[sabi(last_prefix_field)]
    pub new_strategy: extern "C" fn(RStr<'_>) -> RResult<StrategyBox, PluginError>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "tamp_plugin";
    const NAME: &'static str = "tamp plugin";
    const VERSION_STRINGS: abi_stable::sabi_types::VersionStrings = package_version_strings!();
}
