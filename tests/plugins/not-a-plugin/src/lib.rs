//! A real shared library with no tamp root module, for the loader's "not a plugin" error.

#[no_mangle]
pub extern "C" fn not_a_tamp_plugin() -> u32 {
    42
}
