"""Putting one job's outputs in place as its owner, or holding the job with the reason.

The returned files are opened by whoever may read the returned spool (root for a spool
fetched into root's own state; the owner for a bundle the owner handed in). Everything
on the user's side, every directory made, file written and log appended to, happens
with the owner's identity (identity.acting_as), so the kernel says what is allowed, as
it does for HTCondor's own output transfer. Every destination of a job is checked before
the first is written: a job with one that its owner cannot write gets nothing placed
and comes home held with the reason ("cannot write /x/victim.conf as alice: Permission
denied", HoldReasonCode 12 as HTCondor's transfer failure).

Which jobs are in place is journaled (PlacedJournal) in root's import state, so a rerun
after a crash places nothing twice; user-log events have their own journal
(userlog.append_once).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lumberjack.ap import safe_write, userlog
from lumberjack.ap.checkpoint_home import Checkpoint
from lumberjack.ap.job_paths import JobPaths
from lumberjack.ap.placement import Placement
from lumberjack.core.jobstatus import JobStatus
from lumberjack.errors import BadInput
from lumberjack.host.identity import Owner, acting_as

PLACED = "placed.log"  # in the import state: jobs whose outputs are in place, one a line
LEGACY_PLACED = "placed.json"  # the same as one JSON list (an import begun by an older version)
#: The placed journal is fsynced after this many jobs (and at the end).
PLACED_SYNC_EVERY = 1000
#: HTCondor's HoldReasonCode for a failed output transfer (TransferOutputError).
HOLD_TRANSFER_OUTPUT = 12


@dataclass
class JobPlan:
    paths: JobPaths
    placements: list[Placement]
    job_dir: Path
    status: JobStatus | None
    events: userlog.Events | None = None
    #: when the site's results came back (a hold event's date: the same on every rerun)
    returned_at: float = 0.0
    #: an unfinished job's site checkpoint, or why it starts anew (checkpoint_home.plan)
    checkpoint: Checkpoint | str | None = None
    #: why the job is held here whatever its destinations (its return over a cap)
    held: CannotPlace | None = None


@dataclass
class Placed:
    files: int = 0
    bytes: int = 0
    events: int = 0


class CannotPlace(Exception):
    """A job import cannot place (a destination the owner may not write, a return over
    a cap): it is held with this reason, HTCondor's hold code and subcode."""

    def __init__(self, reason: str, code: int, hold_code: int = HOLD_TRANSFER_OUTPUT) -> None:
        super().__init__(reason)
        self.reason, self.errno, self.hold_code = reason, code, hold_code


def place_job(
    plan: JobPlan,
    state_dir: Path,
    owner: Owner | None,
    owner_name: str,
    reader: Owner | None,
    after_append: Callable[[], None] | None = None,
) -> Placed:
    """Put one job's outputs in place and append its user-log events (once).

    `owner` acts on the user's side, `reader` reads the returned files. Raises
    CannotPlace (nothing of the job placed when the check finds it) or BadInput.
    """
    done = Placed()
    if not plan.placements:  # nothing came back to place: no identity to take on
        if plan.held is not None:
            raise plan.held
        return done
    sources: dict[str, tuple[int, os.stat_result]] = {}
    try:
        with acting_as(reader):
            for p in plan.placements:
                if p.kind != "userlog":
                    sources[p.source] = safe_write.open_returned(str(plan.job_dir / p.source))
        logs: list[tuple[int, Placement]] = []
        held = plan.held
        try:
            with acting_as(owner):
                for p in plan.placements:  # opened (and checked) before anything is written
                    if p.kind == "userlog":
                        logs.append((_open_user_log(Path(p.dest), owner_name), p))
                try:
                    for p in plan.placements if held is None else ():
                        _check_destination(p, owner_name)
                except CannotPlace as exc:
                    held = exc
                for p in plan.placements if held is None else ():
                    if p.kind == "userlog":
                        continue
                    fd, st = sources[p.source]
                    _write_output(fd, st, Path(p.dest), owner_name)
                    done.files += 1
                    done.bytes += st.st_size
            # The event journal is root's: appended through the descriptor the owner opened.
            if held is not None:
                _log_hold(plan, state_dir, logs, held)
                raise held
            for fd, p in logs:
                assert plan.events is not None
                journal = userlog.journal_path(state_dir, plan.paths.job_id, p.dest)
                written = userlog.append_once(fd, _for_log(plan, p, plan.events.data), journal,
                                              after_append=after_append)  # fmt: skip
                done.events += plan.events.kept if written else 0
                done.files += 1
                done.bytes += written
        finally:
            for fd, _ in logs:
                os.close(fd)
    finally:
        for fd, _ in sources.values():
            os.close(fd)
    return done


def _log_hold(
    plan: JobPlan, state_dir: Path, logs: list[tuple[int, Placement]], exc: CannotPlace
) -> None:
    """The user log learns that the job is held, and why, as from HTCondor itself."""
    if plan.events is None:
        return
    data = userlog.held_events(plan.events, plan.paths.cluster, plan.paths.proc, exc.reason,
                               exc.hold_code, exc.errno, plan.returned_at)  # fmt: skip
    for fd, p in logs:
        journal = userlog.journal_path(state_dir, plan.paths.job_id, f"held:{p.dest}")
        userlog.append_once(fd, _for_log(plan, p, data), journal)


def _for_log(plan: JobPlan, p: Placement, data: bytes) -> bytes:
    """The events `p`'s log takes: a DAG's nodes log only those DAGMan asked for."""
    if p.dest != plan.paths.dagman_nodes_log or p.dest == plan.paths.user_log:
        return data
    return userlog.masked(data, plan.paths.dagman_nodes_mask)


def _check_destination(p: Placement, owner_name: str) -> None:
    """As the owner: the destination's nearest existing directory must be one the owner
    may write, and an existing destination a file the owner may write (HTCondor's own
    transfer opens it for writing as the owner; a missing directory it makes, as 25.x's
    shadow makes the directory of a remapped output: the conformance suite shows it)."""
    dest = Path(p.dest)
    try:
        # A link at the name itself is replaced by the new file (never written through).
        st = os.lstat(dest)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot(dest, owner_name, exc) from None
    if st is not None and not stat.S_ISLNK(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise CannotPlace(f"cannot write {dest} as {owner_name}: it is a directory",
                              errno.EISDIR)  # fmt: skip
        if not os.access(dest, os.W_OK, effective_ids=True):
            raise _cannot(dest, owner_name, PermissionError(errno.EACCES, "Permission denied"))
    parent = dest.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CannotPlace(f"cannot write {dest} as {owner_name}: {parent} is not a directory",
                          errno.ENOTDIR)  # fmt: skip
    if not os.access(parent, os.W_OK | os.X_OK, effective_ids=True):
        raise _cannot(dest, owner_name, PermissionError(errno.EACCES, "Permission denied"))


def _cannot(dest: Path, owner_name: str, exc: OSError) -> CannotPlace:
    reason = exc.strerror or str(exc)
    return CannotPlace(f"cannot write {dest} as {owner_name}: {reason}", exc.errno or 0)


def _write_output(fd: int, st: os.stat_result, dest: Path, owner_name: str) -> None:
    try:
        dir_fd = safe_write.open_dir(str(dest.parent), create=True)
        try:
            executable = bool(st.st_mode & 0o111)
            safe_write.write_file(dir_fd, dest.name, fd, st.st_size, executable)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise _cannot(dest, owner_name, exc) from None
    except BadInput as exc:  # a directory in the way, a file that changed while copied
        raise CannotPlace(f"cannot write {dest} as {owner_name}: {exc}", errno.EPERM) from None


def _open_user_log(dest: Path, owner_name: str) -> int:
    """The user log opened for appending as the owner: a link, FIFO, device or a file
    with other hard links is not appended to (the job is held instead)."""
    try:
        dir_fd = safe_write.open_dir(str(dest.parent), create=True)
        try:
            fd = safe_write.open_log(dir_fd, dest.name)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise _cannot(dest, owner_name, exc) from None
    except BadInput as exc:
        raise CannotPlace(f"cannot append to {dest} as {owner_name}: {exc}", errno.EPERM) from None
    try:
        userlog.check_log_file(fd, str(dest))
    except BadInput as exc:
        os.close(fd)
        raise CannotPlace(f"cannot append to {dest} as {owner_name}: {exc}", errno.EPERM) from None
    return fd


def read_placed(state_dir: Path) -> set[str]:
    """Jobs an earlier run of this import put in place (so they are not placed again).

    A last line without its newline is a write a crash cut short: that job is placed
    again, which is harmless (see PlacedJournal).
    """
    placed: set[str] = set()
    legacy = state_dir / LEGACY_PLACED
    if legacy.exists():
        placed.update(json.loads(legacy.read_text()))
    try:
        text = (state_dir / PLACED).read_text()
    except FileNotFoundError:
        return placed
    lines = text.split("\n")
    placed.update(line for line in lines[:-1] if line)  # lines[-1]: "" or a cut-short line
    return placed


class PlacedJournal:
    """Append-only record of the jobs whose outputs are in place: one job id a line.

    One write per job, fsynced every PLACED_SYNC_EVERY jobs and at the end; rewriting a
    whole list per job was quadratic. A process crash loses nothing written (the kernel
    holds it). A power cut may lose the lines since the last fsync; those jobs are then
    placed again on the next run, which is harmless: a regular output is the same returned
    file renamed into place again (atomic, same content), and user-log events have their
    own journal (userlog.append_once) that keeps them from being appended twice.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        self.unsynced = 0

    def __enter__(self) -> PlacedJournal:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.path, flags, 0o600)
        size = os.fstat(self.fd).st_size
        if size and os.pread(self.fd, 1, size - 1) != b"\n":
            # A line a crash cut short (read_placed skipped it): drop it, so that ending
            # it with the next line cannot turn "7.1" of "7.12" into a job id.
            whole = os.pread(self.fd, size, 0)
            os.ftruncate(self.fd, whole.rfind(b"\n") + 1)
        return self

    def add(self, job_id: str) -> None:
        line = f"{job_id}\n".encode()
        if os.write(self.fd, line) != len(line):
            raise OSError(f"{self.path}: short write")
        self.unsynced += 1
        if self.unsynced >= PLACED_SYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        if self.unsynced:
            os.fsync(self.fd)
            self.unsynced = 0

    def __exit__(self, *exc: object) -> None:
        try:
            self.sync()
        finally:
            os.close(self.fd)
