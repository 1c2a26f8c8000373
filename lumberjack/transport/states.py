"""What each end of a transfer holds, and the plan that makes the receiver match.

Pure parts (no connection): the helper's listings parsed into FileStates, the site's
listing checked before anything is fetched (the site is not trusted), the steps to send
(whole files, the rest of a file cut short, or only a mode fix), and the check after.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lumberjack.core.manifest import FileEntry
from lumberjack.core.returns import KIND_PROBLEMS, entry_problem, name_problem
from lumberjack.core.safepath import why_unsafe
from lumberjack.errors import RemoteError
from lumberjack.site import transfer_helper


@dataclass(frozen=True)
class FileState:
    """What one end holds at a path: kind f(ile), l(ink), d(ir), p (FIFO), c or b
    (device), s(ocket), o(ther); `links`: how many names the file has."""

    path: str
    kind: str
    size: int
    executable: bool
    sha256: str | None
    links: int = 1


@dataclass(frozen=True)
class Step:
    """Send `path` from byte `offset` (0: whole file; == size: only fix the mode)."""

    path: str
    offset: int
    size: int
    executable: bool
    sha256: str

    @property
    def length(self) -> int:
        return self.size - self.offset


@dataclass
class TransferReport:
    sent_files: int = 0
    sent_bytes: int = 0
    skipped_files: int = 0
    skipped_bytes: int = 0
    seconds: float = 0.0
    resumed_files: int = 0  # sent from where an interrupted run stopped
    #: (path, why) of what a download refused to take: skipped, never written here
    bad_entries: list[tuple[str, str]] = field(default_factory=list)
    #: job ("C.P") -> why: jobs a download left at the site, over a per-job cap
    over_cap: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        mib = self.sent_bytes / (1 << 20)
        rate = mib / self.seconds if self.seconds else 0.0
        return (
            f"sent {self.sent_files} files ({mib:.1f} MiB, {rate:.1f} MiB/s), "
            f"{self.skipped_files} already there"
        )


_SHA = re.compile(r"^[0-9a-f]{64}$")


def parse_listing(text: str, source: str) -> dict[str, FileState]:
    """The helper's scan output (JSON lines) as FileStates; RemoteError on anything odd."""
    states: dict[str, FileState] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            kind, path, size, executable, sha, *more = json.loads(line)
            links = more[0] if more else 1
            ok = (
                (kind == "f" or kind in KIND_PROBLEMS)
                and len(more) <= 1
                and isinstance(links, int)
                and links >= 0
                and isinstance(path, str)
                and isinstance(size, int)
                and size >= 0
                and isinstance(executable, bool)
                and (sha is None or (isinstance(sha, str) and _SHA.match(sha)))
            )
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise RemoteError(f"{source}: unreadable listing line {number}: {line[:80]!r}")
        states[path] = FileState(path, kind, size, executable, sha, links)
    return states


def check_site_path(path: str, source: str) -> str:
    """Refuse a name from the site that could escape the root or confuse a terminal."""
    if why_unsafe(path, printable=True) is not None:
        raise RemoteError(f"{source}: refusing unsafe file name {path!r}")
    return path


def check_download_listing(
    states: dict[str, FileState], max_size: int | None = None
) -> tuple[list[FileEntry], list[tuple[str, str]]]:
    """The site's files as (entries to fetch, (path, why) of those never fetched): an
    unsafe name, a symlink, a special file or a file with other hard links is skipped
    (the site is not trusted; nothing of it is written here). A file over `max_size`
    is listed without its sha256 and kept: the caller refuses it by its size."""
    entries, skipped = [], []
    for path, state in sorted(states.items()):
        problem = name_problem(path) or entry_problem(state.kind, state.links)
        unread = max_size is not None and state.size > max_size  # over the cap: not hashed
        if problem is None and state.sha256 is None and not unread:
            problem = "was listed without its sha256"
        if problem is not None:
            skipped.append((path, problem))
            continue
        entries.append(FileEntry(path, state.size, state.sha256 or "", state.executable))
    return entries, skipped


def plan(
    wanted: Iterable[FileEntry],
    have: dict[str, FileState],
    prefix_sha: Callable[[str, int], str] | None = None,
) -> tuple[list[Step], list[FileEntry]]:
    """What to send so that `have` matches `wanted`: (steps, entries already right).

    A file shorter than wanted whose bytes so far match is continued, not resent:
    `prefix_sha(path, n)` hashes the first n bytes at the sending end; without it the
    sender checks (it gets the receiver's sha256 and restarts at 0 on a mismatch).
    """
    steps: list[Step] = []
    done: list[FileEntry] = []
    for entry in wanted:
        state = have.get(entry.path)
        offset = 0
        if state is not None and state.kind == "f" and state.sha256 is not None:
            if state.size == entry.size and state.sha256 == entry.sha256:
                if state.executable == entry.executable:
                    done.append(entry)
                    continue
                offset = entry.size  # right bytes, wrong mode: a zero-length step fixes it
            elif 0 < state.size < entry.size and (
                prefix_sha is None or prefix_sha(entry.path, state.size) == state.sha256
            ):
                offset = state.size
        steps.append(Step(entry.path, offset, entry.size, entry.executable, entry.sha256))
    return steps, done


def verify_states(
    wanted: Iterable[FileEntry], have: dict[str, FileState], check_mode: bool = True
) -> list[str]:
    """Every file of `wanted` that `have` does not hold exactly (empty: all good)."""
    problems = []
    for entry in wanted:
        state = have.get(entry.path)
        if state is None or state.kind != "f":
            problems.append(f"{entry.path}: missing")
        elif state.size != entry.size:
            problems.append(f"{entry.path}: size {state.size} != {entry.size}")
        elif state.sha256 != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch")
        elif check_mode and state.executable != entry.executable:
            problems.append(f"{entry.path}: executable bit differs")
    return problems


def local_states(root: Path, paths: Iterable[str], sizes: dict[str, int]) -> dict[str, FileState]:
    """The local end's FileStates for `paths` below root (hashing files no longer than wanted)."""
    listing = io.StringIO()
    transfer_helper.scan(str(root), {"want": {p: sizes[p] for p in paths}}, listing)
    return parse_listing(listing.getvalue(), str(root))


# ---- the connection ------------------------------------------------------------------
