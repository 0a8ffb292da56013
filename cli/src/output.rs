//! A file a command writes its result to (`compact --output`/`--report-json`, `eval --out`),
//! checked before the work: a path that cannot be written is refused before a page is
//! archived, an LLM called or an evaluation run for hours. A failed run leaves a file that was
//! there as it was, and removes one it made.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

pub struct OutputFile {
    path: PathBuf,
    /// The flag that named it, for errors (`--out`).
    flag: &'static str,
    /// Opened by the check; `None` for a device or a pipe (`/dev/stdout`), opened when
    /// written (opening a pipe with no reader yet would wait).
    file: Option<std::fs::File>,
    /// Made by the check and not written yet: removed when dropped.
    unwritten_new: bool,
}

impl OutputFile {
    /// Checks that `path` can be written (its directory exists; it is not a directory) and
    /// opens it without emptying it; the error names `flag` and the path.
    pub fn open(path: &Path, flag: &'static str) -> Result<OutputFile> {
        let error = |why: String| anyhow::anyhow!("{flag} {}: cannot write: {why}", path.display());
        let opened = |file, unwritten_new| OutputFile {
            path: path.to_path_buf(),
            flag,
            file,
            unwritten_new,
        };
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => Err(error("is a directory, not a file".into())),
            Ok(meta) if meta.is_file() => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| error(e.to_string()))?;
                Ok(opened(Some(file), false))
            }
            Ok(_) => Ok(opened(None, false)),
            Err(_) => {
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                match std::fs::metadata(parent) {
                    Ok(meta) if !meta.is_dir() => {
                        return Err(error(format!("{} is not a directory", parent.display())))
                    }
                    Err(_) => {
                        return Err(error(format!(
                            "the directory {} does not exist",
                            parent.display()
                        )))
                    }
                    Ok(_) => {}
                }
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|e| error(e.to_string()))?;
                Ok(opened(Some(file), true))
            }
        }
    }

    /// Writes `text` in place of what the file held.
    pub fn write(mut self, text: &str) -> Result<()> {
        let context = || format!("{} {}: cannot write", self.flag, self.path.display());
        let mut file = match self.file.take() {
            Some(file) => {
                file.set_len(0).with_context(context)?;
                file
            }
            None => std::fs::OpenOptions::new()
                .write(true)
                .open(&self.path)
                .with_context(context)?,
        };
        file.write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .with_context(context)?;
        self.unwritten_new = false;
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.unwritten_new {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
