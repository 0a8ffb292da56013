//! What the batch worker needs of a chain file, checked before a command opens its store
//! (`LoadedChainFile::check_batch_worker`): here, beside the assembler that builds the worker
//! (`LoadedChainFile::batch_worker`), so that the worker never names the chain file.

use super::LoadedChainFile;
use crate::config_error::{ConfigError, FieldError};
use crate::providers;

/// Checks what [`LoadedChainFile::batch_worker`] takes from the chain file (the Batches
/// client's model and key and, with `batch.sync_fallback`, the provider) without a queue, so
/// that a command can report a config error before it opens the store, and creates no store
/// file for a chain it cannot run. A chain that cannot name a Batches account and has no
/// `[batch]` section is told what it lacks: a `batch-deferred` stage, a `[batch]` section, and
/// what to add.
pub(super) fn check(file: &LoadedChainFile) -> Result<(), ConfigError> {
    let (batch, provider) = (&file.file.batch, &file.file.provider);
    if let Err(e) = crate::deferred::worker::batches_client(batch, provider) {
        // With an anthropic provider the account is inherited, and the error is about it.
        let inherited = provider.kind == providers::ProviderKind::Anthropic;
        if inherited || batch_table_written(&file.source) {
            return Err(file.at_field(e));
        }
        return Err(no_batch_section(file, &e));
    }
    if batch.sync_fallback {
        file.provider()?;
    }
    Ok(())
}

/// The error for a chain with no `[batch]` section whose `[provider]` cannot stand in for it.
fn no_batch_section(file: &LoadedChainFile, e: &FieldError) -> ConfigError {
    const ADD: &str = "a [batch] section naming the Message Batches account, e.g. \
        `[batch]` with `model = \"claude-sonnet-4-5\"` and `api_key_env = \"ANTHROPIC_API_KEY\"` \
        (or a [provider] with kind = \"anthropic\", whose model and key it takes; see \
        docs/configuration.md, `[batch]`)";
    match deferring_stage(file) {
        Some(i) => file.error(
            file.stage_line(i),
            format!(
                "stage \"{}\" defers its summaries (plugin {}), but the chain has no [batch] \
                 section and its [provider] is not anthropic ({e}); add {ADD}",
                file.file.stages[i].get_ref().name,
                crate::deferred::PLUGIN_NAME
            ),
        ),
        None => file.error(
            None,
            format!(
                "the chain has no {} stage and no [batch] section: it defers no summaries, and \
                 `tamp batch` has no Message Batches account to send them with ({e}). To defer \
                 summaries, add a [[stage]] with `plugin = \"tamp_batch_deferred\"` and \
                 `trigger = \"always\"`, and {ADD}",
                crate::deferred::PLUGIN_NAME
            ),
        ),
    }
}

/// The first stage of `file` that runs the `batch-deferred` plugin (by the name the loaded
/// plugin gives itself; a plugin that does not load, by the name the stage gives it).
fn deferring_stage(file: &LoadedChainFile) -> Option<usize> {
    let base = file.base_dir();
    file.file.stages.iter().position(|stage| {
        let spec = &stage.get_ref().plugin;
        let loaded = crate::loader::resolve_plugin(spec, &base, &file.file.plugin_dirs)
            .and_then(|path| crate::loader::load_plugin(&path));
        match loaded {
            Ok(plugin) => plugin.meta().name == crate::deferred::PLUGIN_NAME,
            Err(_) => spec.replace('-', "_").contains("batch_deferred"),
        }
    })
}

/// Whether the chain-file text writes a `batch` table (`[batch]`, `batch = {..}` or dotted
/// `batch.` keys); unparsable text counts as written (the file was read, so it parses).
fn batch_table_written(source: &str) -> bool {
    toml::de::DeTable::parse(source)
        .map(|root| {
            root.get_ref()
                .iter()
                .any(|(key, _)| key.get_ref() == "batch")
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_table_is_found_however_it_is_written() {
        assert!(batch_table_written("[batch]\nmax_attempts = 2\n"));
        assert!(batch_table_written("batch = { max_attempts = 2 }\n"));
        assert!(batch_table_written("batch.max_attempts = 2\n"));
        assert!(!batch_table_written(
            "[provider]\nkind = \"extractive\"\n# [batch]\n[[stage]]\nname = \"batch\"\nplugin = \"x\"\n"
        ));
    }
}
