//! The sandbox's limits as a chain file sets them: `[plugins.wasm]` for every WebAssembly
//! stage, and a stage's own `wasm` table over it, key by key (docs/configuration.md).
//!
//! Parsed whether or not this build runs WebAssembly components, so a chain file means the
//! same thing to every build; a build without the `wasm` feature refuses the stages that
//! name a component, not the table.

use serde::{Deserialize, Serialize};

use crate::config_error::FieldError;

/// A guest's linear memory cap by default, in MiB: a componentize-py guest needs about 40
/// to start and a componentize-js one about 20, and a 5 MB message is held a few times over
/// while a guest reads it.
pub const DEFAULT_MEMORY_MIB: u64 = 256;
/// Instances of one stage's component at once by default (each runs one call at a time).
pub const DEFAULT_MAX_INSTANCES: u32 = 8;

/// WebAssembly linear memory is at most 4 GiB (wasm32).
const MAX_MEMORY_MIB: u64 = 4096;
const MAX_INSTANCES: u32 = 1024;

/// `[plugins.wasm]`, or a stage's `wasm = { ... }`: unset keys take the next level's value.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WasmLimits {
    /// The most linear memory (and tables) one instance of the component may hold, in MiB.
    /// Growing past it traps: the call fails and the stage is rolled back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// How many instances of the component one stage runs at once. Each instance runs one
    /// call at a time, so this bounds the stage's concurrent compactions (and its memory, at
    /// `memory_mib` each); further calls wait for a free instance, within their timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
}

impl WasmLimits {
    /// Whether no key is set (the table is then left out when a chain file is written).
    pub fn is_unset(&self) -> bool {
        *self == WasmLimits::default()
    }

    /// These limits, with the keys they leave unset taken from `base`.
    pub fn over(self, base: WasmLimits) -> WasmLimits {
        WasmLimits {
            memory_mib: self.memory_mib.or(base.memory_mib),
            max_instances: self.max_instances.or(base.max_instances),
        }
    }

    pub fn memory_mib(&self) -> u64 {
        self.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB)
    }

    pub fn max_instances(&self) -> u32 {
        self.max_instances.unwrap_or(DEFAULT_MAX_INSTANCES)
    }

    /// Checks the values set; `table` names where they were set (`plugins.wasm`, or
    /// `wasm` for a stage's own table) for the error.
    pub fn validate(&self, table: &'static str) -> Result<(), FieldError> {
        if let Some(mib) = self
            .memory_mib
            .filter(|m| !(1..=MAX_MEMORY_MIB).contains(m))
        {
            return Err(FieldError::new(
                table,
                "memory_mib",
                format!(
                    "{mib} is out of range 1..={MAX_MEMORY_MIB} (MiB; a WebAssembly memory \
                     holds at most 4 GiB)"
                ),
            ));
        }
        if let Some(n) = self
            .max_instances
            .filter(|n| !(1..=MAX_INSTANCES).contains(n))
        {
            return Err(FieldError::new(
                table,
                "max_instances",
                format!("{n} is out of range 1..={MAX_INSTANCES}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_overrides_key_by_key_and_defaults_fill_the_rest() {
        let chain = WasmLimits {
            memory_mib: Some(64),
            max_instances: Some(2),
        };
        let stage = WasmLimits {
            memory_mib: Some(512),
            max_instances: None,
        };
        let merged = stage.over(chain);
        assert_eq!((merged.memory_mib(), merged.max_instances()), (512, 2));
        let none = WasmLimits::default();
        assert_eq!(
            (none.memory_mib(), none.max_instances()),
            (DEFAULT_MEMORY_MIB, DEFAULT_MAX_INSTANCES)
        );
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_key() {
        let err = WasmLimits {
            memory_mib: Some(0),
            ..Default::default()
        }
        .validate("plugins.wasm")
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("plugins.wasm.memory_mib: 0 is out of range"),
            "{err}"
        );
        let err = WasmLimits {
            max_instances: Some(5000),
            ..Default::default()
        }
        .validate("plugins.wasm")
        .unwrap_err();
        assert!(err.to_string().contains("max_instances: 5000"), "{err}");
        assert!(WasmLimits::default().validate("plugins.wasm").is_ok());
    }
}
