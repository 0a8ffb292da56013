//! The commands in README.md and docs/*.md run as written.
//!
//! Every fenced `sh` block marked `<!-- runnable -->` on the line before its fence is run, in
//! order, after the README's first command, the way a reader who follows the docs runs it:
//! from a copy of the repository's README, docs and examples whose `target/` is this build's
//! (`tamp_e2e::docs::scratch`), with the built `tamp` on `PATH`; docs/writing-a-plugin.md's
//! from the plugin crate it has the reader make beside the clone, written from its
//! `<!-- file: PATH -->` blocks. Each block runs in `bash -euo pipefail`: a command that fails
//! fails the test, naming the doc, the line and the block.
//!
//! One substitution, and only that (`tamp_e2e::docs::run`): `target/release` becomes
//! `target/debug`, since the tests build debug binaries where the README builds release ones.
//! So the marked blocks hold no `cargo build --release` (the README's first command built
//! everything).
//!
//! Mark a block when a new reader would run it and it runs offline in seconds; leave
//! unmarked what needs a key, a server, a network or a long run. Two docs' blocks are run
//! elsewhere: docs/eval.md's by `eval::the_docs_sample_is_what_its_command_prints`, which
//! also compares what they print with the samples after them, and docs/proxy.md's set-ups by
//! `agents::the_set_ups_in_docs_proxy_md_run_as_written`, with their own markers.

use std::path::Path;
use std::time::Instant;

use tamp_e2e::docs::{self, Marked};
use tamp_e2e::workspace_root;

/// Runs a block, or panics with what it printed.
fn run(doc: &str, line: usize, script: &str, dir: &Path) {
    let started = Instant::now();
    let out = docs::run(script, dir);
    eprintln!(
        "{doc}:{line}: {:.1} s in {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    let tail = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    assert!(
        out.status.success(),
        "{doc}:{line}: the block fails as written ({}):\n{}\n--- stdout (tail)\n{}\n--- stderr (tail)\n{}",
        out.status,
        script.replace("target/release", "target/debug"),
        tail(&out.stdout),
        tail(&out.stderr)
    );
}

#[test]
fn the_runnable_blocks_of_the_readme_and_the_docs_run_as_written() {
    let scratch = docs::scratch();
    let clone = scratch.join("tamp");

    // The README's first command: a build, then the compaction every later step reads.
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let first = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.lines().find(|l| !l.starts_with('#')))
        .expect("the README's first sh block");
    let compaction = first
        .strip_prefix("cargo build --release --workspace && ")
        .unwrap_or_else(|| {
            panic!("the README's first command is not a build, then a command: {first}")
        });
    run("README.md", 0, compaction, &clone);

    let mut docs: Vec<String> = vec!["README.md".into()];
    let mut names: Vec<String> = std::fs::read_dir(workspace_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    names.sort();
    docs.extend(names);

    let mut ran = Vec::new();
    for doc in &docs {
        let blocks = docs::marked_blocks_of(doc);
        // The docs a new reader follows each have steps to run.
        if ["README.md", "docs/eval.md", "docs/writing-a-plugin.md"].contains(&doc.as_str()) {
            assert!(
                blocks.iter().any(|b| b.marked == Marked::Run),
                "{doc} marks no runnable block"
            );
        }
        if doc == "docs/eval.md" {
            // Run, and their output compared with the samples after them, by
            // `eval::the_docs_sample_is_what_its_command_prints`.
            continue;
        }
        if doc == "docs/writing-a-plugin.md" {
            // The plugin crate (its files written by `docs::scratch`), one cargo at a time.
            let (dir, _cargo) = docs::guide_plugin();
            for block in blocks.iter().filter(|b| b.marked == Marked::Run) {
                run(doc, block.line, &block.text, &dir);
                ran.push(format!("{doc}:{}", block.line));
            }
            continue;
        }
        for block in &blocks {
            match &block.marked {
                Marked::Run => {
                    run(doc, block.line, &block.text, &clone);
                    ran.push(format!("{doc}:{}", block.line));
                }
                Marked::File(path) => docs::write_if_changed(&clone.join(path), &block.text),
            }
        }
    }
    eprintln!("ran {} block(s): {}", ran.len(), ran.join(", "));
}
