//! Keeping a summary's list within a number of entries without losing its oldest entries.

/// Separates entries packed into one by [`pack_oldest`].
pub const PACK_SEPARATOR: &str = "; ";

/// A list kept within its bound by [`pack_oldest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed {
    /// The entries, oldest first.
    pub entries: Vec<String>,
    /// How many of the original entries were dropped because even packed they did not fit.
    pub dropped: usize,
}

/// `entries` (oldest first) in at most `max_entries`: when there are more, as few of the
/// oldest as needed are packed several to an entry (joined by [`PACK_SEPARATOR`], a packed
/// entry at most `max_entry_chars` characters), so a long session's early entries (its
/// decisions, say) stay in fewer entries instead of being dropped. Only when even packing
/// every entry leaves too many are the oldest packed entries dropped, and counted.
pub fn pack_oldest(entries: Vec<String>, max_entries: usize, max_entry_chars: usize) -> Packed {
    if entries.len() <= max_entries {
        return Packed {
            entries,
            dropped: 0,
        };
    }
    let pack = |old: &[String]| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut len = 0;
        for e in old {
            let n = e.chars().count();
            match out.last_mut() {
                Some(last) if len + PACK_SEPARATOR.len() + n <= max_entry_chars => {
                    last.push_str(PACK_SEPARATOR);
                    last.push_str(e);
                    len += PACK_SEPARATOR.len() + n;
                }
                _ => {
                    out.push(e.clone());
                    len = n;
                }
            }
        }
        out
    };
    let all = entries.len();
    // Packing one more of the oldest never adds an entry, so whether `k` packed entries are
    // enough is monotone in `k`: the fewest is found by bisection.
    let fits = |k: usize| pack(&entries[..k]).len() + all - k <= max_entries;
    if !fits(all) {
        let mut packed = pack(&entries);
        let excess = packed.len() - max_entries;
        let dropped = packed
            .drain(..excess)
            .map(|e| e.matches(PACK_SEPARATOR).count() + 1)
            .sum();
        return Packed {
            entries: packed,
            dropped,
        };
    }
    let (mut lo, mut hi) = (0, all);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let mut out = pack(&entries[..lo]);
    out.extend_from_slice(&entries[lo..]);
    Packed {
        entries: out,
        dropped: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_as_few_of_the_oldest_as_needed_and_drops_only_what_cannot_fit() {
        let short: Vec<String> = (0..60).map(|i| format!("d{i}")).collect();
        let packed = pack_oldest(short.clone(), 50, 500);
        assert_eq!((packed.entries.len(), packed.dropped), (50, 0));
        assert_eq!(
            packed.entries[0],
            "d0; d1; d2; d3; d4; d5; d6; d7; d8; d9; d10"
        );
        assert_eq!(packed.entries[1..], short[11..]);
        let same = pack_oldest(short[..50].to_vec(), 50, 500);
        assert_eq!((same.entries.as_slice(), same.dropped), (&short[..50], 0));
        // Entries too long to share one are dropped, oldest first, when they do not fit.
        let long: Vec<String> = (0..52).map(|i| format!("{i:0>400}")).collect();
        let kept = pack_oldest(long.clone(), 50, 500);
        assert_eq!((kept.entries.as_slice(), kept.dropped), (&long[2..], 2));
    }

    #[test]
    fn a_packed_entry_stays_within_its_length() {
        let entries: Vec<String> = (0..30).map(|i| format!("decision number {i}")).collect();
        let packed = pack_oldest(entries, 10, 60);
        assert_eq!(packed.dropped, 0);
        assert!(packed.entries.len() <= 10);
        assert!(packed.entries.iter().all(|e| e.chars().count() <= 60));
        let joined = packed.entries.join(PACK_SEPARATOR);
        assert!((0..30).all(|i| joined.contains(&format!("decision number {i}"))));
    }
}
