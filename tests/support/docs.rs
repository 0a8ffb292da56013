//! The docs' marked blocks, and the scratch directory a reader's steps run in.
//!
//! Two markers, each on the line right before a fenced block:
//!
//! - `<!-- runnable -->` before a fenced `sh` block: commands a reader runs as written, offline,
//!   in seconds (tests/e2e/docs_blocks.rs runs them);
//! - `<!-- file: PATH -->` before a block of any language: a file the reader writes, at `PATH`
//!   relative to the directory the doc's commands run in (docs/writing-a-plugin.md's
//!   `Cargo.toml`, `src/lib.rs`, `tests/conformance.rs` and `chain.toml`).
//!
//! [`scratch`] lays out what a reader has: `tamp/`, a copy of the repository's README, docs and
//! examples, whose `target` is this build's target directory and whose crates are the
//! repository's own (symlinks); and beside it `my-strategy/`, the plugin crate that
//! docs/writing-a-plugin.md has a reader make beside the clone, written from its file blocks.
//! Both live under `target/docs-blocks/`, made once per test process; the plugin crate's own
//! `target/` is kept between runs, so its dependencies are built once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::{artifact_dir, workspace_root};

/// What a marker says of the block after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marked {
    /// `<!-- runnable -->`: run it.
    Run,
    /// `<!-- file: PATH -->`: write it to `PATH`.
    File(String),
}

/// One marked fenced block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The line of the block's opening fence (1-based).
    pub line: usize,
    pub marked: Marked,
    /// The fence's language (`sh`, `toml`, `rust`, ...).
    pub lang: String,
    /// The block's lines, each ending in `\n`.
    pub text: String,
}

/// The marked blocks of a Markdown text, in order. A marker not followed by a fence, or a
/// `runnable` marker before a block that is not `sh`, panics: it is a mistake in the doc.
pub fn marked_blocks(doc: &str) -> Vec<Block> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut blocks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(marker) = line
            .trim()
            .strip_prefix("<!--")
            .and_then(|l| l.strip_suffix("-->"))
            .map(str::trim)
        else {
            continue;
        };
        let marked = if marker == "runnable" {
            Marked::Run
        } else if let Some(path) = marker.strip_prefix("file:") {
            Marked::File(path.trim().to_string())
        } else {
            continue;
        };
        let fence = lines.get(i + 1).copied().unwrap_or("");
        let lang = fence
            .strip_prefix("```")
            .unwrap_or_else(|| panic!("line {}: {line} is not followed by a fence", i + 1))
            .trim()
            .to_string();
        assert!(
            marked != Marked::Run || lang == "sh",
            "line {}: a runnable block must be a fenced sh block, not {fence}",
            i + 2
        );
        let body: Vec<&str> = lines[i + 2..]
            .iter()
            .take_while(|l| l.trim_end() != "```")
            .copied()
            .collect();
        assert!(
            i + 2 + body.len() < lines.len(),
            "line {}: the block never ends",
            i + 2
        );
        blocks.push(Block {
            line: i + 2,
            marked,
            lang,
            text: body.iter().map(|l| format!("{l}\n")).collect(),
        });
    }
    blocks
}

/// The marked blocks of a file of the repository (`docs/eval.md`).
pub fn marked_blocks_of(doc: &str) -> Vec<Block> {
    let path = workspace_root().join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    marked_blocks(&text)
}

/// Runs a runnable block's `script` in `dir` as a reader's shell would (`bash -euo pipefail`),
/// the built `tamp` first on `PATH`. One substitution, and only that: `target/release`
/// becomes `target/debug`, since the tests build debug binaries where the README builds
/// release ones. The environment adds `CARGO_NET_OFFLINE=true` (the guide plugin's
/// dependencies are those of tamp's `Cargo.lock`, already fetched) and removes
/// `CARGO_TARGET_DIR`, so that a plugin builds into its own `target/` as a reader's does.
pub fn run(script: &str, dir: &Path) -> Output {
    let script = script.replace("target/release", "target/debug");
    let path = format!(
        "{}:{}",
        artifact_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TERM_COLOR", "never")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("TAMP_LOG")
        .output()
        .expect("run bash")
}

/// The fenced block of `lang` that comes first after line `line` (1-based) of `doc`.
pub fn block_after(doc: &str, line: usize, lang: &str) -> String {
    let fence = format!("```{lang}");
    let mut lines = doc.lines().skip(line);
    // Past the end of the block that opens at `line`.
    lines.by_ref().find(|l| l.trim_end() == "```");
    lines.by_ref().find(|l| l.trim_end() == fence);
    let body: Vec<&str> = lines.take_while(|l| l.trim_end() != "```").collect();
    assert!(!body.is_empty(), "no {fence} block after line {line}");
    body.iter().map(|l| format!("{l}\n")).collect()
}

/// `target/docs-blocks/`, laid out as described at the top of this module (once per process).
pub fn scratch() -> &'static Path {
    static SCRATCH: OnceLock<PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        // The binary and plugins the README's first command builds.
        crate::ensure_built();
        let root = workspace_root();
        let target = artifact_dir()
            .parent()
            .expect("the target directory")
            .to_path_buf();
        let dir = target.join("docs-blocks");
        let clone = dir.join("tamp");
        if clone.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&clone).expect("remove the last run's copy");
        }
        std::fs::create_dir_all(&clone).unwrap();
        std::fs::copy(root.join("README.md"), clone.join("README.md")).unwrap();
        for tree in ["docs", "examples"] {
            copy_tree(&root.join(tree), &clone.join(tree));
        }
        // What a plugin built against the clone reads (the workspace's manifest, for the
        // crates' inherited fields), and the binary and plugins the README built.
        for linked in [
            "Cargo.toml",
            "Cargo.lock",
            "plugin-abi",
            "plugin-api",
            "conformance",
        ] {
            std::os::unix::fs::symlink(root.join(linked), clone.join(linked)).unwrap();
        }
        std::os::unix::fs::symlink(&target, clone.join("target")).unwrap();
        let plugin = dir.join("my-strategy");
        // What the guide's commands write, so each run starts where a reader's first does.
        for written in [".tamp", "compacted.json", "conformance.xml"] {
            let path = plugin.join(written);
            if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else if path.exists() {
                std::fs::remove_file(&path).unwrap();
            }
        }
        write_guide_plugin(&plugin);
        dir
    })
}

/// The plugin crate of docs/writing-a-plugin.md (`target/docs-blocks/my-strategy`), with the
/// lock that keeps two tests from running cargo in it at once.
pub fn guide_plugin() -> (PathBuf, MutexGuard<'static, ()>) {
    static LOCK: Mutex<()> = Mutex::new(());
    let dir = scratch().join("my-strategy");
    (dir, LOCK.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Writes `text` to `path` unless it already holds exactly that (an unchanged file keeps its
/// time, so cargo does not rebuild the plugin for nothing).
pub fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The guide's file blocks, written where the reader writes them. Two things differ from a
/// reader's crate, both because this one sits under tamp's `target/`: an empty `[workspace]`
/// (else cargo takes it for a member of tamp's workspace), and tamp's `Cargo.lock`, so the
/// build needs no registry.
fn write_guide_plugin(dir: &Path) {
    let mut files = 0;
    for block in marked_blocks_of("docs/writing-a-plugin.md") {
        let Marked::File(path) = &block.marked else {
            continue;
        };
        let mut text = block.text.clone();
        if path == "Cargo.toml" {
            text.push_str("\n[workspace]\n");
        }
        write_if_changed(&dir.join(path), &text);
        files += 1;
    }
    assert!(
        files >= 3,
        "docs/writing-a-plugin.md marks {files} file block(s)"
    );
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).unwrap();
    write_if_changed(&dir.join("Cargo.lock"), &lock);
}

/// A copy of `from` at `to`, leaving out what a run leaves behind (stores, build output).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if matches!(
            name.as_ref(),
            ".tamp" | "target" | "__pycache__" | "node_modules"
        ) || name.contains(".sqlite3")
        {
            continue;
        }
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&entry.path(), &to.join(&*name));
        } else if kind.is_file() {
            std::fs::copy(entry.path(), to.join(&*name)).unwrap();
        }
    }
}
