//! The end-to-end tests: the real `tamp` binary and the real plugin libraries, one module
//! per area. Helpers shared by every module are in `tests/support` (crate `tamp_e2e`).

mod agents;
mod anchored_structured;
mod batch_deferred;
mod buffered_tool_call;
mod chain;
mod cli;
mod conformance;
mod console;
mod containment;
mod contract;
/// The runnable blocks of README.md and docs/*.md, run as written after the README's first command.
mod docs_blocks;
mod eval;
mod fuzz;
mod half_written_plugin;
mod hostile_input;
mod ledger;
mod loader;
mod map_reduce_adaptive;
mod own_summaries;
mod plugin_trust;
mod postgres_store;
mod postgres_tls;
mod providers;
mod proxy;
mod record_replay;
mod replicas;
mod serve;
mod serve_limits;
mod server_access;
mod silent_loss;
mod summary_cache;
mod threads;
mod tool_result_clearing;
mod wasm;
mod wire_formats;
