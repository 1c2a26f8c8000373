"""An export's phases and the one table of steps that move it between them.

The ledger refuses a move the table does not hold, `advance`/`sync` take the step the
table marks for sync, and the command line builds its help and advice from it: adding a
phase means one member of `Phase` and its rows in `TABLE`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

from lumberjack.errors import BadInput


class Phase(str, Enum):
    """Where an export is; stored in the ledger by its value."""

    SELECTED = "selected"  # in the ledger; the jobs are still the local schedd's
    EXPORTING = "exporting"  # the local schedd let go of the jobs; the bundle is being written
    EXPORTED = "exported"  # the bundle is complete on this machine
    SHIPPED = "shipped"  # bundle and agent are at the site
    LAUNCHED = "launched"  # the remote pool runs on the queue; pilots submitted
    RUNNING = "running"  # the site reported a job running
    FINISHED = "finished"  # the site reported that no job can run there again
    FETCHED = "fetched"  # the remote spool and the outputs are back on this machine
    IMPORTED = "imported"  # outputs placed, job ads merged into the local schedd
    CLEANED = "cleaned"  # the site directory and the local bundle are gone
    FAILED = "failed"  # the export was rolled back: its jobs are the local schedd's again
    UNEXPORTED = "unexported"  # a person handed the jobs back unrun

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Move:
    step: str  # the command (or the part of one) that makes the move
    start: Phase
    end: Phase
    by_sync: bool = False  # `sync` takes this step on its own


P = Phase
# Every move an export can make. A step whose end is its start may repeat (each step is
# idempotent); `status` has several ends from one start: what the site reports decides.
# "running" means a job has left idle at the site: status sets it, so that `exports`
# tells an export whose jobs are under way from one still waiting for its pilots.
TABLE: tuple[Move, ...] = (
    #    step           from          to            by sync
    Move("export",      P.SELECTED,   P.EXPORTING),         # the local schedd let go of the jobs
    Move("export",      P.EXPORTING,  P.EXPORTED),          # the bundle is complete
    Move("rollback",    P.EXPORTING,  P.FAILED,     True),  # jobs handed back (sync: after a crash)
    Move("unexport",    P.SELECTED,   P.UNEXPORTED),
    Move("unexport",    P.EXPORTING,  P.UNEXPORTED),
    Move("unexport",    P.EXPORTED,   P.UNEXPORTED),
    Move("unexport",    P.SHIPPED,    P.UNEXPORTED),        # nothing runs at the site yet
    Move("unexport",    P.FAILED,     P.UNEXPORTED),
    # Nothing the site returns (or fails to return) may wedge an export. Once launched,
    # the site may hold results: handing the jobs back drops them, so it takes
    # --discard, and the remote pool is stopped first (handback.py; a site that cannot
    # be reached is refused unless forced). fetch stops the pool before anything comes
    # back, so after a refused or failed fetch the jobs still go back; after a refused
    # import too. From fetched the site's directory (its keys) may go while the bundle
    # stays. `cleanup` then removes what is left, site and bundle, once the local schedd
    # has the jobs again (unexported).
    Move("unexport --discard", P.LAUNCHED, P.UNEXPORTED),
    Move("unexport --discard", P.RUNNING,  P.UNEXPORTED),
    Move("unexport --discard", P.FINISHED, P.UNEXPORTED),
    Move("unexport --discard", P.FETCHED,  P.UNEXPORTED),
    Move("cleanup --site",     P.FETCHED,  P.FETCHED),
    Move("ship",        P.EXPORTED,   P.SHIPPED,    True),
    Move("ship",        P.SHIPPED,    P.SHIPPED),           # only what is missing moves
    Move("launch",      P.SHIPPED,    P.LAUNCHED,   True),
    Move("launch",      P.LAUNCHED,   P.LAUNCHED),          # more pilots when the last ones ended
    Move("launch",      P.RUNNING,    P.RUNNING),
    Move("status",      P.SHIPPED,    P.SHIPPED),
    Move("status",      P.LAUNCHED,   P.LAUNCHED,   True),  # no job has started yet
    Move("status",      P.LAUNCHED,   P.RUNNING,    True),  # a job left idle at the site
    Move("status",      P.LAUNCHED,   P.FINISHED,   True),  # no job can run there again
    Move("status",      P.RUNNING,    P.RUNNING,    True),
    Move("status",      P.RUNNING,    P.FINISHED,   True),
    Move("status",      P.FINISHED,   P.FINISHED),
    Move("fetch",       P.LAUNCHED,   P.FETCHED),           # early: unfinished jobs come home idle
    Move("fetch",       P.RUNNING,    P.FETCHED),
    Move("fetch",       P.FINISHED,   P.FETCHED,    True),
    Move("fetch",       P.FETCHED,    P.FETCHED),
    Move("import",      P.FETCHED,    P.IMPORTED,   True),
    Move("import",      P.IMPORTED,   P.IMPORTED),
    Move("import --in", P.EXPORTED,   P.IMPORTED),          # an offline bundle's spool, copied back
    Move("import --in", P.FETCHED,    P.IMPORTED),
    Move("import --in", P.IMPORTED,   P.IMPORTED),
    Move("cleanup",     P.IMPORTED,   P.CLEANED),
    Move("cleanup",     P.UNEXPORTED, P.CLEANED),
    Move("cleanup",     P.FAILED,     P.CLEANED),
    Move("cleanup",     P.CLEANED,    P.CLEANED),
)  # fmt: skip


def starts(step: str) -> tuple[Phase, ...]:
    """The phases `step` may start from, in the order of `Phase`."""
    found = {m.start for m in TABLE if m.step == step}
    if not found:
        raise ValueError(f"unknown step {step!r}")
    return tuple(p for p in Phase if p in found)


def ends(step: str, start: str) -> tuple[Phase, ...]:
    """Where `step` may take an export that is in `start` (empty: it may not start)."""
    return tuple(m.end for m in TABLE if m.step == step and m.start == start)


def sync_step(phase: str) -> str | None:
    """The step `sync` takes from `phase`, or None: the export waits for a person."""
    return _SYNC_STEP.get(Phase(phase))


def sync_phases() -> tuple[Phase, ...]:
    """The phases `sync` moves on."""
    return tuple(_SYNC_STEP)


def way_home(phase: str) -> list[str] | None:
    """The fewest steps from `phase` to imported (empty when there), or None: no way."""
    paths: dict[Phase, list[str]] = {Phase(phase): []}
    queue = deque(paths)
    while queue:
        here = queue.popleft()
        if here is Phase.IMPORTED:
            return paths[here]
        for move in TABLE:
            if move.start is here and move.end not in paths and move.step != "status":
                paths[move.end] = [*paths[here], move.step]
                queue.append(move.end)
    return None


def check(phase: str, step: str, name: str) -> None:
    """BadInput (nothing changed) when `step` cannot start from `phase`."""
    if not ends(step, phase):
        raise BadInput(f"export {name!r} is {phase}; {step} needs phase {either(starts(step))}")


def either(phases: tuple[Phase, ...]) -> str:
    """'a, b or c' (for messages and help texts)."""
    words = [p.value for p in phases]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _sync_steps() -> dict[Phase, str]:
    chosen: dict[Phase, str] = {}
    for move in TABLE:
        if move.by_sync and chosen.setdefault(move.start, move.step) != move.step:
            raise AssertionError(f"two sync steps from {move.start}")  # a bad table
    return {p: chosen[p] for p in Phase if p in chosen}


_SYNC_STEP = _sync_steps()


# ---- leases --------------------------------------------------------------------------


class LeasePhase(str, Enum):
    """Where a lease is; stored in the ledger by its value."""

    CREATING = "creating"  # in the ledger; its pool and pilots are being started
    ACTIVE = "active"  # its collector runs at the site; exports may join
    STOPPING = "stopping"  # its pilots are being cancelled and its pool stopped
    ENDED = "ended"  # nothing of it runs at the site; its directory is gone

    def __str__(self) -> str:
        return self.value


L = LeasePhase
#: (step, from) -> to. `sync` repeats "create" from creating and "shutdown" from
#: stopping (both idempotent), so a crash at any point leaves nothing behind.
LEASE_MOVES: dict[tuple[str, LeasePhase], LeasePhase] = {
    ("create", L.CREATING): L.ACTIVE,
    ("create", L.ACTIVE): L.ACTIVE,
    ("extend", L.ACTIVE): L.ACTIVE,
    ("join", L.CREATING): L.CREATING,  # pilots may wait in the queue while jobs ship
    ("join", L.ACTIVE): L.ACTIVE,
    ("shutdown", L.CREATING): L.STOPPING,
    ("shutdown", L.ACTIVE): L.STOPPING,
    ("shutdown", L.STOPPING): L.STOPPING,
    ("ended", L.STOPPING): L.ENDED,
}


def lease_move(phase: str, step: str, name: str) -> LeasePhase:
    """Where `step` takes lease `name` from `phase`; BadInput when it cannot start there."""
    end = LEASE_MOVES.get((step, LeasePhase(phase)))
    if end is None:
        allowed = [p.value for (s, p) in LEASE_MOVES if s == step]
        raise BadInput(f"lease {name!r} is {phase}; {step} needs phase {' or '.join(allowed)}")
    return end
