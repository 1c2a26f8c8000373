"""PBS Professional (and OpenPBS): qsub / qstat -F json / qdel.

Resources: one chunk per node, `-l select=N:ncpus=C:mem=Mmb[:ngpus=G]` with
`-l place=scatter` (never two chunks on one node). Whole-node queues ask for
`select=N` and `place=scatter:excl` only: on systems such as ALCF Polaris the nodes are
whole anyway and naming their exact core and memory figures can only get a job refused.
`chunk_resources` (e.g. "system=polaris") are appended to the chunk.

Launcher (PilotSpec.launcher):
- "mpiexec" (default): `mpiexec -n N --ppn 1 --cpu-bind none bash -c CMD`, the form the
  ALCF Polaris documentation uses with its Cray PALS mpiexec; the environment, including
  what the setup lines changed, reaches every node. `--cpu-bind none` leaves all of the
  node's cores to the startd.
- "pbsdsh": PBS's own task spawner (`pbsdsh -- ...`, one task per line of
  $PBS_NODEFILE, i.e. one per chunk), for PBS sites without a PALS mpiexec. pbsdsh does
  not carry the environment, so the exported variables and PATH are passed explicitly
  through `/usr/bin/env`.

Query: `qstat -f -F json -x IDS`. `-x` includes finished jobs (state F, with
Exit_status) while the server keeps job history. A job absent from the answer, or one
qstat calls "Unknown Job Id", has left the server (history off or expired): "done".
Exit_status: 0 is done; so are the ends on request or at the walltime (143 = our
script's exit on TERM, 256+15 and 256+9 = killed by SIGTERM/SIGKILL, -29 = PBS's
JOB_EXEC_KILL_WALLTIME); anything else is failed. Some older PBS versions write
invalid JSON (unescaped characters in Variable_List); the parser then falls back to
reading job_state and Exit_status with regular expressions.

qsub prints the job id ("1234.pbs01", sometimes with the server's full host name).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

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

NAME = "pbs"
DIRECTIVE = "#PBS"
LAUNCHERS = ("mpiexec", "pbsdsh")

_STATES = {
    "Q": PilotState.QUEUED,
    "H": PilotState.QUEUED,  # held: waits for a release
    "W": PilotState.QUEUED,  # waiting for its start time
    "T": PilotState.QUEUED,  # moving between servers
    "M": PilotState.QUEUED,  # moved to another server
    "R": PilotState.RUNNING,
    "S": PilotState.RUNNING,  # suspended: keeps its nodes
    "U": PilotState.RUNNING,
    "B": PilotState.RUNNING,  # array job begun
    "E": PilotState.FINISHING,  # exiting after having run
    "F": PilotState.DONE,  # finished; Exit_status decides done or failed
    "X": PilotState.DONE,  # finished subjob
}
# Exit statuses of a pilot that ended normally, on request or at its walltime.
_NORMAL_EXITS = {0, 143, 256 + 15, 256 + 9, -29}

_JOB_ID = re.compile(r"^\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?$")
_GONE = ("unknown job id",)


def allocation_nodes_env() -> str:
    return "PBS_NODEFILE"


def launch_line(spec: PilotSpec) -> str:
    """The launcher line of `launch_on_all_nodes` (ends with `&`)."""
    launcher = spec.launcher or "mpiexec"
    if launcher == "mpiexec":
        return (
            f"mpiexec -n {spec.nodes} --ppn 1 --cpu-bind none {quoted_command(spec.node_command)} &"
        )
    # pbsdsh starts tasks without our environment: hand it over explicitly.
    env_args = ['PATH="$PATH"'] + [
        f"{key}={shlex.quote(spec.env[key])}" for key in sorted(spec.env)
    ]
    return (
        f"pbsdsh -- /usr/bin/env {' '.join(env_args)} /bin/bash -c "
        f"{shlex.quote(spec.node_command)} &"
    )


def select_line(spec: PilotSpec) -> str:
    chunk = [str(spec.nodes)]
    if not spec.whole_node:
        chunk.append(f"ncpus={spec.cores_per_node}")
        if spec.memory_per_node_mb:
            chunk.append(f"mem={spec.memory_per_node_mb}mb")
    if spec.gpus_per_node:
        chunk.append(f"ngpus={spec.gpus_per_node}")
    chunk.extend(spec.chunk_resources)
    return f"{DIRECTIVE} -l select={':'.join(chunk)}"


def header_lines(spec: PilotSpec) -> list[str]:
    d = DIRECTIVE
    lines = [
        f"{d} -N {spec.name}",
        select_line(spec),
        f"{d} -l place=scatter{':excl' if spec.whole_node else ''}",
        f"{d} -l walltime={hhmmss(spec.walltime_s)}",
    ]
    if spec.queue:
        lines.append(f"{d} -q {spec.queue}")
    if spec.allocation:
        lines.append(f"{d} -A {spec.allocation}")
    # PBS has no job-id pattern for these names: the agent gives each pilot its own name.
    lines += [
        f"{d} -o {spec.output_dir}/{spec.name}.out",
        f"{d} -e {spec.output_dir}/{spec.name}.err",
    ]
    return lines


def render_pilot_script(spec: PilotSpec) -> str:
    if spec.launcher not in ("", *LAUNCHERS):
        raise ValueError(f"pbs pilots launch with {' or '.join(LAUNCHERS)}, not {spec.launcher!r}")
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
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    job_id = lines[-1] if lines else ""
    if not _JOB_ID.match(job_id):
        raise BatchError(f"qsub printed no job id: {job_id or 'nothing'}")
    return job_id


def query_command(job_ids: Sequence[str]) -> list[str]:
    return ["qstat", "-f", "-F", "json", "-x", *job_ids]


def parse_query_details(
    stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
) -> dict[str, PilotStatus]:
    """`qstat -f -F json -x` output -> status per job id (ids match with or without the
    server suffix: "1234" finds "1234.pbs01.example.org")."""
    if returncode != 0:
        errors = [line for line in stderr.splitlines() if line.strip()]
        if not errors or not all(any(t in e.lower() for t in _GONE) for e in errors):
            raise command_failed("qstat", returncode, stdout, stderr)
    jobs = _jobs_from_json(stdout)
    by_number = {_number(key): value for key, value in jobs.items()}
    result = {}
    for job_id in job_ids:
        job = jobs.get(job_id) or by_number.get(_number(job_id))
        if job is None:
            result[job_id] = PilotStatus(PilotState.DONE, "", "no longer known to PBS")
        else:
            result[job_id] = _status(job)
    return result


def parse_query_output(
    stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
) -> dict[str, PilotState]:
    details = parse_query_details(stdout, job_ids, stderr, returncode)
    return {job_id: status.state for job_id, status in details.items()}


def cancel_command(job_ids: Sequence[str]) -> list[str]:
    return ["qdel", *job_ids]


def _number(job_id: str) -> str:
    return job_id.split(".", 1)[0]


def _status(job: dict[str, Any]) -> PilotStatus:
    raw = str(job.get("job_state", ""))
    state = _STATES.get(raw, PilotState.UNKNOWN)
    exit_status = job.get("Exit_status")
    reason = str(job.get("comment", ""))
    if state is PilotState.DONE and exit_status is not None:
        try:
            code = int(exit_status)
        except (TypeError, ValueError):
            code = None
        if code not in _NORMAL_EXITS:
            state = PilotState.FAILED
        reason = f"Exit_status {exit_status}" + (f"; {reason}" if reason else "")
    return PilotStatus(state, raw, reason)


def _jobs_from_json(stdout: str) -> dict[str, dict[str, Any]]:
    if not stdout.strip():
        return {}
    try:
        report = json.loads(stdout)
    except ValueError:
        return _jobs_from_broken_json(stdout)
    jobs = report.get("Jobs", {}) if isinstance(report, dict) else None
    if not isinstance(jobs, dict):
        raise BatchError('qstat -F json printed no "Jobs" object')
    return {str(key): value for key, value in jobs.items() if isinstance(value, dict)}


_JOB_KEY = re.compile(r'"(\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?)"\s*:\s*\{')
_JOB_STATE = re.compile(r'"job_state"\s*:\s*"([A-Z])"')
_EXIT_STATUS = re.compile(r'"Exit_status"\s*:\s*(-?\d+)')


def _jobs_from_broken_json(stdout: str) -> dict[str, dict[str, Any]]:
    # Split the text at each job's key and read the two fields we need from each part.
    starts = list(_JOB_KEY.finditer(stdout))
    if not starts:
        raise BatchError("qstat -F json printed text that is neither JSON nor a job list")
    jobs: dict[str, dict[str, Any]] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(stdout)
        part = stdout[match.end() : end]
        job: dict[str, Any] = {}
        state = _JOB_STATE.search(part)
        if state:
            job["job_state"] = state.group(1)
        exit_status = _EXIT_STATUS.search(part)
        if exit_status:
            job["Exit_status"] = int(exit_status.group(1))
        jobs[match.group(1)] = job
    return jobs
