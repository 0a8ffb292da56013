//! Filling a [`StageReport`] from plain Rust values: details from anything `Serialize`, and
//! warnings from strings, so a plugin never builds the report's wire fields by hand.
//!
//! ```
//! use tamp_plugin_api::prelude::*;
//! use tamp_plugin_api::sdk::report::ReportExt as _;
//!
//! #[derive(Serialize)]
//! struct Details { deferred: usize, finalized: usize }
//!
//! let report = StageReport::acted("deferred 2 page(s)")
//!     .with_details(&Details { deferred: 2, finalized: 0 })
//!     .with_warnings(["one page could not be archived"]);
//! assert_eq!(report.details_json.as_str(), r#"{"deferred":2,"finalized":0}"#);
//! assert_eq!(report.warnings.len(), 1);
//! ```

use serde::Serialize;

use crate::report::StageReport;

/// What the SDK adds to [`StageReport`] (in the prelude).
pub trait ReportExt: Sized {
    /// The report with `details` as its details: the JSON object a host shows under the
    /// stage's report (`tamp compact --report`, `/v1/compact`'s `stages`). A value that does
    /// not serialize leaves the details empty and says why among the warnings.
    fn with_details<T: Serialize + ?Sized>(mut self, details: &T) -> Self {
        self.set_details(details);
        self
    }

    /// Sets the details, as [`ReportExt::with_details`].
    fn set_details<T: Serialize + ?Sized>(&mut self, details: &T);

    /// The report with `warnings` added after its own.
    fn with_warnings<I, S>(self, warnings: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>;

    /// Replaces what the report says the stage did and why.
    fn set_reason(&mut self, reason: impl Into<String>);
}

impl ReportExt for StageReport {
    fn set_details<T: Serialize + ?Sized>(&mut self, details: &T) {
        match serde_json::to_string(details) {
            Ok(json) => self.details_json = json.into(),
            Err(e) => {
                self.details_json = Default::default();
                self.warn(format!("the stage's details do not serialize: {e}"));
            }
        }
    }

    fn with_warnings<I, S>(mut self, warnings: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for warning in warnings {
            self.warn(warning);
        }
        self
    }

    fn set_reason(&mut self, reason: impl Into<String>) {
        self.reason = reason.into().into();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    #[test]
    fn details_come_from_any_serializable_value() {
        #[derive(Serialize)]
        struct Counts {
            deferred: usize,
            finalized: usize,
        }
        let report = StageReport::acted("x").with_details(&Counts {
            deferred: 3,
            finalized: 1,
        });
        assert_eq!(report.details_json, r#"{"deferred":3,"finalized":1}"#);
        let value = json!({"path": "structured", "chunks": 2});
        let report = StageReport::skipped("y").with_details(&value);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&report.details_json).unwrap(),
            value
        );
        assert!(report.warnings.is_empty());
    }

    #[test]
    fn details_that_do_not_serialize_are_a_warning_not_a_panic() {
        // JSON objects need string keys.
        let mut by_pair = BTreeMap::new();
        by_pair.insert((1, 2), "x");
        let report = StageReport::acted("x").with_details(&by_pair);
        assert!(report.details_json.is_empty());
        assert_eq!(report.warnings.len(), 1);
        assert!(report.warnings[0].contains("details do not serialize"));
    }

    #[test]
    fn warnings_and_reason_are_plain_strings() {
        let mut report = StageReport::skipped("first")
            .with_warnings(vec![String::from("a")])
            .with_warnings(["b"]);
        report.set_reason("second");
        assert_eq!(report.reason, "second");
        let warnings: Vec<&str> = report.warnings.iter().map(|w| w.as_str()).collect();
        assert_eq!(warnings, ["a", "b"]);
        assert!(!report.acted);
    }
}
