//! Claims the host's own plugin-api version but exports a root module of another layout, as a
//! plugin built from a modified plugin-api would. The version check passes; abi_stable's
//! layout check must refuse it, and the loader must summarize its thousand-line report.

const API_VERSION: &str = tamp_plugin_api::PLUGIN_API_VERSION;

include!("../../incompatible-abi/src/old_module.rs");
