"""Slurm: sbatch / squeue / scontrol / scancel; launcher srun (see launchers.srun).

Whole-node queues: `--exclusive` and `--mem=0` (all of each node's memory) instead of a
memory figure; cores still go in `--cpus-per-task` so the step gets them. GPUs: the
spelling the profile's [batch] gpu_request names (`--gpus-per-node=N`, `--gres=gpu:N`,
or none where the queue's nodes come with their GPUs and other spellings are refused).

Query: `squeue -h -t all -o "%i|%T|%r" -j IDS`. Slurm forgets a finished job after
MinJobAge (300 s by default) and this project plans without accounting (sacct), so a
job we submitted that squeue no longer lists has ended: it is reported "done". squeue
answers a single unknown id with "Invalid job id specified" and exit code 1; that is
the same news. `scontrol -o show job ID` (one line per job) is read by the same
function, as a fallback that also gives the exit code while Slurm still remembers it.

`sbatch --parsable` prints "1234" or, on a multi-cluster system, "1234;cluster"; the id
returned is "1234" (lumberjack talks to the login node's own cluster).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lumberjack.core.units import format_walltime as hhmmss
from lumberjack.site.batch.base import BatchError, BatchSystem
from lumberjack.site.batch.launchers import slurm_gpu_option
from lumberjack.site.batch.pilot import PilotSpec, PilotState, PilotStatus

_Q, _R, _F = PilotState.QUEUED, PilotState.RUNNING, PilotState.FAILED


class Slurm(BatchSystem):
    NAME = "slurm"
    TITLE = "Slurm"
    DIRECTIVE = "#SBATCH"
    LAUNCHERS = ("srun",)
    SUBMIT = ("sbatch", "--parsable")
    QUERY = ("squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j")
    CANCEL = ("scancel",)
    JOB_ID = re.compile(r"(?P<job_id>\d+(_\d+)?)(;\S*)?")
    JOB_ID_ENV = "SLURM_JOB_ID"
    NODE_LIST_ENV = "SLURM_JOB_NODELIST"
    NODE_NAME_ENV = "SLURMD_NODENAME"
    GONE = ("invalid job id specified",)
    # squeue's long state names (%T) and scontrol's JobState.
    STATES = {
        "PENDING": _Q,
        "CONFIGURING": _Q,  # nodes allocated, still booting: nothing runs yet
        "REQUEUED": _Q,
        "REQUEUE_HOLD": _Q,
        "REQUEUE_FED": _Q,
        "RESV_DEL_HOLD": _Q,
        "RUNNING": _R,
        "RESIZING": _R,
        "SIGNALING": _R,
        "SUSPENDED": _R,  # holds its nodes and will resume
        "STOPPED": _R,
        "COMPLETING": PilotState.FINISHING,
        "STAGE_OUT": PilotState.FINISHING,
        "COMPLETED": PilotState.DONE,
        "CANCELLED": PilotState.DONE,  # scancel: by us when stopping, or by the user
        "TIMEOUT": PilotState.DONE,  # the walltime's end; the startds retired before it
        "FAILED": _F,
        "NODE_FAIL": _F,
        "BOOT_FAIL": _F,
        "OUT_OF_MEMORY": _F,
        "PREEMPTED": _F,
        "DEADLINE": _F,
        "SPECIAL_EXIT": _F,
        "REVOKED": _F,
    }

    def header_lines(self, spec: PilotSpec) -> list[str]:
        d = self.DIRECTIVE
        lines = [
            f"{d} --job-name={spec.name}",
            f"{d} --nodes={spec.nodes}",
            f"{d} --ntasks-per-node=1",
            f"{d} --cpus-per-task={spec.cores_per_node}",
        ]
        if spec.whole_node:
            lines.append(f"{d} --exclusive")
            if spec.memory_per_node_mb:  # 0: the site refuses --mem (see PilotSpec)
                lines.append(f"{d} --mem=0")
        elif spec.memory_per_node_mb:
            lines.append(f"{d} --mem={spec.memory_per_node_mb}M")
        if slurm_gpu_option(spec):
            lines.append(f"{d} {slurm_gpu_option(spec)}")
        lines.append(f"{d} --time={hhmmss(spec.walltime_s)}")
        if spec.queue:
            lines.append(f"{d} --partition={spec.queue}")
        if spec.allocation:
            lines.append(f"{d} --account={spec.allocation}")
        lines += [
            f"{d} --output={spec.output_dir}/%x-%j.out",
            f"{d} --error={spec.output_dir}/%x-%j.err",
        ]
        return lines

    def query_command(self, job_ids: Sequence[str]) -> list[str]:
        return [*self.QUERY, ",".join(job_ids)]

    def scontrol_query_command(self, job_id: str) -> list[str]:
        """The fallback query for one job: `scontrol -o show job ID` (one line)."""
        return ["scontrol", "-o", "show", "job", job_id]

    def state(self, raw: str) -> PilotState:
        # squeue may add a "+" (e.g. "CANCELLED+") or " by UID"; keep the word only.
        return super().state(re.split(r"[^A-Z_]", raw, maxsplit=1)[0])

    def read_jobs(self, stdout: str) -> dict[str, PilotStatus]:
        """squeue `%i|%T|%r` lines or `scontrol -o show job` lines."""
        jobs = {}
        for line in stdout.splitlines():
            line = line.strip()
            if not line:
                continue
            if "JobId=" in line:
                job_id, status = self._scontrol_line(line)
            else:
                fields = line.split("|")
                if len(fields) < 2:
                    raise BatchError(f"squeue printed a line this module cannot read: {line!r}")
                job_id, raw = fields[0].strip(), fields[1].strip().upper()
                reason = fields[2].strip() if len(fields) > 2 else ""
                status = PilotStatus(self.state(raw), raw, "" if reason == "None" else reason)
            jobs[job_id] = status
        return jobs

    def _scontrol_line(self, line: str) -> tuple[str, PilotStatus]:
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        raw = fields.get("JobState", "").upper()
        reason = fields.get("Reason", "")
        exit_code = fields.get("ExitCode", "")
        detail = " ".join(
            part
            for part in (
                "" if reason in ("", "None") else reason,
                f"exit code {exit_code}" if exit_code else "",
            )
            if part
        )
        return fields.get("JobId", ""), PilotStatus(self.state(raw), raw, detail)
