"""PBS Professional (and OpenPBS): qsub / qstat -F json / qdel; launchers mpiexec
(default, Cray PALS as on ALCF Polaris) or pbsdsh (see launchers.py).

Resources: one chunk per node, `-l select=N:ncpus=C:mem=Mmb[:ngpus=G]` with
`-l place=scatter` (never two chunks on one node). Whole-node queues ask for
`select=N` and `place=scatter:excl` only: on systems such as ALCF Polaris the nodes are
whole anyway and naming their exact core and memory figures can only get a job refused.
`chunk_resources` (e.g. "system=polaris") are appended to the chunk.

Query: `qstat -f -F json -x IDS`. `-x` includes finished jobs (state F, with
Exit_status) while the server keeps job history. A job absent from the answer, or one
qstat calls "Unknown Job Id", has left the server (history off or expired): "done".
Exit_status: 0 is done; so are the ends on request or at the walltime (143 = our
script's exit on TERM, 256+15 and 256+9 = killed by SIGTERM/SIGKILL, -29 = PBS's
JOB_EXEC_KILL_WALLTIME); anything else is failed. Some older PBS versions write
invalid JSON (unescaped characters in Variable_List); the reader then falls back to
job_state and Exit_status found with regular expressions.

qsub prints the job id ("1234.pbs01", sometimes with the server's full host name); ids
match with or without that suffix: "1234" finds "1234.pbs01.example.org".
"""

from __future__ import annotations

import json
import re
from typing import Any

from lumberjack.core.units import format_walltime as hhmmss
from lumberjack.site.batch.base import BatchError, BatchSystem
from lumberjack.site.batch.pilot import PilotSpec, PilotState, PilotStatus

_Q = PilotState.QUEUED
# Exit statuses of a pilot that ended normally, on request or at its walltime.
_NORMAL_EXITS = {0, 143, 256 + 15, 256 + 9, -29}
_JOB_KEY = re.compile(r'"(\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?)"\s*:\s*\{')
_JOB_STATE = re.compile(r'"job_state"\s*:\s*"([A-Z])"')
_EXIT_STATUS = re.compile(r'"Exit_status"\s*:\s*(-?\d+)')


class Pbs(BatchSystem):
    NAME = "pbs"
    TITLE = "PBS"
    DIRECTIVE = "#PBS"
    LAUNCHERS = ("mpiexec", "pbsdsh")
    SUBMIT = ("qsub",)
    QUERY = ("qstat", "-f", "-F", "json", "-x")
    CANCEL = ("qdel",)
    JOB_ID = re.compile(r"(?P<job_id>\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?)")
    JOB_ID_ENV = "PBS_JOBID"
    NODE_LIST_ENV = "PBS_NODEFILE"
    GONE = ("unknown job id",)
    STATES = {
        "Q": _Q,
        "H": _Q,  # held: waits for a release
        "W": _Q,  # waiting for its start time
        "T": _Q,  # moving between servers
        "M": _Q,  # moved to another server
        "R": PilotState.RUNNING,
        "S": PilotState.RUNNING,  # suspended: keeps its nodes
        "U": PilotState.RUNNING,
        "B": PilotState.RUNNING,  # array job begun
        "E": PilotState.FINISHING,  # exiting after having run
        "F": PilotState.DONE,  # finished; Exit_status decides done or failed
        "X": PilotState.DONE,  # finished subjob
    }

    def select_line(self, spec: PilotSpec) -> str:
        chunk = [str(spec.nodes)]
        if not spec.whole_node:
            chunk.append(f"ncpus={spec.cores_per_node}")
            if spec.memory_per_node_mb:
                chunk.append(f"mem={spec.memory_per_node_mb}mb")
        if spec.gpus_per_node:
            chunk.append(f"ngpus={spec.gpus_per_node}")
        chunk.extend(spec.chunk_resources)
        return f"{self.DIRECTIVE} -l select={':'.join(chunk)}"

    def header_lines(self, spec: PilotSpec) -> list[str]:
        d = self.DIRECTIVE
        lines = [
            f"{d} -N {spec.name}",
            self.select_line(spec),
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

    def find(self, jobs: dict[str, PilotStatus], job_id: str) -> PilotStatus | None:
        if job_id in jobs:
            return jobs[job_id]
        by_number = {_number(key): status for key, status in jobs.items()}
        return by_number.get(_number(job_id))

    def read_jobs(self, stdout: str) -> dict[str, PilotStatus]:
        """`qstat -f -F json -x` output."""
        return {job_id: self._status(job) for job_id, job in _jobs_from_json(stdout).items()}

    def _status(self, job: dict[str, Any]) -> PilotStatus:
        raw = str(job.get("job_state", ""))
        state = self.state(raw)
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


def _number(job_id: str) -> str:
    return job_id.split(".", 1)[0]


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
