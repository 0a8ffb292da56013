//! Picking the best units within the budget, repeats and near-duplicates skipped.

use super::*;

#[derive(PartialEq)]
pub(super) struct Candidate {
    pub(super) score: f64,
    pub(super) index: usize,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.index.cmp(&self.index))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Picks units into `budget` characters, each costing its length plus a newline; returns their
/// texts in original order. A unit is written after its tag (`tags[i]`, the speaker a unit lost
/// when split from its turn; none where `tags` is shorter), which counts in its length and in
/// the repeat check; only the picked units are put together with theirs.
pub(super) fn pick(
    units: &[&str],
    tags: &[&str],
    analysis: &Analysis,
    budget: usize,
) -> Vec<String> {
    let tag = |i: usize| tags.get(i).copied().unwrap_or("");
    let lens: Vec<usize> = units
        .iter()
        .enumerate()
        .map(|(i, u)| tag(i).chars().count() + u.chars().count())
        .collect();
    let min_cost = lens.iter().map(|l| l + 1).min().unwrap_or(usize::MAX);
    let mut heap: BinaryHeap<Candidate> = analysis
        .scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Candidate { score, index })
        .collect();
    let mut penalized = vec![false; units.len()];
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    let mut window: VecDeque<usize> = VecDeque::with_capacity(DUP_WINDOW);
    let mut chosen: Vec<usize> = Vec::new();
    let mut remaining = budget;

    while remaining >= min_cost {
        let Some(Candidate { score, index }) = heap.pop() else {
            break;
        };
        let cost = lens[index] + 1;
        if cost > remaining || !analysis.pickable[index] {
            continue;
        }
        let key = normalized_hash(tag(index), units[index]);
        if seen.contains(&key) {
            continue;
        }
        if !penalized[index] {
            let sim = window
                .iter()
                .map(|&j| analysis.signatures[index].jaccard(&analysis.signatures[j]))
                .fold(0.0f64, f64::max);
            if sim >= NEAR_DUP_JACCARD {
                penalized[index] = true;
                heap.push(Candidate {
                    score: score * (1.0 - sim) * 0.5,
                    index,
                });
                continue;
            }
        }
        seen.insert(key);
        if window.len() == DUP_WINDOW {
            window.pop_front();
        }
        window.push_back(index);
        chosen.push(index);
        remaining -= cost;
    }

    if chosen.is_empty() {
        // Nothing fits whole: cut the best unit to the room left, if that room is worth it.
        if budget < 17 {
            return Vec::new();
        }
        let best = analysis
            .scores
            .iter()
            .enumerate()
            .filter(|(i, _)| analysis.pickable[*i])
            .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(&a.0)))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let whole = format!("{}{}", tag(best), units[best]);
        let mut cut = cut_chars(&whole, budget - 2).trim_end().to_string();
        cut.push('…');
        return vec![cut];
    }
    chosen.sort_unstable();
    chosen
        .into_iter()
        .map(|i| format!("{}{}", tag(i), units[i]))
        .collect()
}

/// A hash of the unit's letters, lowercased, with every run of digits that is a number as
/// one `0`: equal for repeats that differ only in case, numbers, spacing or punctuation. Digits
/// that belong to a name (`HAT268`, `D-017`, `parse_v2`: after a letter or `_`, or after a `-`
/// that follows a letter) are kept: two decisions or reservations are not repeats of each
/// other.
pub(super) fn normalized_hash(tag: &str, unit: &str) -> u64 {
    let mut h = FxHasher::default();
    let mut in_number = false;
    let mut in_name = false;
    let (mut before, mut last) = (' ', ' ');
    for c in tag.chars().chain(unit.chars()) {
        if c.is_ascii_digit() {
            if !in_number && !in_name {
                in_name =
                    last.is_alphabetic() || last == '_' || (last == '-' && before.is_alphabetic());
            }
            if in_name {
                h.write_u32(c as u32);
            } else if !in_number {
                h.write_u8(b'0');
            }
            in_number = true;
        } else {
            in_number = false;
            in_name = false;
            if c.is_ascii_alphabetic() {
                h.write_u32(c.to_ascii_lowercase() as u32);
            } else if !c.is_ascii() && c.is_alphanumeric() {
                for l in c.to_lowercase() {
                    h.write_u32(l as u32);
                }
            }
        }
        before = last;
        last = c;
    }
    h.finish()
}
