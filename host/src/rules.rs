//! The rules of `docs/plugin-spec.md`, by stable id: the one table the chain's invariant
//! checks (`invariants::Rule::title`) and the conformance kit's checks (`tamp-conformance-engine`) read.

use serde::Serialize;

/// How binding a rule is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// Breaking it fails the kit.
    Must,
    /// Breaking it is reported as a warning.
    Should,
}

/// One rule of the specification.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RuleSpec {
    pub id: &'static str,
    pub title: &'static str,
    pub level: Level,
}

const fn must(id: &'static str, title: &'static str) -> RuleSpec {
    RuleSpec {
        id,
        title,
        level: Level::Must,
    }
}

/// Every rule, in the order the kit checks and reports them. Each has one check of the same
/// id; a check may also find breaks of other rules (an invariant broken on a 5 MB message is
/// reported under the invariant's id).
pub const RULES: &[RuleSpec] = &[
    must(
        "TAMP-LOAD-01",
        "loads through the checked loader with a compatible ABI",
    ),
    must(
        "TAMP-META-01",
        "metadata present: name, semver version, description",
    ),
    must(
        "TAMP-CFG-01",
        "config schema is valid JSON Schema and the default config satisfies it",
    ),
    must(
        "TAMP-CFG-02",
        "an invalid config is refused with an error, never a panic",
    ),
    must("TAMP-INV-01", "nothing lost"),
    must("TAMP-INV-02", "tool exchanges intact"),
    must(
        "TAMP-INV-03",
        "system prompt, task and recent messages untouched",
    ),
    must(
        "TAMP-INV-04",
        "order kept, nothing new but summaries and clearings",
    ),
    must(
        "TAMP-INV-05",
        "failure-atomic on LLM errors and garbage answers",
    ),
    must("TAMP-INV-06", "no growth"),
    must("TAMP-INV-07", "deterministic for the same LLM answers"),
    RuleSpec {
        id: "TAMP-INV-08",
        title: "prefix-stable LLM requests",
        level: Level::Should,
    },
    must(
        "TAMP-INV-09",
        "LLM output bounded before it enters the conversation",
    ),
    must("TAMP-INV-10", "clearing keeps the structure"),
    must(
        "TAMP-INV-11",
        "instructions kept (system messages wherever they stand)",
    ),
    must("TAMP-INV-12", "opaque units kept verbatim in place"),
    must(
        "TAMP-INV-13",
        "nothing before a provider's compaction boundary compacted",
    ),
    must("TAMP-ERR-01", "errors are returned, never panics"),
    must("TAMP-EDGE-01", "empty conversation"),
    must("TAMP-EDGE-02", "a 5 MB message"),
    must("TAMP-EDGE-03", "Unicode: RTL, emoji, combining marks"),
    must("TAMP-CONC-01", "concurrent calls on one instance"),
];

/// The rule with this id.
pub fn rule(id: &str) -> Option<&'static RuleSpec> {
    RULES.iter().find(|r| r.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
    }
}
