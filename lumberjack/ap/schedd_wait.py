"""When the schedd's answer comes too late: settle what it did from its own state.

The bindings give the schedd 20 s to answer an export, an unexport or an import (a fixed
socket timeout in DCSchedd); a big export takes the schedd longer, and it goes on and
finishes after the client gave up ("DCSchedd::exportJobs:6004:Can't read response ad").
Such a failure says nothing about what the schedd did. Here lumberjack waits until the
schedd answers again (it does one thing at a time: while it exports, it answers no
query), then reads the outcome from the queue and from the export's own job_queue.log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lumberjack.ap.bundle import MAX_QUEUE_BYTES, read_queue_log
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.contract import QUEUE_LOG
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.host.bounded_read import open_regular
from lumberjack.host.identity import Owner

T = TypeVar("T")

# The request reached the schedd; its answer did not come back in time (the read of the
# reply timed out). The schedd may have done all of it.
_MAY_HAVE_ACTED = ("can't read response ad", "timed out", "timeout")
# The schedd, busy with something long, did not let a new connection in in time. "No
# result ad" is the bindings' text when the command could not even be started (DCSchedd
# returns nothing and says nothing): the request never reached the schedd.
_BUSY = ("secman:2007", "failed to read resume session", "failed to connect", "no result ad")


def may_have_acted(text: str) -> bool:
    """True when a failed call's text says the request was sent and no answer came in
    time: what the schedd did must be read from its state, not guessed."""
    low = text.lower()
    return any(mark in low for mark in _MAY_HAVE_ACTED)


def schedd_busy(text: str) -> bool:
    """True when a failed call's text says the schedd did not answer in time (busy),
    rather than that it refused: asking again later is right."""
    low = text.lower()
    return may_have_acted(text) or any(mark in low for mark in _BUSY)


@dataclass(frozen=True)
class Patience:
    """How long to wait for the schedd, and how: delays from `first` doubling up to
    `most` seconds, for `limit` seconds in all."""

    limit: float = 600.0
    first: float = 1.0
    most: float = 15.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def delays(self) -> Iterable[float]:
        """Each pause before the next try, until the limit is spent."""
        deadline = self.clock() + self.limit
        delay = self.first
        while (left := deadline - self.clock()) > 0:
            yield min(delay, left)
            delay = min(delay * 2, self.most)


#: the wait for a schedd that still works on a big export: up to 10 minutes
PATIENCE = Patience()


def _pauses(patience: Patience) -> Iterator[float]:
    """No pause before the first try, then patience's delays (taken lazily: the clock
    moves as they are slept)."""
    yield 0.0
    yield from patience.delays()


def retry_while_busy(call: Callable[[], T], patience: Patience) -> T:
    """`call()`, asked again while the schedd is busy (schedd_busy); any other failure,
    and the last one when patience runs out, is raised as it came."""
    pauses = iter(patience.delays())
    while True:
        try:
            return call()
        except Exception as exc:
            pause = next(pauses, None) if schedd_busy(str(exc)) else None
            if pause is None:
                raise
            patience.sleep(pause)


def wait_for_answer(ask: Callable[[], T], patience: Patience, what: str) -> T:
    """`ask()` once the schedd answers: asked again after any failure (it answered a
    moment ago, so a failure now is its being busy) until patience runs out."""
    last: Exception | None = None
    for pause in _pauses(patience):
        if pause:
            patience.sleep(pause)
        try:
            return ask()
        except Exception as exc:  # the bindings raise HTCondorException, among others
            last = exc
    raise LumberjackError(
        f"the schedd did not answer {what} within {patience.limit:.0f} s: {last}"
    ) from last


@dataclass(frozen=True)
class LogLook:
    """One look at an export's job_queue.log: `missing` the expected jobs it lacks,
    `problem` why it is not (yet) a whole log, `stamp` to see whether it changed."""

    procs: int
    clusters: int
    missing: tuple[str, ...]
    problem: str
    stamp: tuple[int, int]

    @property
    def complete(self) -> bool:
        return not self.problem and not self.missing


def look_at_log(log: Path, expected: Collection[str], reader: Owner | None = None) -> LogLook:
    """What `log` holds of the jobs `expected` ("C.P"), read with lumberjack's reader as
    `reader` (bounded_read): a log with an unfinished transaction, or unreadable, is not
    complete."""
    try:
        with open_regular(log, "export log", MAX_QUEUE_BYTES, reader) as handle:
            info = os.fstat(handle.fileno())
            stamp = (info.st_size, info.st_mtime_ns)
            records = jql.parse_file(handle, str(log))
        ads = jql.replay(records, source=str(log))
    except FileNotFoundError:
        return LogLook(0, 0, tuple(expected), f"{log} does not exist", (-1, -1))
    except (OSError, jql.JobQueueLogError, BadInput) as exc:
        return LogLook(0, 0, tuple(expected), str(exc), (-1, -1))
    bounds = [r.op for r in records if r.op in (jql.OP_BEGIN_TRANSACTION, jql.OP_END_TRANSACTION)]
    open_txn = bool(bounds) and bounds[-1] == jql.OP_BEGIN_TRANSACTION
    kinds = [jql.key_kind(k) for k in ads]
    present = {k for k in ads if jql.key_kind(k) == "proc"}
    missing = tuple(j for j in expected if j not in present)
    return LogLook(
        procs=kinds.count("proc"),
        clusters=kinds.count("cluster"),
        missing=missing,
        problem=f"{log} ends in an unfinished transaction" if open_txn else "",
        stamp=stamp,
    )


def settle_export(
    query: Callable[[str, list[str]], list[Any]],
    clusters: list[int],
    expected: Collection[str],
    log: Path,
    patience: Patience,
    reader: Owner | None = None,
) -> LogLook:
    """After an export the schedd did not answer in time: its whole log when the schedd
    did export every job `expected` (each Managed "External" by "Lumberjack") and wrote
    all of them to `log`; LumberjackError (one line) saying what is not so otherwise.

    `query(constraint, projection)` asks the schedd (the bindings' Schedd.query)."""
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
    projection = ["ClusterId", "ProcId", "Managed", "ManagedManager"]
    ads = wait_for_answer(lambda: list(query(constraint, projection)), patience, "a query")
    held = {
        f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
        for ad in ads
        if ad.get("Managed") == "External" and ad.get("ManagedManager") == "Lumberjack"
    }
    not_held = [j for j in expected if j not in held]
    if not_held:
        raise LumberjackError(
            f"the schedd did not export {len(not_held)} of {len(expected)} jobs "
            f"(first: {not_held[0]})"
        )
    # The schedd answers, so its export is over; the log is read until it is whole and
    # still (a file system may show the last writes late).
    previous = None
    for pause in _pauses(patience):
        if pause:
            patience.sleep(pause)
        look = look_at_log(log, expected, reader)
        if look.complete and previous is not None and look.stamp == previous.stamp:
            return look
        previous = look
    why = previous.problem if previous and previous.problem else ""
    if previous and previous.missing:
        why = f"{log} lacks {len(previous.missing)} jobs (first: {previous.missing[0]})"
    raise LumberjackError(f"the schedd's export log is not whole: {why or 'it kept changing'}")


def settle_import(
    query: Callable[[str, list[str]], list[Any]], import_dir: Path, patience: Patience
) -> int:
    """After an import the schedd did not answer in time: the number of jobs it took
    back when no job of `import_dir`'s log is still exported by lumberjack (the schedd
    clears Managed as it merges them); LumberjackError otherwise."""
    try:
        ads = read_queue_log(import_dir / QUEUE_LOG)
    except (OSError, jql.JobQueueLogError, BadInput) as exc:
        raise LumberjackError(f"cannot read the import's own log: {exc}") from exc
    jobs = [k for k in ads if jql.key_kind(k) == "proc"]
    clusters = sorted({jql.key_numbers(k)[0] for k in jobs})
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters) or "false"
    constraint = f'({constraint}) && Managed == "External" && ManagedManager == "Lumberjack"'
    projection = ["ClusterId", "ProcId"]
    ads_now = wait_for_answer(lambda: list(query(constraint, projection)), patience, "a query")
    still = {f"{a.get('ClusterId')}.{a.get('ProcId')}" for a in ads_now} & set(jobs)
    if still:
        raise LumberjackError(
            f"the schedd did not take back {len(still)} of {len(jobs)} jobs "
            f"(first: {sorted(still)[0]})"
        )
    return len(jobs)
