//! The conformance kit: checks a plugin against `docs/plugin-spec.md` (issue 9).
//!
//! Placeholder: filled in by the conformance work.

use std::path::PathBuf;

/// `tamp conformance` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ConformanceArgs {
    /// The plugin library to check.
    pub plugin: PathBuf,
}

/// Runs `tamp conformance`; the exit status says whether every check passed.
pub fn run_cli(_args: ConformanceArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("tamp conformance is not built yet")
}
