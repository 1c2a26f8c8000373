"""The site agent's answers: what comes back over the SSH link, one type per verb.

The agent (site/agent.py) returns these objects and prints them with the one codec
(core/records.encode); the access point reads them with `read_answer`, strictly: a field
it does not know, one missing or of the wrong type is a one-line ContractError, because
an answer is what a site wrote (a hostile site may write anything). Each type carries
its VERSION; an unversioned answer is one an agent shipped by an earlier release gave
(an export mid-flight), read as the same fields.

Stdlib only (and Python 3.9: `Optional`, not `X | None`): this module runs at the site,
inside the agent's zipapp.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from lumberjack.core.contract import LaunchPlan, QueueActions
from lumberjack.core.records import ContractError, decode


class Answer:
    """What every answer shares: its version, and unversioned text read as it is."""

    VERSION: ClassVar[int] = 1

    @classmethod
    def upgrade(cls, data: Any) -> Any:
        return data


# ---- pieces of several answers -------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """The queue put in place as the schedd's SPOOL (once; again: placed False)."""

    placed: bool
    reason: str = ""
    files: int = 0
    jobs: int = 0
    owners: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PoolStarted:
    """The pool's daemons started on the login node (or not: why, or where they run)."""

    started: bool
    reason: str = ""
    collector: str = ""
    placement: str = ""


@dataclass(frozen=True)
class PilotsSubmitted:
    """The batch jobs submitted now, and those alive that made a new one unneeded."""

    submitted: list[str] = field(default_factory=list)
    alive: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass(frozen=True)
class LogsGathered:
    """site-logs/ as the agent wrote it at `stop` (core/contract.SiteLogs); `error`
    when it could not (the stop went on)."""

    dir: str = ""
    pilot_files: int = 0
    jobs: int = 0
    left_out: int = 0
    bytes: int = 0
    error: str = ""


@dataclass(frozen=True)
class IdleShape:
    """What one distinct shape of the idle jobs asks of a slot (site/idle_jobs.py)."""

    attrs: dict[str, str]
    jobs: int
    example: str


@dataclass(frozen=True)
class RemoteJob:
    """A job that left idle at the site: its JobStatus and what condor_q shows at home
    (site/queue_commands.SHOWN); the names are the ClassAd attributes'."""

    JobStatus: int
    HoldReason: Optional[str] = None
    RemoteHost: Optional[str] = None
    LastRemoteHost: Optional[str] = None

    def texts(self) -> dict[str, Any]:
        """The attributes it carries, by name (those the site left out absent)."""
        found: dict[str, Any] = {"JobStatus": self.JobStatus}
        for name in ("HoldReason", "RemoteHost", "LastRemoteHost"):
            if getattr(self, name) is not None:
                found[name] = getattr(self, name)
        return found


@dataclass(frozen=True)
class ActionDone:
    """What one of the local queue's commands came to at the site."""

    job: str
    action: str
    result: str


@dataclass(frozen=True)
class Ad:
    """One ad of a lease's collector, as `condor_status -af` printed it (words)."""

    name: str
    state: str = ""
    activity: str = ""
    idle: str = ""
    running: str = ""


@dataclass(frozen=True)
class Accounting:
    """One joined export in a lease: its jobs as its schedd advertises them, and the
    lease accountant's usage (slot-seconds, and weighted by cores) and slots in use."""

    idle: float = 0
    running: float = 0
    usage_s: float = 0
    weighted_usage_s: float = 0
    slots_in_use: float = 0


# ---- the answers, one per verb -------------------------------------------------------


@dataclass(frozen=True)
class Failed(Answer):
    """Any verb that could not act: its one-line reason (the agent exits non-zero)."""

    error: str


@dataclass(frozen=True)
class Launched(Answer):
    """`launch`: the queue placed, the pool started, the pilots submitted; a joined
    export's also names its lease."""

    place: Placed
    pool: PoolStarted
    pilots: PilotsSubmitted
    lease: str = ""


@dataclass(frozen=True)
class Status(Answer):
    """`status`: the jobs by status, read from the schedd's own log; pilots (their
    states as words, or {"error": ...} when the batch system did not answer); whether
    any job may still run there (see site/job_queue.held_report)."""

    jobs: dict[str, int]
    total: int
    finished: bool
    final: bool
    held_final: int
    releasable: int
    wait_until: Optional[int]
    pool_running: bool
    placed: bool
    pilots: dict[str, str]
    remote_jobs: dict[str, RemoteJob] = field(default_factory=dict)
    idle_shapes: list[IdleShape] = field(default_factory=list)
    placement: str = "login"
    interrupted: int = 0  # placement "allocation": "running" jobs no pilot holds


@dataclass(frozen=True)
class Statuses(Answer):
    """`status DIR DIR ...`: each export's answer, or why it has none."""

    VERSION: ClassVar[int] = 2  # 1 held answers and errors in one map

    answers: dict[str, Status] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stopped(Answer):
    """`stop`: the schedd stopped (its log final), pilots cancelled, logs gathered."""

    stopped_schedd: bool
    cancelled_pilots: list[str]
    logs: LogsGathered


@dataclass(frozen=True)
class Removed(Answer):
    """`remove`: whether the export's directory was there to delete."""

    removed: bool


@dataclass(frozen=True)
class Acted(Answer):
    """`act`: what each of the local queue's commands came to."""

    actions: list[ActionDone] = field(default_factory=list)


@dataclass(frozen=True)
class LeaseStarted(Answer):
    """`lease-start`: the central manager started, the first round of pilots."""

    pool: PoolStarted
    pilots: PilotsSubmitted


@dataclass(frozen=True)
class LeaseExtended(Answer):
    """`lease-extend`: one more round of pilots."""

    pilots: PilotsSubmitted


@dataclass(frozen=True)
class LeaseStatus(Answer):
    """`lease-status`: pilots, the collector's startds and joined schedds, and each
    joined export's accounting (placement "allocation": the head's collector and the
    exports' join requests instead)."""

    pool_running: bool
    pilots: dict[str, str]
    pilots_alive: bool
    startds: list[Ad] = field(default_factory=list)
    schedds: list[Ad] = field(default_factory=list)
    accounting: dict[str, Accounting] = field(default_factory=dict)
    collector_error: str = ""
    placement: str = "login"
    collector: str = ""
    joined: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LeaseStopped(Answer):
    """`lease-stop`: the pilots cancelled and gone, the pool stopped."""

    cancelled_pilots: list[str]
    pool_stopped: bool


#: Each verb of the agent and the type of its answer.
ANSWERS: dict[str, type[Answer]] = {
    "launch": Launched,
    "status": Status,
    "stop": Stopped,
    "remove": Removed,
    "act": Acted,
    "lease-start": LeaseStarted,
    "lease-extend": LeaseExtended,
    "lease-status": LeaseStatus,
    "lease-stop": LeaseStopped,
}


def read_answer(command: str, text: str | bytes, where: str) -> Answer:
    """The answer of `command` (its own type, or Failed), strictly; ContractError for
    anything else. `where` names the answer in errors."""
    kind: type[Answer] = ANSWERS[command]
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ContractError(f"{where} is not JSON: {exc}") from None
    if isinstance(data, dict) and "error" in data:
        kind = Failed
    return decode(kind, text, where)


#: The files the access point writes for the agent (core/contract.py), by name.
PLANS: dict[str, type] = {"launch.json": LaunchPlan, "queue-actions.json": QueueActions}
#: Every kind of message that crosses the link: the plans, each verb's answer, and the
#: answer of `status DIR DIR ...`.
MESSAGES = (*PLANS, *ANSWERS, "status-many")


def read_message(kind: str, text: str | bytes) -> Any:
    """A message of any kind (MESSAGES), strictly; ContractError for anything else."""
    if kind in PLANS:
        return decode(PLANS[kind], text, kind)
    if kind == "status-many":
        return decode(Statuses, text, kind)
    if kind not in ANSWERS:
        raise ContractError(f"{kind!r} is no message of the contract")
    return read_answer(kind, text, kind)


__all__ = [
    "ANSWERS",
    "Accounting",
    "Acted",
    "ActionDone",
    "Ad",
    "Answer",
    "Failed",
    "IdleShape",
    "Launched",
    "LeaseExtended",
    "LeaseStarted",
    "LeaseStatus",
    "LeaseStopped",
    "LogsGathered",
    "MESSAGES",
    "PLANS",
    "PilotsSubmitted",
    "Placed",
    "PoolStarted",
    "Removed",
    "RemoteJob",
    "Status",
    "Statuses",
    "Stopped",
    "read_answer",
    "read_message",
]
