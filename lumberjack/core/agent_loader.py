"""The loader that runs the site agent at the site, only as the access point built it.

Its whole source is the `-c` program of every agent command (ap/agent_zipapp.py
`agent_command`): `python3 -I -c LOADER SHA256 PATH COMMAND DIR...`. It reads the file at
PATH once, checks its sha256 against the one the access point knows, and runs exactly
the bytes it checked, from a sealed in-memory file: a file swapped or rewritten after
the check cannot matter, and one that does not match runs nothing. The agent lives
outside every export's directory (core/contract.ExportLayout.agent_file), but its
bytes are checked wherever it lives: whatever can write to the site account (a job
without a container) could write there too.

Stdlib only (and Python 3.9), and self-contained: nothing of lumberjack is importable
when it runs.
"""

from __future__ import annotations

import hashlib
import os
import runpy
import stat
import sys

#: Exit codes the access point acts on (sysexits.h): no file at PATH (it ships the agent
#: and asks again), a file that is not the agent of that sha256 (it refuses).
MISSING = 66
ALTERED = 65
#: More than any agent needs; a larger file is not the agent (and is not read whole).
MAX_BYTES = 64 << 20
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


def _refuse(code: int, message: str) -> int:
    sys.stderr.write(f"lumberjack-agent: {message}\n")
    return code


def _read(path: str) -> bytes:
    """The file's bytes, read once; OSError for a link, FIFO, device or a huge file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise OSError(f"{path} is larger than any agent")
    return data


def _in_memory(data: bytes) -> str:
    """A path to a sealed in-memory copy of `data` (zipimport reads the agent by path,
    module by module). Sealed: not even this account can change it once written."""
    try:
        fd = os.memfd_create("lumberjack-agent", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):  # Linux < 3.17: an unnamed file, unlinked already
        import tempfile

        fd = os.dup(tempfile.TemporaryFile().fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    try:
        import fcntl

        seals = 0
        for name in _SEALS:
            seals |= getattr(fcntl, name, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass  # the temporary file of an old kernel takes no seals
    return f"/proc/self/fd/{fd}"


def main(argv: list[str]) -> int:
    """SHA256 PATH ARGS...: run the agent at PATH with ARGS if its bytes have that sha256."""
    if len(argv) < 2:
        return _refuse(2, "usage: SHA256 PATH ARGS...")
    digest, path, args = argv[0], argv[1], argv[2:]
    try:
        data = _read(path)
    except FileNotFoundError:
        return _refuse(MISSING, f"no agent at {path}")
    except OSError as exc:
        return _refuse(ALTERED, f"refusing to run {path}: {exc}")
    found = hashlib.sha256(data).hexdigest()
    if found != digest:
        return _refuse(
            ALTERED,
            f"refusing to run {path}: its sha256 is {found}, not the agent's {digest}; "
            "something changed it at the site",
        )
    sys.argv = [path, *args]
    runpy.run_path(_in_memory(data), run_name="__main__")
    return 0


if __name__ == "__main__":  # as the `-c` program
    sys.exit(main(sys.argv[1:]))
