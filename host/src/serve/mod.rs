//! `tamp serve`: the HTTP API over a chain that hot-reloads from its config file (issue 8).
//!
//! Placeholder: filled in by the serve work.

use std::path::PathBuf;

/// `tamp serve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The chain file to serve and watch.
    #[arg(short, long)]
    pub config: PathBuf,
}

/// Runs `tamp serve` until SIGTERM or Ctrl-C.
pub fn run_cli(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("tamp serve is not built yet")
}

/// `tamp check-config` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckConfigArgs {
    /// The chain file to validate.
    pub config: PathBuf,
}

/// Validates a chain file the way a reload would, without serving.
pub fn check_config_cli(_args: CheckConfigArgs) -> anyhow::Result<()> {
    anyhow::bail!("tamp check-config is not built yet")
}
