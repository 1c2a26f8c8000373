"""Slurm: sbatch / squeue / scontrol / scancel.

Launcher: one `srun` step with one task per node (`--ntasks-per-node=1`) that runs the
node command on every node at once. `--kill-on-bad-exit=0` keeps the other startds
running when one of them exits with an error. The step asks for every CPU the job holds
on a node (`$SLURM_CPUS_ON_NODE`) and all of its memory (`--mem=0`): without that a step
gets one CPU and the startd's jobs would share it.

Whole-node queues: `--exclusive` and `--mem=0` (all of each node's memory) instead of a
memory figure; cores still go in `--cpus-per-task` so the step gets them.

Query: `squeue -h -t all -o "%i|%T|%r" -j IDS`. Slurm forgets a finished job after
MinJobAge (300 s by default) and this project plans without accounting (sacct), so a
job we submitted that squeue no longer lists has ended: it is reported "done". squeue
answers a single unknown id with "Invalid job id specified" and exit code 1; that is
the same news. `scontrol -o show job ID` (one line per job) is parsed by the same
function, as a fallback that also gives the exit code while Slurm still remembers it.

`sbatch --parsable` prints "1234" or, on a multi-cluster system, "1234;cluster"; the id
returned is "1234" (lumberjack talks to the login node's own cluster).
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

NAME = "slurm"
DIRECTIVE = "#SBATCH"
LAUNCHERS = ("srun",)

# squeue's long state names (%T) and scontrol's JobState.
_STATES = {
    "PENDING": PilotState.QUEUED,
    "CONFIGURING": PilotState.QUEUED,  # nodes allocated, still booting: nothing runs yet
    "REQUEUED": PilotState.QUEUED,
    "REQUEUE_HOLD": PilotState.QUEUED,
    "REQUEUE_FED": PilotState.QUEUED,
    "RESV_DEL_HOLD": PilotState.QUEUED,
    "RUNNING": PilotState.RUNNING,
    "RESIZING": PilotState.RUNNING,
    "SIGNALING": PilotState.RUNNING,
    "SUSPENDED": PilotState.RUNNING,  # holds its nodes and will resume
    "STOPPED": PilotState.RUNNING,
    "COMPLETING": PilotState.FINISHING,
    "STAGE_OUT": PilotState.FINISHING,
    "COMPLETED": PilotState.DONE,
    "CANCELLED": PilotState.DONE,  # scancel: by us when stopping, or by the user
    "TIMEOUT": PilotState.DONE,  # the walltime's end; the startds retired before it
    "FAILED": PilotState.FAILED,
    "NODE_FAIL": PilotState.FAILED,
    "BOOT_FAIL": PilotState.FAILED,
    "OUT_OF_MEMORY": PilotState.FAILED,
    "PREEMPTED": PilotState.FAILED,
    "DEADLINE": PilotState.FAILED,
    "SPECIAL_EXIT": PilotState.FAILED,
    "REVOKED": PilotState.FAILED,
}

_JOB_ID = re.compile(r"^\d+(_\d+)?$")
_GONE = ("invalid job id specified",)


def allocation_nodes_env() -> str:
    return "SLURM_JOB_NODELIST"


def launch_line(spec: PilotSpec) -> str:
    """The srun line of `launch_on_all_nodes` (ends with `&`)."""
    parts = [
        "srun",
        f"--nodes={spec.nodes}",
        f"--ntasks={spec.nodes}",
        "--ntasks-per-node=1",
        f'--cpus-per-task="${{SLURM_CPUS_ON_NODE:-{spec.cores_per_node}}}"',
        "--mem=0",
    ]
    if spec.gpus_per_node:
        parts.append(f"--gpus-per-node={spec.gpus_per_node}")
    parts += ["--kill-on-bad-exit=0", quoted_command(spec.node_command), "&"]
    return " ".join(parts)


def header_lines(spec: PilotSpec) -> list[str]:
    d = DIRECTIVE
    lines = [
        f"{d} --job-name={spec.name}",
        f"{d} --nodes={spec.nodes}",
        f"{d} --ntasks-per-node=1",
        f"{d} --cpus-per-task={spec.cores_per_node}",
    ]
    if spec.whole_node:
        lines += [f"{d} --exclusive", f"{d} --mem=0"]
    elif spec.memory_per_node_mb:
        lines.append(f"{d} --mem={spec.memory_per_node_mb}M")
    if spec.gpus_per_node:
        lines.append(f"{d} --gpus-per-node={spec.gpus_per_node}")
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


def render_pilot_script(spec: PilotSpec) -> str:
    if spec.launcher not in ("", *LAUNCHERS):
        raise ValueError(f"slurm pilots launch with srun, not {spec.launcher!r}")
    return render_script(
        spec,
        system=NAME,
        header=header_lines(spec),
        launch_lines=[launch_line(spec)],
        nodes_env=allocation_nodes_env(),
    )


def submit_command(script_path: str) -> list[str]:
    return ["sbatch", "--parsable", script_path]


def parse_submit_output(stdout: str, stderr: str = "", returncode: int = 0) -> str:
    if returncode != 0:
        raise command_failed("sbatch", returncode, stdout, stderr)
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    job_id = lines[-1].split(";", 1)[0] if lines else ""
    if not _JOB_ID.match(job_id):
        shown = lines[-1] if lines else "nothing"
        raise BatchError(f"sbatch printed no job id: {shown}")
    return job_id


def query_command(job_ids: Sequence[str]) -> list[str]:
    return ["squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(job_ids)]


def scontrol_query_command(job_id: str) -> list[str]:
    """The fallback query for one job: `scontrol -o show job ID` (one line)."""
    return ["scontrol", "-o", "show", "job", job_id]


def parse_query_details(
    stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
) -> dict[str, PilotStatus]:
    """squeue `%i|%T|%r` lines or `scontrol -o show job` lines -> status per job id."""
    if returncode != 0 and not any(text in stderr.lower() for text in _GONE):
        raise command_failed("squeue", returncode, stdout, stderr)
    seen: dict[str, PilotStatus] = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        if "JobId=" in line:
            job_id, status = _parse_scontrol_line(line)
        else:
            fields = line.split("|")
            if len(fields) < 2:
                raise BatchError(f"squeue printed a line this module cannot read: {line!r}")
            job_id, raw = fields[0].strip(), fields[1].strip().upper()
            reason = fields[2].strip() if len(fields) > 2 else ""
            status = PilotStatus(_state(raw), raw, "" if reason == "None" else reason)
        seen[job_id] = status
    return {
        job_id: seen.get(job_id, PilotStatus(PilotState.DONE, "", "no longer listed by Slurm"))
        for job_id in job_ids
    }


def parse_query_output(
    stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
) -> dict[str, PilotState]:
    details = parse_query_details(stdout, job_ids, stderr, returncode)
    return {job_id: status.state for job_id, status in details.items()}


def cancel_command(job_ids: Sequence[str]) -> list[str]:
    return ["scancel", *job_ids]


def _state(raw: str) -> PilotState:
    # squeue may add a "+" (e.g. "CANCELLED+") or " by UID"; keep the word only.
    word = re.split(r"[^A-Z_]", raw, maxsplit=1)[0]
    return _STATES.get(word, PilotState.UNKNOWN)


def _parse_scontrol_line(line: str) -> tuple[str, PilotStatus]:
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
    return fields.get("JobId", ""), PilotStatus(_state(raw), raw, detail)
