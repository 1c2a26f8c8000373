"""Which other queue of a site takes a request its chosen queue refuses.

A hint is never a guess from one limit: the whole request (the same flags, the same
jobs) is built again for each other queue, so a queue is named only when its node
limits, GPUs, node size and walltime all take it. Each hint carries what following it
costs; when the other queue raises the nodes (its minimum), the hint says so, since
that is more node-hours than were asked for. The cheapest queues come first, then the
profile's order; a request that wants no GPUs is pointed at a GPU queue only when no
other queue takes it (GPU nodes are dearer, and often a separate allocation).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from lumberjack.errors import BadInput
from lumberjack.profiles.cost import baseline_nodes, cost_of
from lumberjack.profiles.model import SiteProfile

#: At most this many queues are named in one message.
MAX_HINTS = 2


class Hinted(NamedTuple):
    """What a request would be on another queue (the part a hint needs)."""

    nodes: int
    pilots: int
    walltime_s: int
    nodes_origin: str


def queue_hints(
    profile: SiteProfile,
    refused: str,
    attempt: Callable[[str], Hinted],
    wants_gpus: bool,
) -> list[tuple[str, str]]:
    """(queue name, what following it costs) for up to MAX_HINTS queues other than
    `refused` that take the whole request; `attempt(name)` builds it there (BadInput
    when that queue refuses it too)."""
    found = []
    for order, queue in enumerate(profile.queues):
        if queue.name == refused:
            continue
        try:
            request = attempt(queue.name)
        except BadInput:
            continue
        cost = cost_of(request.nodes, request.walltime_s, queue)
        asked = baseline_nodes(profile, request.pilots)
        what = cost.text()
        if request.nodes_origin != "--nodes" and request.nodes > asked:
            what = f"raises the nodes from {asked} to {request.nodes}: {what}"
        needless = queue.gpus_per_node > 0 and not wants_gpus
        found.append((needless, cost.charged, order, (queue.name, what)))
    if any(not needless for needless, *_ in found):
        found = [item for item in found if not item[0]]
    return [item[-1] for item in sorted(found)[:MAX_HINTS]]
