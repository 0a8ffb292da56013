//! The credentials an operator writes into a URL (`http://user:password@host`, for an
//! upstream, a provider's base URL or a store), kept out of every answer, log line, report
//! and error: each of them shows a URL through [`url`], or, for text that may quote one (an
//! HTTP client's error), through [`urls_in`]. A leaf.
//!
//! The whole user-info part is replaced, the user name with the password: a token is often
//! given as the user name alone (`https://TOKEN@host`).

use std::borrow::Cow;

/// What stands where a URL's user and password were.
pub const CREDENTIALS: &str = "[redacted]";

/// `url` with its user-info replaced by [`CREDENTIALS`]
/// (`http://[redacted]@127.0.0.1:9/v1`); unchanged when it has none.
pub fn url(url: &str) -> Cow<'_, str> {
    urls_in(url)
}

/// `text` with the user-info of every URL in it (`scheme://user:password@host`) replaced by
/// [`CREDENTIALS`].
pub fn urls_in(text: &str) -> Cow<'_, str> {
    if !text.contains('@') || !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The authority ends where the path, query or fragment starts, or the URL does.
        let end = after
            .find(|c: char| "/?#".contains(c) || c.is_whitespace() || "\"'<>()[]{},;`".contains(c))
            .unwrap_or(after.len());
        // Without an `@` before a delimiter, the host may be an IPv6 `[…]`: the authority then
        // runs to the path.
        let authority_end = match after[..end].rfind('@') {
            Some(_) => end,
            None => after
                .find(|c: char| "/?#".contains(c) || c.is_whitespace())
                .unwrap_or(after.len()),
        };
        match after[..authority_end].rfind('@') {
            Some(user_end) => {
                out.push_str(CREDENTIALS);
                rest = &after[user_end..];
                changed = true;
            }
            None => rest = after,
        }
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_info_of_every_url_is_replaced_and_nothing_else() {
        assert_eq!(
            url("http://produser:S3CRET-PW-IN-URL@127.0.0.1:9"),
            "http://[redacted]@127.0.0.1:9"
        );
        assert_eq!(
            url("https://tok3n@api.example.com/v1?x=1"),
            "https://[redacted]@api.example.com/v1?x=1"
        );
        assert_eq!(
            url("http://u:p@[::1]:8080/v1"),
            "http://[redacted]@[::1]:8080/v1"
        );
        // A password holding `@` (unescaped, as people write it).
        assert_eq!(url("http://u:p@ss@h/"), "http://[redacted]@h/");
        for plain in [
            "https://api.anthropic.com",
            "http://127.0.0.1:9/v1/messages?a=b@c",
            "mail me at a@b.c",
            "no url",
        ] {
            assert!(matches!(url(plain), Cow::Borrowed(_)), "{plain}");
            assert_eq!(url(plain), plain);
        }
        assert_eq!(
            urls_in(
                "error sending request for url (http://user:pw@127.0.0.1:9/v1/messages): \
                 connect refused; retried https://a:b@h.example/x"
            ),
            "error sending request for url (http://[redacted]@127.0.0.1:9/v1/messages): \
             connect refused; retried https://[redacted]@h.example/x"
        );
    }
}
