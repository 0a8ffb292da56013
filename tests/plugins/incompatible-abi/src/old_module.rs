// The root module of an "older plugin-api"; included by both ABI fixtures.

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::RString;
use abi_stable::{declare_root_module_statics, export_root_module, StableAbi};


#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = OldPluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct OldPluginModule {
    #[sabi(last_prefix_field)]
    pub name: extern "C" fn() -> RString,
}

impl RootModule for OldPluginModuleRef {
    declare_root_module_statics! {OldPluginModuleRef}
    const BASE_NAME: &'static str = "tamp_plugin";
    const NAME: &'static str = "tamp plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new(API_VERSION);
}

extern "C" fn name() -> RString {
    "old".into()
}

#[export_root_module]
pub fn root() -> OldPluginModuleRef {
    OldPluginModule { name }.leak_into_prefix()
}
