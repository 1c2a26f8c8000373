"""The contract between the access point and the site agent: every file that crosses the
SSH link, as typed, versioned, frozen dataclasses. Both sides import it; neither imports
the other.

- `ExportLayout`: every path of one export's (or lease's) directory at the site.
- `LaunchPlan` (launch.json): the request as the site must run it. The access point
  writes it, whole and once per launch; the agent only reads it, never writes it back.
- `PilotRequest`: the part of a plan that sizes a pilot, written by the access point
  (profiles/request.pilot_request) and checked once, as it is built (`__post_init__`):
  at home before anything ships, at the site as the agent decodes launch.json. The
  agent adds what only it knows (the pilot's name, its node and retire commands, its
  output directory) to make the `PilotSpec` a batch system renders (`PilotSpec.of`,
  which checks only those four).
- The agent's reports, each in a file of its own: `PoolState` (where it started the
  pool's collector) and `SubmittedPilots` (the batch job ids it submitted).
- `PilotState` and `ALIVE`: the words a status answer reports a pilot's state with.

Every type goes through the one codec of core/records.py, `encode` and `decode`. Each
file carries its type's version; `decode` reads the current version (and the unversioned
files an earlier release left at a site mid-flight) and refuses anything else: a field
it does not know, a field missing, a value of the wrong type, or one its type's `check`
refuses, each as a one-line ContractError. Both directions are hostile input: the agent
reads what an access point wrote, the access point what an agent reported.

Stdlib only (and Python 3.9): this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import PurePosixPath
from typing import Any, ClassVar, Optional

from lumberjack.core.records import ContractError, decode, encode
from lumberjack.core.shell_safe import CHUNK_RESOURCE, DIRECTIVE_WORD

#: The container runtimes the agent knows (lumberjack/site/runtime.py registers one class
#: for each; a unit test holds the two to the same names).
RUNTIME_NAMES = (
    "apptainer", "singularity", "apptainer-emulated", "podman-hpc", "container-engine", "none",
)  # fmt: skip
#: Where the schedd runs: on the login node, or inside the pilot's allocation.
PLACEMENTS = ("login", "allocation")

#: The schedd's queue, in the bundle's spool as shipped and in SPOOL at the site.
QUEUE_LOG = "job_queue.log"

#: The directory name of lease NAME under the site's base_dir starts with this.
LEASE_PREFIX = "lease-"


#: lumberjack's own directory under base_dir, beside the exports' and leases' (no export
#: or lease name starts with "."): the site agent, one file per content. No container
#: binds it, unlike an export's directory, which its pool and pilots bind writable.
AGENT_DIR = ".lumberjack"


def lease_dir_name(name: str) -> str:
    return f"{LEASE_PREFIX}{name}"


def release_paths(base_dir: str, sha256: str) -> tuple[str, str]:
    """(tarball, release directory) at the site for an HTCondor tarball of this sha256
    (runtime "none"): one copy per site, whatever export uses it."""
    prefix = sha256[:16]
    directory = posixpath.join(base_dir, "htcondor")
    return posixpath.join(directory, f"{prefix}.tar.gz"), posixpath.join(directory, prefix)


# ---- the export's directory at the site -------------------------------------------------


@dataclass(frozen=True)
class ExportLayout:
    """Paths of one export's (or lease's) directory at the site."""

    root: str  # absolute: <base_dir>/<export name>

    def _path(self, *parts: str) -> str:
        return str(PurePosixPath(self.root, *parts))

    @property
    def name(self) -> str:
        return PurePosixPath(self.root).name

    @property
    def is_lease(self) -> bool:
        return self.name.startswith(LEASE_PREFIX)

    @property
    def bundle(self) -> str:
        return self._path("bundle")

    @property
    def launch_plan(self) -> str:
        """The LaunchPlan: what the access point asks the agent to launch (its one writer)."""
        return self._path("launch.json")

    @property
    def spool(self) -> str:
        return self._path("spool")

    @property
    def schedd_address(self) -> str:
        """The address file the schedd writes in SPOOL once it is up."""
        return self._path("spool", ".schedd_address")

    @property
    def pool(self) -> str:
        return self._path("pool")

    @property
    def pool_local(self) -> str:
        return self._path("pool", "local")

    @property
    def pool_config(self) -> str:
        return self._path("pool", "condor_config")

    @property
    def pool_state(self) -> str:
        """The agent's PoolState."""
        return self._path("pool", "state.json")

    @property
    def master_pid(self) -> str:
        return self._path("pool", "master.pid")

    @property
    def pilots(self) -> str:
        return self._path("pilots")

    @property
    def pilot_output(self) -> str:
        """The pilots' batch output (stdout and stderr of each batch job)."""
        return self._path("pilots", "out")

    @property
    def pilot_config(self) -> str:
        return self._path("pilots", "condor_config")

    @property
    def pilot_tokens(self) -> str:
        return self._path("pilots", "tokens.d")

    @property
    def node_script(self) -> str:
        return self._path("pilots", "node.sh")

    @property
    def pilot_list(self) -> str:
        """The agent's SubmittedPilots."""
        return self._path("pilots", "submitted.json")

    @property
    def site_logs(self) -> str:
        """What the agent gathered from the site's logs (SiteLogs)."""
        return self._path(SiteLogs.DIR)

    @property
    def agent_dir(self) -> str:
        """lumberjack's directory beside this one (see AGENT_DIR), the account's only."""
        return str(PurePosixPath(self.root).parent / AGENT_DIR)

    def agent_file(self, sha256: str) -> str:
        """The site agent of this content. An export shipped by an earlier release has
        its own agent.pyz in its directory, which a job could rewrite: never run again
        (this agent reads everything an earlier one left there)."""
        return str(PurePosixPath(self.agent_dir, f"agent-{sha256}.pyz"))

    @property
    def queue_actions(self) -> str:
        """The local queue's commands for the site copies (QueueActions): written whole
        by the access point before each `act`, only read by the agent."""
        return self._path("queue-actions.json")

    @property
    def joined(self) -> str:
        """A lease's in the allocation: one join request per export (the export's
        directory), `<name>~release` when it leaves and `<name>~released` once its
        schedd is gone; the head node of each round acts on them."""
        return self._path("joined")

    @property
    def schedd_script(self) -> str:
        """An export joined to a lease in the allocation: how the head starts its schedd."""
        return self._path("pool", "schedd.sh")


class SiteLogs:
    """site-logs/ in an export's directory: what the agent gathers from the site's logs
    when it stops an export (site/gather_logs.py), one file per pilot and per job, and
    what the access point downloads and reads (ap/site_logs.py) within these limits."""

    DIR = "site-logs"
    PILOTS = "pilots"
    JOBS = "jobs"
    #: Largest file the agent writes; the access point refuses anything larger.
    FILE_MAX = 64 << 10
    #: All the files together; beyond it jobs get no file (the agent's answer counts them).
    TOTAL_MAX = 64 << 20


# ---- pilots -----------------------------------------------------------------------------


class PilotState(str, Enum):
    """Where a pilot (one batch job) is in its life, the same words for every system.

    - queued: waiting to start (pending, held, configuring its nodes).
    - running: its script runs.
    - finishing: the batch system is cleaning up after it (Slurm COMPLETING, PBS E).
    - done: it ended normally, was cancelled on request, or reached its walltime (a
      pilot retires its startds before the walltime, so that end is expected), or the
      batch system no longer knows it (see each batch module for why that means "ended").
    - failed: it ended abnormally (node failure, out of memory, preempted, non-zero exit).
    - unknown: the batch system reported a state no batch module knows.
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

#: How a Slurm pilot asks for its GPUs (a profile's [batch] gpu_request; the first is
#: the default): --gpus-per-node=N, --gres=gpu:N, or no line where whole GPU nodes come
#: with the queue and the centre refuses the others (TACC).
GPU_REQUESTS = ("gpus-per-node", "gres", "none")

_JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+@=,:~-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class PilotRequest:
    """The size and place of one pilot, as the access point decided them."""

    nodes: int
    cores_per_node: int
    memory_per_node_mb: int  # 0: ask for no memory (the site's default; --mem=0 left out)
    gpus_per_node: int
    walltime_s: int
    retire_s: int  # stop accepting new jobs this many seconds before the walltime ends
    queue: str = ""  # partition/queue name for the batch system; "" leaves it out
    allocation: Optional[str] = None  # account/project to charge
    extra_directives: tuple[str, ...] = ()  # verbatim header lines
    setup_lines: tuple[str, ...] = ()  # shell lines run first
    env: dict[str, str] = field(default_factory=dict)  # exported before anything runs
    whole_node: bool = False  # ask for whole nodes (exclusive) instead of cores/memory
    launcher: str = ""  # "" = the batch system's default launcher (see each module)
    chunk_resources: tuple[str, ...] = ()  # PBS only: "system=polaris"
    gpu_request: str = GPU_REQUESTS[0]  # Slurm only: see GPU_REQUESTS

    def __post_init__(self) -> None:
        self._freeze()
        self._refuse_unsafe()  # the one check of a request: wherever it is built

    def _freeze(self) -> None:
        # Lists given by a caller become tuples: the request is frozen all the way down.
        for name in ("extra_directives", "setup_lines", "chunk_resources"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "env", dict(self.env))

    @property
    def retire_after_s(self) -> int:
        """Seconds after the pilot starts when its startds must stop accepting jobs."""
        return max(0, self.walltime_s - self.retire_s)

    def _refuse_unsafe(self) -> None:
        """ValueError when a field cannot go into a script safely."""
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
        for value, label in ((self.queue, "queue"), (self.allocation or "", "allocation")):
            if value and not DIRECTIVE_WORD.match(value):
                raise ValueError(f"pilot {label} {value!r} has characters a directive cannot hold")
        for key in self.env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"pilot env name {key!r} is not a shell variable name")
        for line in self.extra_directives:
            if "\n" in line or not line.startswith("#"):
                raise ValueError(f"extra directive {line!r} must be one line starting with '#'")
        if self.gpu_request not in GPU_REQUESTS:
            raise ValueError(f"pilot gpu_request {self.gpu_request!r} is not one of {GPU_REQUESTS}")
        for item in self.chunk_resources:
            if not CHUNK_RESOURCE.match(item):
                raise ValueError(f"chunk resource {item!r} must look like name=value")


@dataclass(frozen=True)
class PilotSpec(PilotRequest):
    """Everything needed to render one pilot script: the request, and what the agent names."""

    name: str = ""  # job name: a letter, then letters, digits, "_", "." or "-" (max 63)
    node_command: str = ""  # starts the startd on ONE node and blocks until it exits
    retire_command: str = ""  # tells this pilot's startds to stop accepting new jobs
    output_dir: str = ""  # absolute path at the site for the batch job's stdout/stderr

    def __post_init__(self) -> None:
        self._freeze()  # the request's fields were checked when it was built
        self._refuse_unsafe_names()

    @classmethod
    def of(
        cls, request: PilotRequest, *, name: str, node_command: str, retire_command: str,
        output_dir: str,
    ) -> PilotSpec:  # fmt: skip
        asked = {f.name: getattr(request, f.name) for f in fields(PilotRequest)}
        return cls(**asked, name=name, node_command=node_command,
                   retire_command=retire_command, output_dir=output_dir)  # fmt: skip

    def _refuse_unsafe_names(self) -> None:
        """ValueError when what the agent names cannot go into a script safely."""
        if not _JOB_NAME.match(self.name):
            raise ValueError(
                f"pilot name {self.name!r} must start with a letter and use only letters, "
                "digits, '_', '.', '-' (at most 63 characters)"
            )
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


# ---- the launch plan --------------------------------------------------------------------


@dataclass(frozen=True)
class ReleasePlan:
    """Runtime "none": the shipped HTCondor tarball at the site, and where it unpacks."""

    sha256: str
    tarball: str
    dir: str

    def check(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError(f"sha256 {self.sha256!r} is not 64 hex digits")
        for path in (self.tarball, self.dir):
            _absolute(path, "release path")


@dataclass(frozen=True)
class GpuPlan:
    """The queue's GPUs: vendor and model, and (test sites only) simulated ones."""

    vendor: str = ""
    model: str = ""
    simulate: bool = False


@dataclass(frozen=True)
class LaunchPlan:
    """launch.json: the pool and the pilots the access point asks the agent to run."""

    VERSION: ClassVar[int] = 1

    runtime: str  # one of RUNTIME_NAMES
    image: str  # the site image (SIF, or OCI name for podman-hpc); "" for runtime "none"
    batch_system: str  # the name site profiles use ("slurm")
    pilots: int  # how many pilots one round submits
    spec: PilotRequest
    token_lifetime_s: int  # the pilots' token: the walltime and a margin
    binds: tuple[str, ...] = ()  # extra container binds from the profile
    condor_release: Optional[ReleasePlan] = None  # runtime "none" only
    address: Optional[str] = None  # the login node's address (None: the agent finds it)
    port: Optional[int] = None  # the collector's port (None or 0: the agent picks a free one)
    idle_shutdown_s: int = 300  # a startd with no job for this long exits
    max_running_jobs: Optional[int] = None  # the site's policy cap (None: HTCondor's default)
    placement: str = "login"  # one of PLACEMENTS
    gpus: GpuPlan = field(default_factory=GpuPlan)
    lease: Optional[str] = None  # a joined export's: its lease's directory

    def __post_init__(self) -> None:
        object.__setattr__(self, "binds", tuple(self.binds))

    @property
    def in_allocation(self) -> bool:
        return self.placement == "allocation"

    def check(self) -> None:
        if self.runtime not in RUNTIME_NAMES:
            raise ValueError(f"runtime {self.runtime!r} is not one of {', '.join(RUNTIME_NAMES)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        if (self.runtime == "none") != (self.condor_release is not None):
            raise ValueError('a shipped HTCondor release goes with runtime "none", and only there')
        for label, value, low in (
            ("pilots", self.pilots, 1),
            ("token_lifetime_s", self.token_lifetime_s, 1),
            ("idle_shutdown_s", self.idle_shutdown_s, 1),
        ):
            if value < low:
                raise ValueError(f"{label} must be >= {low}, not {value}")
        if self.port is not None and not 0 <= self.port < 65536:
            raise ValueError(f"port {self.port} is not a TCP port")
        if self.lease is not None:
            _absolute(self.lease, "lease directory")

    @classmethod
    def upgrade(cls, data: Any) -> Any:
        """A plan an earlier release wrote (no version; still read by the agent of a new
        export that joins an older lease): its pilot spec held the names the agent gives,
        and a plan from before runtimes, GPUs or releases lacks those."""
        if not isinstance(data, dict):
            return data  # refused as it is
        data = dict(data)
        spec = data.get("spec")
        if isinstance(spec, dict):
            names = ("name", "node_command", "retire_command", "output_dir")
            data["spec"] = {key: value for key, value in spec.items() if key not in names}
        data.setdefault("runtime", "apptainer")
        data["image"] = data.get("image") or ""
        data["gpus"] = data.get("gpus") or {}
        for key in ("binds", "condor_release", "placement"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


# ---- the local queue's commands ---------------------------------------------------------

#: What the local queue's commands become at the site: condor_rm, condor_hold,
#: condor_release, condor_qedit of the job's copy there.
#: "remove-transfer" is condor_rm -transfer: a running job sends its outputs first.
QUEUE_ACTIONS = ("remove", "remove-transfer", "hold", "release", "edit")
_JOB_ID = re.compile(r"^[0-9]{1,10}\.[0-9]{1,10}$")
_ATTR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class JobAction:
    """One local queue command for one job's copy at the site. `reason`: the home
    reason (condor_rm/condor_hold -reason); `edits`: attribute -> ClassAd expression
    text, as condor_qedit takes them (action "edit" only)."""

    job: str  # "C.P"
    action: str  # one of QUEUE_ACTIONS
    reason: str = ""
    edits: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "edits", dict(self.edits))

    def check(self) -> None:
        if not _JOB_ID.match(self.job):
            raise ValueError(f"job {self.job!r} is not a job id C.P")
        if self.action not in QUEUE_ACTIONS:
            raise ValueError(f"action {self.action!r} is not one of {', '.join(QUEUE_ACTIONS)}")
        if bool(self.edits) != (self.action == "edit"):
            raise ValueError("edits go with action edit, and only there")
        for text in (self.reason, *self.edits.values()):
            if any(c in text for c in "\n\r\x00") or len(text) > 4096:
                raise ValueError("a reason or value must be one line of at most 4096 characters")
        for name in self.edits:
            if not _ATTR_NAME.match(name):
                raise ValueError(f"{name!r} is not a ClassAd attribute name")


@dataclass(frozen=True)
class QueueActions:
    """queue-actions.json: what the site's schedd must do to the export's jobs."""

    VERSION: ClassVar[int] = 1

    actions: tuple[JobAction, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))

    @classmethod
    def upgrade(cls, data: Any) -> Any:
        return data  # no unversioned file was ever written


# ---- the agent's reports ----------------------------------------------------------------


@dataclass(frozen=True)
class PoolState:
    """pool/state.json: the address and port the agent started the pool's collector on."""

    VERSION: ClassVar[int] = 1

    address: str
    port: int

    def check(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} is not a TCP port")

    @classmethod
    def upgrade(cls, data: Any) -> Any:
        return data  # the unversioned file had these two fields


@dataclass(frozen=True)
class SubmittedPilots:
    """pilots/submitted.json: the batch job ids of every pilot the agent submitted."""

    VERSION: ClassVar[int] = 1

    job_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_ids", tuple(self.job_ids))

    def check(self) -> None:
        for job in self.job_ids:
            if not DIRECTIVE_WORD.match(job):
                raise ValueError(f"pilot job id {job!r} is not a batch job id")

    @classmethod
    def upgrade(cls, data: Any) -> Any:
        return {"job_ids": data}  # the unversioned file was the bare list


def _absolute(path: str, label: str) -> None:
    if not path.startswith("/") or "\n" in path:
        raise ValueError(f"{label} {path!r} is not an absolute path")


__all__ = [
    "ALIVE",
    "GPU_REQUESTS",
    "ContractError",
    "ExportLayout",
    "GpuPlan",
    "JobAction",
    "LaunchPlan",
    "PilotRequest",
    "PilotSpec",
    "PilotState",
    "PoolState",
    "QUEUE_ACTIONS",
    "QueueActions",
    "ReleasePlan",
    "SiteLogs",
    "SubmittedPilots",
    "decode",
    "encode",
]
