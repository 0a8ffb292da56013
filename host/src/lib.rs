//! `tamp-host`: loads compaction-strategy plugins, composes them into a chain, and runs
//! conversations through it. The `tamp` binary (crate `tamp-cli`) is a thin CLI over this
//! library, and the conformance kit's checks (crate `tamp-conformance-engine`) build on its core.
//!
//! The core, with no feature:
//! - [`wire`]: Anthropic Messages and OpenAI Chat Completions JSON ⇄ the plugin-api model.
//! - [`loader`]: loads plugin libraries through abi_stable's checked loader;
//!   `plugin_load`: what it shares with the WebAssembly loader, a leaf.
//! - [`config`]: the chain file, validated before anything runs: it reads the file and
//!   assembles each table's type from the component that owns it (`providers::config`,
//!   `store::config`, `deferred::config`, [`budget`], ...; the tables of the servers that
//!   read the assembled file, `[proxy]` and `[http]`, stay in it);
//!   `config_error`: its errors, a leaf.
//! - [`chain`]: runs stages in order; [`edits`] checks and applies what a stage returns;
//!   [`invariants`] and [`rules`]: the rules every stage keeps.
//! - [`store::threads`]: thread continuity, so a growing thread pays for what is new.
//! - [`summary_mac`]: the summaries tamp believes, those its store's key vouches for.
//! - [`services`]: the host services a plugin calls back.
//! - [`providers`], [`store`], [`tokens`]: LLM backends, the page store, the token counter;
//!   `digest`: the hashes that name stored things (cache keys, config hashes), a leaf.
//! - [`eval`]: `tamp eval`, chains compared side by side.
//! - [`recall`]: what a model reads back of the archive (a page as text, a search), within
//!   what its caller may see; [`mcp`] serves it (`tamp mcp`, and `/tamp/mcp` on the proxy).
//! - [`input_file`]: every file tamp reads whole, opened without waiting and bounded, a leaf.
//! - [`wasm`]: strategies as WebAssembly components (the runtime is the `wasm` feature).
//!
//! What an embedder uses is [`chain`] (with [`config`] and [`budget`]), [`wire`], [`store`],
//! [`providers`] and [`tokens`] (`examples/embed-host` needs two of them). The modules marked
//! hidden in these docs are public for tamp's own crates (the `tamp` binary and the
//! conformance kit) and may change in any release; the rest of the host is private to it.
//!
//! Features (on by default): `http-providers` (the Anthropic and OpenAI clients),
//! `postgres` (the shared PostgreSQL store), `deferred` (the Message Batches worker) and
//! `serve` ([`serve`]: `tamp serve`, the HTTP API with hot reload; [`proxy`]: `tamp proxy`,
//! the providers' own APIs with every request compacted; [`http`]: what the two servers
//! share). Off by default: `wasm`, sandboxed
//! strategies as WebAssembly components under wasmtime, which costs minutes of build.

#[doc(hidden)]
pub mod bounded;
pub mod budget;
pub mod chain;
#[cfg(feature = "serve")]
#[doc(hidden)]
pub mod check_config;
pub mod config;
pub(crate) mod config_error;
#[cfg(feature = "serve")]
pub mod console;
pub mod deferred;
pub(crate) mod digest;
#[doc(hidden)]
pub mod edits;
#[doc(hidden)]
pub mod error_text;
pub mod eval;
#[cfg(feature = "serve")]
pub mod http;
#[doc(hidden)]
pub mod input_file;
#[doc(hidden)]
pub mod invariants;
pub mod loader;
pub(crate) mod logging;
pub(crate) mod markup;
#[cfg(feature = "serve")]
pub mod mcp;
/// The check that host modules import one another without circles (a test).
#[cfg(test)]
mod module_graph;
pub(crate) mod plugin_load;
pub(crate) mod prices;
pub mod providers;
#[cfg(feature = "serve")]
pub mod proxy;
pub mod recall;
pub(crate) mod redact;
pub mod rules;
#[cfg(test)]
mod scratch;
#[cfg(feature = "serve")]
pub mod serve;
pub mod services;
#[doc(hidden)]
pub mod signals;
#[doc(hidden)]
pub mod stage_guard;
pub mod store;
pub mod summary_mac;
#[doc(hidden)]
pub mod time_text;
pub mod tokens;
pub mod wasm;
pub mod wire;

pub use tamp_plugin_api as plugin_api;
