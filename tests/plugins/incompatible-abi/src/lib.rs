//! Stands in for a plugin built against `tamp-plugin-api` 0.9.0: same root-module name, an
//! older layout, another version. The host must refuse it and name both versions.
//! (`layout-mismatch` includes this file with the host's own version instead.)

const API_VERSION: &str = "0.9.0";

include!("old_module.rs");
