//! The console's settings: the chain file's `[console]` table (what is recorded and kept, the
//! prices of the savings), read from the chain being served, so that a reload changes them
//! together with the chain.

use crate::config::console::ConsoleConfig;
use crate::http::active::ActiveChain;

impl ActiveChain {
    /// The `[console]` table of the file this chain was built from.
    pub fn console(&self) -> &ConsoleConfig {
        &self.file().console
    }
}
