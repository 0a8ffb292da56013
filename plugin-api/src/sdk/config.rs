//! Checks of a stage config that its JSON schema states but a config built in Rust (or read
//! by a host that skips the schema) can still break; each error names the field.

use crate::error::PluginError;

/// `share` must lie in `0..=1` (a share of the budget); the error names `field`.
pub fn check_share(field: &str, share: f64) -> Result<(), PluginError> {
    if (0.0..=1.0).contains(&share) {
        Ok(())
    } else {
        Err(PluginError::invalid_config(format!(
            "{field}: must be a share between 0 and 1, got {share}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_outside_0_to_1_is_refused_by_its_field_name() {
        assert!(check_share("s", 0.0).is_ok() && check_share("s", 1.0).is_ok());
        let e = check_share("ledger.max_share", 1.5).unwrap_err();
        assert_eq!(
            e.message.to_string(),
            "ledger.max_share: must be a share between 0 and 1, got 1.5"
        );
        assert!(check_share("s", f64::NAN).is_err());
    }
}
