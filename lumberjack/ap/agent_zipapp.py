"""Build agent.pyz: the site agent as one file that a bare `python3` runs, and the
command line that runs it at the site.

It holds the site side of this package (`lumberjack.core` and `lumberjack.site`, stdlib
only) and the pure-Python spython, which drives Apptainer. The archive is byte-for-byte
reproducible (fixed timestamps, sorted names), so its sha256 names its content: the site
keeps one file per content (core/contract.ExportLayout.agent_file), and every run checks
the file against that sha256 first (core/agent_loader.py).
"""

from __future__ import annotations

import functools
import hashlib
import io
import zipfile
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import lumberjack
from lumberjack.core.site_python import packed, python_command

#: The subpackages shipped to the site: everything under them is stdlib-only (a unit test
#: enforces it), so the archive is built from whole packages, never from a list of files.
SHIPPED_PACKAGES = ("core", "site")
MAIN = "from lumberjack.site.agent import main\nraise SystemExit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def build_agent() -> bytes:
    """The zipapp's bytes (starts with a shebang line, like `python -m zipapp` makes)."""
    package = Path(lumberjack.__file__).parent
    files: dict[str, bytes] = {"__main__.py": MAIN.encode()}
    files["lumberjack/__init__.py"] = (package / "__init__.py").read_bytes()
    for sub in SHIPPED_PACKAGES:
        for path in sorted((package / sub).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[f"lumberjack/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    files.update(_spython_files())
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def _spython_files() -> dict[str, bytes]:
    import spython

    root = Path(spython.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if "tests" in relative.parts:
            continue
        found[f"spython/{relative.as_posix()}"] = path.read_bytes()
    return found


def agent_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ShippedAgent(NamedTuple):
    """The agent this access point ships and runs: its bytes and their sha256."""

    data: bytes
    sha256: str


@functools.cache
def shipped_agent() -> ShippedAgent:
    """Built once per process: the package's files do not change under a running command."""
    data = build_agent()
    return ShippedAgent(data, agent_digest(data))


@functools.cache
def _loader_program() -> str:
    # The loader's own source, sent whole: nothing of lumberjack is at the site to import.
    source = resources.files("lumberjack.core").joinpath("agent_loader.py").read_text("utf-8")
    return packed(source)


def agent_command(path: str, sha256: str, *args: str) -> str:
    """The remote command line running the agent at `path` with `args`, only if its bytes
    have `sha256` (exit codes: core/agent_loader.MISSING, ALTERED)."""
    return python_command(_loader_program(), sha256, path, *args)
