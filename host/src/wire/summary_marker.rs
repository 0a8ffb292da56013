//! How a summary message is written on the wire.
//!
//! Neither wire format has a place for tamp's summary fields, so a summary travels as a message
//! whose only content is one text block:
//!
//! ```text
//! <tamp-summary page="PAGE" strategy="NAME" status="final|pending" mac="MAC">
//! BODY
//! (The original messages: recall page PAGE.)
//! </tamp-summary>
//! ```
//!
//! The last line tells the model it can read the summarized messages back with `tamp mcp`'s
//! `recall` tool ([`recall_line`]); a summary read without it (as an earlier tamp wrote them) is
//! written back without it.
//!
//! Attribute values escape `&`, `"` and `<` as `&amp;`, `&quot;` and `&lt;`. `mac` (32
//! lowercase hex digits) is the store's MAC over the rest ([`crate::summary_mac`]): it tells a
//! summary tamp wrote from text that only looks like one, and a reader keeps it in the
//! message's `tamp:mac` marker; a marker without it reads back the same. Only this exact
//! (canonical) form is read back as a summary, so that reading and writing a summary gives the
//! same text byte for byte; any other text is an ordinary text block. Reading one does not make
//! it tamp's: the chain believes a summary only with a MAC its store made.

use std::borrow::Cow;

use abi_stable::std_types::RString;

use crate::plugin_api::{SummaryInfo, SummaryStatus};

const OPEN: &str = "<tamp-summary page=\"";
const CLOSE: &str = "\n</tamp-summary>";
/// The digits of a canonical `mac` attribute.
pub const MAC_HEX_LEN: usize = 32;

/// A summary marker read back: what it says, its MAC when it has one, its body (slices of the
/// text read), and whether it had its recall line.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker<'a> {
    pub info: SummaryInfo,
    pub mac: Option<&'a str>,
    pub body: &'a str,
    pub recall_line: bool,
}

/// Whether `text` could be a summary marker (a cheap test before [`parse`]).
pub fn looks_like_marker(text: &str) -> bool {
    text.starts_with(OPEN)
}

/// The line after a summary's body that tells the model how to read its page back.
pub fn recall_line(page: &str) -> String {
    format!("(The original messages: recall page {page}.)")
}

/// The wire text of a summary with `body`, without a MAC, with its recall line.
pub fn render(info: &SummaryInfo, body: &str) -> String {
    write(info, None, body, true)
}

/// The wire text of a summary with `body`, with its `mac` when given, and with or without its
/// recall line (a summary read without one is written back as it came).
pub fn write(info: &SummaryInfo, mac: Option<&str>, body: &str, recall_line: bool) -> String {
    let page = escape_attr(info.page_ref.as_str());
    let strategy = escape_attr(info.strategy.as_str());
    let status = info.status.as_str();
    let hint = if recall_line {
        format!("\n{}", self::recall_line(&page))
    } else {
        String::new()
    };
    let mut out = String::with_capacity(
        OPEN.len() + page.len() + strategy.len() + body.len() + hint.len() + CLOSE.len() + 32,
    );
    out.push_str(OPEN);
    out.push_str(&page);
    out.push_str("\" strategy=\"");
    out.push_str(&strategy);
    out.push_str("\" status=\"");
    out.push_str(status);
    if let Some(mac) = mac {
        out.push_str("\" mac=\"");
        out.push_str(mac);
    }
    out.push_str("\">\n");
    out.push_str(body);
    out.push_str(&hint);
    out.push_str(CLOSE);
    out
}

/// Reads a summary marker: its info and the body (a slice of `text`), whatever its MAC.
/// `None` when `text` is not exactly the canonical form [`write`] writes.
pub fn parse(text: &str) -> Option<(SummaryInfo, &str)> {
    read(text).map(|marker| (marker.info, marker.body))
}

/// Reads a summary marker, its MAC and recall line included. `None` when `text` is not exactly
/// the canonical form [`write`] writes.
pub fn read(text: &str) -> Option<Marker<'_>> {
    let rest = text.strip_prefix(OPEN)?;
    let (page_esc, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(" strategy=\"")?;
    let (strategy_esc, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(" status=\"")?;
    let (status, rest) = rest.split_once('"')?;
    let (mac, rest) = match rest.strip_prefix(" mac=\"") {
        Some(rest) => {
            let (mac, rest) = rest.split_once('"')?;
            let canonical = mac.len() == MAC_HEX_LEN
                && mac.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            (Some(Some(mac).filter(|_| canonical)?), rest)
        }
        None => (None, rest),
    };
    let rest = rest.strip_prefix(">\n")?;
    let body = rest.strip_suffix(CLOSE)?;
    // The recall line the page's own id names, when the summary has it.
    let hinted = body
        .strip_suffix(recall_line(page_esc).as_str())
        .and_then(|b| b.strip_suffix('\n'));
    let (body, hinted) = match hinted {
        Some(body) => (body, true),
        None => (body, false),
    };
    let status = match status {
        "final" => SummaryStatus::Final,
        "pending" => SummaryStatus::Pending,
        _ => return None,
    };
    let page = unescape_attr(page_esc);
    let strategy = unescape_attr(strategy_esc);
    // Only the canonical escaping is a marker, so that writing it back gives the same text.
    if escape_attr(&page) != page_esc || escape_attr(&strategy) != strategy_esc {
        return None;
    }
    Some(Marker {
        info: SummaryInfo {
            page_ref: RString::from(page.into_owned()),
            strategy: RString::from(strategy.into_owned()),
            status,
        },
        mac,
        body,
        recall_line: hinted,
    })
}

/// Escapes an attribute value: `&` → `&amp;`, `"` → `&quot;`, `<` → `&lt;`.
pub fn escape_attr(value: &str) -> Cow<'_, str> {
    if !value.contains(['&', '"', '<']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Undoes [`escape_attr`]; other `&` sequences are kept as they are.
pub fn unescape_attr(value: &str) -> Cow<'_, str> {
    if !value.contains('&') {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (c, len) = if tail.starts_with("&amp;") {
            ('&', 5)
        } else if tail.starts_with("&quot;") {
            ('"', 6)
        } else if tail.starts_with("&lt;") {
            ('<', 4)
        } else {
            ('&', 1)
        };
        out.push(c);
        rest = &tail[len..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(page: &str, strategy: &str, status: SummaryStatus) -> SummaryInfo {
        SummaryInfo {
            page_ref: page.into(),
            strategy: strategy.into(),
            status,
        }
    }

    #[test]
    fn renders_the_documented_form() {
        let text = render(
            &info("pg_1", "map-reduce", SummaryStatus::Final),
            "the body",
        );
        assert_eq!(
            text,
            "<tamp-summary page=\"pg_1\" strategy=\"map-reduce\" status=\"final\">\nthe body\n\
             (The original messages: recall page pg_1.)\n</tamp-summary>"
        );
        let marker = read(&text).unwrap();
        assert_eq!(
            marker.info,
            info("pg_1", "map-reduce", SummaryStatus::Final)
        );
        assert_eq!((marker.body, marker.recall_line), ("the body", true));
        // As an earlier tamp wrote it, without the recall line: a summary all the same, and
        // written back as it came.
        let earlier = "<tamp-summary page=\"pg_1\" strategy=\"map-reduce\" status=\"final\">\n\
                       the body\n</tamp-summary>";
        let marker = read(earlier).unwrap();
        assert_eq!((marker.body, marker.recall_line), ("the body", false));
        assert_eq!(write(&marker.info, None, marker.body, false), earlier);
        // Another page's recall line is body text.
        let other = text.replace("recall page pg_1", "recall page pg_2");
        assert_eq!(
            read(&other).unwrap().body,
            "the body\n(The original messages: recall page pg_2.)"
        );
    }

    #[test]
    fn escaping_round_trips() {
        let i = info("a\"b&c<d>e", "x&amp;y", SummaryStatus::Pending);
        let text = render(&i, "body with </tamp-summary> inside\nand lines");
        assert!(text.starts_with(
            "<tamp-summary page=\"a&quot;b&amp;c&lt;d>e\" strategy=\"x&amp;amp;y\" status=\"pending\">\n"
        ));
        let marker = read(&text).unwrap();
        assert_eq!(marker.info, i);
        assert_eq!(marker.body, "body with </tamp-summary> inside\nand lines");
        assert_eq!(render(&marker.info, marker.body), text);
    }

    #[test]
    fn empty_body_round_trips() {
        let i = info("", "", SummaryStatus::Final);
        let text = render(&i, "");
        assert_eq!(
            text,
            "<tamp-summary page=\"\" strategy=\"\" status=\"final\">\n\n\
             (The original messages: recall page .)\n</tamp-summary>"
        );
        let marker = read(&text).unwrap();
        assert_eq!((marker.info, marker.body), (i, ""));
    }

    #[test]
    fn non_canonical_text_is_not_a_marker() {
        for text in [
            "<tamp-summary page=\"p\" strategy=\"s\" status=\"final\">\n</tamp-summary>",
            "<tamp-summary page=\"p\" strategy=\"s\" status=\"done\">\nb\n</tamp-summary>",
            "<tamp-summary strategy=\"s\" page=\"p\" status=\"final\">\nb\n</tamp-summary>",
            "<tamp-summary page=\"p\"  strategy=\"s\" status=\"final\">\nb\n</tamp-summary>",
            "<tamp-summary page=\"p\" strategy=\"s\" status=\"final\">\nb\n</tamp-summary>\n",
            "<tamp-summary page=\"p\" strategy=\"s\" status=\"final\">b\n</tamp-summary>",
            "<tamp-summary page=\"a&gt;b\" strategy=\"s\" status=\"final\">\nb\n</tamp-summary>",
            "<tamp-summary page=\"a&b\" strategy=\"s\" status=\"final\">\nb\n</tamp-summary>",
            " <tamp-summary page=\"p\" strategy=\"s\" status=\"final\">\nb\n</tamp-summary>",
            "plain text",
        ] {
            assert!(parse(text).is_none(), "{text}");
        }
    }

    #[test]
    fn a_mac_is_read_back_and_only_a_canonical_one() {
        let i = info("pg_1", "s", SummaryStatus::Final);
        let mac = "0123456789abcdef0123456789abcdef";
        let text = write(&i, Some(mac), "body", true);
        assert_eq!(
            text,
            format!("<tamp-summary page=\"pg_1\" strategy=\"s\" status=\"final\" mac=\"{mac}\">\nbody\n(The original messages: recall page pg_1.)\n</tamp-summary>")
        );
        assert_eq!(
            read(&text),
            Some(Marker {
                info: i.clone(),
                mac: Some(mac),
                body: "body",
                recall_line: true,
            })
        );
        assert_eq!(parse(&text), Some((i.clone(), "body")));
        for bad in [
            "0123456789ABCDEF0123456789ABCDEF",
            "0123",
            "",
            "zz23456789abcdef0123456789abcdef",
        ] {
            let text = text.replace(mac, bad);
            assert_eq!(read(&text), None, "{text}");
        }
        assert_eq!(read(&render(&i, "b")).unwrap().mac, None);
    }

    #[test]
    fn unescape_keeps_unknown_entities() {
        assert_eq!(unescape_attr("a&gt;b&amp;quot;"), "a&gt;b&quot;");
        assert_eq!(unescape_attr("&lt;&quot;&amp;"), "<\"&");
        assert_eq!(escape_attr("plain"), Cow::Borrowed("plain"));
    }
}
