"""The one-line refusals of a request a queue cannot take, and the ways out on that
same queue (build_request adds the other queues that take the whole request, see
queue_hints.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from lumberjack.core.units import format_memory, format_walltime
from lumberjack.errors import BadInput
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.queue_tables import Queue


class QueueLimit(BadInput):
    """A request beyond a limit of its queue: `text` says which, `ways` are fixes on the
    same queue; build_request adds the other queues that take the whole request, and
    `fallback` is offered only when none does (`none` is said when nothing is)."""

    def __init__(
        self, text: str, queue: str, ways: Sequence[str] = (), *, fallback: Sequence[str] = (),
        after: str = "", none: str = "",
    ) -> None:  # fmt: skip
        self.text, self.queue, self.ways = text, queue, list(ways)
        self.fallback, self.after, self.none = list(fallback), after, none
        super().__init__(self.message([]))

    def message(self, hints: list[str]) -> str:
        ways = [*self.ways, *hints] or self.fallback
        if not ways:
            return f"{self.text}; {self.none}"
        return f"{self.text}; use {either(ways)}{self.after}"


def check_nodes(profile: SiteProfile, queue: Queue, total: int, pilots: int) -> None:
    per_pilot = total // pilots
    shown = f"--nodes {total}" + (f" --pilots {pilots}" if pilots > 1 else "")
    if per_pilot > queue.max_nodes:
        ways = [f"--nodes {queue.max_nodes * pilots}"]
        needed = -(-total // queue.max_nodes)
        if total % needed == 0:
            ways.append(f"--pilots {needed}")
        where = " per pilot" if pilots > 1 else ""
        raise QueueLimit(
            f'{shown} exceeds queue "{queue.name}" of site "{profile.name}" '
            f"(max {queue.max_nodes} nodes{where})",
            queue.name,
            ways,
        )
    if per_pilot < queue.min_nodes:
        raise QueueLimit(
            f'{shown} is below the minimum of queue "{queue.name}" of site "{profile.name}" '
            f"({queue.min_nodes} nodes per pilot)",
            queue.name,
            [f"--nodes {queue.min_nodes * pilots}"],
        )


def limit_message(
    profile: SiteProfile, queue: Queue, flag: str, value: int, limit: int, unit: str
) -> QueueLimit:
    if flag == "--walltime":
        return QueueLimit(
            f'--walltime {format_walltime(value)} exceeds queue "{queue.name}" of site '
            f'"{profile.name}" (max {format_walltime(queue.max_walltime_s)})',
            queue.name,
            [f"--walltime {format_walltime(queue.max_walltime_s)}"],
        )
    if flag == "--memory":
        shown, most = format_memory(value), f"{format_memory(limit)} {unit}"
        first = f"--memory {format_memory(limit)}"
    else:
        shown, most, first = str(value), f"{limit} {unit}", f"{flag} {limit}"
    text = f'{flag} {shown} exceeds queue "{queue.name}" of site "{profile.name}"'
    if limit == 0 and flag == "--gpus":  # another queue's GPUs, else none
        return QueueLimit(f"{text} (it has no GPUs)", queue.name, fallback=["--gpus 0"])
    return QueueLimit(f"{text} (max {most})", queue.name, [first])


def runtime_message(profile: SiteProfile, queue: Queue, described: str) -> QueueLimit:
    return QueueLimit(
        f'{described}, more than queue "{queue.name}" of site "{profile.name}" '
        f"allows (max {format_walltime(queue.max_walltime_s)})",
        queue.name,
        after=", or shorten the job",
        none="no queue there is long enough",
    )


def either(ways: list[str]) -> str:
    if len(ways) == 1:
        return ways[0]
    return ", ".join(ways[:-1]) + " or " + ways[-1]


def split_message(nodes: int, pilots: int) -> str:
    if pilots > nodes:
        return f"--pilots {pilots} is more than --nodes {nodes}; each pilot needs a node"
    lower = nodes - nodes % pilots
    upper = lower + pilots
    divisors = [d for d in range(1, nodes + 1) if nodes % d == 0 and d != pilots]
    near = min(divisors, key=lambda d: abs(d - pilots))
    nodes_way = f"--nodes {lower} or {upper}" if lower else f"--nodes {upper}"
    return (
        f"--nodes {nodes} cannot be split evenly among --pilots {pilots}; "
        f"use {nodes_way}, or --pilots {near}"
    )
