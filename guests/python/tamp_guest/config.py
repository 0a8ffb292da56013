"""A strategy's config, declared once: the JSON Schema the host shows (`tamp plugins
describe`), the default config and the checks of a stage's config all derive from the one
declaration, as a native strategy's derive from its `Config` struct. What the schema accepts,
the checks accept (`keep = 3.0` is the integer 3, as JSON Schema reads it), and the reverse.

    CONFIG = Config(
        Integer("keep", 3, "Tool uses left alone.", minimum=0, maximum=1000000),
        StringList("exclude_tools", [], "Tools never cleared."),
        description="How the strategy chooses what to clear.",
    )
    values = CONFIG.parse({"keep": 5})   # {"keep": 5, "exclude_tools": []}
"""


def _refuse(message):
    from . import invalid_config

    return invalid_config(message)


class Field:
    """One key of the config: its name, default, description and JSON Schema type."""

    TYPE = ""

    def __init__(self, name, default, description=""):
        self.name = name
        self.default = default
        self.description = description
        self.check(default)  # a default the checks would refuse is a bug in the declaration

    def schema(self) -> dict:
        out = {"description": self.description} if self.description else {}
        out["type"] = self.TYPE
        out.update(self._schema())
        out["default"] = self.default
        return out

    def _schema(self) -> dict:
        return {}

    def check(self, value):
        """The value as the strategy reads it; raises `PluginError` (`invalid-config`)."""
        raise NotImplementedError


class Integer(Field):
    """A whole number in `minimum..=maximum` (either bound may be None). A JSON number with
    no fractional part (`3.0`) is accepted, as JSON Schema's `integer` accepts it."""

    TYPE = "integer"

    def __init__(self, name, default, description="", minimum=None, maximum=None):
        self.minimum = minimum
        self.maximum = maximum
        super().__init__(name, default, description)

    def _schema(self):
        out = {}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out

    def check(self, value):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(f"{self.name}: expected an integer, got {value!r}")
        low = self.minimum if self.minimum is not None else float("-inf")
        high = self.maximum if self.maximum is not None else float("inf")
        if not low <= value <= high:
            bounds = (f"{'' if self.minimum is None else self.minimum}..="
                      f"{'' if self.maximum is None else self.maximum}")
            raise _refuse(f"{self.name}: {value} is out of range {bounds}")
        return value


class Boolean(Field):
    TYPE = "boolean"

    def check(self, value):
        if not isinstance(value, bool):
            raise _refuse(f"{self.name}: expected true or false, got {value!r}")
        return value


class String(Field):
    TYPE = "string"

    def check(self, value):
        if not isinstance(value, str):
            raise _refuse(f"{self.name}: expected a string, got {value!r}")
        return value


class StringList(Field):
    TYPE = "array"

    def _schema(self):
        return {"items": {"type": "string"}}

    def check(self, value):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _refuse(f"{self.name}: expected a list of strings, got {value!r}")
        return list(value)


class Config:
    """The fields of a config, in order; no other key is accepted."""

    def __init__(self, *fields, title="Config", description=""):
        self.fields = list(fields)
        self.title = title
        self.description = description

    def schema(self) -> dict:
        """The config's JSON Schema (draft-07)."""
        out = {"$schema": "http://json-schema.org/draft-07/schema#", "title": self.title}
        if self.description:
            out["description"] = self.description
        out["type"] = "object"
        if self.fields:
            out["properties"] = {f.name: f.schema() for f in self.fields}
        out["additionalProperties"] = False
        return out

    def defaults(self) -> dict:
        """The default config: every field at its default."""
        return {f.name: f.default for f in self.fields}

    def parse(self, given: dict) -> dict:
        """`given` checked, with the defaults filled in; raises `PluginError`
        (`invalid-config`) naming the first key at fault."""
        known = {f.name for f in self.fields}
        unknown = sorted(k for k in given if k not in known)
        if unknown:
            expected = ", ".join(f"`{f.name}`" for f in self.fields) or "no field"
            raise _refuse(f"unknown field `{unknown[0]}`, expected {expected}")
        return {f.name: f.check(given.get(f.name, f.default)) for f in self.fields}
