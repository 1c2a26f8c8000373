"""The agent's files: the plan it reads, the reports it writes (each its own file, never
the plan: see lumberjack/core/contract.py), and the modes of an export's tree.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Any, TypeVar

from lumberjack.core.contract import ExportLayout, LaunchPlan, decode, encode

T = TypeVar("T")


class AgentError(Exception):
    """A one-line reason the command could not be done."""


def read_plan(layout: ExportLayout) -> LaunchPlan | None:
    """The export's (or lease's) launch.json, checked; None when there is none."""
    return read_contract(LaunchPlan, layout.launch_plan, None)


def read_contract(cls: type[T], path: str, default: Any) -> T | Any:
    """A contract file (see core/contract.py) read strictly; `default` when absent."""
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        return default
    return decode(cls, text, path)


def write_contract(path: str, obj: Any) -> None:
    """A report of the agent, written whole (a reader never sees half of it)."""
    write_whole(Path(path), encode(obj))


def write_whole(path: Path, text: str) -> None:
    """`text` at `path`, 0600, moved into place whole: a reader (the agent, a pilot, the
    head node's poll of a lease's joined/) sees the old file or the new one, never half.
    The partial file's name starts with "." and holds "~", the two marks of a name the
    head node's poll passes over."""
    partial = path.with_name(f".{path.name}~new")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(partial, path)


def make_private(root: str) -> int:
    """Take group and other bits off everything under `root` (and root itself): other
    accounts on the site read no input, output, queue, key or token. Files that arrived
    with a wider mode (the transfer keeps the executable bit, and the ssh session's umask
    decides the rest) are narrowed here; the pool's own daemons run as this account, so
    they lose nothing. Links are not followed. Returns how many modes changed."""
    changed = 0
    for _, _, files, dir_fd in os.fwalk(root):  # each directory comes as "." once
        for name in (".", *files):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
                continue
            os.chmod(name, stat.S_IMODE(st.st_mode) & 0o700, dir_fd=dir_fd)
            changed += 1
    return changed


def make_signing_key(path: Path) -> None:
    """The pool's signing key (0600), once, where no collector has made it yet: a joined
    export's (it runs none), an allocation lease's (its collector starts with a round)."""
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(48))
