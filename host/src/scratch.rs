//! Scratch directories for unit tests: one per test (the tag, the process and the thread name
//! it), emptied first, so reruns and parallel tests never see each other's files.

use std::path::PathBuf;

/// A fresh, empty directory under the system's temp dir, named after `tag`.
pub fn dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tamp-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}
