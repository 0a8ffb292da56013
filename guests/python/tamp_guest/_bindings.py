"""The WIT bindings the SDK is written against.

Inside a component, componentize-py provides them (`wit_world`, `componentize_py_types`).
In plain CPython (a strategy's unit tests, with `tamp_guest.testing`'s fake host) they are
generated once, by the pinned componentize-py this package depends on, from the WIT package
shipped inside it (`tamp_guest/wit`), into a cache directory put on `sys.path`: nothing is
downloaded.
"""

import sys

try:
    import wit_world  # noqa: F401  (in a component: componentize-py's bindings)

    IN_COMPONENT = True
except ImportError:  # plain CPython
    IN_COMPONENT = False
    import hashlib
    import os
    import tempfile

    _wit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wit")
    _key = hashlib.sha256()
    for _name in sorted(os.listdir(_wit)):
        with open(os.path.join(_wit, _name), "rb") as _f:
            _key.update(_name.encode() + b"\0" + _f.read())
    _dir = os.path.join(tempfile.gettempdir(), f"tamp-guest-bindings-{_key.hexdigest()[:16]}")
    if not os.path.isfile(os.path.join(_dir, "ready")):
        import componentize_py

        _partial = tempfile.mkdtemp(prefix="tamp-guest-bindings-")
        componentize_py.generate_bindings(
            [_wit], ["plugin"], [], False, None, _partial, [], [], False
        )
        open(os.path.join(_partial, "ready"), "w").close()
        try:
            os.rename(_partial, _dir)
        except OSError:  # another process generated them first
            import shutil

            shutil.rmtree(_partial, ignore_errors=True)
    sys.path.append(_dir)

from componentize_py_types import Err, Ok  # noqa: E402,F401
from wit_world import exports  # noqa: E402,F401
from wit_world.imports import host, types  # noqa: E402,F401
