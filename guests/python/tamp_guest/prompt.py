"""Prompts, as the native SDK's `sdk::prompt` writes them: messages rendered for a summarizer
(`render_messages`), the `<content>` section that holds a prompt's material (`wrap_content`),
and templates (`render_template`). The host renders all three (the WIT's `render-messages`,
`wrap-content` and `render-template`), so that a guest's prompt is a native strategy's, byte
for byte: the same prompt hits the same summary cache, and the host's offline summarizer
reads the same section. They read nothing of the conversation in progress, so they may be
called at any time, from `__init__` too.

And the native SDK's small text helpers answers are fitted with: `cap_chars` and `trim`.
"""

from . import _raised, _renderings


def render_messages(messages) -> str:
    """`messages` as a prompt shows them to a summarizer: one line group per block, `role:
    text`, tool calls as `assistant called name(input)`, results as `name returned: ...`,
    summaries with their page, each long block cut (the native SDK's `render_messages` with
    its default options)."""
    return _renderings().render_messages(list(messages))


def wrap_content(material: str) -> str:
    """`material` as a prompt's `<content>` section, the tags on lines of their own, with any
    `<content>` or `</content>` inside the material escaped (`&lt;content&gt;`): the host's
    offline summarizer reads what stands between the last pair of tags. Put it last in a
    prompt that asks for a summary of the material."""
    return _renderings().wrap_content(material)


def render_template(template: str, values: dict) -> str:
    """`template` with each `{name}` replaced by `values[name]` (`{{` and `}}` write braces);
    raises `PluginError` (`invalid-config`, led by `prompt template:`) for an unknown
    placeholder, naming it and the known ones, or for an unmatched brace."""
    from ._bindings import Err

    pairs = [(name, str(value)) for name, value in values.items()]
    try:
        return _renderings().render_template(template, pairs)
    except Err as e:
        raise _raised(e) from None


def cap_chars(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, the cut marked by `…` in place of the
    last character kept (the native SDK's `sdk::cap_chars`). A character is a Unicode scalar
    value, as a Python `str` counts them, so an emoji is one."""
    if len(text) <= max_chars:
        return text
    if max_chars == 0:
        return ""
    return text[:max_chars - 1] + "…"


# What Rust's `str::trim` strips (Unicode's White_Space). Python's `str.strip()` also strips
# the separators U+001C..U+001F, which would make an answer trimmed here differ from the
# native strategy's by a byte.
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def trim(text: str) -> str:
    """`text` without leading and trailing white space, as the native SDK trims an LLM's
    answer (Rust's `str::trim`)."""
    return text.strip(_WHITE_SPACE)
