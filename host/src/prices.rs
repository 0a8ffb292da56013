//! What a cache read and a cache write cost, as multiples of a model's input price: `tamp
//! eval`'s main-model cost and the console's savings read them alike. A leaf, so that the
//! chain file's `[console]` table can name them.

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

/// In a chain file (`[console.prices]`), as `--cache-prices` takes them: `"0.1,1.25"`.
impl<'de> serde::Deserialize<'de> for CachePrices {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_longer_than_the_request_is_read_once() {
        assert_eq!(CachePrices::ANTHROPIC.request_cost(5_000, 1_000), 100.0);
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
