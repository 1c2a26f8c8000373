"""The command line that runs the transfer helper (lumberjack.site.transfer_helper) at
the site.

How it gets there: its source goes inside the command itself, `python3 -I -c` with a
compressed program (core/site_python.py), on every call. That needs nothing at the site
beforehand (no file to install or keep in step with this version, no agent yet: the
agent is itself written by the helper's `put`), costs about 5 KB per command, and keeps
the command on one line, which every login shell passes as is. The program puts the
helper and the lumberjack modules it imports (core.safepath, core.returns, core.sparse)
into sys.modules under their own names, so the helper runs at the site exactly as it is
imported here.
"""

from __future__ import annotations

from importlib import resources

from lumberjack.core.site_python import packed, python_command

#: The modules sent, in import order (the helper's own imports: standard library and these).
SENT = (
    "lumberjack.core.safepath", "lumberjack.core.returns", "lumberjack.core.sparse",
    "lumberjack.site.transfer_helper",
)  # fmt: skip
PACKAGES = ("lumberjack", "lumberjack.core", "lumberjack.site")

# Run at the site with PACKAGES, MODULES ((name, source) pairs) and MAIN set before it.
_LOADER = """
import sys, types

for name in PACKAGES:
    package = types.ModuleType(name)
    package.__path__ = []
    sys.modules[name] = package
for name, source in MODULES:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, "<" + name + ">", "exec"), module.__dict__)
sys.modules[MAIN].run(sys.argv[1:])
"""


def _source(name: str) -> str:
    package, _, module = name.rpartition(".")
    return resources.files(package).joinpath(f"{module}.py").read_text(encoding="utf-8")


def _program() -> str:
    modules = [(name, _source(name)) for name in SENT]
    text = f"PACKAGES = {PACKAGES!r}\nMODULES = {modules!r}\nMAIN = {SENT[-1]!r}\n{_LOADER}"
    return packed(text)


#: The `-c` program (no newline in it).
HELPER_PROGRAM = _program()


def helper_command(mode: str, *args: str) -> str:
    """The remote command line running the helper in `mode` (see transfer_helper)."""
    return python_command(HELPER_PROGRAM, mode, *args)
