//! What a conversation costs the main model it is sent to, when that model's provider caches
//! prompt prefixes: the measure of what compaction is for, beside what it costs the
//! summarizer. Each request's unchanged message prefix of the previous request is read from
//! the cache, the rest written to it (every request is taken to come within the cache's
//! lifetime), each at its price in input prices ([`CachePrices`]): Anthropic's by default.

pub use crate::prices::CachePrices;

/// The running cost of a thread's requests, compacted and as posted, side by side.
#[derive(Debug, Default, Clone, Copy)]
pub struct MainModelCost {
    prices: CachePrices,
    compacted: f64,
    posted: f64,
    last_posted: u64,
}

impl MainModelCost {
    /// A thread priced at `prices`.
    pub fn new(prices: CachePrices) -> Self {
        MainModelCost {
            prices,
            ..MainModelCost::default()
        }
    }

    /// One request: the compacted context of `compacted_total` tokens, of which
    /// `compacted_cached` are an unchanged prefix of the previous answer's; and the history
    /// the client posted, `posted_total` tokens, which extends the previous posting (its
    /// whole previous posting is cached).
    pub fn add(&mut self, compacted_cached: u64, compacted_total: u64, posted_total: u64) {
        self.compacted += self.prices.request_cost(compacted_cached, compacted_total);
        self.posted += self.prices.request_cost(self.last_posted, posted_total);
        self.last_posted = posted_total;
    }

    /// The compacted thread's cost ÷ the uncompacted one's; `None` before any request.
    pub fn ratio(&self) -> Option<f64> {
        (self.posted > 0.0).then(|| self.compacted / self.posted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_sent_as_posted_costs_what_it_costs_uncompacted() {
        let mut cost = MainModelCost::default();
        assert_eq!(cost.ratio(), None);
        for (i, posted) in [1_000, 1_500, 2_600].into_iter().enumerate() {
            let previous = [0, 1_000, 1_500][i];
            cost.add(previous, posted, posted);
        }
        assert_eq!(cost.ratio(), Some(1.0));
    }

    #[test]
    fn a_compaction_costs_a_write_of_what_follows_the_first_changed_message() {
        // Posted: 4,000 then 6,000 tokens. Compacted: the second request kept 500 tokens of
        // prefix and rewrote 1,500 after them.
        let mut cost = MainModelCost::default();
        cost.add(0, 4_000, 4_000);
        cost.add(500, 2_000, 6_000);
        let compacted = 1.25 * 4_000.0 + (0.1 * 500.0 + 1.25 * 1_500.0);
        let posted = 1.25 * 4_000.0 + (0.1 * 4_000.0 + 1.25 * 2_000.0);
        let ratio = cost.ratio().unwrap();
        assert!((ratio - compacted / posted).abs() < 1e-12, "{ratio}");
        assert!(ratio < 1.0);
    }

    #[test]
    fn a_provider_that_charges_nothing_to_write_makes_a_compaction_cheaper() {
        // The same thread as above, priced as OpenAI prices a model that halves cached input.
        let openai: CachePrices = "0.5, 1".parse().unwrap();
        assert_eq!(
            openai,
            CachePrices {
                read: 0.5,
                write: 1.0
            }
        );
        let (mut anthropic_cost, mut openai_cost) =
            (MainModelCost::default(), MainModelCost::new(openai));
        for cost in [&mut anthropic_cost, &mut openai_cost] {
            cost.add(0, 4_000, 4_000);
            cost.add(500, 2_000, 6_000);
        }
        let compacted = 4_000.0 + (0.5 * 500.0 + 1_500.0);
        let posted = 4_000.0 + (0.5 * 4_000.0 + 2_000.0);
        assert!((openai_cost.ratio().unwrap() - compacted / posted).abs() < 1e-12);
        assert_ne!(openai_cost.ratio(), anthropic_cost.ratio());
    }
}
