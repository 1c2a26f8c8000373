"""Reading a file its owner could replace: never through a link, never a FIFO or a
device, never more than a bound.

Root reads files of a user's bundle (the manifest, the queues) at export, ship, sync and
import. Each such file is opened here: with the owner's identity when one is given
(identity.acting_as: the kernel decides what the owner may open), O_NOFOLLOW (a link at
the name is refused), O_NONBLOCK (a FIFO with no writer does not hang the open), then
checked on the descriptor: a regular file of at most `max_bytes`, which it may not
outgrow while it is read. Every refusal is one BadInput line naming the file; a missing
file stays FileNotFoundError, for the caller to say what is missing.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from lumberjack.errors import BadInput
from lumberjack.host.identity import Owner, acting_as

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class BoundedFile:
    """A regular file open for reading that refuses to give more than `limit` bytes."""

    def __init__(self, handle: BinaryIO, name: str, limit: int | None) -> None:
        self.handle, self.name, self.limit, self.total = handle, name, limit, 0

    def read(self, size: int = -1, /) -> bytes:
        if self.limit is not None and (size < 0 or size > self.limit - self.total + 1):
            size = self.limit - self.total + 1  # one byte more tells a file that grew
        data = self.handle.read(size)
        self.total += len(data)
        if self.limit is not None and self.total > self.limit:
            raise BadInput(f"{self.name} grew past {self.limit} bytes while read; refusing it")
        return data

    def seek(self, offset: int, /) -> int:
        self.total = offset
        return self.handle.seek(offset)

    def fileno(self) -> int:
        return self.handle.fileno()

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> BoundedFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_regular(
    path: Path | str, what: str, max_bytes: int | None = None, owner: Owner | None = None
) -> BoundedFile:
    """`path` open for reading as `owner` (None: as this process), refused unless it is a
    regular file (not a link) of at most `max_bytes` (None: the caller bounds its reads)."""
    name = f"{what} {path}"
    try:
        with acting_as(owner):
            fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput(f"{name} is a symbolic link; not following it") from None
        raise BadInput(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{name} is not a regular file; refusing to read it")
        if max_bytes is not None and info.st_size > max_bytes:
            raise BadInput(
                f"{name} is {info.st_size} bytes, more than the {max_bytes} allowed; "
                "refusing to read it"
            )
        os.set_blocking(fd, True)
        return BoundedFile(os.fdopen(fd, "rb"), name, max_bytes)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, what: str, max_bytes: int, owner: Owner | None = None) -> bytes:
    """The whole of `path`, opened and bounded as open_regular does."""
    with open_regular(path, what, max_bytes, owner) as handle:
        try:
            return handle.read()
        except OSError as exc:
            raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from None
