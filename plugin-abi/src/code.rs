//! Kinds that may grow: a `#[repr(transparent)]` code with variant-named constants.
//!
//! A Rust enum crossing the boundary cannot gain a variant without an ABI break (abi_stable's
//! layout check, and undefined behaviour for a plugin handed a discriminant it does not
//! know). A code can: a later version adds a constant, an older plugin reads the new code as
//! `unknown` (keeping it), and a `match` on it needs a `_` arm. The constants match like enum
//! variants, and the type serializes as the snake_case name.

/// Declares such a code type:
///
/// ```ignore
/// extensible_code! {
///     /// Docs of the type.
///     pub struct Kind, "kind" {
///         /// Docs of the variant.
///         First = 0, "first";
///     }
/// }
/// ```
macro_rules! extensible_code {
    (
        $(#[$meta:meta])*
        pub struct $name:ident, $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal, $snake:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(abi_stable::StableAbi, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(u8);

        #[allow(non_upper_case_globals)]
        impl $name {
            $( $(#[$vmeta])* pub const $variant: $name = $name($code); )*

            const NAMES: &'static [(u8, &'static str, &'static str)] =
                &[$( ($code, $snake, stringify!($variant)) ),*];

            /// The value with this code (one this version may not know).
            pub const fn from_code(code: u8) -> Self {
                $name(code)
            }

            pub const fn code(self) -> u8 {
                self.0
            }

            fn names(self) -> Option<(&'static str, &'static str)> {
                Self::NAMES
                    .iter()
                    .find(|(code, _, _)| *code == self.0)
                    .map(|(_, snake, variant)| (*snake, *variant))
            }

            /// `snake_case` name, or `unknown` for one a later version added.
            pub fn as_str(self) -> &'static str {
                self.names().map_or("unknown", |(snake, _)| snake)
            }

            /// The value named `name` (as [`Self::as_str`] spells it), if this version knows it.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::NAMES
                    .iter()
                    .find(|(_, snake, _)| *snake == name)
                    .map(|(code, _, _)| $name(*code))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.names() {
                    Some((_, variant)) => f.write_str(variant),
                    None => write!(f, "Unknown({})", self.0),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                $name::from_name(&name).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("unknown ", $what, " `{}`"), name))
                })
            }
        }
    };
}

pub(crate) use extensible_code;
