"""`tamp-guest build APP.py -o strategy.wasm`: builds a strategy into a WebAssembly
component, from any directory.

It runs the componentize-py this package pins (refusing another version) against the WIT
package shipped inside this package (`tamp_guest/wit`), with WASI stubbed out (tamp refuses
a component that imports it), on a copy of the SDK and the app's directory: the component
holds the app's modules (the `.py` files beside it) and the SDK, nothing else of the
environment.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata

COMPONENTIZE_PY = "0.25.1"
WORLD = "plugin"

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# Left out of the component: the build itself, the WIT, the fake host.
_NOT_IN_GUEST = {"wit", "cli.py", "__main__.py", "testing.py", "__pycache__"}


def wit_dir() -> str:
    """The WIT package this SDK is written against (tamp's `plugin-abi/wit`)."""
    return os.path.join(_PACKAGE, "wit")


def _check_componentize_py():
    try:
        version = metadata.version("componentize-py")
    except metadata.PackageNotFoundError:
        sys.exit(f"tamp-guest: componentize-py is not installed in this Python "
                 f"({sys.executable}); pip install componentize-py=={COMPONENTIZE_PY}")
    if version != COMPONENTIZE_PY:
        sys.exit(f"tamp-guest: componentize-py {version} is installed; this SDK is built and "
                 f"tested with {COMPONENTIZE_PY} (pip install componentize-py=={COMPONENTIZE_PY})")


def build(app: str, output: str) -> None:
    """Builds the strategy module `app` (a `.py` file binding `Strategy = export(...)`) into
    the component `output`."""
    _check_componentize_py()
    app = os.path.abspath(app)
    if not (os.path.isfile(app) and app.endswith(".py")):
        sys.exit(f"tamp-guest: {app}: not a Python file")
    output = os.path.abspath(output)
    module = os.path.splitext(os.path.basename(app))[0]
    with tempfile.TemporaryDirectory(prefix="tamp-guest-") as staging:
        sdk = os.path.join(staging, "sdk", "tamp_guest")
        shutil.copytree(_PACKAGE, sdk, ignore=lambda _d, names: [
            n for n in names if n in _NOT_IN_GUEST])
        command = [
            sys.executable, "-c",
            "import sys; from componentize_py import script; "
            "sys.argv[0] = 'componentize-py'; sys.exit(script())",
            "--wit-path", wit_dir(), "--world", WORLD, "componentize", "--stub-wasi",
            "--python-path", os.path.join(staging, "sdk"),
            "--python-path", os.path.dirname(app),
            module, "--output", output,
        ]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run(command, env=env, cwd=staging)
        if done.returncode != 0:
            sys.exit(f"tamp-guest: componentize-py failed ({done.returncode})")
    print(f"built {output}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="tamp-guest", description="Builds tamp strategies written in Python into "
        "WebAssembly components.")
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="build APP.py into a component")
    b.add_argument("app", help="the strategy's module (it binds Strategy = export(...))")
    b.add_argument("-o", "--output", default="strategy.wasm",
                   help="the component to write (default: strategy.wasm)")
    commands.add_parser("wit", help="print the path of the WIT package the SDK ships")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.app, args.output)
    elif args.command == "wit":
        print(wit_dir())


if __name__ == "__main__":
    main()
