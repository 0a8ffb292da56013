"""Messages no stage may summarize, replace, clear or move, as the native SDK's
`sdk::pinned` reads them (the host checks the same rules, TAMP-INV-11 to TAMP-INV-13):

- **instructions**: a system message wherever it stands (the system prompt, or a
  mid-conversation system or developer message);
- **opaque units**: a message the wire reader kept verbatim because it holds something tamp
  does not know (an unknown item, role or block), marked with `OPAQUE` in its `extra_json`;
- **compaction boundaries**: a provider's own compaction, marked with `BOUNDARY`; nothing up
  to it is compactable.

`Compaction.compactable` (computed by the host) already starts after the pinned messages of
the conversation's head and its last boundary; a strategy steps over the pinned messages
inside it (`Compaction.pinned()`).
"""

import json

from ._bindings import types

# Marker key (in a message's `extra_json`): what in the message tamp does not know.
OPAQUE = "tamp:opaque"
# Marker key (in a message's `extra_json`): the message holds a provider's compaction.
BOUNDARY = "tamp:boundary"


def _has_marker(message, key: str) -> bool:
    extra = message.extra_json
    if f'"{key}"' not in extra:
        return False
    try:
        keys = json.loads(extra)
    except ValueError:
        return False
    return isinstance(keys, dict) and key in keys


def is_pinned(message) -> bool:
    """Whether no stage may summarize, replace, clear or move `message`: instructions (a
    system message) or an opaque unit."""
    return message.role == types.Role.SYSTEM or _has_marker(message, OPAQUE)


def is_instructions(message) -> bool:
    """Whether `message` is instructions: a system message that is not an opaque unit."""
    return message.role == types.Role.SYSTEM and not _has_marker(message, OPAQUE)


def is_boundary(message) -> bool:
    """Whether `message` holds a provider's compaction boundary."""
    return _has_marker(message, BOUNDARY)
