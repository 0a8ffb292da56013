//! `tamp conformance`: the kit (crate tamp-conformance) from the command line.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tamp_conformance::{child, spec, Kit, KitOptions, Launcher, RULES};

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
    long_about = "Check a plugin (a `.so` library or a `.wasm` component) against tamp's plugin specification \
        (docs/plugin-spec.md), rule by rule. Each check runs in its own process, so a plugin \
        that aborts or hangs fails that check instead of stopping the kit. Conversations are \
        generated from --seed (both wire formats); a failure prints the rule, the message at \
        fault, what the plugin returned, the seed and the smallest conversation that fails.\n\n\
        Exit status: 0 when every MUST rule passes (broken SHOULD rules are warnings), 1 when \
        one fails, 2 on a usage error.\n\n\
        Examples:\n  tamp conformance target/debug/libtamp_custom_strategy.so\n  \
        tamp conformance libmy_plugin.so --config '{\"group_size\": 4}' --format junit > conformance.xml\n  \
        tamp conformance libmy_plugin.so --seed 7 --only TAMP-INV-01\n  \
        tamp conformance my_strategy.wasm --timeout 60"
)]
pub struct ConformanceArgs {
    /// The plugin to check: a library (`.so`) or a WebAssembly component (`.wasm`).
    pub plugin: PathBuf,
    /// The stage config to check the plugin with: JSON, or @file with JSON in it (default:
    /// the plugin's default config).
    #[arg(long, value_name = "JSON|@FILE")]
    pub config: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: OutputFormat,
    /// Seed of the generated conversations (the same seed gives the same conversations).
    #[arg(long, default_value_t = KitOptions::DEFAULT_SEED)]
    pub seed: u64,
    /// Generated conversations per wire format for each property check.
    #[arg(long, default_value_t = KitOptions::DEFAULT_CASES)]
    pub cases: usize,
    /// Run only these checks (rule ids, repeatable or comma-separated; `PERF` for the
    /// performance line). The load check always runs.
    #[arg(long, value_delimiter = ',', value_name = "RULE-ID")]
    pub only: Vec<String>,
    /// Time limit of one compaction, in seconds; a check's process is killed after 4× this
    /// plus 4 s.
    #[arg(long, default_value_t = KitOptions::DEFAULT_TIMEOUT_SECS, value_name = "SECS")]
    pub timeout: f64,
    /// Checks run at once (default: the number of CPUs).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Internal: run the one check named in TAMP_CONFORMANCE_CHILD and print its result.
    #[arg(long, hide = true)]
    pub child: bool,
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
    let config = match &args.config {
        None => None,
        Some(text) => Some(parse_config_arg(text)?),
    };
    for id in &args.only {
        if spec::rule(id).is_none() && id != spec::PERF {
            anyhow::bail!(
                "--only {id}: no such rule; the rules are {} (and {})",
                RULES.iter().map(|r| r.id).collect::<Vec<_>>().join(", "),
                spec::PERF
            );
        }
    }
    let timeout = tamp_host::bounded::positive_seconds(args.timeout)
        .map_err(|e| anyhow::anyhow!("--timeout {}: {e}", args.timeout))?;
    if !args.plugin.is_file() {
        anyhow::bail!("{}: no such file", args.plugin.display());
    }
    let mut kit = Kit::new(&args.plugin)
        .seed(args.seed)
        .cases(args.cases)
        .timeout(timeout)
        .launcher(Launcher::Tamp(std::env::current_exe()?));
    if let Some(config) = config {
        kit = kit.config(config);
    }
    for id in &args.only {
        kit = kit.only(id);
    }
    if let Some(jobs) = args.jobs {
        kit = kit.jobs(jobs);
    }
    let report = kit.run();
    let text = match args.format {
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

/// `--config`: JSON text, or `@path` to a file holding it.
fn parse_config_arg(text: &str) -> anyhow::Result<serde_json::Value> {
    let (what, json) = match text.strip_prefix('@') {
        Some(path) => (
            path.to_string(),
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--config @{path}: cannot read: {e}"))?,
        ),
        None => ("the argument".to_string(), text.to_string()),
    };
    serde_json::from_str(&json).map_err(|e| {
        anyhow::anyhow!(
            "--config: {what} is not valid JSON: {e} (line {}, column {})",
            e.line(),
            e.column()
        )
    })
}
