//! `tamp-host`: loads compaction-strategy plugins, composes them into a chain, and runs
//! conversations through it. The `tamp` binary is a thin CLI over this library.
//!
//! - [`wire`]: Anthropic Messages and OpenAI Chat Completions JSON ⇄ the plugin-api model.
//! - [`loader`]: loads plugin libraries through abi_stable's checked loader.
//! - [`config`]: the chain file, validated before anything runs.
//! - [`chain`]: runs stages in order, rolls back a stage that fails or breaks an invariant.
//! - [`threads`]: thread continuity, so a growing thread pays for what is new.
//! - [`services`]: the host services a plugin calls back.
//! - [`providers`], [`store`], [`tokens`]: LLM backends, the page store, the token counter.
//! - [`serve`]: `tamp serve`, the HTTP API with hot reload; [`proxy`]: `tamp proxy`, the
//!   providers' own APIs with every request compacted; [`conformance`]: the plugin kit.

pub mod chain;
pub mod config;
pub mod conformance;
pub mod deferred;
mod edits;
pub mod error_text;
pub mod eval;
pub mod invariants;
pub mod loader;
pub mod logging;
pub mod providers;
pub mod proxy;
pub mod serve;
pub mod services;
pub mod store;
pub mod threads;
pub mod tokens;
pub mod wire;

pub use tamp_plugin_api as plugin_api;
