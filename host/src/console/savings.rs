//! What compaction saved a thread, and all threads: the main model's cost of what was
//! forwarded against what the history as the agent sent it would have cost, each with prompt
//! caching (a request's unchanged prefix of the previous one read from the cache, the rest
//! written: [`CachePrices`], as `tamp eval` reckons it), and beside it what the summarizer's
//! own calls cost. In input-token prices always, and in US dollars where `[console.prices]`
//! prices the thread's model.

use serde::Serialize;

use crate::config::console::ConsoleConfig;
use crate::prices::CachePrices;
use crate::store::activity::ThreadTotals;

/// One thread's savings, or all threads'.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Savings {
    /// Tokens the agent sent, and tokens forwarded, over the requests that were counted.
    pub tokens_sent: u64,
    pub tokens_forwarded: u64,
    /// The main model's cost in input-token prices: of what was forwarded, and of the
    /// history as sent.
    pub cost_forwarded: f64,
    pub cost_uncompacted: f64,
    /// The same in US dollars, when the thread's model is priced (for all threads: over the
    /// priced ones).
    pub usd_forwarded: Option<f64>,
    pub usd_uncompacted: Option<f64>,
    /// The summarizer's calls: tokens, and their cost where `[provider.price]` prices them.
    pub summarizer_input_tokens: u64,
    pub summarizer_output_tokens: u64,
    pub summarizer_usd: f64,
    /// Dollars saved: uncompacted less forwarded less the summarizer, where priced.
    pub usd_saved: Option<f64>,
    /// The cache prices the thread was reckoned at.
    pub cache: Option<CachePrices>,
}

impl Savings {
    /// A thread's savings at the prices `config` gives its model.
    pub fn of(thread: &ThreadTotals, config: &ConsoleConfig) -> Savings {
        let price = config.price_of(thread.model.as_deref());
        let cache = price.map_or(CachePrices::ANTHROPIC, |p| p.cache);
        let cost_forwarded = cache.request_cost(thread.out_cached, thread.tokens_out);
        let cost_uncompacted = cache.request_cost(thread.in_cached, thread.tokens_in);
        let summarizer_usd = thread.llm_cost_micro_usd as f64 / 1e6;
        let usd = |cost: f64| price.map(|p| cost * p.input_per_mtok / 1e6);
        let (usd_forwarded, usd_uncompacted) = (usd(cost_forwarded), usd(cost_uncompacted));
        Savings {
            tokens_sent: thread.tokens_in,
            tokens_forwarded: thread.tokens_out,
            cost_forwarded,
            cost_uncompacted,
            usd_forwarded,
            usd_uncompacted,
            summarizer_input_tokens: thread.llm_input_tokens,
            summarizer_output_tokens: thread.llm_output_tokens,
            summarizer_usd,
            usd_saved: usd_uncompacted
                .zip(usd_forwarded)
                .map(|(before, after)| before - after - summarizer_usd),
            cache: Some(cache),
        }
    }

    /// The sum of `each`: tokens and input-token prices over all, dollars over the priced.
    pub fn total<'a>(each: impl IntoIterator<Item = &'a Savings>) -> Savings {
        let mut total = Savings::default();
        let add = |sum: &mut Option<f64>, value: Option<f64>| {
            if let Some(v) = value {
                *sum = Some(sum.unwrap_or(0.0) + v);
            }
        };
        for s in each {
            total.tokens_sent += s.tokens_sent;
            total.tokens_forwarded += s.tokens_forwarded;
            total.cost_forwarded += s.cost_forwarded;
            total.cost_uncompacted += s.cost_uncompacted;
            add(&mut total.usd_forwarded, s.usd_forwarded);
            add(&mut total.usd_uncompacted, s.usd_uncompacted);
            add(&mut total.usd_saved, s.usd_saved);
            total.summarizer_input_tokens += s.summarizer_input_tokens;
            total.summarizer_output_tokens += s.summarizer_output_tokens;
            total.summarizer_usd += s.summarizer_usd;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(model: &str) -> ThreadTotals {
        ThreadTotals {
            thread: "t".into(),
            model: Some(model.into()),
            tokens_in: 20_000,
            in_cached: 12_000,
            tokens_out: 9_000,
            out_cached: 4_000,
            llm_cost_micro_usd: 2_000,
            ..ThreadTotals::default()
        }
    }

    #[test]
    fn a_priced_thread_is_reckoned_with_its_cache_prices_and_its_summarizer() {
        let config: ConsoleConfig =
            toml::from_str("[prices]\n\"claude-*\" = { input_per_mtok = 3.0 }").unwrap();
        let s = Savings::of(&thread("claude-opus-5-5"), &config);
        let uncompacted = 0.1 * 12_000.0 + 1.25 * 8_000.0;
        let forwarded = 0.1 * 4_000.0 + 1.25 * 5_000.0;
        assert!((s.cost_uncompacted - uncompacted).abs() < 1e-9);
        assert!((s.cost_forwarded - forwarded).abs() < 1e-9);
        let saved = (uncompacted - forwarded) * 3.0 / 1e6 - 0.002;
        assert!((s.usd_saved.unwrap() - saved).abs() < 1e-12, "{s:?}");

        // Unpriced: input-token prices only.
        let other = Savings::of(&thread("qwen3"), &config);
        assert_eq!((other.usd_forwarded, other.usd_saved), (None, None));
        let total = Savings::total([&s, &other]);
        assert_eq!(total.tokens_sent, 40_000);
        assert_eq!(total.usd_saved, s.usd_saved);
        assert!((total.summarizer_usd - 0.004).abs() < 1e-12);
    }
}
