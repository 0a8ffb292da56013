//! Files tamp reads whole (a chain file, a conversation, a facts file, recorded answers, a
//! script, a stage's JSON config): opened without waiting, refused unless they are regular
//! files, and read up to a bound the error names. A leaf.
//!
//! A plain `read_to_string` of whatever a path names blocks for ever in `open` on a FIFO (a
//! reload of `tamp serve` then never ends, and holds the reloader), and reads a device such
//! as `/dev/zero` until memory runs out. So a path is opened with `O_NONBLOCK` (which a
//! regular file's reads ignore), what was opened is looked at through its descriptor (no
//! window for a swap between the look and the read), and only a regular file is read, at most
//! its bound. Standard input, where a command documents `-`, is read up to the same bound.

use std::io::Read as _;
use std::path::Path;

/// The most a file of settings is read to (a chain file, a facts file, a script, a stage's
/// JSON config): thousands of times a real one (a chain of 10,000 stages is under 1 MiB).
pub const MAX_SETTINGS_BYTES: u64 = 16 << 20;

/// The most a conversation (or a file of recorded answers) is read to: four times the
/// largest request body `tamp proxy` takes by default.
pub const MAX_CONVERSATION_BYTES: u64 = 256 << 20;

/// A bound, and what it is the bound of, for the error (`a chain file`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub what: &'static str,
}

impl Limit {
    pub const CHAIN_FILE: Limit = Limit {
        bytes: MAX_SETTINGS_BYTES,
        what: "a chain file",
    };
    pub const SETTINGS: Limit = Limit {
        bytes: MAX_SETTINGS_BYTES,
        what: "a file of settings",
    };
    pub const CONVERSATION: Limit = Limit {
        bytes: MAX_CONVERSATION_BYTES,
        what: "a conversation",
    };
    pub const RECORDING: Limit = Limit {
        bytes: MAX_CONVERSATION_BYTES,
        what: "a file of recorded answers",
    };
}

/// Why a file was not read. Its text names no path: the caller says which file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(std::io::Error),
    /// A directory, a device, a FIFO, a socket.
    #[error("it is {0}, not a regular file")]
    NotAFile(&'static str),
    /// Larger than its bound: `size` when known before reading (standard input has none).
    #[error("{}", too_large(*.size, *.limit))]
    TooLarge { size: Option<u64>, limit: Limit },
}

impl ReadError {
    /// Whether the path names nothing.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

fn too_large(size: Option<u64>, limit: Limit) -> String {
    let has = match size {
        Some(n) => format!("it has {n} bytes"),
        None => "it goes on".to_owned(),
    };
    format!(
        "{has}, more than the {} {} may have; not read further",
        size_text(limit.bytes),
        limit.what
    )
}

/// `16 MiB`, `256 MiB`, `512 KiB`, `100 bytes`.
pub fn size_text(bytes: u64) -> String {
    match bytes {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// The bytes of the regular file at `path` (symlinks followed), at most `limit.bytes`.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let file = open_without_waiting(path).map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if let Some(kind) = not_a_file_kind(&meta.file_type()) {
        return Err(ReadError::NotAFile(kind));
    }
    if meta.len() > limit.bytes {
        return Err(ReadError::TooLarge {
            size: Some(meta.len()),
            limit,
        });
    }
    // The file may grow while it is read: the bound holds all the same.
    bounded(file, limit, meta.len())
}

/// [`read`], as UTF-8 text (invalid UTF-8 is an I/O error of kind `InvalidData`).
pub fn read_to_string(path: &Path, limit: Limit) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit)?).map_err(|e| {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "invalid UTF-8 at byte offset {}",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}

/// Standard input to its end, at most `limit.bytes`.
pub fn read_stdin(limit: Limit) -> Result<Vec<u8>, ReadError> {
    bounded(std::io::stdin().lock(), limit, 0)
}

fn bounded(reader: impl std::io::Read, limit: Limit, expected: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    reader
        .take(limit.bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(ReadError::TooLarge { size: None, limit });
    }
    Ok(bytes)
}

/// Opens `path` for reading without waiting: a FIFO with no writer opens at once instead of
/// blocking, and a terminal does not become the process's.
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    options.open(path)
}

/// What a file type is, in words, when it is not a regular file.
pub fn not_a_file_kind(file_type: &std::fs::FileType) -> Option<&'static str> {
    if file_type.is_file() {
        return None;
    }
    if file_type.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if file_type.is_char_device() {
            return Some("a character device");
        }
        if file_type.is_block_device() {
            return Some("a block device");
        }
        if file_type.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if file_type.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_read_and_only_up_to_its_bound() {
        let dir = crate::scratch::dir("input-file");
        let file = dir.join("chain.toml");
        std::fs::write(&file, "x = 1\n").unwrap();
        assert_eq!(read_to_string(&file, Limit::CHAIN_FILE).unwrap(), "x = 1\n");

        let small = Limit {
            bytes: 4,
            what: "a test file",
        };
        let e = read(&file, small).unwrap_err().to_string();
        assert_eq!(
            e,
            "it has 6 bytes, more than the 4 bytes a test file may have; not read further"
        );

        // A FIFO with no writer: refused at once, never waited on.
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let started = std::time::Instant::now();
        let e = read(&fifo, Limit::CHAIN_FILE).unwrap_err().to_string();
        assert_eq!(e, "it is a FIFO (named pipe), not a regular file");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));

        // A device behind a symlink: what the link leads to is looked at, never read.
        let link = dir.join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read(&link, Limit::CHAIN_FILE).unwrap_err().to_string();
        assert_eq!(e, "it is a character device, not a regular file");
        let e = read(&dir, Limit::CHAIN_FILE).unwrap_err().to_string();
        assert_eq!(e, "it is a directory, not a regular file");

        let missing = read(&dir.join("missing"), Limit::CHAIN_FILE).unwrap_err();
        assert!(missing.is_not_found(), "{missing}");

        std::fs::write(&file, b"ok \xff").unwrap();
        let e = read_to_string(&file, Limit::CHAIN_FILE)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "invalid UTF-8 at byte offset 3");
    }

    #[test]
    fn a_reader_that_goes_on_is_cut_at_the_bound() {
        let limit = Limit {
            bytes: 1 << 20,
            what: "a conversation",
        };
        let e = bounded(std::io::repeat(0), limit, 0)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "it goes on, more than the 1 MiB a conversation may have; not read further"
        );
        assert_eq!(size_text(MAX_CONVERSATION_BYTES), "256 MiB");
        assert_eq!(size_text(1536), "1536 bytes");
    }
}
