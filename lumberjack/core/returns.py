"""What a site may send back: the caps fetch and import both hold it to, the spool
path's job, and why an entry of the returned spool is refused.

Stdlib only: the transport reads it while a download runs, import reads it again
before anything is placed (the second line of defence), and the site's transfer helper
gets the numbers in its requests.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lumberjack.core.safepath import why_unsafe

#: Caps on what comes back, per job and per export; the first name of each wins, the
#: second is the name import honoured first (kept as an alias).
MAX_JOB_BYTES_ENV = "LUMBERJACK_RETURN_MAX_JOB_BYTES"
MAX_TOTAL_BYTES_ENV = "LUMBERJACK_RETURN_MAX_TOTAL_BYTES"
MAX_JOB_FILES_ENV = "LUMBERJACK_RETURN_MAX_JOB_FILES"
ALIASES = {
    MAX_JOB_BYTES_ENV: "LUMBERJACK_IMPORT_MAX_JOB_BYTES",
    MAX_TOTAL_BYTES_ENV: "LUMBERJACK_IMPORT_MAX_TOTAL_BYTES",
    MAX_JOB_FILES_ENV: "LUMBERJACK_IMPORT_MAX_JOB_FILES",
}
#: The fixed caps are ceilings for a file system large enough to take them. What bounds a
#: return by default is the room where it lands (`room_at`): a download is refused
#: before a byte moves when what the site offers is more than the free space of the
#: file system that will hold it, less a reserve. No number fixed here can suit every
#: disk (1 TiB would fill most state directories; a cap small enough for the smallest
#: one refuses honest work elsewhere), so the reserve, not these, keeps root's state
#: from being filled by a site.
DEFAULT_MAX_JOB_BYTES = 64 << 30
DEFAULT_MAX_TOTAL_BYTES = 1 << 40
DEFAULT_MAX_JOB_FILES = 100_000
#: What stays free on the file system a return lands on (root's state directory is
#: usually on / or /var, beside the system's logs, the schedd's spool and the ledger
#: itself, which must record the step): 1 GiB or 5% of the file system, whichever is
#: larger, above what the file system already keeps for root alone (free space is
#: counted as an unprivileged writer sees it). The variable sets another number of bytes.
KEEP_FREE_ENV = "LUMBERJACK_RETURN_KEEP_FREE_BYTES"
MIN_KEEP_FREE = 1 << 30
KEEP_FREE_SHARE = 20  # one part in 20: 5%
#: Linux NAME_MAX and PATH_MAX (bytes).
NAME_MAX = 255
PATH_MAX = 4096

#: HTCondor's hold code for a job whose output is over its MAX_TRANSFER_OUTPUT_MB
#: (MaxTransferOutputSizeExceeded, subcode 0): a job whose return is over a per-job cap
#: comes home held with it, as HTCondor holds only the job over its limit.
HOLD_OVER_CAP = 33

#: A job's directory in the remote spool (the schedd's own layout, see ap/remote_layout.py).
_JOB_DIR = re.compile(r"^(\d+)/(\d+)/cluster\1\.proc\2\.subproc0(?:/|$)")


class BadLimit(ValueError):
    """A cap variable that is not a number (callers raise their own one-line error)."""


@dataclass(frozen=True)
class Limits:
    """The caps, and the variable that sets each (named in every refusal)."""

    job_bytes: int = DEFAULT_MAX_JOB_BYTES
    total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    job_files: int = DEFAULT_MAX_JOB_FILES
    job_bytes_var: str = MAX_JOB_BYTES_ENV
    total_bytes_var: str = MAX_TOTAL_BYTES_ENV
    job_files_var: str = MAX_JOB_FILES_ENV

    @classmethod
    def from_env(
        cls, error: type[Exception] = BadLimit, environ: Mapping[str, str] | None = None
    ) -> Limits:
        """The caps the environment sets; `error` (one line) for a value that is not a
        non-negative whole number."""
        env = os.environ if environ is None else environ

        def read(name: str, default: int) -> tuple[int, str]:
            for var in (name, ALIASES[name]):
                value = _count_in(env, var, "bytes or files", error)
                if value is not None:
                    return value, var
            return default, name

        job_bytes, job_bytes_var = read(MAX_JOB_BYTES_ENV, DEFAULT_MAX_JOB_BYTES)
        total_bytes, total_bytes_var = read(MAX_TOTAL_BYTES_ENV, DEFAULT_MAX_TOTAL_BYTES)
        job_files, job_files_var = read(MAX_JOB_FILES_ENV, DEFAULT_MAX_JOB_FILES)
        return cls(job_bytes, total_bytes, job_files, job_bytes_var, total_bytes_var,
                   job_files_var)  # fmt: skip

    @property
    def file_bytes(self) -> int:
        """No one file may be larger than its job may return."""
        return self.job_bytes


@dataclass(frozen=True)
class Room:
    """The file system a return lands on: bytes free there and bytes to keep free."""

    path: str
    free: int
    keep: int
    keep_var: str = KEEP_FREE_ENV

    @property
    def usable(self) -> int:
        """What a return may take."""
        return max(0, self.free - self.keep)


def room_at(
    path: str, error: type[Exception] = BadLimit, environ: Mapping[str, str] | None = None
) -> Room:
    """The room on the file system holding `path` (which exists); `error` (one line) for
    a reserve variable that is not a non-negative whole number."""
    env = os.environ if environ is None else environ
    fs = os.statvfs(path)
    free = fs.f_bavail * fs.f_frsize  # as an unprivileged writer sees it
    keep = _count_in(env, KEEP_FREE_ENV, "bytes", error)
    if keep is None:
        keep = max(MIN_KEEP_FREE, fs.f_blocks * fs.f_frsize // KEEP_FREE_SHARE)
    return Room(path, free, keep)


def _count_in(env: Mapping[str, str], var: str, unit: str, error: type[Exception]) -> int | None:
    """The non-negative whole number `var` sets, None when unset; else `error`."""
    text = env.get(var)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise error(f"{var}={text!r} is not a number of {unit}") from None
    if value < 0:
        raise error(f"{var} must not be negative")
    return value


def jobs_over_cap(sizes: Iterable[tuple[str, int]], limits: Limits) -> dict[str, str]:
    """The jobs whose listed files (path, size) are over a per-job cap, each with why (to
    end "its return is ..." or "it returns ..."); the spool's own files are not a job's."""
    job_bytes: dict[str, int] = {}
    job_files: dict[str, int] = {}
    for path, size in sizes:
        job = job_of(path)
        if job is not None:
            job_bytes[job] = job_bytes.get(job, 0) + size
            job_files[job] = job_files.get(job, 0) + 1
    over = {}
    for job, size in job_bytes.items():
        if size > limits.job_bytes:
            over[job] = (f"returns {size} bytes, over the cap of {limits.job_bytes} bytes "
                         f"per job ({limits.job_bytes_var})")  # fmt: skip
        elif job_files[job] > limits.job_files:
            over[job] = (f"returns {job_files[job]} files, over the cap of {limits.job_files} "
                         f"files per job ({limits.job_files_var})")  # fmt: skip
    return over


def job_of(path: str) -> str | None:
    """The job ("C.P") a path of the returned spool belongs to; None for the spool's own
    files (job_queue.log), which count toward the export's total only."""
    match = _JOB_DIR.match(path)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def name_problem(name: object) -> str | None:
    """Why a returned name is refused (control characters, not UTF-8, `..`, absolute,
    too long for this system), or None."""
    reason = why_unsafe(name, printable=True)
    if reason is not None:
        return f"unsafe name ({reason})"
    assert isinstance(name, str)
    raw = name.encode("utf-8")
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        return "unsafe name (too long)"
    return None


#: Listing kinds (mode_kind) that are never fetched, and why.
KIND_PROBLEMS = {
    "l": "is a symbolic link",
    "p": "is a FIFO",
    "c": "is a device",
    "b": "is a device",
    "s": "is a socket",
    "d": "is a directory",
    "o": "is not a regular file",
}


def entry_problem(kind: str, links: int = 1) -> str | None:
    """Why a returned entry of listing kind `kind` with `links` names is refused."""
    if kind != "f":
        return KIND_PROBLEMS.get(kind, "is not a regular file")
    if links > 1:
        return "has other hard links (maybe to a file outside the spool)"
    return None


def mode_kind(mode: int) -> str:
    """The listing kind of a file mode (one letter, as `ls -l` shows it)."""
    for test, kind in (
        (stat.S_ISREG, "f"), (stat.S_ISLNK, "l"), (stat.S_ISDIR, "d"), (stat.S_ISFIFO, "p"),
        (stat.S_ISCHR, "c"), (stat.S_ISBLK, "b"), (stat.S_ISSOCK, "s"),
    ):  # fmt: skip
        if test(mode):
            return kind
    return "o"
