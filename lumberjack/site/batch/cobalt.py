"""Cobalt (ALCF Theta, retired at the end of 2023): qsub / qstat / qdel.

Kept for sites that still run Cobalt and as the historical record of Theta; no Cobalt
system is reachable from this project, so this module follows the documented formats.

Script: `#COBALT` directives (`-n` nodes, `-t` walltime, `-q` queue, `-A` project,
`-O` output prefix, giving PREFIX.output, PREFIX.error and PREFIX.cobaltlog). Cobalt on
Theta hands out whole KNL nodes and has no directive for cores, memory or GPUs, so those
are not requested. The script runs on a service ("MOM") node, not on a compute node, and
Cobalt runs it only if it is executable: write it with mode 0755.

Launcher: `aprun -n N -N 1 -d C -cc none bash -c CMD` (one process per node, C cores
for it, no CPU binding so the startd may use every core); aprun passes the script's
environment to the compute nodes.

Query: `qstat -l --header JobID:State IDS` prints one block per job
("JobID: 1234" then "    State : running"); the default table format (a header line, a
line of "=", one row per job) is parsed too. Cobalt drops a job from its queue as soon as
it ends and keeps no exit status there, so a job it no longer lists is "done"; qstat
asked only about unknown ids prints nothing and exits 1, which means the same.

qsub prints the new job's number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lumberjack.site.batch import (
    BatchError,
    PilotSpec,
    PilotState,
    PilotStatus,
    command_failed,
    hhmmss,
    quoted_command,
    render_script,
)

NAME = "cobalt"
DIRECTIVE = "#COBALT"
LAUNCHERS = ("aprun",)

_STATES = {
    "queued": PilotState.QUEUED,
    "user_hold": PilotState.QUEUED,
    "admin_hold": PilotState.QUEUED,
    "dep_hold": PilotState.QUEUED,
    "maxrun_hold": PilotState.QUEUED,
    "starting": PilotState.RUNNING,
    "running": PilotState.RUNNING,
    "exiting": PilotState.FINISHING,
    "killing": PilotState.FINISHING,
    "done": PilotState.DONE,
    "dep_fail": PilotState.FAILED,
}

_JOB_ID = re.compile(r"^\d+$")


def allocation_nodes_env() -> str:
    return "COBALT_PARTNAME"


def launch_line(spec: PilotSpec) -> str:
    """The aprun line of `launch_on_all_nodes` (ends with `&`)."""
    return (
        f"aprun -n {spec.nodes} -N 1 -d {spec.cores_per_node} -cc none "
        f"{quoted_command(spec.node_command)} &"
    )


def header_lines(spec: PilotSpec) -> list[str]:
    d = DIRECTIVE
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


def render_pilot_script(spec: PilotSpec) -> str:
    if spec.launcher not in ("", *LAUNCHERS):
        raise ValueError(f"cobalt pilots launch with aprun, not {spec.launcher!r}")
    return render_script(
        spec,
        system=NAME,
        header=header_lines(spec),
        launch_lines=[launch_line(spec)],
        nodes_env=allocation_nodes_env(),
    )


def submit_command(script_path: str) -> list[str]:
    return ["qsub", script_path]


def parse_submit_output(stdout: str, stderr: str = "", returncode: int = 0) -> str:
    if returncode != 0:
        raise command_failed("qsub", returncode, stdout, stderr)
    numbers = [line.strip() for line in stdout.splitlines() if _JOB_ID.match(line.strip())]
    if not numbers:
        shown = stdout.strip().splitlines()[-1] if stdout.strip() else "nothing"
        raise BatchError(f"qsub printed no job id: {shown}")
    return numbers[-1]


def query_command(job_ids: Sequence[str]) -> list[str]:
    return ["qstat", "-l", "--header", "JobID:State", *job_ids]


def parse_query_details(
    stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
) -> dict[str, PilotStatus]:
    """`qstat -l` blocks or the default table -> status per job id."""
    if returncode != 0 and (stdout.strip() or stderr.strip()):
        raise command_failed("qstat", returncode, stdout, stderr)
    rows = _parse_table(stdout) if _is_table(stdout) else _parse_blocks(stdout)
    result = {}
    for job_id in job_ids:
        raw = rows.get(job_id.strip())
        if raw is None:
            result[job_id] = PilotStatus(PilotState.DONE, "", "no longer listed by Cobalt")
        else:
            result[job_id] = PilotStatus(_STATES.get(raw.lower(), PilotState.UNKNOWN), raw)
    return result


def parse_query_output(
    stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
) -> dict[str, PilotState]:
    details = parse_query_details(stdout, job_ids, stderr, returncode)
    return {job_id: status.state for job_id, status in details.items()}


def cancel_command(job_ids: Sequence[str]) -> list[str]:
    return ["qdel", *job_ids]


def _is_table(stdout: str) -> bool:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return len(lines) >= 2 and set(lines[1].strip()) == {"="}


def _parse_table(stdout: str) -> dict[str, str]:
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


def _parse_blocks(stdout: str) -> dict[str, str]:
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
