//! One definition of the statistics the benches print, so that a p99 means the same in every
//! bench's table.

/// The median of `values` (the upper one of an even count), in any order; NaN sorts last.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `p`th percentile (0 to 100) of `sorted`, by nearest rank: the smallest value with at
/// least `p`% of the values at or below it. An empty slice gives the type's zero.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nearest_rank_percentiles_and_the_upper_median() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&values, 100.0), 100.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
        assert_eq!(percentile(&values[..3], 50.0), 2.0);
        assert_eq!(percentile::<Duration>(&[], 99.0), Duration::ZERO);
        assert_eq!(median(vec![3.0, 1.0, 2.0, 4.0]), 3.0);
        assert_eq!(median(vec![2.0, f64::NAN, 1.0]), 2.0);
    }
}
