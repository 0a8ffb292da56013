//! What a conversation costs the main model it is sent to, when that model's provider caches
//! prompt prefixes: the measure of what compaction is for, beside what it costs the
//! summarizer. Each request's unchanged message prefix of the previous request is read from
//! the cache, the rest written to it (every request is taken to come within the cache's
//! lifetime), each at its price in input prices ([`CachePrices`]): Anthropic's by default.

use serde::Serialize;

/// What a cache read and a cache write cost, each as a multiple of the model's input price.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CachePrices {
    pub read: f64,
    pub write: f64,
}

impl CachePrices {
    /// Anthropic's prompt caching with the 5-minute cache: reads at 0.1, writes at 1.25.
    pub const ANTHROPIC: CachePrices = CachePrices {
        read: 0.1,
        write: 1.25,
    };

    /// A request of `total` tokens whose first `cached` the previous request sent unchanged,
    /// in input-token prices.
    pub fn request_cost(&self, cached: u64, total: u64) -> f64 {
        self.read * cached.min(total) as f64 + self.write * total.saturating_sub(cached) as f64
    }
}

impl Default for CachePrices {
    fn default() -> Self {
        CachePrices::ANTHROPIC
    }
}

/// As `--cache-prices` takes them: `READ,WRITE`.
impl std::fmt::Display for CachePrices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.read, self.write)
    }
}

impl std::str::FromStr for CachePrices {
    type Err = String;

    /// `READ,WRITE`, e.g. `0.1,1.25` (Anthropic) or `0.5,1` (OpenAI's automatic caching on a
    /// model that halves cached input and charges nothing to write).
    fn from_str(text: &str) -> Result<Self, String> {
        let Some((read, write)) = text.split_once(',') else {
            return Err(format!(
                "\"{text}\": give the read price and the write price, as multiples of the \
                 input price, separated by a comma (e.g. 0.1,1.25)"
            ));
        };
        let price = |what: &str, value: &str| -> Result<f64, String> {
            let value = value.trim();
            let number = value.parse::<f64>().map_err(|_| {
                format!("the {what} price \"{value}\" is not a number of input prices")
            })?;
            crate::bounded::scale(number, 0.0..=100.0)
                .map_err(|e| format!("the {what} price \"{value}\" (in input prices) {e}"))
        };
        let prices = CachePrices {
            read: price("read", read)?,
            write: price("write", write)?,
        };
        if prices.write == 0.0 {
            return Err("the write price is 0: every request would cost nothing".into());
        }
        Ok(prices)
    }
}

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
    fn a_prefix_longer_than_the_request_is_read_once() {
        assert_eq!(CachePrices::ANTHROPIC.request_cost(5_000, 1_000), 100.0);
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

    #[test]
    fn prices_read_back_as_they_are_written() {
        let anthropic = CachePrices::ANTHROPIC.to_string();
        assert_eq!(anthropic, "0.1,1.25");
        assert_eq!(anthropic.parse::<CachePrices>(), Ok(CachePrices::ANTHROPIC));
    }

    #[test]
    fn prices_that_are_not_two_numbers_are_refused_naming_the_one_at_fault() {
        for (bad, says) in [
            ("0.1", "separated by a comma"),
            ("x,1.25", "the read price \"x\""),
            ("0.1,-1", "the write price \"-1\""),
            ("0.1,NaN", "the write price \"NaN\""),
            (
                "1e300,1.25",
                "the read price \"1e300\" (in input prices) must be a number from 0 to 100",
            ),
            ("0.1,0", "the write price is 0"),
        ] {
            let error = bad.parse::<CachePrices>().unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
