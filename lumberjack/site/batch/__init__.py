"""Batch systems: render a pilot script, submit it, ask about it, cancel it.

A **pilot** is one batch job that starts an HTCondor startd on each of its nodes (inside
the site's container image) and keeps them running until its walltime is nearly over.
Every batch system lumberjack knows is one small module here with the same functions
(see `BatchSystem`); `get_batch_system(name)` returns it.

These modules are copied, with this package, into the zipapp the site agent runs on HPC
login nodes, where only a bare `python3` (>= 3.9) may exist: they import nothing but the
standard library and this package.

The pilot script (the same body for every batch system; only the header directives and
the launcher line differ):

1. header directives (job name, nodes, one task per node, cores, memory, GPUs, walltime,
   queue, account, output files, the profile's extra directives verbatim);
2. `set -u`, the exported environment, the site's setup lines (with `set -u` off while
   they run: module scripts trip over it);
3. `launch_on_all_nodes` starts `node_command` once per node, in the background, through
   the batch system's launcher (srun / mpiexec / pbsdsh / aprun);
4. a timer subshell sleeps until `retire_s` before the walltime ends, then signals the
   script (USR1), which runs `retire_command` (startds stop accepting new jobs; running
   jobs finish) and goes on waiting for the launcher;
5. on TERM or INT (scancel/qdel, or the walltime's end) it runs `retire_command` once,
   forwards TERM to the launcher and the timer, waits for the launcher and exits 143;
6. when the launcher ends first (every startd exited), the timer is stopped and the
   script exits with the launcher's status: no allocation time is wasted waiting.

Bash runs a trap only between commands or while the script sits in the `wait` builtin,
so the script never blocks in a foreground command: it always waits with `wait PID`.
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, Protocol

from lumberjack.core.safe import DIRECTIVE_WORD
from lumberjack.core.units import format_walltime as hhmmss

#: The batch systems lumberjack can drive, by the name used in site profiles.
SYSTEMS = ("slurm", "pbs", "cobalt")


class BatchError(Exception):
    """The batch system refused or failed a command; the message is one line and quotes
    the batch system's own error text."""


class PilotState(str, Enum):
    """Where a pilot (one batch job) is in its life, the same words for every system.

    - queued: waiting to start (pending, held, configuring its nodes).
    - running: its script runs.
    - finishing: the batch system is cleaning up after it (Slurm COMPLETING, PBS E).
    - done: it ended normally, was cancelled on request, or reached its walltime (a
      pilot retires its startds before the walltime, so that end is expected), or the
      batch system no longer knows it (see each module for why that means "ended").
    - failed: it ended abnormally (node failure, out of memory, preempted, non-zero exit).
    - unknown: the batch system reported a state this module does not know.
    """

    QUEUED = "queued"
    RUNNING = "running"
    FINISHING = "finishing"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class PilotStatus(NamedTuple):
    """One pilot's state plus the batch system's own words for it (for reports)."""

    state: PilotState
    raw: str = ""  # e.g. "PENDING", "Q", "queued"; "" when the job was not listed
    reason: str = ""  # e.g. Slurm's reason, PBS's comment or exit status


@dataclass
class PilotSpec:
    """Everything needed to render one pilot script; plain data, no profile objects."""

    name: str  # job name: a letter, then letters, digits, "_", "." or "-" (max 63)
    nodes: int
    cores_per_node: int
    memory_per_node_mb: int  # 0: do not ask for memory (the site's default)
    gpus_per_node: int
    walltime_s: int
    node_command: str  # starts the startd on ONE node and blocks until it exits
    retire_command: str  # tells this pilot's startds to stop accepting new jobs
    retire_s: int  # run retire_command this many seconds before the walltime ends
    output_dir: str  # absolute path at the site for the batch job's stdout/stderr
    queue: str = ""  # partition/queue name for the batch system; "" leaves it out
    allocation: str | None = None  # account/project to charge
    extra_directives: list[str] = field(default_factory=list)  # verbatim header lines
    setup_lines: list[str] = field(default_factory=list)  # shell lines run first
    env: dict[str, str] = field(default_factory=dict)  # exported before anything runs
    whole_node: bool = False  # ask for whole nodes (exclusive) instead of cores/memory
    launcher: str = ""  # "" = the batch system's default launcher (see each module)
    chunk_resources: list[str] = field(default_factory=list)  # PBS only: "system=polaris"

    def validate(self) -> None:
        """Raise ValueError when a field cannot go into a script safely."""
        if not _JOB_NAME.match(self.name):
            raise ValueError(
                f"pilot name {self.name!r} must start with a letter and use only letters, "
                "digits, '_', '.', '-' (at most 63 characters)"
            )
        for label, value, low in (
            ("nodes", self.nodes, 1),
            ("cores_per_node", self.cores_per_node, 1),
            ("memory_per_node_mb", self.memory_per_node_mb, 0),
            ("gpus_per_node", self.gpus_per_node, 0),
            ("walltime_s", self.walltime_s, 1),
            ("retire_s", self.retire_s, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"pilot {label} must be an integer >= {low}, not {value!r}")
        for label, text in (
            ("node_command", self.node_command),
            ("retire_command", self.retire_command),
        ):
            if not text.strip():
                raise ValueError(f"pilot {label} is empty")
        if not _SAFE_PATH.match(self.output_dir):
            raise ValueError(
                f"pilot output_dir {self.output_dir!r} must be an absolute path of letters, "
                "digits and _ . / + @ = , : ~ - (batch systems do not expand or quote it)"
            )
        for value, label in ((self.queue, "queue"), (self.allocation or "", "allocation")):
            if value and not _SAFE_WORD.match(value):
                raise ValueError(f"pilot {label} {value!r} has characters a directive cannot hold")
        for key in self.env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"pilot env name {key!r} is not a shell variable name")
        for line in self.extra_directives:
            if "\n" in line or not line.startswith("#"):
                raise ValueError(f"extra directive {line!r} must be one line starting with '#'")
        for item in self.chunk_resources:
            if not _CHUNK_RESOURCE.match(item):
                raise ValueError(f"chunk resource {item!r} must look like name=value")


class BatchSystem(Protocol):
    """What every module in this package provides (a module satisfies it directly)."""

    NAME: str

    def render_pilot_script(self, spec: PilotSpec) -> str:
        """The whole pilot script, ready to write (executable: Cobalt requires it)."""

    def submit_command(self, script_path: str) -> list[str]:
        """argv that submits the script."""

    def parse_submit_output(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        """The job id from the submit command's output; BatchError when it failed."""

    def query_command(self, job_ids: Sequence[str]) -> list[str]:
        """argv that asks about these jobs."""

    def parse_query_details(
        self, stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
    ) -> dict[str, PilotStatus]:
        """State and raw words for every id in job_ids; BatchError when the query failed."""

    def parse_query_output(
        self, stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
    ) -> dict[str, PilotState]:
        """The state of every id in job_ids; BatchError when the query failed."""

    def cancel_command(self, job_ids: Sequence[str]) -> list[str]:
        """argv that cancels these jobs."""

    def allocation_nodes_env(self) -> str:
        """The environment variable that, inside a pilot, names its nodes."""


def get_batch_system(name: str) -> BatchSystem:
    """The module for batch system `name` ("slurm", "pbs" or "cobalt")."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown batch system {name!r}; known: {', '.join(SYSTEMS)}")
    module: BatchSystem = importlib.import_module(f"{__name__}.{name}")  # type: ignore[assignment]
    return module


# ---- shared helpers for the modules -------------------------------------------------

_JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+@=,:~-]*$")
_SAFE_WORD = DIRECTIVE_WORD
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHUNK_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:+-]+$")


def retire_after_s(spec: PilotSpec) -> int:
    """Seconds after the pilot starts when its startds must stop accepting jobs."""
    return max(0, spec.walltime_s - spec.retire_s)


def quoted_command(command: str) -> str:
    """`bash -c '<command>'` with the command quoted for the launcher's argv."""
    return f"bash -c {shlex.quote(command)}"


def first_error_line(text: str) -> str:
    """The most telling line of a batch command's error output, for one-line messages."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[-1] if lines else ""


def command_failed(what: str, returncode: int, stdout: str, stderr: str) -> BatchError:
    detail = first_error_line(stderr) or first_error_line(stdout) or "no output"
    return BatchError(f"{what} failed (exit code {returncode}): {detail}")


def render_script(
    spec: PilotSpec,
    *,
    system: str,
    header: Sequence[str],
    launch_lines: Sequence[str],
    nodes_env: str,
) -> str:
    """The pilot script: `header` directives, then the body shared by every system.

    `launch_lines` are the body of `launch_on_all_nodes`; their last command must be the
    launcher started in the background (`... &`), whose PID the function records.
    """
    spec.validate()
    retire_after = retire_after_s(spec)
    out: list[str] = ["#!/bin/bash"]
    out.extend(header)
    out.extend(spec.extra_directives)
    out += [
        "",
        f"# condor_lumberjack pilot {spec.name} ({system}, written by the site agent).",
        f"# One HTCondor startd on each of its {spec.nodes} node(s) (listed in ${nodes_env});",
        f"# walltime {hhmmss(spec.walltime_s)}; the startds stop accepting new jobs",
        f"# {hhmmss(spec.retire_s)} before it ends, {hhmmss(retire_after)} after the start.",
        "set -u",
    ]
    if spec.env:
        out.append("")
        for key in sorted(spec.env):
            out.append(f"export {key}={shlex.quote(spec.env[key])}")
    if spec.setup_lines:
        out += ["", "# site setup from the profile; module scripts trip over `set -u`", "set +u"]
        out.extend(spec.setup_lines)
        out.append("set -u")
    out += [
        "",
        f"lj_retire_after_s={retire_after}",
        "lj_sleep_s=0",
        "lj_launcher_pid=''",
        "lj_timer_pid=''",
        "lj_retired=0",
        "lj_stopping=0",
        "",
        "lj_log() {",
        '    printf \'%s lumberjack pilot: %s\\n\' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"',
        "}",
        "",
        "# Start the node command once on every node, in the background.",
        "launch_on_all_nodes() {",
        *(f"    {line}" for line in launch_lines),
        "    lj_launcher_pid=$!",
        "}",
        "",
        "# Tell this pilot's startds to stop accepting new jobs; running jobs finish.",
        "retire_startds() {",
        f"    {spec.retire_command}",
        "}",
        "",
        "lj_retire_once() {",
        '    if [ "$lj_retired" = 0 ]; then',
        "        lj_retired=1",
        '        lj_log "retiring the startds"',
        '        retire_startds || lj_log "the retire command failed with exit code $?"',
        "    fi",
        "}",
        "",
        "# No `wait` for the timer: bash can hang in a `wait` run from a trap handler.",
        "lj_stop_timer() {",
        '    if [ -n "$lj_timer_pid" ]; then',
        '        kill -TERM "$lj_timer_pid" 2>/dev/null',
        "        lj_timer_pid=''",
        "    fi",
        "}",
        "",
        "lj_on_signal() {",
        '    lj_log "caught $1: retiring and stopping the startds"',
        "    lj_stopping=1",
        "    lj_retire_once",
        "    lj_stop_timer",
        '    if [ -n "$lj_launcher_pid" ]; then kill -TERM "$lj_launcher_pid" 2>/dev/null; fi',
        "}",
        "",
        "# The timer is a subshell so that the script itself always waits in `wait`,",
        "# where bash runs traps at once; it signals the script with USR1 when it fires.",
        "# $SECONDS counts from the script's start: time spent in the setup lines counts.",
        "lj_start_timer() {",
        "    lj_sleep_s=$((lj_retire_after_s - SECONDS))",
        '    if [ "$lj_sleep_s" -lt 0 ]; then lj_sleep_s=0; fi',
        "    (",
        "        trap 'kill \"${lj_sleep_pid:-}\" 2>/dev/null; exit 0' TERM",
        '        sleep "$lj_sleep_s" &',
        "        lj_sleep_pid=$!",
        '        wait "$lj_sleep_pid" && kill -USR1 $$',
        "    ) &",
        "    lj_timer_pid=$!",
        "}",
        "",
        "trap 'lj_on_signal TERM' TERM",
        "trap 'lj_on_signal INT' INT",
        "trap 'lj_retire_once' USR1",
        "",
        f'lj_log "starting {spec.nodes} startd(s); retiring after ${{lj_retire_after_s}} s"',
        "launch_on_all_nodes",
        "lj_start_timer",
        "",
        "# `wait` returns early (status > 128) whenever a trapped signal arrives: wait",
        "# again until the launcher itself has ended.",
        "while :; do",
        '    wait "$lj_launcher_pid"',
        "    lj_status=$?",
        '    [ "$lj_status" -le 128 ] && break',
        '    if ! kill -0 "$lj_launcher_pid" 2>/dev/null; then',
        "        # it ended just as a signal came in: fetch its own exit code if still there",
        '        wait "$lj_launcher_pid" 2>/dev/null',
        "        lj_again=$?",
        '        [ "$lj_again" = 127 ] || lj_status=$lj_again',
        "        break",
        "    fi",
        "done",
        "lj_stop_timer",
        'if [ "$lj_stopping" = 1 ]; then',
        '    lj_log "stopped by a signal"',
        "    exit 143",
        "fi",
        'lj_log "every startd has exited (launcher exit code $lj_status)"',
        'exit "$lj_status"',
        "",
    ]
    return "\n".join(out)
