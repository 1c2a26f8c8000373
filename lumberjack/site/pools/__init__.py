"""The kinds of remote pool the agent runs: a `Pool` (pool.py: the shared work) made of
a placement and a role, one small class each.

Placements (where the pool's daemons run):
- `LoginNode` (login.py): on the login node, started by the agent.
- `InAllocation` (allocation.py): on the first node (the head) of a pilot, started by
  its node.sh (templates/node-head*.sh.tmpl); nothing on the login node.

Roles (whose pool it is):
- `Own` (own.py): an export's own schedd, collector and negotiator, and its pilots.
- `Lease` (lease.py): a lease's collector and negotiator and its rounds of pilots.
- `Joined` (joined.py): an export's schedd in a lease's pool, served by the lease's pilots.

`pool_for` picks an export's kind from its launch.json, `lease_pool_for` a lease's (the
agent's lease-* commands). A new placement or role = one module with one class (plus
its templates, beside it); a placement also one line in `PLACEMENTS` below and its word
in the contract's (core/contract.py). Each placement answers the hooks of `Placement`
(pool.py) for every role.

Stdlib only: this package runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from lumberjack.core.contract import ExportLayout, LaunchPlan
from lumberjack.site.pools.allocation import InAllocation
from lumberjack.site.pools.joined import Joined
from lumberjack.site.pools.lease import Lease
from lumberjack.site.pools.login import LoginNode
from lumberjack.site.pools.own import Own
from lumberjack.site.pools.pool import Placement, Pool, Role

__all__ = ["InAllocation", "Joined", "Lease", "LoginNode", "Own", "Placement", "Pool", "Role",
           "PLACEMENTS", "lease_for", "lease_pool_for", "pool_for"]  # fmt: skip

#: launch.json's placement (one of the contract's PLACEMENTS) -> its class.
PLACEMENTS: dict[str, type[Placement]] = {"login": LoginNode, "allocation": InAllocation}


def pool_for(layout: ExportLayout, plan: LaunchPlan | None) -> Pool:
    """The kind of pool an export's plan asks for (on the login node when it has none:
    status, stop and remove still work)."""
    role: type[Role] = Joined if plan is not None and plan.lease else Own
    return Pool(layout, plan, PLACEMENTS[plan.placement if plan else "login"], role)


def lease_pool_for(layout: ExportLayout, plan: LaunchPlan | None) -> Pool:
    """The kind of a lease's pool: its central manager on the login node or in the
    allocation."""
    return Pool(layout, plan, PLACEMENTS[plan.placement if plan else "login"], Lease)


def lease_for(layout: ExportLayout, plan: LaunchPlan | None) -> Lease:
    """The role of a lease's pool, whose verbs the agent's lease-* commands are."""
    lease = lease_pool_for(layout, plan).role
    assert isinstance(lease, Lease)
    return lease
