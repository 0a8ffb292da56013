//! `tamp conformance`: the conformance kit's checks (crate tamp-conformance-engine) from the
//! command line; the kit in a plugin's own tests (crate tamp-conformance) runs this command.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use tamp_conformance_engine::{child, config_args, spec, KitOptions, Launcher, RULES};

/// Output format of `tamp conformance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
    Junit,
}

/// `tamp conformance` arguments.
#[derive(Debug, Clone, Args)]
#[command(
    about = "Check a plugin (a library or a WebAssembly component) against tamp's plugin specification (docs/plugin-spec.md).",
    // After the options, not `long_about`: the `conformance` subcommand's own doc comment
    // (in main.rs) replaces the about texts, and this would never be shown.
    after_long_help = "Checks a plugin (a `.so` library or a `.wasm` component) against tamp's plugin specification \
        (docs/plugin-spec.md), rule by rule. Each check runs in its own process, so a plugin \
        that aborts or hangs fails that check instead of stopping the kit. Conversations are \
        generated from --seed (both wire formats); a failure prints the rule, the message at \
        fault, what the plugin returned, the seed and the smallest conversation that fails.\n\n\
        The plugin is a path, or a name looked up as `tamp plugins describe` does \
        (`tamp_tool_result_clearing`: lib<name>.so in TAMP_PLUGIN_PATH, then next to the tamp \
        executable). A --stage-config the plugin refuses (its config schema, or its constructor with \
        an invalid-config error) is a usage error naming the field, and nothing is checked.\n\n\
        With --only or --skip the run is partial: the result line says how many checks ran and \
        makes no claim about the rules left out (`partial` in the JSON report, the `result` \
        property in JUnit).\n\n\
        Exit status: 0 when every MUST rule checked passes (broken SHOULD rules are warnings), \
        1 when one fails, 2 on a usage error (a bad flag, a plugin not found, a --stage-config the \
        plugin refuses).\n\n\
        Examples:\n  tamp conformance target/debug/libtamp_custom_strategy.so\n  \
        tamp conformance tamp_tool_result_clearing --stage-config '{\"keep\": 5}'\n  \
        tamp conformance libmy_plugin.so --stage-config '{\"group_size\": 4}' --output-format junit > conformance.xml\n  \
        tamp conformance libmy_plugin.so --seed 7 --only TAMP-INV-01\n  \
        tamp conformance libmy_plugin.so --skip TAMP-EDGE-02,PERF   # a quick run of a debug build\n  \
        tamp conformance my_strategy.wasm --timeout 60"
)]
pub struct ConformanceArgs {
    /// The plugin to check: a library (`.so`) or a WebAssembly component (`.wasm`), by path
    /// or by name (as `tamp plugins describe` takes it).
    pub plugin: PathBuf,
    /// The stage config to check the plugin with: JSON, or @file with JSON in it (default:
    /// the plugin's default config). It must satisfy the plugin's config schema (else: a
    /// usage error naming the field).
    #[arg(long, value_name = "JSON|@FILE")]
    pub stage_config: Option<String>,
    /// `--stage-config`'s old spelling (`--config` is the chain file in every other command).
    #[arg(long = "config", value_name = "JSON|@FILE", hide = true)]
    pub config_old: Option<String>,
    /// Output format.
    #[arg(long, value_enum)]
    pub output_format: Option<OutputFormat>,
    /// `--output-format`'s old spelling.
    #[arg(long = "format", value_enum, hide = true)]
    pub format_old: Option<OutputFormat>,
    /// Seed of the generated conversations (the same seed gives the same conversations).
    #[arg(long, default_value_t = KitOptions::DEFAULT_SEED)]
    pub seed: u64,
    /// Generated conversations per wire format for each property check (at least 1).
    #[arg(long, default_value_t = KitOptions::DEFAULT_CASES, value_parser = at_least_one)]
    pub cases: usize,
    /// Run only these checks (rule ids, repeatable or comma-separated; `PERF` for the
    /// performance line). The load check always runs.
    #[arg(long, value_delimiter = ',', value_name = "RULE-ID")]
    pub only: Vec<String>,
    /// Leave these checks out (rule ids, repeatable or comma-separated). The load check
    /// always runs.
    #[arg(long, value_delimiter = ',', value_name = "RULE-ID")]
    pub skip: Vec<String>,
    /// Time limit of one compaction, in seconds; a check's process is killed after 4× this
    /// plus 4 s.
    #[arg(long, default_value_t = KitOptions::DEFAULT_TIMEOUT_SECS, value_name = "SECS")]
    pub timeout: f64,
    /// Checks run at once (at least 1; default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub jobs: Option<usize>,
    /// Internal: run the one check named in TAMP_CONFORMANCE_CHILD and print its result.
    #[arg(long, hide = true)]
    pub child: bool,
}

/// `--cases` and `--jobs`: a count of at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|e| format!("{e} (expected a whole number of at least 1)"))?;
    if n == 0 {
        return Err("must be at least 1, got 0".into());
    }
    Ok(n)
}

/// Runs `tamp conformance`; the exit status says whether every check passed (2: a usage
/// error).
pub fn run(args: ConformanceArgs) -> std::process::ExitCode {
    match run_checked(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run_checked(args: ConformanceArgs) -> anyhow::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    if args.child {
        return Ok(if child::serve_child_from_env() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        });
    }
    let stage_config = crate::spelling::prefer(
        args.stage_config.clone(),
        args.config_old.clone(),
        "--config",
        "--stage-config",
    );
    let config = match &stage_config {
        None => None,
        Some(text) => Some(parse_config_arg(text)?),
    };
    for (flag, id) in args
        .only
        .iter()
        .map(|id| ("--only", id))
        .chain(args.skip.iter().map(|id| ("--skip", id)))
    {
        if spec::rule(id).is_none() && id != spec::PERF {
            anyhow::bail!(
                "{flag} {id}: no such rule; the rules are {} (and {})",
                RULES.iter().map(|r| r.id).collect::<Vec<_>>().join(", "),
                spec::PERF
            );
        }
    }
    let timeout = tamp_host::bounded::positive_seconds(args.timeout)
        .map_err(|e| anyhow::anyhow!("--timeout {}: {e}", args.timeout))?;
    let plugin = find_plugin(&args.plugin)?;
    let options = KitOptions {
        config,
        seed: args.seed,
        cases: args.cases,
        only: args.only,
        skip: args.skip,
        timeout_secs: timeout.as_secs_f64(),
        ..KitOptions::new(plugin)
    };
    let launcher = Launcher::Tamp(std::env::current_exe()?);
    if options.config.is_some() {
        if let Some(why) = config_args::refusal(&launcher, &options) {
            anyhow::bail!(
                "--stage-config: {why}. Nothing was checked: a config the plugin refuses is an error \
                 in the arguments, not a finding about the plugin"
            );
        }
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let report = tamp_conformance_engine::run(&options, &launcher, jobs);
    let format = crate::spelling::prefer(
        args.output_format,
        args.format_old,
        "--format",
        "--output-format",
    )
    .unwrap_or(OutputFormat::Text);
    let text = match format {
        OutputFormat::Text => report.to_text(),
        OutputFormat::Json => report.to_json(),
        OutputFormat::Junit => report.to_junit(),
    };
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The plugin argument: a path, or a name looked up the way `tamp plugins describe` does
/// ([`tamp_host::loader::resolve_plugin`]); a path is kept as given.
fn find_plugin(plugin: &Path) -> anyhow::Result<PathBuf> {
    match plugin.to_str() {
        Some(spec) => Ok(tamp_host::loader::resolve_plugin(spec, Path::new(""), &[])?),
        None if plugin.is_file() => Ok(plugin.to_path_buf()),
        None => anyhow::bail!("{}: no such file", plugin.display()),
    }
}

/// `--stage-config`: JSON text, or `@path` to a file holding it.
fn parse_config_arg(text: &str) -> anyhow::Result<serde_json::Value> {
    let (what, json) = match text.strip_prefix('@') {
        Some(path) => (
            path.to_string(),
            tamp_host::input_file::read_to_string(
                std::path::Path::new(path),
                tamp_host::input_file::Limit::SETTINGS,
            )
            .map_err(|e| anyhow::anyhow!("--stage-config @{path}: cannot read: {e}"))?,
        ),
        None => ("the argument".to_string(), text.to_string()),
    };
    serde_json::from_str(&json).map_err(|e| {
        anyhow::anyhow!(
            "--stage-config: {what} is not valid JSON: {e} (line {}, column {})",
            e.line(),
            e.column()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_must_be_at_least_one() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert_eq!(
            at_least_one("0"),
            Err("must be at least 1, got 0".to_string())
        );
        assert!(at_least_one("-1").unwrap_err().contains("at least 1"));
    }
}
