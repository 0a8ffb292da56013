//! `tamp check-config`: a chain file built the way a reload of `tamp serve` builds it,
//! without serving, so that its errors are the ones a reload would log.

use std::path::Path;

use crate::chain::FileOverrides;
use crate::http::active::ActiveChain;

/// Validates a chain file the way a reload would, without serving: parses it, loads every
/// plugin, validates every stage config against its plugin's schema and instantiates it.
/// Returns the line that describes the chain (with the config hash the server would show).
pub fn check_config(config: &Path, overrides: FileOverrides) -> anyhow::Result<String> {
    // Loaded as the server loads them, so the config hash printed is the one it would show.
    crate::loader::load_from_private_copies();
    let built = ActiveChain::build(config, overrides);
    crate::loader::remove_private_copies();
    Ok(built.map_err(|p| anyhow::anyhow!("{p}"))?.summary())
}
