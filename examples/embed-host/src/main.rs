//! Embedding tamp in a Rust agent: build a chain from a chain file, compact a conversation,
//! and read back a page. Run from the repository root after building the plugins:
//!
//! ```sh
//! cargo build --workspace && cargo run -p tamp-embed-host
//! ```

use std::path::Path;

use tamp_host::chain::{Chain, CompactOptions, FileOverrides};
use tamp_host::wire;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let chain_file = root.join("examples/chains/default.toml");
    let sample = root.join("examples/conversations/ponyc-4588.openai.json");

    // One chain serves any number of concurrent compactions.
    let chain = Chain::from_file(&chain_file, FileOverrides::default())?;

    // An agent usually holds its conversation already; here it comes from a file.
    let (conversation, format) = wire::parse_str(&std::fs::read_to_string(&sample)?, None)?;
    let options = CompactOptions {
        format: Some(format),
        ..Default::default()
    };
    let compacted = chain.compact(conversation, &options).await?;

    let report = &compacted.report;
    println!(
        "{} → {} tokens ({} → {} messages)",
        report.tokens_before, report.tokens_after, report.messages_before, report.messages_after
    );
    for stage in &report.stages {
        println!("  {}: {:?}: {}", stage.stage, stage.status, stage.reason);
    }

    // Every summary carries a page ref: the originals are one call away.
    if let Some(info) = compacted
        .conversation
        .messages
        .iter()
        .find_map(|m| m.summary_info())
    {
        let page = chain.store().get_page(&info.page_ref).await?;
        println!(
            "page {} holds {} original message(s) archived by {}",
            page.page.id,
            page.page.messages.len(),
            page.page.strategy
        );
    }

    // Send this to the model instead of the original.
    let _request_body = wire::to_value(&compacted.conversation, format);
    Ok(())
}
