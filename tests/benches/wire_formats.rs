//! The wire readers and writers side by side (issue 31): the same ten corpus conversations in
//! Anthropic Messages, Chat Completions and the Responses API (`tests/fixtures/corpus/`), and
//! the last request of each captured agent session (`tests/fixtures/agents/captures/`), each
//! read (`wire::parse_str`, format given, as the proxy reads) and written back
//! (`wire::to_string`). Printed: the median time of a read and of a write, the text's size, the
//! throughput, and each format's time ÷ Anthropic's on the same conversations.
//!
//! Run: `cargo bench -p tamp-e2e --bench wire_formats` (`-- quick` for fewer rounds).

use std::time::Instant;

use serde_json::Value;
use tamp_e2e::{corpus, corpus_names, workspace_root};
use tamp_host::wire::{self, WireFormat};

/// The median of `rounds` timings of `f`, in milliseconds.
fn median_ms(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Read and write medians of `text` in `format`, in milliseconds.
fn measure(text: &str, format: WireFormat, rounds: usize) -> (f64, f64) {
    let (conversation, _) = wire::parse_str(text, Some(format)).expect("reads");
    assert_eq!(
        wire::to_string(&conversation, format).len(),
        text.len(),
        "compact input comes back as it was"
    );
    let read = median_ms(rounds, || {
        std::hint::black_box(wire::parse_str(text, Some(format)).unwrap());
    });
    let write = median_ms(rounds, || {
        std::hint::black_box(wire::to_string(&conversation, format));
    });
    (read, write)
}

/// The last POST body of a captured session, compact.
fn last_request(file: &str) -> String {
    let path = workspace_root()
        .join("tests/fixtures/agents/captures")
        .join(file);
    let session: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let body = session["requests"]
        .as_array()
        .expect("a capture holds its requests")
        .iter()
        .filter(|r| r["method"] == "POST" && r["body"].is_object())
        .map(|r| &r["body"])
        .next_back()
        .expect("a request");
    let (conversation, format) = wire::parse_str(&body.to_string(), None).unwrap();
    let text = wire::to_string(&conversation, format);
    assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), body);
    text
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let rounds = if quick { 5 } else { 31 };
    println!(
        "wire formats: read (parse_str, format given) and write (to_string) of the same \
         conversations; median of {rounds} rounds each"
    );
    let names = corpus_names();
    // The corpus files are indented; the proxy reads what clients send, compact.
    let texts: Vec<[String; 3]> = names
        .iter()
        .map(|name| {
            WireFormat::ALL.map(|format| {
                let (c, _) = wire::parse_str(&corpus(format.as_str(), name), Some(format)).unwrap();
                wire::to_string(&c, format)
            })
        })
        .collect();
    println!(
        "\n{:<40} {:<10} {:>9} {:>9} {:>9} {:>9}",
        "conversation", "format", "KB", "read ms", "write ms", "MB/s"
    );
    let mut totals = [(0.0f64, 0.0f64, 0usize); 3];
    for (name, texts) in names.iter().zip(&texts) {
        for (k, format) in WireFormat::ALL.into_iter().enumerate() {
            let text = &texts[k];
            let (read, write) = measure(text, format, rounds);
            totals[k].0 += read;
            totals[k].1 += write;
            totals[k].2 += text.len();
            println!(
                "{:<40} {:<10} {:>9.1} {:>9.3} {:>9.3} {:>9.0}",
                name,
                format.as_str(),
                text.len() as f64 / 1e3,
                read,
                write,
                text.len() as f64 / 1e6 / ((read + write) / 1e3)
            );
        }
    }
    println!(
        "\n{:<10} {:>9} {:>10} {:>10} {:>9} {:>14}",
        "all ten", "KB", "read ms", "write ms", "MB/s", "time ÷ anthropic"
    );
    let anthropic = totals[0].0 + totals[0].1;
    for (k, format) in WireFormat::ALL.into_iter().enumerate() {
        let (read, write, bytes) = totals[k];
        println!(
            "{:<10} {:>9.0} {:>10.2} {:>10.2} {:>9.0} {:>14.2}",
            format.as_str(),
            bytes as f64 / 1e3,
            read,
            write,
            bytes as f64 / 1e6 / ((read + write) / 1e3),
            (read + write) / anthropic
        );
    }

    println!("\ncaptured agents, last request of the session:");
    println!(
        "{:<40} {:<10} {:>9} {:>9} {:>9} {:>9}",
        "session", "format", "KB", "read ms", "write ms", "MB/s"
    );
    for file in [
        "claude-code-2.1.328.tool-task.json",
        "codex-0.169.0.custom-provider.tool-task.json",
        "codex-0.169.0.remote-compaction.json",
    ] {
        let text = last_request(file);
        let (_, format) = wire::parse_str(&text, None).unwrap();
        let (read, write) = measure(&text, format, rounds);
        println!(
            "{:<40} {:<10} {:>9.1} {:>9.3} {:>9.3} {:>9.0}",
            file.trim_end_matches(".json"),
            format.as_str(),
            text.len() as f64 / 1e3,
            read,
            write,
            text.len() as f64 / 1e6 / ((read + write) / 1e3)
        );
    }
}
