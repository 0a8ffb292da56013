//! The names the report gives chains and conversations: a file's name without its extensions
//! (`ponyc-4588`, `hybrid`), made unique only where two files would share it, so every row
//! says which file it ran. Within a group of files that share a name:
//!
//! 1. the file name without its last extension, when that tells them apart (the wire format
//!    of a conversation: `ponyc-4588.anthropic`, `ponyc-4588.openai`);
//! 2. else, as many of the parent directories as tell them apart, nearest first
//!    (`chains/hybrid`, `planted/hybrid`), the directories of the path made absolute;
//! 3. else (the same file given twice), a count: `hybrid#1`, `hybrid#2`.
//!
//! Every output format (text, JSON, CSV, HTML) shows these names.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// A file's name without its extensions (`ponyc-4588`).
pub fn short_name(path: &Path) -> String {
    let file = file_name(path);
    file.split('.').next().unwrap_or(file).to_string()
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("?")
}

/// A file's name without its last extension (`ponyc-4588.anthropic`).
fn without_last_extension(path: &Path) -> String {
    let file = file_name(path);
    match file.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem.to_string(),
        _ => file.to_string(),
    }
}

/// `path` made absolute (against the current directory), with `.` and `..` resolved by
/// their names (links are not followed: the directories shown are the ones given).
fn absolute(path: &Path) -> PathBuf {
    let joined = match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    };
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The names of the directories holding `path`, nearest first.
fn parents(path: &Path) -> Vec<String> {
    let absolute = absolute(path);
    let mut dirs: Vec<String> = absolute
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    dirs.reverse();
    dirs
}

fn all_distinct(names: &[String]) -> bool {
    let mut seen = std::collections::HashSet::new();
    names.iter().all(|n| seen.insert(n.as_str()))
}

/// A name for each of `paths`, in order: [`short_name`], but where two paths share it, the
/// shortest longer form that tells them apart (see the module's documentation).
pub fn unique_names(paths: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = paths.iter().map(|p| short_name(p)).collect();
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, name) in names.iter().enumerate() {
        groups.entry(name.clone()).or_default().push(i);
    }
    for (name, members) in groups {
        if members.len() < 2 {
            continue;
        }
        // 1. The last extension off, the others kept.
        let longer: Vec<String> = members
            .iter()
            .map(|&i| without_last_extension(&paths[i]))
            .collect();
        if all_distinct(&longer) {
            for (&i, n) in members.iter().zip(longer) {
                names[i] = n;
            }
            continue;
        }
        // 2. Parent directories, nearest first, as many as it takes.
        let dirs: Vec<Vec<String>> = members.iter().map(|&i| parents(&paths[i])).collect();
        let deepest = dirs.iter().map(Vec::len).max().unwrap_or(0);
        let with_parents = (1..=deepest).find_map(|depth| {
            let named: Vec<String> = dirs
                .iter()
                .zip(&longer)
                .map(|(dirs, file)| {
                    let mut parts: Vec<&str> =
                        dirs.iter().take(depth).map(String::as_str).collect();
                    parts.reverse();
                    parts.push(file);
                    parts.join("/")
                })
                .collect();
            all_distinct(&named).then_some(named)
        });
        if let Some(named) = with_parents {
            for (&i, n) in members.iter().zip(named) {
                names[i] = n;
            }
            continue;
        }
        // 3. The same file more than once: counted.
        for (n, &i) in members.iter().enumerate() {
            names[i] = format!("{name}#{}", n + 1);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(paths: &[&str]) -> Vec<String> {
        unique_names(&paths.iter().map(PathBuf::from).collect::<Vec<_>>())
    }

    #[test]
    fn names_are_file_stems_unless_two_collide() {
        assert_eq!(
            names(&[
                "examples/eval/summarize.toml",
                "examples/eval/clear-then-summarize.toml"
            ]),
            ["summarize", "clear-then-summarize"]
        );
        assert_eq!(
            names(&[
                "examples/chains/hybrid.toml",
                "examples/eval/planted/hybrid.toml",
                "examples/eval/summarize.toml",
            ]),
            ["chains/hybrid", "planted/hybrid", "summarize"]
        );
        assert_eq!(
            names(&[
                "examples/conversations/ponyc-4588.anthropic.json",
                "examples/conversations/ponyc-4588.openai.json",
                "examples/conversations/airline-task33.openai.json",
            ]),
            [
                "ponyc-4588.anthropic",
                "ponyc-4588.openai",
                "airline-task33"
            ]
        );
        // As many directories as it takes; a relative path's directories are the current
        // directory's.
        assert_eq!(
            names(&["a/x/hybrid.toml", "b/x/hybrid.toml"]),
            ["a/x/hybrid", "b/x/hybrid"]
        );
        let cwd = std::env::current_dir().unwrap();
        let here = cwd.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            names(&["hybrid.toml", "./sub/../other/hybrid.toml"]),
            [format!("{here}/hybrid"), "other/hybrid".to_string()]
        );
        // The same file twice.
        assert_eq!(
            names(&["a/hybrid.toml", "a/./hybrid.toml"]),
            ["hybrid#1", "hybrid#2"]
        );
    }
}
