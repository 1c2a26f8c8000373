"""The queue handed to the schedd's import: a fresh directory only its owner may open.

The schedd opens `job_queue.log` of the import directory read-write as the user it
authenticated (the job owner). Root makes that directory new in its own import state
(a parent no user can write), writes the log through descriptors, gives the file and
then the directory to the owner last, and never follows either path again: afterwards
the directory's entries are removed as the owner and the directory itself through its
parent's descriptor.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.contract import QUEUE_LOG
from lumberjack.host.identity import Owner, acting_as

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def handed_over(parent: Path, ads: Mapping[str, jql.Ad], owner: Owner | None) -> Iterator[Path]:
    """A directory under `parent` holding `ads` as job_queue.log, the owner's while the
    block runs; removed afterwards."""
    parent_fd = os.open(parent, _DIR)
    name = f"merge-{secrets.token_hex(8)}"
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        dir_fd = os.open(name, _DIR, dir_fd=parent_fd)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(QUEUE_LOG, flags, 0o600, dir_fd=dir_fd), "wb") as fh:
                jqlw.write_log_to(fh, ads)
                if owner is not None:
                    os.fchown(fh.fileno(), owner.uid, owner.gid)
            if owner is not None:
                os.fchown(dir_fd, owner.uid, owner.gid)  # last: from here on it is theirs
            yield parent / name
        finally:
            with acting_as(owner):
                _empty(dir_fd)
            os.close(dir_fd)
            try:
                os.rmdir(name, dir_fd=parent_fd)
            except OSError:
                pass  # the owner put something back meanwhile: cleanup removes it later
    finally:
        os.close(parent_fd)


def _empty(dir_fd: int) -> None:
    """Remove everything inside the open directory, never following a link."""
    for _root, dirs, files, root_fd in os.fwalk(".", topdown=False, dir_fd=dir_fd):
        for entry in files:
            _unlink_quietly(entry, root_fd)
        for entry in dirs:
            try:
                os.rmdir(entry, dir_fd=root_fd)
            except NotADirectoryError:  # a link to a directory is listed with dirs
                _unlink_quietly(entry, root_fd)
            except OSError:
                pass


def _unlink_quietly(entry: str, dir_fd: int) -> None:
    try:
        os.unlink(entry, dir_fd=dir_fd)
    except OSError:
        pass
