"""The kinds of remote pool the agent runs, one small `Pool` subclass each over the
shared work in base.py:

- `LoginPool` (login.py): schedd, collector and negotiator on the login node.
- `AllocationPool` (allocation.py): schedd placement "allocation", the pool on the first
  node of the one pilot, nothing on the login node.
- `LeasePool` (lease.py): a lease's collector and negotiator and its rounds of pilots.
- `JoinedPool` (joined.py): an export's schedd in a lease's pool, the lease's pilots.
- `AllocationLeasePool` (lease_alloc.py): a lease with placement "allocation", its
  central manager and joined schedds on the head node of each round of pilots.
- `JoinedAllocationPool` (joined_alloc.py): an export joined to such a lease, its schedd
  started and stopped by that head through requests in the lease's directory.

`pool_for` picks an export's kind from its launch.json, `lease_pool_for` a lease's (the
agent's lease-* commands). Adding a kind = one module with one subclass
(its `launch`, and `settings`, `write_pilot_files`, `status` or `stop` where it differs)
+ one line in `pool_for`.

Stdlib only: this package runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from lumberjack.core.contract import ExportLayout, LaunchPlan
from lumberjack.site.pools.allocation import AllocationPool
from lumberjack.site.pools.base import Pool
from lumberjack.site.pools.joined import JoinedPool
from lumberjack.site.pools.joined_alloc import JoinedAllocationPool
from lumberjack.site.pools.lease import LeasePool
from lumberjack.site.pools.lease_alloc import AllocationLeasePool
from lumberjack.site.pools.login import LoginPool

__all__ = ["AllocationLeasePool", "AllocationPool", "JoinedAllocationPool", "JoinedPool",
           "LeasePool", "LoginPool", "Pool", "lease_pool_for", "pool_for"]  # fmt: skip


def pool_for(layout: ExportLayout, plan: LaunchPlan | None) -> Pool:
    """The kind of pool an export's plan asks for (a schedd on the login node when it
    has none: status, stop and remove still work)."""
    if plan is not None and plan.lease:
        return (JoinedAllocationPool if plan.in_allocation else JoinedPool)(layout, plan)
    if plan is not None and plan.in_allocation:
        return AllocationPool(layout, plan)
    return LoginPool(layout, plan)


def lease_pool_for(layout: ExportLayout, plan: LaunchPlan | None) -> LeasePool:
    """The kind of a lease's pool: its central manager on the login node or in the
    allocation."""
    if plan is not None and plan.in_allocation:
        return AllocationLeasePool(layout, plan)
    return LeasePool(layout, plan)
