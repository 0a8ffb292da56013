//! Scoring units: term weights, features (paths, identifiers, numbers, errors) and sources,
//! and the signatures of the near-duplicate check.

use super::*;

pub(super) struct Analysis {
    /// A signature of each unit's distinct content terms, for the near-duplicate check.
    pub(super) signatures: Vec<Signature>,
    pub(super) scores: Vec<f64>,
    /// Whether a unit may be picked at all (an earlier summary's `Mentions:` line may not:
    /// it is only read for its mentions).
    pub(super) pickable: Vec<bool>,
    pub(super) mentions: Mentions,
}

/// A 256-bit set of a unit's content terms (one bit per term, by hash) and how many terms it
/// has: Jaccard overlap is estimated with popcounts, so the duplicate check is a few word
/// operations per pair whatever the units' lengths.
#[derive(Clone, Copy, Default)]
pub(super) struct Signature {
    pub(super) bits: [u64; 4],
    pub(super) terms: u32,
}

impl Signature {
    pub(super) fn of(ids: &[u32]) -> Self {
        let mut bits = [0u64; 4];
        for &id in ids {
            let h = id.wrapping_mul(0x9E37_79B1) >> 24; // 0..256
            bits[(h >> 6) as usize] |= 1 << (h & 63);
        }
        Signature {
            bits,
            terms: ids.len() as u32,
        }
    }

    /// Estimated Jaccard overlap; 0 when either unit has fewer than 3 terms.
    pub(super) fn jaccard(&self, other: &Signature) -> f64 {
        if self.terms < 3 || other.terms < 3 {
            return 0.0;
        }
        let (mut and, mut or) = (0u32, 0u32);
        for k in 0..4 {
            and += (self.bits[k] & other.bits[k]).count_ones();
            or += (self.bits[k] | other.bits[k]).count_ones();
        }
        if or == 0 {
            0.0
        } else {
            and as f64 / or as f64
        }
    }
}

#[derive(Default)]
pub(super) struct Features {
    pub(super) paths: usize,
    pub(super) identifiers: usize,
    pub(super) numbers: usize,
    pub(super) error: bool,
}

#[derive(Clone, Copy)]
pub(super) struct TermInfo {
    pub(super) tf: u32,
    pub(super) df: u32,
    pub(super) stop: bool,
    pub(super) error: bool,
}

pub(super) fn analyze(units: &[&str], sources: &[Source]) -> Analysis {
    let mut ids: FxHashMap<String, u32> = FxHashMap::default();
    let mut info: Vec<TermInfo> = Vec::new();
    // Distinct content-term ids of every unit, one after the other; `spans[i]` is unit i's.
    let mut flat: Vec<u32> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(units.len());
    let mut features: Vec<Features> = Vec::with_capacity(units.len());
    let mut mentions = Mentions::default();
    let mut buf = String::new();

    for (index, unit) in units.iter().enumerate() {
        let start = flat.len();
        let mut error = false;
        for word in unit.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.is_empty() || word.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
                continue;
            }
            buf.clear();
            if word.is_ascii() {
                buf.push_str(word);
                buf.make_ascii_lowercase();
            } else {
                for c in word.chars() {
                    buf.extend(c.to_lowercase());
                }
            }
            let id = match ids.get(buf.as_str()) {
                Some(&id) => id,
                None => {
                    let id = info.len() as u32;
                    info.push(TermInfo {
                        tf: 0,
                        df: 0,
                        stop: buf.chars().nth(1).is_none() || is_stop_word(&buf),
                        error: is_error_word(&buf),
                    });
                    ids.insert(buf.clone(), id);
                    id
                }
            };
            let t = &mut info[id as usize];
            t.tf += 1;
            error |= t.error;
            if !t.stop {
                flat.push(id);
            }
        }
        flat[start..].sort_unstable();
        let mut write = start;
        for read in start..flat.len() {
            if read == start || flat[read] != flat[write - 1] {
                flat[write] = flat[read];
                write += 1;
            }
        }
        flat.truncate(write);
        for &id in &flat[start..] {
            info[id as usize].df += 1;
        }
        spans.push((start, flat.len()));
        let mut f = mentions.scan(unit, index as u32);
        f.error = error;
        features.push(f);
    }

    let n = units.len() as f64;
    let weight: Vec<f64> = info
        .iter()
        .map(|t| {
            if t.stop || t.df == 0 {
                0.0
            } else {
                (1.0 + t.tf as f64).ln() * ((n + 1.0) / (t.df as f64 + 0.5)).ln()
            }
        })
        .collect();
    let base: Vec<f64> = spans
        .iter()
        .map(|&(a, b)| {
            if a == b {
                0.0
            } else {
                flat[a..b]
                    .iter()
                    .map(|&id| weight[id as usize])
                    .sum::<f64>()
                    / ((b - a).max(4) as f64).sqrt()
            }
        })
        .collect();
    let max_base = base.iter().copied().fold(0.0f64, f64::max);
    let last = units.len() - 1;
    let scores = base
        .iter()
        .zip(&features)
        .enumerate()
        .map(|(i, (&b, f))| {
            let mut s = if max_base > 0.0 { b / max_base } else { 0.0 };
            s += match f.paths {
                0 => 0.0,
                1 => 0.3,
                _ => 0.4,
            };
            s += (0.1 * f.identifiers as f64).min(0.3);
            s += (0.05 * f.numbers as f64).min(0.15);
            if f.error {
                s += 0.35;
            }
            if i == 0 || i == last {
                s += 0.15;
            }
            s += sources.get(i).map_or(0.0, |src| src.bonus(units[i]));
            if is_numbered_code(units[i]) {
                s -= 0.5;
            }
            s
        })
        .collect();
    let signatures = spans
        .iter()
        .map(|&(a, b)| Signature::of(&flat[a..b]))
        .collect();
    let pickable = (0..units.len())
        .map(|i| sources.get(i) != Some(&Source::Mentions))
        .collect();
    Analysis {
        signatures,
        scores,
        pickable,
        mentions,
    }
}

pub(super) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

pub(super) fn is_error_word(word: &str) -> bool {
    matches!(
        word,
        "error"
            | "errors"
            | "err"
            | "failed"
            | "fails"
            | "failure"
            | "failures"
            | "exception"
            | "exceptions"
            | "traceback"
            | "panic"
            | "panicked"
            | "fatal"
            | "crash"
            | "crashed"
            | "segfault"
            | "aborted"
            | "timeout"
            | "denied"
            | "refused"
            | "errno"
            | "stacktrace"
    )
}
