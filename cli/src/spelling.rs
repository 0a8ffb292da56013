//! Old spellings of flags, kept for one release: each still works, with a warning that names
//! the new one. One grammar across commands: the chain file is `-c/--config`, an input's
//! format `--format`, an output's `--output-format` (or `--json`), a file written `-o/--output`.

/// Takes the value given under the old spelling, if any, with a warning; else the new one's.
pub fn prefer<T>(new: Option<T>, old: Option<T>, old_flag: &str, new_flag: &str) -> Option<T> {
    match old {
        Some(value) => {
            warn(old_flag, new_flag);
            new.or(Some(value))
        }
        None => new,
    }
}

/// Both spellings' values of a repeatable flag, with a warning when the old one was used.
pub fn merge<T>(mut new: Vec<T>, old: Vec<T>, old_flag: &str, new_flag: &str) -> Vec<T> {
    if !old.is_empty() {
        warn(old_flag, new_flag);
        new.extend(old);
    }
    new
}

/// The warning that an old spelling was used.
pub fn warn(old_flag: &str, new_flag: &str) {
    if crate::logging::quiet() {
        return;
    }
    eprintln!(
        "warning: {old_flag} is now {new_flag}; the old spelling works until the next release"
    );
}
