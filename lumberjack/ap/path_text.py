"""Lexical POSIX paths, never looking at the disk.

Both sides of the path map (rewriting at export, placing outputs at import) resolve a
job's relative paths against its Iwd the same way HTCondor does: join, then normalise
lexically (``..`` is common in submit files and no symlink is followed).
"""

from __future__ import annotations

import functools
import posixpath
from typing import Optional

from lumberjack.core.message_text import shown
from lumberjack.errors import BadInput

# The procs of a cluster name the same few paths over and over (Cmd, inputs, logs):
# remembering the last few thousand answers saves most of the work at 100,000 jobs.
CACHE_SIZE = 4096


@functools.lru_cache(maxsize=CACHE_SIZE)
def normpath(path: str) -> str:
    """``posixpath.normpath`` as Linux reads paths: a leading "//" is just "/"."""
    norm = posixpath.normpath(path)
    # POSIX leaves a leading "//" implementation-defined, so normpath keeps it.
    return "/" + norm.lstrip("/") if norm.startswith("/") else norm


def norm_abs(path: str, what: str) -> str:
    """Lexically normalised absolute POSIX path; BadInput when not absolute."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise BadInput(f"{what} {shown(str(path))} is not an absolute path")
    if "\x00" in path:
        raise BadInput(f"{what} contains a NUL character")
    return normpath(path)


def resolve(path: str, iwd: str, what: str) -> str:
    """``path`` as an absolute local path: relative ones resolve against the job's Iwd."""
    return norm_abs(path if path.startswith("/") else iwd + "/" + path, what)


def relative_to(path: str, root: str) -> Optional[str]:
    """``path`` relative to ``root`` ('' when equal), or None when outside it."""
    if path == root:
        return ""
    prefix = root if root.endswith("/") else root + "/"
    if path.startswith(prefix):
        return path[len(prefix) :]
    return None


def join(base: str, rel: str) -> str:
    """``base`` + ``/rel``; ``base`` alone when ``rel`` is empty; no "//" after a root "/"."""
    return base.rstrip("/") + "/" + rel if rel else base
