"""Build agent.pyz: the site agent as one file that a bare `python3` runs.

It holds the stdlib-only parts of this package that the login node needs (the agent,
the remote pool's configs, the job_queue.log reader/writer, the batch modules) and the
pure-Python spython, which drives Apptainer. The archive is byte-for-byte reproducible
(fixed timestamps, sorted names), so re-shipping an unchanged agent moves no bytes.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import lumberjack

#: The package modules the agent imports (directly or through each other).
AGENT_MODULES = (
    "__init__.py",
    "agent.py",
    "remote_pool.py",
    "jobqueuelog.py",
    "batch/__init__.py",
    "batch/slurm.py",
    "batch/pbs.py",
    "batch/cobalt.py",
)
MAIN = "from lumberjack.agent import main\nraise SystemExit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def build_agent() -> bytes:
    """The zipapp's bytes (starts with a shebang line, like `python -m zipapp` makes)."""
    package = Path(lumberjack.__file__).parent
    files: dict[str, bytes] = {"__main__.py": MAIN.encode()}
    for name in AGENT_MODULES:
        files[f"lumberjack/{name}"] = (package / name).read_bytes()
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
