//! Numbers read from outside (a chain file, a flag, a provider's answer), range-checked
//! before they are used: durations into [`Duration`], and the numbers that scale a count
//! ([`scale`]: characters per token, prices, price factors). `Duration::from_secs_f64` panics
//! on what it cannot hold (`inf`, `1e20`, NaN, a negative number), and a count divided by
//! `1e-300` wraps when it is cast back to an integer; a chain file saying `timeout_secs =
//! inf` or `chars_per_token:1e-300` must be an error naming the field and the range, never a
//! backtrace or a count of 0.

use std::ops::RangeInclusive;
use std::time::Duration;

/// The longest wait any setting may ask for: 30 days. Nothing tamp does waits that long
/// (the longest default is the batch timeout, one day); a longer value is a typo.
pub const MAX_SECONDS: f64 = 30.0 * 86_400.0;

/// `secs` as a duration when it is a positive number of seconds of at most [`MAX_SECONDS`];
/// otherwise the message a field error carries.
pub fn positive_seconds(secs: f64) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(secs) {
        // Not zero once rounded to nanoseconds: a timer of 0 would fire at once, and a tokio
        // interval of 0 panics.
        Ok(d) if secs <= MAX_SECONDS && !d.is_zero() => Ok(d),
        _ => Err(format!(
            "must be a positive number of seconds (at least 1 ns), at most {MAX_SECONDS} \
             (30 days), got {secs:?}"
        )),
    }
}

/// [`positive_seconds`], 0 allowed (a grace period that may be none).
pub fn seconds_or_zero(secs: f64) -> Result<Duration, String> {
    if secs == 0.0 {
        return Ok(Duration::ZERO);
    }
    positive_seconds(secs).map_err(|_| {
        format!("must be 0 or a positive number of seconds, at most {MAX_SECONDS} (30 days), got {secs:?}")
    })
}

/// A duration for a value checked earlier (or one that need not be exact, like a server's
/// `retry-after`): clamped into `0..=MAX_SECONDS`, NaN as 0. Never panics.
pub fn saturating_seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.clamp(0.0, MAX_SECONDS)).unwrap_or(Duration::ZERO)
}

/// `value` when it lies in `range` (NaN never does); otherwise the message a field error
/// carries, naming the range. For the numbers that scale a count: each range is far wider
/// than any real value and narrow enough that what it scales stays a count.
pub fn scale(value: f64, range: RangeInclusive<f64>) -> Result<f64, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "must be a number from {} to {}, got {value:?}",
            range.start(),
            range.end()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_outside_its_range_is_an_error_naming_the_range() {
        assert_eq!(scale(4.0, 0.01..=1000.0), Ok(4.0));
        assert_eq!(scale(0.01, 0.01..=1000.0), Ok(0.01));
        for bad in [1e-300, 0.0, -1.0, 1e300, f64::NAN, f64::INFINITY] {
            let e = scale(bad, 0.01..=1000.0).unwrap_err();
            assert!(
                e.starts_with("must be a number from 0.01 to 1000, got "),
                "{e}"
            );
        }
        assert_eq!(
            scale(1e-300, 0.01..=1000.0).unwrap_err(),
            "must be a number from 0.01 to 1000, got 1e-300"
        );
    }

    #[test]
    fn what_a_duration_cannot_hold_is_an_error_or_clamped_never_a_panic() {
        assert_eq!(positive_seconds(1.5), Ok(Duration::from_millis(1500)));
        assert_eq!(
            positive_seconds(MAX_SECONDS),
            Ok(Duration::from_secs(30 * 86_400))
        );
        for bad in [
            0.0,
            -0.0,
            -1.0,
            1e-300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e20,
            1e300,
        ] {
            let e = positive_seconds(bad).unwrap_err();
            assert!(e.contains("at most 2592000 (30 days)"), "{bad}: {e}");
        }
        assert_eq!(seconds_or_zero(0.0), Ok(Duration::ZERO));
        assert!(seconds_or_zero(-1.0)
            .unwrap_err()
            .contains("0 or a positive"));
        assert_eq!(
            saturating_seconds(f64::INFINITY),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(saturating_seconds(f64::NAN), Duration::ZERO);
        assert_eq!(saturating_seconds(-5.0), Duration::ZERO);
        assert_eq!(saturating_seconds(2.0), Duration::from_secs(2));
    }
}
