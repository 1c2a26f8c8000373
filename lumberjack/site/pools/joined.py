"""An export joined to a lease: only its own schedd runs on the login node, reporting
to the lease's collector; its pilots are the lease's (a new round of them when none is
alive and jobs are idle), shared with the lease's other exports, never cancelled by it.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lumberjack.core.contract import ExportLayout
from lumberjack.site import remote_pool
from lumberjack.site.files import AgentError, make_private, read_plan
from lumberjack.site.job_queue import job_counts, place_queue
from lumberjack.site.pools.base import Pool
from lumberjack.site.pools.lease import LeasePool
from lumberjack.site.processes import pool_processes
from lumberjack.site.remote_pool import PoolSettings


class JoinedPool(Pool):
    """A schedd in a lease's pool."""

    @property
    def pilot_holder(self) -> ExportLayout:
        return ExportLayout(self.need_plan().lease or "")

    def lease(self) -> LeasePool:
        """The lease, which must run."""
        lease = self.pilot_holder
        plan = read_plan(lease)
        if plan is None or not pool_processes(lease, "condor_master"):
            raise AgentError(
                f"{lease.name} does not run at the site; see `condor_lumberjack lease status`"
            )
        return LeasePool(lease, plan)

    def settings(self) -> PoolSettings:
        """The lease's address, port and trust domain; the rest is the export's own."""
        lease = self.lease().settings()
        own = replace(self.need_plan(), address=lease.address, port=lease.port)
        return replace(self.settings_of(own), domain=lease.trust_domain)

    def launch(self) -> dict[str, Any]:
        """Place the queue, start only a schedd reporting to the lease's collector, and
        (if none of the lease's pilots is alive and jobs are idle) a round of its pilots."""
        self.prepare()
        lease = self.lease()
        settings = self.settings()
        placed = place_queue(self.layout, settings.site_user, settings.trust_domain)
        config = remote_pool.joined_schedd_config(settings, lease.layout)
        pool = self.start_pool(settings, config=config)
        make_private(self.layout.root)
        pilots = lease.submit_pilots(
            lease.settings(), waiting=lambda: job_counts(self.layout).get("idle", 0)
        )
        return {"place": placed, "pool": pool, "pilots": pilots, "lease": lease.layout.name}
