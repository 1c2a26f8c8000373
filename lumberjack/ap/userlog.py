"""The site's user log events: which ones reach the user's log, and appending each once.

A job's events come back in its own ``lumberjack-user.log``, written at the site, so
untrusted. HTCondor's text format (one event: a header line ``NNN (C.P.S) DATE TIME
text``, body lines, a line ``...``) is parsed here by a small strict parser instead of
``htcondor2.JobEventLog``: that reader follows a log as it grows, keeps no count of
what it skipped and was not written for hostile input; we need to know exactly which
bytes we keep so that what we append is byte for byte the site's well-formed events.

Kept: complete events of the job's own id, in order, and only those its final status
allows (a terminate event only for a job that completed: DAGMan believes these). Never
the site's abort event: the local schedd writes its own when the imported removed job
leaves its queue (with the site's RemoveReason, a result), as HTCondor writes one.
Dropped and counted: events of other jobs, truncated events, garbage between events,
events that contradict the job's status, the site's abort events.

Appending is recorded in the same step (``append_once``): before writing, the log's
size and the bytes to append go to a journal in root's import state; a rerun
after a crash finds those bytes after the recorded size and appends nothing twice.
The user's log is never truncated.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lumberjack.ap import result_attrs
from lumberjack.core.classad_text import site_text
from lumberjack.core.jobstatus import JobStatus
from lumberjack.core.records import JsonRecord
from lumberjack.errors import BadInput

_HEADER = re.compile(
    rb"(?P<code>[0-9]{3}) \((?P<cluster>[0-9]+)\.(?P<proc>[0-9]+)\.(?P<sub>[0-9]+)\) "
    rb"(?:[0-9]{2}/[0-9]{2}|[0-9]{4}-[0-9]{2}-[0-9]{2}) [0-9]{2}:[0-9]{2}:[0-9]{2}"
    rb"(?:\.[0-9]+)?(?:[+-][0-9]{2}:?[0-9]{2}|Z)?(?: .*)?"
)
_END = b"..."
#: Event codes HTCondor writes (ULogEventNumber): 000 submit .. 045 and a little room.
MAX_EVENT_CODE = 60
MAX_EVENT_LINES = 1000
MAX_EVENT_BYTES = 64 * 1024
TERMINATED, ABORTED = 5, 9
_ALLOWED_ONLY_IF = {TERMINATED: JobStatus.COMPLETED}
# Printable text and tabs only; anything else is not an event HTCondor wrote.
_BAD_BYTES = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass
class Events(JsonRecord):
    """What one job's returned log held: what is kept, what was dropped and why."""

    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    data: bytes = b""

    def to_json(self) -> dict:  # the bytes stay out of reports
        return {"kept": self.kept, "dropped": dict(self.dropped)}


def filter_events(data: bytes, cluster: int, proc: int, status: JobStatus | None) -> Events:
    """The well-formed events of job ``cluster.proc`` in ``data``, in order."""
    dropped: Counter[str] = Counter()
    kept: list[bytes] = []
    current: list[bytes] | None = None
    header = None
    garbage = False

    def close_garbage() -> None:
        nonlocal garbage
        if garbage:
            dropped["garbage"] += 1
            garbage = False

    lines = data.split(b"\n")
    last_unterminated = lines[-1] != b""
    if not last_unterminated:
        lines.pop()
    for i, line in enumerate(lines):
        if last_unterminated and i == len(lines) - 1:
            # no newline at the end: the event (or line) was cut off
            if current is not None or _HEADER.fullmatch(line):
                dropped["truncated"] += 1
                current = None
            elif line.strip():
                garbage = True
            break
        m = _HEADER.fullmatch(line)
        if m is not None:
            if current is not None:
                dropped["truncated"] += 1
            close_garbage()
            current, header = [line], m
            continue
        if current is None:
            if line.strip():
                garbage = True
            continue
        current.append(line)
        if len(current) > MAX_EVENT_LINES or sum(len(x) + 1 for x in current) > MAX_EVENT_BYTES:
            dropped["too long"] += 1
            current = None
            garbage = True  # the rest up to the next header is part of it
            continue
        if line != _END:
            continue
        event, current = current, None
        reason = _reject(event, header, cluster, proc, status)
        if reason:
            dropped[reason] += 1
        else:
            kept.append(b"\n".join(event) + b"\n")
    if current is not None:
        dropped["truncated"] += 1
    close_garbage()
    return Events(kept=len(kept), dropped=dict(dropped), data=b"".join(kept))


def _reject(
    event: list[bytes], header: re.Match, cluster: int, proc: int, status: JobStatus | None
) -> str | None:
    code = int(header["code"])
    if (int(header["cluster"]), int(header["proc"]), int(header["sub"])) != (cluster, proc, 0):
        return "other job"
    if code > MAX_EVENT_CODE:
        return "unknown event"
    if any(_BAD_BYTES.search(line) for line in event):
        return "control characters"
    try:
        b"\n".join(event).decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    if code == ABORTED:
        return "written by the local schedd"
    needed = _ALLOWED_ONLY_IF.get(code)
    if needed is not None and status is not needed:
        return "contradicts the job's status"
    return None


#: The eviction event HTCondor's shadow writes when a job's output transfer fails
#: (JobEvictedEvent: not checkpointed, no usage of its own, no bytes).
_EVICTED_BODY = (
    "Job was evicted.\n\t(0) CPU times\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
    "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
)


def held_events(
    events: Events, cluster: int, proc: int, reason: str, code: int, sub: int, when: float
) -> bytes:
    """What the user log gets for a job import holds because its outputs cannot be
    written: its events without a terminate (the job did not complete here), then what
    HTCondor writes when an output transfer fails, dated `when`: the error (021), the
    eviction (004) and the hold (012), each with the reason and codes."""
    kept = filter_events(events.data, cluster, proc, JobStatus.HELD).data
    date = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    job = f"({cluster:03d}.{proc:03d}.000) {date}"
    text = site_text(reason, result_attrs.TEXT)  # as the job's HoldReason says it
    codes = f"\tCode {code} Subcode {sub}\n...\n"
    added = (
        f"021 {job} Error from starter on the site:\n\t{text}\n{codes}"
        f"004 {job} {_EVICTED_BODY}...\n"
        f"012 {job} Job was held.\n\t{text}\n{codes}"
    )
    return kept + added.encode("utf-8", "replace")


def masked(data: bytes, mask: list[int] | None) -> bytes:
    """Of well-formed events (filter_events' or held_events' data), those whose event
    number is in `mask`: what the schedd writes to a DAG's nodes log (DAGManNodesMask;
    DAGMan leaves out e.g. file transfer events). None: all of them."""
    if mask is None:
        return data
    wanted = {b"%03d" % n for n in mask}
    return b"".join(e for e in _EVENT_END.split(data) if e and e[:3] in wanted)


#: Between two events: a split here keeps each event's closing "..." line with it.
_EVENT_END = re.compile(rb"(?<=\n\.\.\.\n)")


# ------------------------------------------------------------------- appending once


def journal_path(state_dir: Path, job_id: str, dest: str) -> Path:
    tag = hashlib.sha256(dest.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return state_dir / "events" / f"{job_id}-{tag}.json"


def append_once(log_fd: int, data: bytes, journal: Path, *, after_append=None) -> int:
    """Append ``data`` to the open log ``log_fd`` unless a journal says it is there.

    Returns the bytes written (0 when an earlier run appended them). ``after_append`` is
    called between the append and the record that it is done (tests crash there).
    """
    if not data:
        return 0
    digest = hashlib.sha256(data).hexdigest()
    entry = _read_journal(journal)
    if entry is not None and entry.get("sha256") == digest:
        if entry.get("done"):
            return 0
        found = _find_after(log_fd, data, int(entry["offset"]))
        if found == len(data):
            _write_journal(journal, {**entry, "done": True})
            return 0
        if found:  # our own append was cut short at the end of the log: finish it
            written = _append(log_fd, data[found:])
            if after_append:
                after_append()
            _write_journal(journal, {**entry, "done": True})
            return written
    offset = os.fstat(log_fd).st_size
    _write_journal(journal, {"offset": offset, "length": len(data), "sha256": digest})
    written = _append(log_fd, data)
    if after_append:
        after_append()
    _write_journal(journal, {"offset": offset, "length": len(data), "sha256": digest, "done": True})
    return written


def _find_after(fd: int, data: bytes, offset: int) -> int:
    """len(data) if ``data`` is in the log after ``offset``; the length of a prefix of
    it that ends the log (a cut-short append); else 0."""
    size = os.fstat(fd).st_size
    if size <= offset:
        return 0
    tail = os.pread(fd, size - offset, offset)
    if data in tail:
        return len(data)
    for k in range(min(len(data) - 1, len(tail)), 0, -1):
        if tail.endswith(data[:k]):
            return k
    return 0


def _append(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.fsync(fd)
    return len(data)


def _read_journal(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: unreadable event journal ({exc})") from exc
    return entry if isinstance(entry, dict) else None


def _write_journal(path: Path, entry: dict) -> None:
    from lumberjack.ap.bundle import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps(entry, sort_keys=True).encode(), mode=0o600)


def check_log_file(fd: int, dest: str) -> None:
    """Refuse to append to anything but a plain file of one name."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"user log {dest} is not a regular file; not appending to it")
    if st.st_nlink > 1:
        raise BadInput(f"user log {dest} has other hard links; not appending to it")
