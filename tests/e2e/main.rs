//! The end-to-end tests: the real `tamp` binary and the real plugin libraries, one module
//! per area. Helpers shared by every module are in `tests/support` (crate `tamp_e2e`).

/// Claude Code and Codex (from npm) through `tamp proxy`: finishing, prompt cache, recall.
mod agents;
/// The anchored-structured plugin through the real loader and chain.
mod anchored_structured;
/// Batch-deferred summarization: the plugin, the queue and the batch worker.
mod batch_deferred;
/// The buffered-tool-call plugin through the real loader and chain.
mod buffered_tool_call;
/// Chains of real plugins over the corpus; chain-file errors.
mod chain;
/// The `tamp` binary as a user runs it: compact, pages, plugins, flags, first errors.
mod cli;
/// The conformance kit against every shipped plugin and the broken fixtures.
mod conformance;
/// The web console at `/tamp/ui`, driven in headless Chromium.
mod console;
/// Plugins that panic, hang, fail or break invariants are rolled back.
mod containment;
/// The provider clients' requests checked against the official specs (Prism).
mod contract;
/// The runnable blocks of README.md and docs/*.md, run as written after the README's first command.
/// Every runnable block of README.md and docs/*.md runs as written.
mod docs_blocks;
/// `tamp eval`: every chain on every conversation, reports, the HTML in a browser.
mod eval;
/// Property-based fuzzing of every reader of untrusted input.
mod fuzz;
mod guest_sdks;
/// A plugin file cut short or overwritten under load never kills the host.
mod half_written_plugin;
/// Hostile input through the binary: FIFOs, /dev/zero, huge and broken files.
mod hostile_input;
/// The ledger through the real plugins on the planted-fact session.
mod ledger;
/// The loader against real libraries, good and bad.
mod loader;
/// The map-reduce-adaptive plugin through the real loader and chain.
mod map_reduce_adaptive;
/// Forged summaries are compacted as text, in every wire format.
mod own_summaries;
/// Only the plugins the operator meant: pins, allow_dirs, reload refusals.
mod plugin_trust;
/// The PostgreSQL store against a real server, beside SQLite.
mod postgres_store;
/// TLS to PostgreSQL: modes, certificates, refusals.
mod postgres_tls;
/// The Anthropic and OpenAI clients against local servers of their wire formats.
mod providers;
/// `tamp proxy` between the official SDKs and a local upstream.
mod proxy;
/// Recording real answers and replaying them.
mod record_replay;
/// Several `tamp serve` replicas on one PostgreSQL database.
mod replicas;
/// `tamp serve`: the HTTP API, hot reload, shutdown.
mod serve;
/// The servers' connection, request and body limits and HTTP hygiene.
mod serve_limits;
/// Host checks and bearer tokens on raw sockets.
mod server_access;
/// Work that must never be lost silently: reloads, stores, errors.
mod silent_loss;
/// The summary cache across compactions and processes.
mod summary_cache;
/// Thread continuity: a client that resends its whole history.
mod threads;
/// The tool-result-clearing plugin through the real loader and chain.
mod tool_result_clearing;
/// WebAssembly strategies built from Python and JavaScript sources.
mod wasm;
/// The three wire formats through `tamp compact` and `tamp pages show`.
mod wire_formats;
