"""Template rendering as the native SDK's `sdk::render_template` does it: `{name}` is
replaced by its value, `{{` and `}}` are literal braces, anything else is an error."""


def render_template(template: str, values: dict) -> str:
    """`template` with each `{name}` replaced by `values[name]`; raises `PluginError`
    (`invalid-config`) for an unknown placeholder or an unmatched brace."""
    from . import invalid_config

    out = []
    i = 0
    n = len(template)
    while i < n:
        c = template[i]
        if c == "{":
            if template.startswith("{{", i):
                out.append("{")
                i += 2
                continue
            close = template.find("}", i)
            if close < 0:
                raise invalid_config(
                    "prompt template: unclosed `{` (write `{{` for a literal brace)"
                )
            name = template[i + 1 : close]
            if name not in values:
                known = ", ".join("{" + k + "}" for k in values)
                raise invalid_config(
                    f"prompt template: unknown placeholder {{{name}}}; known: {known}"
                )
            out.append(str(values[name]))
            i = close + 1
        elif c == "}":
            if template.startswith("}}", i):
                out.append("}")
                i += 2
                continue
            raise invalid_config(
                "prompt template: unmatched `}` (write `}}` for a literal brace)"
            )
        else:
            j = n
            for brace in ("{", "}"):
                k = template.find(brace, i)
                if 0 <= k < j:
                    j = k
            out.append(template[i:j])
            i = j
    return "".join(out)
