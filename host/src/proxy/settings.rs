//! The proxy's settings: the chain file's `[proxy]` table, read per request from the chain
//! being served, so that a reload changes them together with the chain. The shared HTTP
//! layer holds the file; only the proxy reads this table.

use crate::config::proxy::ProxyConfig;
use crate::http::active::ActiveChain;

impl ActiveChain {
    /// The `[proxy]` table of the file this chain was built from.
    pub fn proxy(&self) -> &ProxyConfig {
        &self.file().proxy
    }
}
