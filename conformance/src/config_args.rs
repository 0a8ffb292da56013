//! A `--config` the user gave, judged before any check: a config the plugin's schema or
//! constructor refuses is an error in the arguments, not a finding about the plugin. Judged
//! like every check, in a child process ([`crate::child`], from [`crate::config_refusal`]),
//! so that a plugin that aborts or hangs while loading cannot take the kit down; what else
//! goes wrong there is left to the checks to report.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::report::{CheckOutput, Finding};
use crate::KitOptions;

/// The pseudo-check that judges the config (never in a report).
pub const CHECK: &str = "CONFIG-ARGS";
/// The rule of its finding when the config is refused; a process that died or hung is
/// reported under [`CHECK`] by [`crate::child::run_checks_isolated`], and is not a refusal.
pub(crate) const REFUSED: &str = "CONFIG-ARGS-REFUSED";

// Judged in a child like every check, so run from the crate root, which drives the children:
// the child runs this module's judge (through `checks::run_check`).
pub use crate::config_refusal as refusal;

/// The check's output: a finding when [`judge`] refuses the config.
pub(crate) fn output(options: &KitOptions) -> CheckOutput {
    let refused = options
        .config
        .as_ref()
        .and_then(|config| judge(&options.plugin, config));
    CheckOutput {
        findings: refused
            .map(|why| Finding::new(REFUSED, why))
            .into_iter()
            .collect(),
        ..CheckOutput::default()
    }
}

/// Why `config` is the user's fault, if it is: the host validates it against the plugin's
/// schema as for a chain stage (the message names the field), then builds the instance.
/// `None` when the plugin takes it, or when the fault is the plugin's: it does not load
/// (TAMP-LOAD-01), the config is its own default (TAMP-CFG-01), its schema is broken
/// (TAMP-CFG-01), or its constructor fails otherwise than refusing the config (a panic).
pub fn judge(path: &Path, config: &serde_json::Value) -> Option<String> {
    let plugin = tamp_host::loader::load_plugin(path).ok()?;
    let meta = plugin.meta();
    if *config == meta.default_config {
        return None;
    }
    let stage = tamp_host::chain::ChainBuilder::new(Default::default()).stage(
        "conformance",
        Arc::clone(&plugin),
        config.clone(),
        Default::default(),
        Duration::from_secs(10),
    );
    let e = stage.err()?;
    // The schema's refusals read `config: …` (the whole config) or `config.<field>: …`.
    if e.message.starts_with("config:") || e.message.starts_with("config.") {
        let field = if e.path.is_empty() {
            "the config as a whole".to_string()
        } else {
            format!("field \"{}\"", e.path.join("."))
        };
        let detail = e
            .message
            .split_once(": ")
            .map_or(e.message.as_str(), |(_, d)| d);
        return Some(format!(
            "{field}: {detail} (refused by the config schema of plugin {}; `tamp plugins schema \
             {}` prints it)",
            meta.name,
            path.display()
        ));
    }
    match plugin.instantiate(config) {
        Err(refused) if refused.kind == tamp_host::plugin_api::ErrorKind::InvalidConfig => Some(
            format!("plugin {} refuses it: {}", meta.name, refused.message),
        ),
        _ => None,
    }
}
