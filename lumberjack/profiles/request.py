"""Resource requests: how many nodes, cores, memory, GPUs and how much walltime the pilots
ask for, checked against a site profile before anyone logs in.

Where each value comes from, first match wins:
1. the flag (`--nodes`, `--cores`, `--memory`, `--gpus`, `--walltime`, `--queue`,
   `--allocation`, `--pilots`);
2. walltime only: a suggestion from the jobs' own runtimes (below);
3. the profile's `[defaults]`, cut down to the chosen queue's limit when the queue is
   smaller, or raised to its minimum of nodes (said with its cost, see cost.py; a flag
   beyond a limit is an error instead); cores, memory and GPUs are
   raised to what the largest selected job asks for (its RequestCpus, RequestMemory,
   RequestGPUs), within the queue's node size, so the pilots' slots can take it;
4. the queue: on a whole-node queue, cores, memory and GPUs default to the full node;
   walltime defaults to the queue's maximum;
5. otherwise 1 node, 1 core, 1 GB per core, no GPUs, 1 pilot.

Pilots: `--nodes` is the total; `--pilots P` splits it into P batch jobs of nodes/P
nodes each, so nodes must be a multiple of P. A queue's node limits apply to each
pilot, since each pilot is one batch job.

Walltime suggestion: when no `--walltime` is given and the caller passes the jobs'
runtimes (RequestRuntime, MaxRuntime, JobDurationLimit... in seconds), the walltime is
the longest runtime plus `WALLTIME_MARGIN_S` (10 minutes: 5 for the pilot to start its
startds and the job to be matched, 5 for output transfer and shutdown), rounded up to a
whole minute and capped at the queue's maximum. A job longer than the queue's maximum,
or than an explicit `--walltime`, can never finish there: that is an error.

Retirement (`retire_before_end_s`): the startds stop accepting new jobs this long
before the walltime ends, so that a job started just before can still finish:
- runtimes known: the longest runtime + `SHUTDOWN_MARGIN_S` (5 minutes), but never
  leaving less than a minute of acceptance, and never less than the longest runtime;
- unknown: 10% of the walltime, at least 2 minutes and at most 30 minutes (and at most
  half the walltime).

A request a queue refuses is one line naming the limit and the ways out; where another
queue of the site takes the whole request, it is named with its cost (queue_hints.py).

Units (walltime, memory): see `lumberjack.core.units`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

from lumberjack.core.contract import PilotRequest
from lumberjack.core.shell_safe import DIRECTIVE_WORD
from lumberjack.core.units import format_memory, format_walltime, parse_memory, parse_walltime
from lumberjack.errors import BadInput
from lumberjack.profiles.cost import cost_of, partial_node_warnings, raise_warning
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.queue_hints import Hinted, queue_hints
from lumberjack.profiles.queue_limits import (
    QueueLimit,
    check_nodes,
    limit_message,
    runtime_message,
    split_message,
)
from lumberjack.profiles.queue_tables import Queue

#: What a person may ask for: build_request's keyword names, and the flags of every
#: command that takes a request (--idle-shutdown for idle_shutdown).
REQUEST_FIELDS = (
    "nodes",
    "cores",
    "memory",
    "gpus",
    "walltime",
    "queue",
    "allocation",
    "pilots",
    "idle_shutdown",
)

WALLTIME_MARGIN_S = 600
SHUTDOWN_MARGIN_S = 300
MIN_ACCEPT_S = 60
DEFAULT_MEMORY_PER_CORE_MB = 1024


class JobRuntime(NamedTuple):
    """A job's expected runtime and where it came from, for precise error messages."""

    seconds: int
    job: str = ""  # e.g. "12.0"
    attribute: str = ""  # e.g. "MaxRuntime"

    def describe(self) -> str:
        who = f"job {self.job}" if self.job else "a job"
        what = f" ({self.attribute})" if self.attribute else ""
        return f"{who} asks for {format_walltime(self.seconds)}{what}"


RuntimeLike = Union[int, JobRuntime]


class Need(NamedTuple):
    """The most of one resource a selected job asks for, and which job, for the report."""

    amount: int  # cores, MB or GPUs
    job: str  # e.g. "12.0"
    attribute: str  # e.g. "RequestMemory"

    def describe(self) -> str:
        return f"largest job {self.job} {self.attribute}"


@dataclass(frozen=True)
class JobNeeds:
    """The largest requests among the selected jobs (None: no job asks)."""

    cores: Need | None = None
    memory: Need | None = None
    gpus: Need | None = None


@dataclass(frozen=True)
class ResourceRequest:
    """What the pilots of one export ask the batch system for (per node where it says)."""

    site: str
    queue: str
    nodes: int  # total over all pilots
    cores_per_node: int
    memory_per_node_mb: int
    gpus_per_node: int
    walltime_s: int
    allocation: str | None
    pilots: int = 1
    max_job_runtime_s: int | None = None  # longest known job runtime, for retirement
    idle_shutdown_s: int = 300  # a node with no job for this long ends (and frees the node)
    # (value name, where it came from) pairs for the report; not part of equality
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def nodes_per_pilot(self) -> int:
        return self.nodes // self.pilots

    def origin(self, name: str) -> str:
        return dict(self.origins).get(name, "")


# ---- building and checking a request -------------------------------------------------


def build_request(
    profile: SiteProfile,
    *,
    nodes: int | None = None,
    cores: int | None = None,
    memory: str | int | None = None,
    gpus: int | None = None,
    walltime: str | int | None = None,
    queue: str | None = None,
    allocation: str | None = None,
    pilots: int | None = None,
    job_runtimes_s: Sequence[RuntimeLike] = (),
    idle_shutdown: str | int | None = None,
    job_needs: JobNeeds | None = None,
) -> ResourceRequest:
    """Fill a request from flags, the jobs' runtimes and needs, and the profile, and
    check it against the chosen queue. `walltime` may be seconds (int) or any form
    `parse_walltime` reads. Raises BadInput naming the flag, the limit and a way out:
    another queue only if it takes the whole request, with what it costs."""
    flags: dict[str, Any] = dict(
        nodes=nodes, cores=cores, memory=memory, gpus=gpus, walltime=walltime,
        allocation=allocation, pilots=pilots, job_runtimes_s=job_runtimes_s,
        idle_shutdown=idle_shutdown, job_needs=job_needs,
    )  # fmt: skip
    try:
        return _build(profile, queue, flags)
    except QueueLimit as refused:
        wants_gpus = bool(gpus) or bool(job_needs and job_needs.gpus)
        hints = other_queues(profile, refused.queue, flags, wants_gpus)
        ways = [f"--queue {name} ({what})" for name, what in hints]
        raise BadInput(refused.message(ways)) from None


def other_queues(
    profile: SiteProfile, refused: str, flags: dict[str, Any], wants_gpus: bool
) -> list[tuple[str, str]]:
    """(queue, what it costs) for the queues other than `refused` that take the whole
    request `flags` (build_request's keywords but the queue); see queue_hints.py."""

    def attempt(name: str) -> Hinted:
        # An allocation left out is no limit of a queue: it refuses none of them.
        other = _build(profile, name, flags, hinting=True)
        return Hinted(other.nodes, other.pilots, other.walltime_s, other.origin("nodes"))

    return queue_hints(profile, refused, attempt, wants_gpus)


def flags_of(request: ResourceRequest) -> dict[str, Any]:
    """The flags that give `request` again on another queue: those it was given, its
    walltime (the jobs' runtimes may have set it) and its allocation."""
    given = {
        "nodes": request.nodes,
        "cores": request.cores_per_node,
        "memory": request.memory_per_node_mb,
        "gpus": request.gpus_per_node,
        "pilots": request.pilots,
    }
    flags = {key: value for key, value in given.items() if request.origin(key) == f"--{key}"}
    return {**flags, "walltime": request.walltime_s, "allocation": request.allocation}


def _build(
    profile: SiteProfile, queue: str | None, flags: dict[str, Any], hinting: bool = False
) -> ResourceRequest:
    """The request on `queue` alone, from build_request's other keywords (`flags`; an
    absent one is None). Raises BadInput (QueueLimit for a limit of the queue)."""
    get = flags.get
    origins: dict[str, str] = {}  # value name -> where it came from, for the report
    chosen = _choose_queue(profile, queue, origins)
    total_nodes, pilot_count = _nodes_and_pilots(
        profile, chosen, get("nodes"), get("pilots"), origins
    )
    cores_per_node, memory_per_node, gpus_per_node = _node_resources(
        profile, chosen, get("cores"), get("memory"), get("gpus"), get("job_needs"), origins
    )
    longest = _longest_runtime(profile, chosen, get("job_runtimes_s") or ())
    walltime_s = _walltime(profile, chosen, get("walltime"), longest, origins)
    charged = _allocation(profile, get("allocation"), origins, required=not hinting)
    extra: dict[str, Any] = {}
    idle_shutdown = get("idle_shutdown")
    if idle_shutdown is not None:
        extra["idle_shutdown_s"] = _idle_shutdown(idle_shutdown)
        origins["idle_shutdown"] = "--idle-shutdown"
    return ResourceRequest(
        site=profile.name,
        queue=chosen.name,
        nodes=total_nodes,
        cores_per_node=cores_per_node,
        memory_per_node_mb=memory_per_node,
        gpus_per_node=gpus_per_node,
        walltime_s=walltime_s,
        allocation=charged or None,
        pilots=pilot_count,
        max_job_runtime_s=longest.seconds if longest is not None else None,
        origins=tuple(origins.items()),
        **extra,
    )


def _choose_queue(profile: SiteProfile, queue: str | None, origins: dict[str, str]) -> Queue:
    if queue is not None:
        origins["queue"] = "--queue"
        return _queue_from_flag(profile, queue)
    origins["queue"] = "profile default"
    return profile.default_queue


def _nodes_and_pilots(
    profile: SiteProfile,
    chosen: Queue,
    nodes: int | None,
    pilots: int | None,
    origins: dict[str, str],
) -> tuple[int, int]:
    """(nodes over all pilots, pilots): each pilot is one batch job of nodes/pilots nodes,
    within the queue's node limits."""
    pilot_count = _whole("--pilots", pilots) if pilots is not None else 1
    origins["pilots"] = "--pilots" if pilots is not None else "default"
    defaults = profile.defaults
    if nodes is not None:
        total_nodes = _whole("--nodes", nodes)
        origins["nodes"] = "--nodes"
    elif defaults.nodes is not None:
        per_pilot = min(max(defaults.nodes, chosen.min_nodes), chosen.max_nodes)
        total_nodes = per_pilot * pilot_count
        origins["nodes"] = _fitted("profile default", defaults.nodes,
                                   per_pilot, chosen)  # fmt: skip
    else:
        total_nodes = chosen.min_nodes * pilot_count
        origins["nodes"] = _fitted("default", 1, chosen.min_nodes, chosen)
    if pilot_count > total_nodes or total_nodes % pilot_count:
        raise BadInput(split_message(total_nodes, pilot_count))
    check_nodes(profile, chosen, total_nodes, pilot_count)
    return total_nodes, pilot_count


def _longest_runtime(
    profile: SiteProfile, chosen: Queue, job_runtimes_s: Sequence[RuntimeLike]
) -> JobRuntime | None:
    """The longest known job runtime; BadInput when no walltime of the queue fits it."""
    runtimes = [_as_runtime(item) for item in job_runtimes_s]
    longest = max(runtimes, key=lambda item: item.seconds) if runtimes else None
    if longest is not None and longest.seconds > chosen.max_walltime_s:
        raise runtime_message(profile, chosen, longest.describe())
    return longest


def _walltime(
    profile: SiteProfile,
    chosen: Queue,
    walltime: str | int | None,
    longest: JobRuntime | None,
    origins: dict[str, str],
) -> int:
    """The pilots' walltime: the flag, else the longest job plus a margin, else the
    profile's default, else the queue's maximum."""
    if walltime is not None:
        walltime_s = _walltime_flag(walltime)
        origins["walltime"] = "--walltime"
        if walltime_s > chosen.max_walltime_s:
            raise limit_message(profile, chosen, "--walltime", walltime_s, 0, "")
        if longest is not None and longest.seconds > walltime_s:
            raise BadInput(
                f"--walltime {format_walltime(walltime_s)} is shorter than the longest job: "
                f"{longest.describe()}; use --walltime "
                f"{format_walltime(_suggest(longest.seconds, chosen))} or more"
            )
        return walltime_s
    if longest is not None:
        walltime_s = _suggest(longest.seconds, chosen)
        capped = walltime_s == chosen.max_walltime_s
        origins["walltime"] = (
            f"longest job {format_walltime(longest.seconds)} + "
            f"{WALLTIME_MARGIN_S // 60} min margin"
            + (", capped at the queue maximum" if capped else "")
        )
        return walltime_s
    defaults = profile.defaults
    if defaults.walltime_s is not None:
        walltime_s = min(defaults.walltime_s, chosen.max_walltime_s)
        origins["walltime"] = _clipped("profile default", walltime_s != defaults.walltime_s, chosen)
        return walltime_s
    origins["walltime"] = "queue maximum"
    return chosen.max_walltime_s


def _allocation(
    profile: SiteProfile, allocation: str | None, origins: dict[str, str], required: bool = True
) -> str | None:
    """The project the pilots are charged to: the flag, else the profile's default."""
    if allocation is not None:
        charged: str | None = allocation.strip()
        origins["allocation"] = "--allocation"
    elif profile.defaults.allocation is not None:
        charged = profile.defaults.allocation
        origins["allocation"] = "profile default"
    else:
        charged = None
        origins["allocation"] = "none given: the site charges your default project"
    if charged is not None and not DIRECTIVE_WORD.match(charged):
        raise BadInput(
            f"--allocation {charged!r} has characters a batch directive cannot hold; "
            "use the project name as the centre spells it (e.g. m1234)"
        )
    if required and profile.allocation_required and not charged:
        raise BadInput(
            f'site "{profile.name}" charges every job to an allocation (project); '
            "use --allocation NAME with your project's name"
        )
    return charged


def _idle_shutdown(value: str | int) -> int:
    try:
        seconds = parse_walltime(str(value))
    except ValueError as exc:
        raise BadInput(f"--idle-shutdown {value} {exc}") from None
    return _whole("--idle-shutdown", seconds)


def _node_resources(
    profile: SiteProfile,
    chosen: Queue,
    cores: int | None,
    memory: str | int | None,
    gpus: int | None,
    needs: JobNeeds | None,
    origins: dict[str, str],
) -> tuple[int, int, int]:
    """Cores, memory (MB) and GPUs per node: each from its flag, else enough for the
    largest selected job (within the node), else the profile's default."""
    needs = needs or JobNeeds()
    defaults = profile.defaults
    cores_per_node = _per_node(
        "cores", "--cores", cores, defaults.cores, chosen.cores_per_node, chosen, 1, origins,
        need=needs.cores,
    )  # fmt: skip
    memory_flag: int | None = None
    if memory is not None:
        try:
            memory_flag = parse_memory(memory)
        except ValueError as exc:
            raise BadInput(f"--memory {memory} {exc}") from None
        if memory_flag <= 0:
            raise BadInput(f"--memory {memory} must be more than 0")
    memory_fallback = min(cores_per_node * DEFAULT_MEMORY_PER_CORE_MB, chosen.memory_per_node_mb)
    memory_per_node = _per_node(
        "memory", "--memory", memory_flag, defaults.memory_mb, chosen.memory_per_node_mb,
        chosen, memory_fallback, origins, need=needs.memory,
    )  # fmt: skip
    gpus_per_node = _per_node(
        "gpus", "--gpus", gpus, defaults.gpus, chosen.gpus_per_node, chosen, 0, origins,
        zero=True, need=needs.gpus,
    )  # fmt: skip
    for flag, value, limit, unit in (
        ("--cores", cores_per_node, chosen.cores_per_node, "cores per node"),
        ("--memory", memory_per_node, chosen.memory_per_node_mb, "per node"),
        ("--gpus", gpus_per_node, chosen.gpus_per_node, "GPUs per node"),
    ):
        if value > limit:
            raise limit_message(profile, chosen, flag, value, limit, unit)
    return cores_per_node, memory_per_node, gpus_per_node


def retire_before_end_s(request: ResourceRequest) -> int:
    """Seconds before the walltime ends when the startds stop accepting new jobs."""
    walltime = request.walltime_s
    runtime = request.max_job_runtime_s
    if runtime:
        wanted = min(runtime + SHUTDOWN_MARGIN_S, walltime - MIN_ACCEPT_S)
        return max(min(runtime, walltime), wanted)
    return min(max(walltime // 10, 120), 1800, walltime // 2)


def pilot_request(
    request: ResourceRequest, profile: SiteProfile, env: dict[str, str] | None = None
) -> PilotRequest:
    """What one pilot of this request asks the batch system for (each pilot gets
    nodes/pilots nodes), as the launch plan carries it; checked as it is built (see
    PilotRequest). The agent adds each pilot's name and commands (PilotSpec.of)."""
    queue = profile.queue(request.queue)
    return PilotRequest(
        nodes=request.nodes_per_pilot,
        cores_per_node=request.cores_per_node,
        # 0: no memory line in the script, where the site refuses one
        memory_per_node_mb=request.memory_per_node_mb if profile.batch.memory_request else 0,
        gpus_per_node=request.gpus_per_node,
        walltime_s=request.walltime_s,
        retire_s=retire_before_end_s(request),
        queue=queue.batch_queue,
        allocation=request.allocation,
        extra_directives=[*profile.batch.extra_directives, *queue.directives],
        setup_lines=list(profile.batch.setup),
        env=dict(env or {}),
        whole_node=queue.whole_node,
        launcher=profile.batch.launcher,
        chunk_resources=list(profile.batch.chunk_resources),
        gpu_request=profile.batch.gpu_request,
    )


# ---- the report ----------------------------------------------------------------------

_FLAGS = {
    "queue": "--queue",
    "nodes": "--nodes",
    "pilots": "--pilots",
    "cores": "--cores",
    "memory": "--memory",
    "gpus": "--gpus",
    "walltime": "--walltime",
    "allocation": "--allocation",
}


def report_lines(request: ResourceRequest, profile: SiteProfile) -> list[str]:
    """A short human report: each value, where it came from and the flag that changes it."""
    queue = profile.queue(request.queue)
    per_pilot = request.nodes_per_pilot
    values = {
        "queue": request.queue + (" (whole nodes)" if queue.whole_node else ""),
        "nodes": str(request.nodes),
        "pilots": f"{request.pilots} ({per_pilot} node{'s' if per_pilot != 1 else ''} each)",
        "cores": f"{request.cores_per_node} per node",
        "memory": f"{format_memory(request.memory_per_node_mb)} per node",
        "gpus": f"{request.gpus_per_node} per node",
        "walltime": format_walltime(request.walltime_s),
        "allocation": request.allocation or "-",
    }
    lines = [f"{'site':<12} {profile.name}   ({profile.system}; {profile.login_host})"]
    width = max(len(value) for value in values.values())
    for key, value in values.items():
        origin = request.origin(key) or "default"
        flag = _FLAGS[key]
        where = f"from {flag}" if origin == flag else f"{origin}; change with {flag}"
        lines.append(f"{key:<12} {value:<{width}}   ({where})")
    cap = profile.schedd.max_running_jobs
    running = f"{cap} jobs at once" if cap else "no cap"
    lines.append(
        f"{'running':<12} {running:<{width}}   "
        "(site policy: the profile's [schedd] max_running_jobs)"
    )
    retire = retire_before_end_s(request)
    lines.append(
        f"{'retire':<12} {format_walltime(retire):<{width}}   "
        "(before the end, the startds stop accepting new jobs)"
    )
    cost = cost_of(request.nodes, request.walltime_s, queue)
    rate = "" if cost.charge_factor is None else " x the queue's charge_factor"
    lines.append(
        f"{'cost':<12} {'at most ' + cost.text():<{width}}   ({request.nodes} node"
        f"{'s' if request.nodes != 1 else ''} x {format_walltime(request.walltime_s)}{rate}; "
        "pilots that go idle end sooner)"
    )
    lines += [f"{'warning':<12} {line}" for line in request_warnings(request, profile)]
    return lines


def request_warnings(request: ResourceRequest, profile: SiteProfile) -> list[str]:
    """What to read before spending: nodes raised to a queue's minimum, a part of a
    node asked for on a whole-node queue (see cost.py)."""
    queue = profile.queue(request.queue)
    raised = raise_warning(profile, queue, request.nodes, request.pilots,
                           request.walltime_s, request.origin("nodes"))  # fmt: skip
    per_node = {
        "cores": (request.cores_per_node, request.origin("cores")),
        "memory": (request.memory_per_node_mb, request.origin("memory")),
        "gpus": (request.gpus_per_node, request.origin("gpus")),
    }
    return ([raised] if raised else []) + partial_node_warnings(queue, per_node)


def report_dict(request: ResourceRequest, profile: SiteProfile) -> dict[str, Any]:
    """The same report as data, for --json."""
    return {
        "site": request.site,
        "queue": request.queue,
        "batch_queue": profile.queue(request.queue).batch_queue,
        "nodes": request.nodes,
        "pilots": request.pilots,
        "nodes_per_pilot": request.nodes_per_pilot,
        "cores_per_node": request.cores_per_node,
        "memory_per_node_mb": request.memory_per_node_mb,
        "gpus_per_node": request.gpus_per_node,
        "walltime": format_walltime(request.walltime_s),
        "walltime_s": request.walltime_s,
        "allocation": request.allocation,
        "max_job_runtime_s": request.max_job_runtime_s,
        "retire_before_end_s": retire_before_end_s(request),
        "max_running_jobs": profile.schedd.max_running_jobs,
        "schedd_placement": profile.schedd.placement,
        "origins": dict(request.origins),
        **cost_of(request.nodes, request.walltime_s, profile.queue(request.queue)).to_json(),
        "warnings": request_warnings(request, profile),
    }


# ---- helpers -------------------------------------------------------------------------


def _whole(flag: str, value: int, floor: int = 1) -> int:
    """`value` if it is a whole number of at least `floor`; BadInput naming the flag."""
    if isinstance(value, bool) or not isinstance(value, int) or value < floor:
        raise BadInput(f"{flag} {value} must be a whole number of {floor} or more")
    return value


def _queue_from_flag(profile: SiteProfile, name: str) -> Queue:
    queue = profile.find_queue(name)
    if queue is not None:
        return queue
    names = ", ".join(queue.name for queue in profile.queues)
    raise BadInput(f'--queue {name}: site "{profile.name}" has no such queue; use one of {names}')


def _clipped(origin: str, clipped: bool, queue: Queue) -> str:
    return f"{origin}, cut to queue {queue.name}'s limit" if clipped else origin


def _fitted(origin: str, asked: int, given: int, queue: Queue) -> str:
    """Where a node count came from, and whether the queue raised or cut it."""
    if given > asked:
        return f"{origin} {asked}, raised to queue {queue.name}'s minimum"
    if given < asked:
        return f"{origin} {asked}, cut to queue {queue.name}'s maximum"
    return origin


def _per_node(
    key: str,
    flag: str,
    value: int | None,
    default: int | None,
    full_node: int,
    queue: Queue,
    fallback: int,
    origins: dict[str, str],
    *,
    zero: bool = False,
    need: Need | None = None,
) -> int:
    if value is not None:
        origins[key] = flag
        return _whole(flag, value, 0 if zero else 1)
    if queue.whole_node:
        origins[key] = "whole node"
        return full_node
    if default is not None:
        origins[key] = _clipped("profile default", default > full_node, queue)
        chosen = min(default, full_node)
    else:
        origins[key] = "default"
        chosen = min(fallback, full_node)
    if need is not None and need.amount > chosen:
        # The pilots follow the jobs: a node smaller than the largest job runs none of it.
        origins[key] = _clipped(need.describe(), need.amount > full_node, queue)
        chosen = min(need.amount, full_node)
    return chosen


def _as_runtime(item: RuntimeLike) -> JobRuntime:
    if isinstance(item, JobRuntime):
        return item
    return JobRuntime(int(item))


def _walltime_flag(value: str | int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif str(value).strip().isdigit() and int(value) > 0:  # (0: "must be longer than 0")
        # Refused, not guessed: Slurm reads a bare number as minutes, our users mean hours.
        number = int(str(value).strip())
        raise BadInput(
            f"--walltime {value} has no unit: write {number}h, {number}m, {number * 60}m "
            f"or {number:02d}:00:00"
        )
    else:
        try:
            seconds = parse_walltime(str(value))
        except ValueError as exc:
            raise BadInput(f"--walltime {value} {exc}") from None
    if seconds <= 0:
        raise BadInput(f"--walltime {value} must be longer than 0")
    return seconds


def _suggest(runtime_s: int, queue: Queue) -> int:
    wanted = -(-(runtime_s + WALLTIME_MARGIN_S) // 60) * 60
    return min(wanted, queue.max_walltime_s)
