//! How long a summary should be: scaled with what it replaces, within a strategy's caps, and
//! said to the model as a length to aim for.
//!
//! A bare "at most N tokens" reads to a model as leave to be brief: a small model asked for
//! at most 500 tokens of a 9,373-token span wrote 68, and kept 3 of its 7 key facts. So the
//! prompt names a target in words (models judge words better than tokens) with the cap after
//! it, and the request's output limit leaves room above the target so an answer of about that
//! length is not cut mid-sentence.

/// The length to ask of a summary of `input_tokens` tokens: a tenth, within `min..=max`.
pub fn target(input_tokens: u64, min: u32, max: u32) -> u32 {
    let tenth = u32::try_from(input_tokens / 10).unwrap_or(u32::MAX);
    tenth.clamp(min, max.max(min))
}

/// `about M words (at most N tokens)`, for a prompt asking for `target` tokens.
pub fn phrase(target: u32) -> String {
    format!(
        "about {} words (at most {target} tokens)",
        (target.saturating_mul(3) / 4).max(1)
    )
}

/// The output limit of a request aiming at `target` tokens: half as much again.
pub fn output_cap(target: u32) -> u32 {
    target.saturating_add(target / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_a_tenth_within_the_caps() {
        assert_eq!(target(100, 50, 500), 50);
        assert_eq!(target(2_048, 50, 500), 204);
        assert_eq!(target(9_373, 50, 500), 500);
        assert_eq!(target(u64::MAX, 50, 500), 500);
        // A cap below the floor gives the floor, never a panic.
        assert_eq!(target(10_000, 300, 200), 300);
    }

    #[test]
    fn the_phrase_names_words_then_the_cap_and_the_limit_leaves_room() {
        assert_eq!(phrase(120), "about 90 words (at most 120 tokens)");
        assert_eq!(phrase(1), "about 1 words (at most 1 tokens)");
        assert_eq!(output_cap(120), 180);
        assert_eq!(output_cap(u32::MAX), u32::MAX);
    }
}
