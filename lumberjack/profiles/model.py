"""Site profile models: what a profile file may say (pydantic, strict: an unknown key is an
error) and `SiteProfile`, the checked site the rest of lumberjack uses.

Every key is explained in site-profiles/README.md. A check that fails raises a
`problem(...)` (or a pydantic error); `lumberjack.profiles.messages` turns either into
today's one-line message naming the file, the key and a fix.

Validation context (`ProfileFile.model_validate(data, context=...)`): `path`, the file
(its name is the site's name), and `batch_system`, the [site] batch system's name when it
is a known one (its directive prefix and launchers check [batch] and [[queues]]).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from lumberjack.core.shell_safe import CHUNK_RESOURCE, DIRECTIVE_WORD, REMOTE_PATH
from lumberjack.core.units import (
    format_memory,
    format_walltime,
    parse_hhmmss,
    parse_memory,
    parse_walltime,
)
from lumberjack.errors import BadInput
from lumberjack.site.batch import SYSTEMS
from lumberjack.site.gpus import GPU_VENDORS, SIMULATED_MODELS

# "podman-hpc" (NERSC) and "none" (HTCondor from a release tarball) are accepted so that
# profiles can say what the centre documents; see site-profiles/README.md for what runs.
RUNTIMES = ("apptainer", "singularity", "podman-hpc", "none")
# "login": the remote schedd lives on the login node; "allocation": inside the pilots' batch
# allocation, for sites whose login nodes must not host long-running services.
PLACEMENTS = ("login", "allocation")
# "key": a key logs in without a prompt; "mfa": every new connection asks for a one-time code.
AUTH_MODES = ("key", "mfa")

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_BIND = re.compile(r"^[A-Za-z0-9_./${}~@:+,=-]+$")
_URI = re.compile(r"^(docker|oras|library|shub|https?)://[^\s'\"`;|&<>]+$")
_OCI_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_.-]+)?(@sha256:[0-9a-f]{64})?$")
_GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()/+-]*$")
_CHUNK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:+-]+$")
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_REMOTE_RULE = (
    "is not a path at the site (it starts with /, ~ or $VAR and holds letters, digits "
    "and _ . / $ { } ~ @ : + , = -)"
)


def batch_system(name: str) -> Any:
    """The batch system `name` of `lumberjack.site.batch.SYSTEMS`; profiles use only its
    `DIRECTIVE` (header prefix, e.g. "#SBATCH") and `LAUNCHERS` (names a pilot may use)."""
    return SYSTEMS[name]


def problem(
    text: str, *, key: tuple[str | int, ...] = (), value: Any = None, show: bool = True
) -> PydanticCustomError:
    """A failed check, shown as `WHERE VALUE TEXT`: WHERE is where the check ran plus
    `key`; VALUE is what the file holds there, `value` if given, or nothing (show=False)."""
    ctx: dict[str, Any] = {"problem": text, "key": key, "show": show}
    if value is not None:
        ctx["value"] = value
    return PydanticCustomError("profile", "{problem}", ctx)


def display_path(path: Path) -> str:
    """The path as messages show it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


# ---- value types: each carries its example (for "add e.g. KEY = EXAMPLE") -------------


def _matching(pattern: re.Pattern[str], rule: str, example: str) -> Any:
    def check(value: str, info: ValidationInfo) -> str:
        if not pattern.match(value):
            raise problem(f"{rule}; write e.g. {info.field_name} = {example}")
        return value

    return Annotated[StrictStr, Field(examples=[example]), AfterValidator(check)]


def _choice(choices: Callable[[], tuple[str, ...]], example: str) -> Any:
    def check(value: str) -> str:
        if value not in choices():
            options = " or ".join(json.dumps(choice) for choice in choices())
            raise problem(f"is not one of the choices; write {options}")
        return value

    return Annotated[StrictStr, Field(examples=[example]), AfterValidator(check)]


def _lines(example: Callable[[ValidationInfo], str]) -> Any:
    def check(value: Any, info: ValidationInfo) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise problem(
                f"is not a list of strings; write e.g. {info.field_name} = [{example(info)}]"
            )
        if any("\n" in item or "\r" in item for item in value):
            raise problem("holds a string with a line break; give one line per item")
        return tuple(item.strip() for item in value)

    return Annotated[tuple[str, ...], BeforeValidator(check)]


def _hhmmss(value: Any) -> int:
    try:
        seconds = parse_hhmmss(value if isinstance(value, str) else "")
    except ValueError:
        try:
            hint = format_walltime(parse_walltime(str(value)))
        except ValueError:
            hint = "48:00:00"
        raise problem(f'is not HH:MM:SS; write e.g. "{hint}"') from None
    if seconds <= 0:
        raise problem("must be longer than 00:00:00")
    return seconds


def _memory(value: Any) -> int:
    try:
        mb = parse_memory(value if isinstance(value, str) else str(value), unit_required=True)
    except ValueError as exc:
        raise problem(f'{exc}; write e.g. "512GB"') from None
    if mb <= 0:
        raise problem("must be more than 0")
    return mb


def _port_below_65536(fix: str) -> AfterValidator:
    def check(value: int) -> int:
        if value > 65535:
            raise problem(f"is above 65535; {fix}")
        return value

    return AfterValidator(check)


def _directives(info: ValidationInfo) -> str:
    name = (info.context or {}).get("batch_system")
    return f'"{batch_system(name).DIRECTIVE} ..."' if name else '"#... ..."'


def _directive_prefix(lines: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
    name = (info.context or {}).get("batch_system")
    if name:
        prefix = batch_system(name).DIRECTIVE
        for line in lines:
            if not line.startswith(prefix + " "):
                raise problem(
                    f"does not start with {prefix!r}; write e.g. "
                    f'"{prefix} {line.lstrip("#").strip() or "..."}"',
                    value=line,
                )
    return lines


Text = Annotated[StrictStr, Field(examples=['"..."'])]
SiteName = _matching(_NAME, "is not lower-case letters, digits, - and _", '"mysite"')
QueueName = _matching(_QUEUE_NAME, "is not a queue name", '"regular"')
UserName = _matching(_USER, "is not a user name", '"jdoe"')
Hostname = _matching(_HOST, "is not a host name", '"login.example.org"')
NodeAddress = _matching(_HOST, "is not a host name", '"login01"')
RemotePath = _matching(REMOTE_PATH, _REMOTE_RULE, '"$SCRATCH/lumberjack"')
Scratch = _matching(REMOTE_PATH, _REMOTE_RULE, '"$SCRATCH"')
Allocation = _matching(DIRECTIVE_WORD, "is not a project name", '"m1234"')
BatchSystemName = _choice(lambda: tuple(SYSTEMS), '"slurm"')
Runtime = _choice(lambda: RUNTIMES, '"apptainer"')
GpuVendor = _choice(lambda: GPU_VENDORS, '"nvidia"')
GpuModel = _matching(_GPU_MODEL, "is not a GPU model name", '"A100-SXM4-40GB"')
Placement = _choice(lambda: PLACEMENTS, '"login"')
AuthMode = _choice(lambda: AUTH_MODES, '"key"')
Walltime = Annotated[int, BeforeValidator(_hhmmss), Field(examples=['"48:00:00"'])]
Memory = Annotated[int, BeforeValidator(_memory), Field(examples=['"512GB"'])]
Directives = Annotated[_lines(_directives), AfterValidator(_directive_prefix)]
Binds = _lines(lambda _: '"/pscratch:/pscratch"')
SetupLines = _lines(lambda _: '"module load apptainer"')
ChunkResources = _lines(lambda _: '"system=polaris"')


class _Table(BaseModel):
    """One TOML table: unknown keys are errors, strings are stripped, values immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, populate_by_name=True
    )


def tarball_path(value: str, relative_to: Path) -> Optional[Path]:
    """[container].condor_tarball as a path on this machine (~ expanded, relative to the
    profile's directory); None while it names a ${VAR} that is not set (checked again
    when the tarball is used, see SiteProfile.condor_tarball_path)."""

    def expand(match: re.Match[str]) -> str:
        var = match.group(1) or match.group(2)
        if var not in os.environ:
            raise KeyError(var)
        return os.environ[var]

    try:
        expanded = Path(_ENV_REF.sub(expand, value)).expanduser()
    except KeyError:
        return None
    return expanded if expanded.is_absolute() else relative_to / expanded


# ---- the tables --------------------------------------------------------------------------


class SiteTable(_Table):
    """[site]: who the site is and how to log in."""

    name: SiteName
    system: Annotated[StrictStr, Field(examples=['"NERSC Perlmutter"'])]
    description: Text = ""
    source: Annotated[StrictStr, Field(examples=['"https://docs.example.org/"'])] = ""
    checked: Annotated[StrictStr, Field(examples=['"2024-06"'])] = ""
    retired: StrictBool = False  # refused at export, launch and lease create
    successor: Optional[SiteName] = None  # named in that refusal
    login_host: Hostname
    user: Optional[UserName] = None
    port: Annotated[
        StrictInt, Field(ge=1), _port_below_65536("write the SSH port, e.g. port = 22")
    ] = 22
    known_hosts: Optional[Annotated[StrictStr, Field(examples=['"~/.ssh/known_hosts_mysite"'])]] = (
        None
    )
    identity_file: Optional[Annotated[StrictStr, Field(examples=['"~/.ssh/id_ed25519"'])]] = None
    auth: AuthMode = "key"
    connection_sharing: StrictBool = True
    base_dir: RemotePath
    scratch: Optional[Scratch] = None
    batch_system: BatchSystemName
    allocation_required: StrictBool = False
    # Exports of different owners may share the site account at once with no container
    # between their jobs (runtime none, podman-hpc): the operator says so (isolation.py).
    shared_account: StrictBool = False
    # Compute nodes reach the internet (a job may pull a docker://, oras://, library:// or
    # http(s):// container image). Where to check: the centre's pages on compute-node
    # network access, or `curl -sI https://example.org` in a short batch job. Default
    # false: a network image is refused before export instead of failing at the site.
    outbound_network: StrictBool = False

    @field_validator("name")
    @classmethod
    def _is_the_file_name(cls, name: str, info: ValidationInfo) -> str:
        stem = Path((info.context or {}).get("path", f"{name}.toml")).stem
        if name != stem:
            raise problem(
                f'must match the file name; rename the file to "{name}.toml" or set name = "{stem}"'
            )
        return name


class ContainerSpec(_Table):
    """[container]: the runtime, and the site image pilots run in (or, with runtime
    "none", the HTCondor release tarball lumberjack ships to the site)."""

    runtime: Runtime = "apptainer"
    image: Optional[
        Annotated[StrictStr, Field(examples=['"$SCRATCH/lumberjack/image/lumberjack-site.sif"'])]
    ] = None
    bind: Binds = ()
    condor_tarball: Optional[
        Annotated[StrictStr, Field(examples=['"~/htcondor/condor-25.0.0-x86_64_x.tar.gz"'])]
    ] = None

    @field_validator("image")
    @classmethod
    def _path_or_uri(cls, image: str, info: ValidationInfo) -> str:
        if info.data.get("runtime") == "podman-hpc":
            if not _OCI_IMAGE.match(image):
                raise problem(
                    "is not an OCI image name (podman-hpc runs images pulled or migrated "
                    'beforehand); write e.g. "lumberjack-site:25.14"'
                )
            return image
        if not (REMOTE_PATH.match(image) or _URI.match(image)):
            raise problem(
                "is neither a path at the site nor a docker://, oras://, library:// or "
                'https:// URI; write e.g. "$SCRATCH/lumberjack/image/lumberjack-site.sif"'
            )
        return image

    @model_validator(mode="after")
    def _image_or_tarball(self, info: ValidationInfo) -> ContainerSpec:
        if self.runtime != "none":
            if self.condor_tarball is not None:
                raise problem(
                    f'is only for runtime = "none" (this profile runs {self.runtime}); remove it',
                    key=("condor_tarball",),
                )
            if self.image is None:
                raise problem(
                    f'runtime "{self.runtime}" needs the site image; add e.g. image = '
                    '"$SCRATCH/lumberjack/image/lumberjack-site.sif"',
                    show=False,
                )
            return self
        if self.condor_tarball is None:
            raise problem(
                'runtime "none" needs the HTCondor release tarball lumberjack ships to the '
                'site; add e.g. condor_tarball = "~/htcondor/condor-25.0.0-x86_64_x.tar.gz"',
                show=False,
            )
        if _ENV_REF.search(self.condor_tarball):
            return self  # the variables are the environment's at use (condor_tarball_path)
        path = (info.context or {}).get("path")
        found = tarball_path(self.condor_tarball, Path(path).parent if path else Path.cwd())
        if found is not None and not found.is_file():
            raise problem(f"is not a file ({found})", key=("condor_tarball",))
        return self

    @field_validator("bind")
    @classmethod
    def _bind_specs(cls, bind: tuple[str, ...]) -> tuple[str, ...]:
        for item in bind:
            if not _BIND.match(item):
                raise problem(
                    'has characters a bind spec cannot hold; write e.g. "/scratch:/scratch:ro"',
                    value=item,
                )
        return bind


class ScheddSpec(_Table):
    """[schedd]: where the remote pool's schedd runs, how compute nodes reach it, and how many
    jobs it may run at once (a site policy cap; None: no cap)."""

    placement: Placement = "login"
    port: Annotated[
        StrictInt, Field(ge=0), _port_below_65536("use 0 to let the site agent choose")
    ] = 0
    address: Optional[NodeAddress] = None
    max_running_jobs: Optional[Annotated[StrictInt, Field(ge=1, examples=["64"])]] = None


class Queue(_Table):
    """[[queues]]: one queue (Slurm partition or QOS, PBS/Cobalt queue), its per-job limits."""

    name: QueueName
    batch_queue: Annotated[StrictStr, Field(examples=['"regular"'])] = ""  # "": no directive
    description: Text = ""
    min_nodes: Annotated[StrictInt, Field(ge=1)] = 1
    max_nodes: Annotated[StrictInt, Field(ge=1)]
    cores_per_node: Annotated[StrictInt, Field(ge=1)]
    memory_per_node_mb: Memory = Field(alias="memory_per_node")
    gpus_per_node: Annotated[StrictInt, Field(ge=0)] = 0
    gpu_vendor: Optional[GpuVendor] = None  # picks the runtime's device passthrough
    gpu_model: Optional[GpuModel] = None
    # Test sites only: HTCondor's GPU discovery simulates this queue's GPUs (gpus.py).
    simulate_gpus: StrictBool = False
    # A node's local disk for job sandboxes, where known: jobs asking for more are
    # refused before export (unset: RequestDisk is not checked).
    disk_per_node_mb: Optional[Memory] = Field(None, alias="disk_per_node")
    max_walltime_s: Walltime = Field(alias="max_walltime")
    whole_node: StrictBool = False
    default: StrictBool = False
    directives: Directives = ()

    @model_validator(mode="before")
    @classmethod
    def _batch_queue_defaults_to_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "batch_queue" not in data and "name" in data:
            return {**data, "batch_queue": data["name"]}
        return data

    @field_validator("batch_queue")
    @classmethod
    def _batch_queue_name(cls, value: str) -> str:
        if value and not _QUEUE_NAME.match(value):
            raise problem('is not a queue name; write e.g. "regular" or ""')
        return value

    @model_validator(mode="after")
    def _nodes_in_order(self) -> Queue:
        if self.min_nodes > self.max_nodes:
            raise problem(f"is above max_nodes ({self.max_nodes}); lower it", key=("min_nodes",))
        return self

    @model_validator(mode="after")
    def _gpus_described(self) -> Queue:
        has = self.gpus_per_node > 0
        for key, example in (("gpu_vendor", '"nvidia"'), ("gpu_model", '"A100-SXM4-40GB"')):
            if has and getattr(self, key) is None:
                raise problem(f"a queue with GPUs needs {key}; add e.g. {key} = {example}",
                              show=False)  # fmt: skip
            if not has and getattr(self, key) is not None:
                raise problem("is only for queues with gpus_per_node > 0; remove it", key=(key,))
        simulable = self.gpu_vendor == "nvidia" and self.gpu_model in SIMULATED_MODELS
        if self.simulate_gpus and not (has and simulable):
            models = ", ".join(json.dumps(model) for model in SIMULATED_MODELS)
            why = f"a gpu_model HTCondor simulates: {models}" if has else "gpus_per_node > 0"
            raise problem(f'needs gpu_vendor = "nvidia" and {why}', key=("simulate_gpus",),
                          show=False)  # fmt: skip
        return self


class BatchSettings(_Table):
    """[batch]: what every pilot script of the site gets besides its queue's directives."""

    extra_directives: Directives = ()
    setup: SetupLines = ()
    launcher: StrictStr = ""  # "": the batch system's default
    chunk_resources: ChunkResources = ()
    memory_request: StrictBool = True  # false: the site refuses any (TACC's Slurm: --mem)

    @field_validator("launcher", mode="before")
    @classmethod
    def _known_launcher(cls, launcher: Any, info: ValidationInfo) -> Any:
        name = (info.context or {}).get("batch_system")
        if name:
            choices = batch_system(name).LAUNCHERS
            if not isinstance(launcher, str):
                raise problem(f"is not a string; write e.g. launcher = {json.dumps(choices[0])}")
            if launcher.strip() not in choices:
                options = " or ".join(json.dumps(choice) for choice in choices)
                raise problem(f"is not one of the choices; write {options}")
        return launcher

    @field_validator("chunk_resources")
    @classmethod
    def _pbs_chunks(cls, chunk: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        name = (info.context or {}).get("batch_system")
        if chunk and name and name != "pbs":
            raise problem("is for PBS sites only; remove it")
        for item in chunk:
            if not CHUNK_RESOURCE.match(item):
                raise problem('is not name=value; write e.g. "system=polaris"', value=item)
        return chunk


class RequestDefaults(_Table):
    """[defaults]: the resource request when no flag says otherwise."""

    nodes: Optional[Annotated[StrictInt, Field(ge=1)]] = None
    cores: Optional[Annotated[StrictInt, Field(ge=1)]] = None
    memory_mb: Optional[Memory] = Field(None, alias="memory")
    gpus: Optional[Annotated[StrictInt, Field(ge=0)]] = None
    walltime_s: Optional[Walltime] = Field(None, alias="walltime")
    queue: Optional[Annotated[StrictStr, Field(examples=['"regular"'])]] = None
    allocation: Optional[Allocation] = None


class ProfileFile(_Table):
    """A whole profile file. After validation `defaults.queue` names the default queue."""

    site: SiteTable
    container: ContainerSpec
    schedd: ScheddSpec = ScheddSpec()
    queues: tuple[Queue, ...] = Field(min_length=1)
    batch: BatchSettings = BatchSettings()
    defaults: RequestDefaults = RequestDefaults()

    @field_validator("queues")
    @classmethod
    def _unique_names(cls, queues: tuple[Queue, ...]) -> tuple[Queue, ...]:
        for number, queue in enumerate(queues):
            if any(earlier.name == queue.name for earlier in queues[:number]):
                raise problem(
                    "is used by an earlier queue; give each queue its own name",
                    key=(number, "name"),
                )
        return queues

    @model_validator(mode="after")
    def _default_queue_fits(self) -> ProfileFile:
        named = self.defaults.queue
        if named is not None and not any(q.name == named for q in self.queues):
            names = ", ".join(json.dumps(q.name) for q in self.queues)
            raise problem(
                f"names no [[queues]] entry; use one of {names}", key=("defaults", "queue")
            )
        queue = self._pick_default(named)
        _check_defaults(self.defaults, queue)
        return self.model_copy(
            update={"defaults": self.defaults.model_copy(update={"queue": queue.name})}
        )

    def _pick_default(self, named: str | None) -> Queue:
        marked = [queue for queue in self.queues if queue.default]
        if len(marked) > 1:
            names = ", ".join(json.dumps(queue.name) for queue in marked)
            raise problem(
                f"marks {names} as default; keep default = true on one only",
                key=("queues",),
                show=False,
            )
        if named is not None:
            if marked and marked[0].name != named:
                raise problem(
                    f'disagrees with [[queues]] "{marked[0].name}" marked default = true; '
                    "keep one of the two",
                    key=("defaults", "queue"),
                )
            return next(queue for queue in self.queues if queue.name == named)
        if marked:
            return marked[0]
        if len(self.queues) == 1:
            return self.queues[0]
        raise problem(
            "has no default queue; add default = true to the queue pilots use "
            "when --queue is not given",
            key=("queues",),
            show=False,
        )


def _check_defaults(defaults: RequestDefaults, queue: Queue) -> None:
    where = f'of the default queue "{queue.name}"'
    checks = (
        ("nodes", defaults.nodes, queue.max_nodes, f"max_nodes ({queue.max_nodes})"),
        ("cores", defaults.cores, queue.cores_per_node,
         f"cores_per_node ({queue.cores_per_node})"),
        ("memory", defaults.memory_mb, queue.memory_per_node_mb,
         f"memory_per_node ({format_memory(queue.memory_per_node_mb)})"),
        ("gpus", defaults.gpus, queue.gpus_per_node, f"gpus_per_node ({queue.gpus_per_node})"),
        ("walltime", defaults.walltime_s, queue.max_walltime_s,
         f"max_walltime ({format_walltime(queue.max_walltime_s)})"),
    )  # fmt: skip
    for key, value, limit, label in checks:
        if value is not None and value > limit:
            raise problem(f"exceeds the {label} {where}; lower it", key=("defaults", key))
    if defaults.nodes is not None and defaults.nodes < queue.min_nodes:
        raise problem(
            f"is below the min_nodes ({queue.min_nodes}) {where}; raise it",
            key=("defaults", "nodes"),
        )


# ---- the checked site --------------------------------------------------------------------


@dataclass(frozen=True)
class SiteProfile:
    """A site as its profile file describes it: [site]'s keys, the other tables, the file."""

    name: str
    system: str
    login_host: str
    base_dir: str
    batch_system: str
    container: ContainerSpec
    queues: tuple[Queue, ...]
    path: Path
    description: str = ""
    source: str = ""
    checked: str = ""
    retired: bool = False
    successor: Optional[str] = None
    user: Optional[str] = None
    port: int = 22
    known_hosts: Optional[str] = None  # as written; see known_hosts_path()
    identity_file: Optional[str] = None  # as written; see identity_file_path()
    auth: str = "key"
    connection_sharing: bool = True
    scratch: str = ""
    allocation_required: bool = False
    shared_account: bool = False
    outbound_network: bool = False
    schedd: ScheddSpec = ScheddSpec()
    batch: BatchSettings = BatchSettings()
    defaults: RequestDefaults = RequestDefaults()

    @classmethod
    def from_file(cls, file: ProfileFile, path: Path) -> SiteProfile:
        site = file.site.model_dump()
        site["scratch"] = site["scratch"] or site["base_dir"]
        site["known_hosts"] = site["known_hosts"] or None
        site["identity_file"] = site["identity_file"] or None
        return cls(
            **site,
            container=file.container,
            schedd=file.schedd,
            queues=file.queues,
            batch=file.batch,
            defaults=file.defaults,
            path=path,
        )

    @property
    def default_queue(self) -> Queue:
        wanted = self.defaults.queue
        for queue in self.queues:
            if queue.name == wanted or (wanted is None and queue.default):
                return queue
        return self.queues[0]  # a checked profile names its default queue

    def find_queue(self, name: str) -> Optional[Queue]:
        """The queue called `name`, or None."""
        return next((queue for queue in self.queues if queue.name == name), None)

    def queue(self, name: str) -> Queue:
        """The queue called `name`; BadInput naming the site's queues if none."""
        queue = self.find_queue(name)
        if queue is None:
            names = ", ".join(queue.name for queue in self.queues)
            raise BadInput(f'site "{self.name}" has no queue "{name}"; its queues: {names}')
        return queue

    def known_hosts_path(self) -> Optional[Path]:
        """The pinned known_hosts file, with ${VAR} and ~ expanded (BadInput if unset)."""
        return self._local_path("known_hosts", self.known_hosts)

    def identity_file_path(self) -> Optional[Path]:
        """The private key file, with ${VAR} and ~ expanded (BadInput if unset)."""
        return self._local_path("identity_file", self.identity_file)

    def condor_tarball_path(self) -> Optional[Path]:
        """[container].condor_tarball on this machine (runtime "none"), ${VAR} and ~
        expanded; BadInput (one line) if a variable is unset or the file is missing."""
        value = self.container.condor_tarball
        if value is None:
            return None
        path = self._local_path("condor_tarball", value, table="container")
        if path is None or not path.is_file():
            raise BadInput(
                f"{display_path(self.path)}: [container].condor_tarball {path} is not a file; "
                "point it at an HTCondor release tarball"
            )
        return path

    def _local_path(self, key: str, value: Optional[str], table: str = "site") -> Optional[Path]:
        if value is None:
            return None

        def expand(match: re.Match[str]) -> str:
            var = match.group(1) or match.group(2)
            if var not in os.environ:
                raise BadInput(
                    f"{display_path(self.path)}: [{table}].{key} needs ${var}, which is not "
                    f"set; export {var} or write the path into the profile"
                )
            return os.environ[var]

        expanded = Path(_ENV_REF.sub(expand, value)).expanduser()
        if not expanded.is_absolute():
            expanded = self.path.parent / expanded
        return expanded

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (for --json)."""
        default = self.default_queue.name
        return {
            "name": self.name,
            "system": self.system,
            "description": self.description,
            "source": self.source,
            "checked": self.checked,
            "retired": self.retired,
            "successor": self.successor,
            "path": str(self.path),
            "login_host": self.login_host,
            "user": self.user,
            "port": self.port,
            "known_hosts": self.known_hosts,
            "identity_file": self.identity_file,
            "auth": self.auth,
            "connection_sharing": self.connection_sharing,
            "base_dir": self.base_dir,
            "scratch": self.scratch,
            "batch_system": self.batch_system,
            "allocation_required": self.allocation_required,
            "shared_account": self.shared_account,
            "outbound_network": self.outbound_network,
            "container": self.container.model_dump(mode="json"),
            "schedd": self.schedd.model_dump(mode="json"),
            "queues": [
                {
                    **q.model_dump(mode="json", exclude={"memory_per_node_mb", "max_walltime_s"}),
                    "memory_per_node": format_memory(q.memory_per_node_mb),
                    "memory_per_node_mb": q.memory_per_node_mb,
                    "max_walltime": format_walltime(q.max_walltime_s),
                    "max_walltime_s": q.max_walltime_s,
                    "default": q.name == default,
                }
                for q in self.queues
            ],
            "batch": self.batch.model_dump(mode="json"),
            "defaults": {
                **self.defaults.model_dump(mode="json", exclude={"walltime_s"}),
                "walltime": (
                    format_walltime(self.defaults.walltime_s)
                    if self.defaults.walltime_s is not None
                    else None
                ),
                "queue": default,
            },
        }
