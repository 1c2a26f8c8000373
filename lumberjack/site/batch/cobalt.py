"""Cobalt (ALCF Theta, retired at the end of 2023): qsub / qstat / qdel; launcher aprun.

Kept for sites that still run Cobalt and as the historical record of Theta; no Cobalt
system is reachable from this project, so this module follows the documented formats.

Script: `#COBALT` directives (`-n` nodes, `-t` walltime, `-q` queue, `-A` project,
`-O` output prefix, giving PREFIX.output, PREFIX.error and PREFIX.cobaltlog). Cobalt on
Theta hands out whole KNL nodes and has no directive for cores, memory or GPUs, so those
are not requested. The script runs on a service ("MOM") node, not on a compute node, and
Cobalt runs it only if it is executable: write it with mode 0755.

Query: `qstat -l --header JobID:State IDS` prints one block per job
("JobID: 1234" then "    State : running"); the default table format (a header line, a
line of "=", one row per job) is read too. Cobalt drops a job from its queue as soon as
it ends and keeps no exit status there, so a job it no longer lists is "done"; qstat
asked only about unknown ids prints nothing and exits 1, which means the same.

qsub prints the new job's number.
"""

from __future__ import annotations

import re

from lumberjack.core.units import format_walltime as hhmmss
from lumberjack.site.batch.base import BatchError, BatchSystem
from lumberjack.site.batch.pilot import PilotSpec, PilotState, PilotStatus

_Q = PilotState.QUEUED


class Cobalt(BatchSystem):
    NAME = "cobalt"
    TITLE = "Cobalt"
    DIRECTIVE = "#COBALT"
    LAUNCHERS = ("aprun",)
    SUBMIT = ("qsub",)
    QUERY = ("qstat", "-l", "--header", "JobID:State")
    CANCEL = ("qdel",)
    JOB_ID = re.compile(r"(?P<job_id>\d+)")
    JOB_ID_ENV = "COBALT_JOBID"
    NODE_LIST_ENV = "COBALT_PARTNAME"
    SILENT_GONE = True
    STATES = {
        "queued": _Q,
        "user_hold": _Q,
        "admin_hold": _Q,
        "dep_hold": _Q,
        "maxrun_hold": _Q,
        "starting": PilotState.RUNNING,
        "running": PilotState.RUNNING,
        "exiting": PilotState.FINISHING,
        "killing": PilotState.FINISHING,
        "done": PilotState.DONE,
        "dep_fail": PilotState.FAILED,
    }

    def header_lines(self, spec: PilotSpec) -> list[str]:
        d = self.DIRECTIVE
        lines = [
            f"{d} --jobname {spec.name}",
            f"{d} -n {spec.nodes}",
            f"{d} -t {hhmmss(spec.walltime_s)}",
        ]
        if spec.queue:
            lines.append(f"{d} -q {spec.queue}")
        if spec.allocation:
            lines.append(f"{d} -A {spec.allocation}")
        lines.append(f"{d} -O {spec.output_dir}/{spec.name}")
        return lines

    def state(self, raw: str) -> PilotState:
        return super().state(raw.lower())

    def read_jobs(self, stdout: str) -> dict[str, PilotStatus]:
        """`qstat -l` blocks or the default table."""
        rows = _table_rows(stdout) if _is_table(stdout) else _block_rows(stdout)
        return {job_id: PilotStatus(self.state(raw), raw) for job_id, raw in rows.items()}


def _is_table(stdout: str) -> bool:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return len(lines) >= 2 and set(lines[1].strip()) == {"="}


def _table_rows(stdout: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    header = [name.lower() for name in lines[0].split()]
    if "jobid" not in header or "state" not in header:
        raise BatchError(f"qstat's table has no JobID and State columns: {lines[0].strip()!r}")
    id_col, state_col = header.index("jobid"), header.index("state")
    rows = {}
    for line in lines[2:]:
        cells = line.split()
        if len(cells) > max(id_col, state_col):
            rows[cells[id_col]] = cells[state_col]
    return rows


def _block_rows(stdout: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    current = None
    for line in stdout.splitlines():
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        if key.lower() == "jobid":
            current = value
        elif key.lower() == "state" and current is not None:
            rows[current] = value
    return rows
