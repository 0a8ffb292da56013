//! Errors as one line of text for a person.

/// An error and its causes, `a: b: c`, each cause left out when the text already holds it.
/// Clients such as reqwest and tokio-postgres keep the useful part (the server's message,
/// "connection refused") in the source chain, not in their own top-level text.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn causes_are_joined_and_repeats_left_out() {
        let e = E(
            "error sending request",
            Some(Box::new(E(
                "connect: connection refused",
                Some(Box::new(E("connection refused", None))),
            ))),
        );
        assert_eq!(
            error_chain(&e),
            "error sending request: connect: connection refused"
        );
    }
}
