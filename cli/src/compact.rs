//! `tamp compact`: one conversation through the chain, the report in text or JSON.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::Args;
use tamp_host::budget::BudgetConfig;
use tamp_host::chain::{
    Chain, ChainError, ChainReport, CompactOptions, FileOverrides, StageStatus,
};
use tamp_host::config::LoadedChainFile;
use tamp_host::input_file;
use tamp_host::wire::{self, WireFormat};

use crate::output::OutputFile;
use crate::{chain_file, check_store_flag, write_stdout};

#[derive(Args)]
pub(crate) struct CompactArgs {
    /// The conversation JSON file, or `-` for stdin.
    #[arg(default_value = "-")]
    input: String,
    /// The chain file. Without it, a built-in chain: extractive summarizer, store in .tamp/,
    /// the template plugin.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// The input's wire format: Anthropic Messages, OpenAI Chat Completions or the OpenAI
    /// Responses API; detected when absent.
    #[arg(long, value_parser = ["anthropic", "openai", "responses"])]
    format: Option<String>,
    /// Print the per-stage report to stderr.
    #[arg(long)]
    report: bool,
    /// Write the report as JSON to this file (`-` for stderr).
    #[arg(long, value_name = "FILE")]
    report_json: Option<String>,
    /// Write the compacted conversation here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Run the stages even when the conversation is under the high watermark.
    #[arg(long)]
    force: bool,
    /// Override budget.max_tokens.
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Override budget.keep_recent.
    #[arg(long)]
    keep_recent: Option<u32>,
    /// Use this page store file instead of the chain file's.
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Print progress events (LLM calls finished) to stderr.
    #[arg(long)]
    progress: bool,
    /// The conversation's thread id: summary-cache entries and pages are kept per thread.
    /// Without it, cached summaries are shared by content alone.
    #[arg(long, value_name = "ID")]
    thread_id: Option<String>,
    /// Compact exactly what this input holds, not the thread's last answer plus what is new
    /// since (the thread is --thread-id, else the system prompt and the user's opening turn).
    #[arg(long)]
    no_thread_continuity: bool,
}

pub(crate) fn compact(rt: &tokio::runtime::Runtime, args: CompactArgs) -> Result<()> {
    // The chain file first: its errors do not depend on the input.
    let file = chain_file(args.config.as_deref())?;
    // Then the flags, before anything is read, archived or written.
    let budget = flag_budget(&file, &args)?;
    if let Some(path) = &args.store {
        check_store_flag(path, true)?;
    }
    let output = match &args.output {
        Some(path) => Some(OutputFile::open(path, "--output")?),
        None => None,
    };
    let report_json = match args.report_json.as_deref() {
        Some("-") | None => None,
        Some(path) => Some(OutputFile::open(Path::new(path), "--report-json")?),
    };
    for warning in file.warnings() {
        eprintln!("warning: {warning}");
    }
    compact_to(rt, &args, &file, budget, output, report_json)
}

/// The chain file's budget with `--max-tokens` and `--keep-recent` applied, checked: a value
/// a flag gave that breaks a budget rule is named by its flag.
fn flag_budget(file: &LoadedChainFile, args: &CompactArgs) -> Result<BudgetConfig> {
    let mut budget = file.file.budget;
    if let Some(n) = args.max_tokens {
        budget.max_tokens = n;
    }
    if let Some(n) = args.keep_recent {
        budget.keep_recent = n;
    }
    if let Err(e) = budget.validate() {
        let flag = match e.key {
            "max_tokens" => args.max_tokens.map(|n| format!("--max-tokens {n}")),
            "keep_recent" => args.keep_recent.map(|n| format!("--keep-recent {n}")),
            _ => None,
        };
        match flag {
            Some(flag) => bail!("{flag}: {}", e.message),
            None => bail!("{}: {e}", file.path.display()),
        }
    }
    Ok(budget)
}

fn compact_to(
    rt: &tokio::runtime::Runtime,
    args: &CompactArgs,
    file: &LoadedChainFile,
    budget: BudgetConfig,
    output: Option<OutputFile>,
    report_json: Option<OutputFile>,
) -> Result<()> {
    let source = if args.input == "-" {
        "<stdin>"
    } else {
        args.input.as_str()
    };
    let bytes = if args.input == "-" {
        if std::io::stdin().is_terminal() {
            eprintln!(
                "tamp compact: reading the conversation from stdin (end with Ctrl-D), or pass \
                 its file: tamp compact conversation.json"
            );
        }
        input_file::read_stdin(input_file::Limit::CONVERSATION)
            .map_err(|e| anyhow::anyhow!("cannot read stdin: {e}"))?
    } else {
        input_file::read(Path::new(&args.input), input_file::Limit::CONVERSATION)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.input))?
    };
    let text = utf8_text(bytes).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    let format = args
        .format
        .as_deref()
        .map(str::parse::<WireFormat>)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if let Some(given) = format {
        if let Some(detected) = detected_format(&text).filter(|d| *d != given) {
            eprintln!(
                "warning: {source}: --format {given} was given, but without it the \
                 conversation would be read as {detected}; reading it as {given}"
            );
        }
    }
    let (mut conversation, format) =
        wire::parse_str(&text, format).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    if let Some(id) = &args.thread_id {
        conversation.thread_id = tamp_host::plugin_api::FfiOption::RSome(id.as_str().into());
    }

    let progress: Option<tamp_host::services::ProgressFn> = args.progress.then(|| {
        Arc::new(|stage: &str, e: &tamp_host::plugin_api::ProgressEvent| {
            eprintln!("[{stage}] {}", e.message);
        }) as tamp_host::services::ProgressFn
    });
    let overrides = FileOverrides {
        store_path: args.store.clone(),
        progress,
        ..Default::default()
    };
    let chain = Chain::from_loaded(file, overrides).map_err(|e| match (&args.store, e) {
        // The store the flag named: the flag is what to fix, not the chain file.
        (Some(path), ChainError::Store(e)) => {
            anyhow::anyhow!("--store {}: {e}", path.display())
        }
        (_, e) => e.into(),
    })?;
    let options = CompactOptions {
        format: Some(format),
        force: args.force,
        budget: Some(budget),
        thread_continuity: !args.no_thread_continuity,
    };
    let compacted = rt
        .block_on(chain.compact(conversation, &options))
        .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;

    let out = wire::to_string_pretty(&compacted.conversation, format);
    match output {
        Some(file) => file.write(&(out + "\n"))?,
        None => out!("{out}"),
    }
    if args.report {
        eprint!("{}", render_report(&compacted.report));
    } else {
        for run in compacted
            .report
            .stages
            .iter()
            .filter(|r| r.status == StageStatus::RolledBack)
        {
            eprintln!("warning: stage \"{}\" {}", run.stage, run.reason);
        }
    }
    if args.report_json.is_some() {
        let json = serde_json::to_string_pretty(&compacted.report)?;
        match report_json {
            Some(file) => file.write(&(json + "\n"))?,
            None => eprintln!("{json}"),
        }
    }
    Ok(())
}

/// The format the body would be read in without `--format`, when it can be told.
fn detected_format(text: &str) -> Option<WireFormat> {
    match wire::parse_str(text, None) {
        Ok((_, format)) => Some(format),
        // It does not read in the detected format either: detect it on its own.
        Err(_) => serde_json::from_str(text)
            .ok()
            .and_then(|value| wire::detect(&value).ok()),
    }
}

/// The input as text, or where it stops being UTF-8 (`invalid UTF-8 at byte offset 1234`).
fn utf8_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        format!("invalid UTF-8 at byte offset {offset}: the conversation must be UTF-8 JSON")
    })
}

fn render_report(report: &ChainReport) -> String {
    let mut out = format!(
        "tamp: {} → {} tokens, {} → {} messages in {:.1} ms ({})\n",
        report.tokens_before,
        report.tokens_after,
        report.messages_before,
        report.messages_after,
        report.duration_ms,
        report.reason
    );
    if !report.opaque.is_empty() {
        let found: Vec<String> = report.opaque.iter().map(|o| o.describe()).collect();
        out.push_str(&format!(
            "  opaque: {} (kept verbatim in place, compacted around)\n",
            found.join(", ")
        ));
    }
    for run in &report.stages {
        let status = match run.status {
            StageStatus::Acted => "acted",
            StageStatus::Skipped => "skipped",
            StageStatus::NotRun => "not run",
            StageStatus::RolledBack => "ROLLED BACK",
        };
        out.push_str(&format!(
            "  stage {} ({} {}): {status}: {}\n",
            run.stage, run.plugin, run.plugin_version, run.reason
        ));
        if run.status == StageStatus::Acted || run.llm_calls > 0 {
            let archived = match (run.messages_removed, run.messages_cleared) {
                (removed, 0) => format!("{removed} message(s) archived"),
                (0, cleared) => format!("{cleared} message(s) cleared in place"),
                (removed, cleared) => {
                    format!("{removed} message(s) archived and {cleared} cleared in place")
                }
            };
            out.push_str(&format!(
                "    {} → {} tokens; {archived} in {} page(s); {} LLM call(s), {} in / {} out tokens; {:.1} ms\n",
                run.tokens_before,
                run.tokens_after,
                run.pages.len(),
                run.llm_calls,
                run.usage.input_tokens,
                run.usage.output_tokens,
                run.duration_ms
            ));
        }
        if !run.pages.is_empty() {
            out.push_str(&format!("    pages: {}\n", page_list(&run.pages)));
        }
        for w in &run.warnings {
            out.push_str(&format!("    warning: {w}\n"));
        }
    }
    out
}

/// A stage's pages for the text report: their short refs (which `tamp pages show` takes), at
/// most six, then how many more.
fn page_list(pages: &[String]) -> String {
    const SHOWN: usize = 6;
    let mut shown: Vec<&str> = pages
        .iter()
        .take(SHOWN)
        .map(|p| tamp_host::store::short_ref(p))
        .collect();
    let more = pages.len().saturating_sub(SHOWN);
    let more = if more > 0 {
        format!(" and {more} more (the JSON report lists them all)")
    } else {
        String::new()
    };
    shown.dedup();
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_that_is_not_utf8_is_refused_with_its_byte_offset() {
        assert_eq!(utf8_text(b"{\"a\": 1}".to_vec()).unwrap(), "{\"a\": 1}");
        let err = utf8_text(b"{\"messages\": \"caf\xe9\"}".to_vec()).unwrap_err();
        assert!(err.starts_with("invalid UTF-8 at byte offset 17"), "{err}");
    }
}
