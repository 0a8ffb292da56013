//! `tamp eval`'s flags, and writing its output.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::Args;
use tamp_host::eval::main_model::CachePrices;
use tamp_host::eval::output::{self, Format};
use tamp_host::eval::{EvalOptions, Plan};

use crate::spelling;

/// `tamp eval` arguments.
#[derive(Args, Debug)]
#[command(
    about = "Compare chains side by side on your own conversations: cost, prefix reuse and what survives",
    long_about = "Runs every chain on every conversation, once on the whole conversation \
    (one-shot) and replayed as a growing thread compacted before every model call (replay), and \
    prints one table: tokens before and after, LLM calls, tokens sent to the summarizer, \
    estimated cost ([provider.price]), prefix reuse, wall time per compaction, and retention of \
    the facts files' facts in the final context. Each run uses a scratch store: the chain files' \
    own stores are never written. See docs/eval.md.",
    after_help = "Example (offline, from the repository root):\n  tamp eval --config \
    examples/chains/default.toml --config examples/chains/hybrid.toml \\\n    --facts \
    examples/eval/ponyc-4588.facts.json examples/conversations/ponyc-4588.anthropic.json"
)]
pub struct EvalArgs {
    /// A chain file to evaluate (give two or more to compare).
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        required_unless_present = "chains_old"
    )]
    pub chains: Vec<PathBuf>,
    /// `--config`'s old spelling.
    #[arg(long = "chain", value_name = "FILE", hide = true)]
    pub chains_old: Vec<PathBuf>,
    /// A facts file: what must survive in the compacted context (see docs/eval.md). Its
    /// `conversation` names the conversation it belongs to; without one it applies to all.
    #[arg(long = "facts", value_name = "FILE")]
    pub facts: Vec<PathBuf>,
    /// Conversations in any wire format (Anthropic Messages, OpenAI Chat Completions or the
    /// OpenAI Responses API).
    #[arg(value_name = "CONVERSATION", required = true)]
    pub conversations: Vec<PathBuf>,
    /// Output: a text table, JSON (with every replay's context size request by request), CSV
    /// (one row per run), or a self-contained HTML report with charts.
    #[arg(long, value_name = "FORMAT",
          value_parser = PossibleValuesParser::new(Format::NAMES).map(|f| f.parse::<Format>().expect("a listed format")))]
    pub output_format: Option<Format>,
    /// `--output-format`'s old spelling.
    #[arg(long = "format", value_name = "FORMAT", hide = true,
          value_parser = PossibleValuesParser::new(Format::NAMES).map(|f| f.parse::<Format>().expect("a listed format")))]
    pub format_old: Option<Format>,
    /// Write the output here instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// `--output`'s old spelling.
    #[arg(long = "out", value_name = "FILE", hide = true)]
    pub out_old: Option<PathBuf>,
    /// Skip the replays (they make one compaction per model call of each conversation).
    #[arg(long, conflicts_with = "replay_only")]
    pub one_shot_only: bool,
    /// Skip the one-shot runs: only the replays (with a slow local model, each run counts).
    #[arg(long)]
    pub replay_only: bool,
    /// Also judge retention by a model: the facts' `question`s are answered by the
    /// `[provider]` of this chain file (its stages are not run) from the original conversation
    /// and from each run's final context; the probe is the share answered the same.
    #[arg(long, value_name = "JUDGE_FILE")]
    pub probe: Option<PathBuf>,
    /// The main model's prompt-cache prices, as multiples of its input price: `READ,WRITE`.
    /// The `main model` column prices each replay's requests at them. Anthropic's by default;
    /// OpenAI charges nothing to write and reads at 0.5, 0.25 or 0.1 by model (`0.5,1`).
    #[arg(long, value_name = "READ,WRITE", default_value_t = CachePrices::ANTHROPIC)]
    pub cache_prices: CachePrices,
}

/// Runs `tamp eval`: checks that the output can be written, reads and checks everything,
/// runs, writes the output.
pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    let chains = spelling::merge(args.chains, args.chains_old, "--chain", "--config");
    let format = spelling::prefer(
        args.output_format,
        args.format_old,
        "--format",
        "--output-format",
    )
    .unwrap_or(Format::Text);
    let output = spelling::prefer(args.output, args.out_old, "--out", "--output");
    // Before anything runs (a run with a real model can take hours): a bad `--output` fails
    // now.
    let out = output
        .as_deref()
        .map(|path| crate::output::OutputFile::open(path, "--output"))
        .transpose()?;
    let plan = Plan::read(&EvalOptions {
        chains,
        facts: args.facts,
        conversations: args.conversations,
        one_shot_only: args.one_shot_only,
        replay_only: args.replay_only,
        probe: args.probe,
        cache_prices: args.cache_prices,
    })?;
    let progress = crate::progress_bar::EvalProgress::on_stderr();
    let runs = plan.run(&progress).await;
    progress.finish();
    let runs = runs?;
    let text = output::render(&runs, format);
    match out {
        Some(out) => out.write(&text)?,
        None => print!("{text}"),
    }
    Ok(())
}
