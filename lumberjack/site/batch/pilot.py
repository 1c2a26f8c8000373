"""The words every batch system shares: a pilot's spec (what to render), its state and
status (what a query answers). Plain data, stdlib only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from lumberjack.core.shell_safe import CHUNK_RESOURCE, DIRECTIVE_WORD


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


#: A pilot in one of these may still start or run jobs: no new pilot beside it. Unknown
#: counts (a word no module knows is no proof the pilot ended). A tuple, not a set: the
#: words in a status answer ("queued") equal the states but do not hash like them.
ALIVE = (PilotState.QUEUED, PilotState.RUNNING, PilotState.FINISHING, PilotState.UNKNOWN)


class PilotStatus(NamedTuple):
    """One pilot's state plus the batch system's own words for it (for reports)."""

    state: PilotState
    raw: str = ""  # e.g. "PENDING", "Q", "queued"; "" when the job was not listed
    reason: str = ""  # e.g. Slurm's reason, PBS's comment or exit status


_JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+@=,:~-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class PilotSpec:
    """Everything needed to render one pilot script; plain data, no profile objects."""

    name: str  # job name: a letter, then letters, digits, "_", "." or "-" (max 63)
    nodes: int
    cores_per_node: int
    memory_per_node_mb: int  # 0: ask for no memory (the site's default; --mem=0 left out)
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

    @property
    def retire_after_s(self) -> int:
        """Seconds after the pilot starts when its startds must stop accepting jobs."""
        return max(0, self.walltime_s - self.retire_s)

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
            if value and not DIRECTIVE_WORD.match(value):
                raise ValueError(f"pilot {label} {value!r} has characters a directive cannot hold")
        for key in self.env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"pilot env name {key!r} is not a shell variable name")
        for line in self.extra_directives:
            if "\n" in line or not line.startswith("#"):
                raise ValueError(f"extra directive {line!r} must be one line starting with '#'")
        for item in self.chunk_resources:
            if not CHUNK_RESOURCE.match(item):
                raise ValueError(f"chunk resource {item!r} must look like name=value")
