"""A job_queue.log as `inspect` reads it: only a regular file of at most --max-size, every
failure one line naming the file; and `inspect --json FILE` without the command line's
machinery (click and the other commands' imports), which `python -m lumberjack` tries
first (quick_inspect_json)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, TypeVar

from lumberjack.core import crashpoints, jobqueuelog, jobqueuelog_onepass
from lumberjack.core.message_text import printable, shortened
from lumberjack.core.units import format_size, parse_size
from lumberjack.errors import BadInput

T = TypeVar("T")

#: The largest log `inspect` reads unless --max-size says more (it is held in memory).
DEFAULT_MAX_SIZE = "1GB"


def load_ads(path: str, max_bytes: int | None = None) -> dict[str, jobqueuelog.Ad]:
    """The ads of the log at `path`, with every failure turned into a one-line BadInput
    naming the file. Only a regular file of at most `max_bytes` is read: a device or a
    FIFO would be read forever (opened non-blocking, so a FIFO does not hang the open)."""
    return _read(path, max_bytes, jobqueuelog_onepass.read_ads)


def load_json(path: str, max_bytes: int | None = None) -> str:
    """`inspect --json`'s document for the log at `path` (load_ads' ads as
    {"ads": {KEY: {NAME: VALUE}}}), failing as load_ads does."""
    return _read(path, max_bytes, jobqueuelog_onepass.read_json)


def _read(path: str, max_bytes: int | None, reader: Callable[[BinaryIO, str], T]) -> T:
    limit = parse_size(DEFAULT_MAX_SIZE) if max_bytes is None else max_bytes
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            _check_regular(path, os.fstat(fd), limit)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as handle:
            return reader(handle, path)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except PermissionError:
        raise BadInput(f"{path}: permission denied") from None
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except jobqueuelog.JobQueueLogError as exc:
        raise BadInput(log_error(path, exc)) from None


def quick_inspect_json(args: Sequence[str]) -> bool:
    """Print `inspect --json FILE`'s answer and say True when `args` are exactly that
    (in either order, no other option) and all goes well; else False, and the command
    line does it all again, failures and their messages included (nothing was printed:
    an error stops before the document is written)."""
    words = list(args)
    if len(words) != 3 or words[0] != "inspect" or "--json" not in words[1:]:
        return False
    words.remove("--json")
    path = words[1]
    if path.startswith("-"):
        return False  # an option
    try:
        crashpoints.armed()  # a misspelt crash point: the command line says so
        document = load_json(path)
    except Exception:  # noqa: BLE001 - the command line says what went wrong
        return False
    try:
        sys.stdout.write(document)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): nothing to say, as click
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the rest goes too
    return True


def _check_regular(path: str, info: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise BadInput(f"{cell(path)}: is {what}, not a job_queue.log")
    if info.st_size > limit:
        raise BadInput(
            f"{cell(path)}: {format_size(info.st_size)} is more "
            f"than --max-size {format_size(limit)}; give a larger --max-size"
        )


#: How much of a bad line an error shows.
EXCERPT_CHARS = 60


def log_error(path: str, exc: jobqueuelog.JobQueueLogError) -> str:
    """One short line: the file, the line number, what is wrong, the start of the line."""
    if exc.line is None:
        return f"{cell(path)}: {shorten(exc.problem, 2 * EXCERPT_CHARS)}"
    where = f"{cell(path)} line {exc.line}"
    if exc.text is None:
        return f"{where}: {shorten(exc.problem, 2 * EXCERPT_CHARS)}"
    if _binary(exc.text):
        return f"{where}: binary data, not a job_queue.log"
    return f"{where}: {shorten(exc.problem, 2 * EXCERPT_CHARS)}: {_excerpt(exc.text)}"


def _binary(text: str) -> bool:
    start = text[:200]
    odd = sum(1 for c in start if not c.isprintable() and c != "\t")
    return "\x00" in start or odd > len(start) // 10


def shorten(text: str, limit: int) -> str:
    return shortened(cell(text), limit)


def _excerpt(text: str) -> str:
    return '"' + shorten(text, EXCERPT_CHARS) + '"'


def cell(value: Any) -> str:
    """One table cell: no control characters (they would break the layout) and no lone
    surrogates from undecodable bytes (they cannot be printed)."""
    if value is None:
        return "-"
    text = str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return printable(text)
