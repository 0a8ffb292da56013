//! `tamp check-config`: a chain file checked the way a reload of `tamp serve` would check it.

use std::path::PathBuf;

use clap::Args;
use tamp_host::chain::FileOverrides;

/// `tamp check-config` arguments.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Example:\n  tamp check-config --config chain.toml && echo ok\n\n\
    Exits 1 with the same file:line: field: message a reload of `tamp serve` would log."
)]
pub struct CheckConfigArgs {
    /// The chain file to validate.
    #[arg(
        short,
        long,
        value_name = "FILE",
        required_unless_present = "config_old"
    )]
    pub config: Option<PathBuf>,
    /// `--config`'s old spelling: the chain file as the first argument.
    #[arg(value_name = "CONFIG", hide = true)]
    pub config_old: Option<PathBuf>,
    /// Use this page store file instead of the chain file's (the store is opened, as a
    /// reload would).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Refuse a stage without a `sha256` pin, as `tamp serve --require-pins` would.
    #[arg(long)]
    pub require_pins: bool,
}

/// Runs `tamp check-config`: prints `ok: <chain>`, then any warning (a valid chain that may
/// not be meant, e.g. one that compacts nothing).
pub fn check_config(args: CheckConfigArgs) -> anyhow::Result<()> {
    let config = crate::spelling::prefer(
        args.config,
        args.config_old,
        "the chain file as an argument",
        "--config",
    )
    .expect("clap requires one of them");
    let overrides = FileOverrides {
        store_path: args.store,
        progress: None,
        require_pins: args.require_pins,
        check_only: true,
        wrap_provider: None,
    };
    println!(
        "ok: {}",
        tamp_host::check_config::check_config(&config, overrides)?
    );
    for warning in tamp_host::config::LoadedChainFile::read(&config)
        .map(|f| f.warnings())
        .unwrap_or_default()
    {
        eprintln!("warning: {warning}");
    }
    Ok(())
}
