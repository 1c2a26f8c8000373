"""What a resource request costs before it is submitted: the node-hours the pilots may
be charged, and the warnings a person should read before spending them.

Node-hours are nodes x walltime: the most the pilots can be charged, since a batch job
is charged for the time it holds its nodes and the pilots end sooner when idle
(--idle-shutdown). Where a centre charges a queue at a rate (TACC: SUs per
node-hour; NERSC: a QOS factor), the queue's `charge_factor` multiplies them; where
the profile names none, the charge is the node-hours themselves.

Warnings (exit code 0, shown beside the request):
- a raise: the nodes grew beyond what was asked (a queue's minimum), with both costs;
- a partial node on a whole-node queue: cores, memory or GPUs below the node's, while
  the whole node is charged.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumberjack.core.units import format_memory
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.queue_tables import Queue


@dataclass(frozen=True)
class Cost:
    """The most a request can be charged."""

    node_hours: float  # nodes x walltime
    charge_factor: float | None  # the queue's rate per node-hour; None: not documented

    @property
    def charged(self) -> float:
        """What the allocation is charged (node-hours where no rate is documented)."""
        return self.node_hours * (self.charge_factor or 1.0)

    def text(self) -> str:
        """'30 node-hours', or '2 node-hours x 4 = 8 charged' with a rate."""
        hours = f"{hours_text(self.node_hours)} node-hour{'s' if self.node_hours != 1 else ''}"
        if self.charge_factor is None or self.charge_factor == 1:
            return hours
        return f"{hours} x {_number(self.charge_factor)} = {hours_text(self.charged)} charged"

    def to_json(self) -> dict[str, float | None]:
        return {
            "node_hours": round(self.node_hours, 4),
            "charge_factor": self.charge_factor,
            "charged_hours": round(self.charged, 4),
        }


def cost_of(nodes: int, walltime_s: int, queue: Queue) -> Cost:
    """The most `nodes` nodes for `walltime_s` on `queue` can be charged."""
    return Cost(nodes * walltime_s / 3600, queue.charge_factor)


def hours_text(hours: float) -> str:
    """0.5, 3, 12.25: at most two decimals, no trailing zeros."""
    return _number(round(hours, 2))


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def baseline_nodes(profile: SiteProfile, pilots: int) -> int:
    """The nodes a request without --nodes starts from, before any queue's minimum."""
    return (profile.defaults.nodes or 1) * pilots


def raise_warning(
    profile: SiteProfile, queue: Queue, nodes: int, pilots: int, walltime_s: int, origin: str
) -> str | None:
    """One line when the nodes were raised above what was asked (a queue's minimum)."""
    if origin == "--nodes":
        return None
    asked = baseline_nodes(profile, pilots)
    if nodes <= asked:
        return None
    before, after = cost_of(asked, walltime_s, queue), cost_of(nodes, walltime_s, queue)
    return (
        f"nodes raised from {asked} to {nodes}, queue {queue.name}'s minimum: "
        f"{after.text()} instead of {before.text()}; ask for --nodes {nodes} to accept it, "
        "or use a queue without the minimum"
    )


def partial_node_warnings(queue: Queue, values: dict[str, tuple[int, str]]) -> list[str]:
    """One line per resource asked below the node's on a whole-node queue. `values`:
    name ("cores", "memory", "gpus") -> (per-node value, where it came from)."""
    if not queue.whole_node:
        return []
    full = {
        "cores": (queue.cores_per_node, str),
        "memory": (queue.memory_per_node_mb, format_memory),
        "gpus": (queue.gpus_per_node, str),
    }
    lines = []
    for key, (value, origin) in values.items():
        node, shown = full[key]
        flag = f"--{key}"
        if origin == flag and value < node:
            lines.append(
                f"{flag} {shown(value)} on queue {queue.name}, which hands out whole nodes: "
                f"each node is charged whole ({shown(node)} {key}) and the pilots use only "
                f"{shown(value)}; leave out {flag} to use the whole node"
            )
    return lines
