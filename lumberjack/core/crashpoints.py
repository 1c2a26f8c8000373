"""Fault injection: named points where a step can be made to die, as a crash would.

`LUMBERJACK_CRASH_AT=<point>` makes the process that reaches `crash_point(<point>)` kill
itself with SIGKILL there: no `finally`, no atexit, no flushed buffers, exactly what a
power cut or the OOM killer leaves behind. The tests walk an export through every point
and check that rerunning the step (or `sync`) finishes it: no job lost, none run twice.

A point name that is not in `POINTS` is an error (in the environment as in the code),
never a silent no-op. The access point passes the variable on to the site agent (see
state/steps.py Site.agent), so the agent's points are reached from the same variable.

Stdlib only: the site agent uses it too.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "LUMBERJACK_CRASH_AT"

#: Every point, in the order an export reaches them (the crash tests walk this order),
#: and what is half done when the process dies there.
POINTS: dict[str, str] = {
    "export.before-schedd": "ledger says exporting; the local schedd still has the jobs",
    "export.after-schedd": "the schedd let the jobs go; no bundle written yet",
    "export.mid-copy": "one input copied into the bundle, the others not",
    "export.before-manifest": "queue and inputs in the bundle; no manifest",
    "export.after-manifest": "bundle complete; the ledger still says exporting",
    "ship.before-upload": "nothing sent yet",
    "ship.mid-upload": "some of the bundle's files at the site, the others not",
    "ship.after-upload": "spool sent; manifest and agent not",
    "ship.before-ledger": "everything at the site; the ledger still says exported",
    "launch.after-plan": "launch.json at the site; the agent not run",
    "launch.after-place": "(agent) queue placed at the site; no pool started",
    "launch.after-pool": "(agent) the remote pool runs; no pilot submitted",
    "launch.after-pilots": "(agent) pilots submitted; the answer never sent",
    "launch.before-ledger": "the agent answered; the ledger still says shipped",
    "stop.after-schedd": "(agent) remote schedd off; pilots and instance not stopped",
    "fetch.after-stop": "remote pool stopped; nothing downloaded",
    "fetch.mid-download": "outputs downloaded, the remote queue not",
    "fetch.before-ledger": "everything downloaded; the ledger still says finished",
    "import.mid-placement": "the first job's outputs placed (and recorded), the others not",
    "import.before-merge": "every output placed; the schedd has not merged the ads",
    "import.after-merge": "the schedd merged the ads; the ledger does not know",
    "cleanup.after-stop": "remote pool stopped again; the site directory still there",
    "cleanup.after-remote": "site directory removed; the local bundle still there",
    "cleanup.before-ledger": "everything removed; the ledger still says imported",
    "lease.after-dir": "the lease's directory, agent and plan at the site; nothing started",
    "lease.after-pool": "(agent) the lease's collector and negotiator run; no pilot submitted",
    "lease.before-ledger": "the lease runs with its pilots; the ledger still says creating",
    "lease.after-pilots-gone": "(agent) the lease's pilots are gone; its pool still runs",
    "lease.before-ended": "the lease's directory removed; the ledger still says stopping",
    "joined.after-place": "(agent) queue placed for a lease in the allocation; no join request",
    "joined.after-release-request": "(agent) release asked of the lease's head; not acknowledged",
}


class UnknownCrashPoint(ValueError):
    """LUMBERJACK_CRASH_AT (or a caller) names a point that does not exist."""


def armed() -> str | None:
    """The point named in the environment (checked), or None when none is."""
    wanted = os.environ.get(ENV, "").strip()
    if not wanted:
        return None
    if wanted not in POINTS:
        raise UnknownCrashPoint(
            f"{ENV}={wanted!r} names no crash point; known: {', '.join(POINTS)}"
        )
    return wanted


def crash_point(name: str) -> None:
    """Die here (SIGKILL) when the environment names this point."""
    if name not in POINTS:
        raise UnknownCrashPoint(f"crash_point({name!r}): not in crashpoints.POINTS")
    if armed() == name:
        sys.stderr.write(f"lumberjack: crash point {name} reached ({ENV}); killing myself\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
