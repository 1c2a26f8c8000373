"""Placement "login": the pool's daemons (an export's schedd, collector and negotiator; a
lease's central manager; a joined export's schedd) run on the login node, in the
profile's container runtime, started by the agent; the pilots' startds report to them.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from lumberjack.core.answers import (
    Acted,
    LeaseExtended,
    LeaseStatus,
    PilotsSubmitted,
    PoolStarted,
    Status,
    Stopped,
)
from lumberjack.core.contract import ALIVE, ExportLayout, PilotState
from lumberjack.core.crashpoints import crash_point
from lumberjack.site import gather_logs, pilot_token, queue_commands, remote_pool
from lumberjack.site.batch import BatchError
from lumberjack.site.files import AgentError, make_private
from lumberjack.site.idle_jobs import idle_shapes
from lumberjack.site.job_container import write_wrapper
from lumberjack.site.job_queue import held_report, job_counts, placed, queue_ads
from lumberjack.site.pools.joined import joined_schedd_config
from lumberjack.site.pools.lease import LEASE_READY, lease_config
from lumberjack.site.pools.pool import Placement, Pool, all_finished
from lumberjack.site.processes import pool_processes
from lumberjack.site.remote_pool import PoolSettings


class LoginNode(Placement):
    """Daemons on the login node, started now; pilots while idle jobs are left."""

    def write_pilot_files(self, settings: PoolSettings) -> None:
        """The pilots' token, their startd config and node.sh."""
        pool = self.pool
        plan = pool.need_plan()
        try:
            pilot_token.mint(self.layout, settings, plan.token_lifetime_s)
        except RuntimeError as exc:
            raise AgentError(str(exc)) from None
        Path(self.layout.pilot_config).write_text(remote_pool.pilot_config(settings))
        write_wrapper(settings.layout.pilots, settings.runtime_name, settings.image)
        spec = plan.spec
        node = remote_pool.node_script(
            settings, batch=pool.batch, cores=spec.cores_per_node,
            memory_mb=spec.memory_per_node_mb, walltime_s=spec.walltime_s, retire_s=spec.retire_s,
        )  # fmt: skip
        pool.write_node_script(node)

    def start(
        self, settings: PoolSettings, config: str | None = None, ready: Path | None = None
    ) -> PoolStarted:
        answer = self.pool.start_pool(settings, config=config, ready=ready)
        make_private(self.layout.root)  # the daemons' first files (logs, certificates, addresses)
        return answer

    def status(self, known: dict[str, PilotState] | None, masters: set[str] | None) -> Status:
        """The schedd's queue as its log says, the pilots, the pool's master running."""
        pool, layout = self.pool, self.layout
        ads = queue_ads(layout)
        counts = job_counts(layout, ads)
        total = sum(counts.values())
        pilots = pool.pilot_report(known) if pool.plan else {}
        if masters is None:
            running = bool(pool_processes(layout, "condor_master"))
        else:
            running = layout.pool_config in masters
        return Status(
            jobs=counts, total=total, finished=all_finished(counts),
            **held_report(ads, pool.release_window_s(), time.time()),
            pool_running=running, placed=placed(layout), pilots=pilots,
            idle_shapes=idle_shapes(ads) if counts.get("idle") else [],
            remote_jobs=queue_commands.remote_jobs(ads),
        )  # fmt: skip

    def act(self) -> Acted:
        pool = self.pool
        running = bool(pool_processes(self.layout, "condor_schedd")) and pool.instance_running()
        return queue_commands.act(
            self.layout.queue_actions, queue_ads(self.layout), pool.in_pool, running
        )

    def stop(self) -> Stopped:
        """Stop the schedd cleanly (its log final), then the pilots, then the instance."""
        pool = self.pool
        stopped_schedd = False
        if pool_processes(self.layout, "condor_schedd") and pool.instance_running():
            pool.in_pool("condor_off", "-graceful", "-schedd")
            pool.wait_gone("condor_schedd")
            stopped_schedd = True
            crash_point("stop.after-schedd")
        own_pilots = pool.plan is not None and pool.pilot_holder is self.layout
        cancelled = pool.cancel_pilots() if own_pilots else []
        pool.stop_pool()
        pool.wait_gone(None)
        return Stopped(stopped_schedd, cancelled,
                       gather_logs.gather_safely(self.layout.root, pool.plan))  # fmt: skip

    # ---- a lease's central manager on the login node ---------------------------------

    def start_central_manager(self, settings: PoolSettings) -> PoolStarted:
        """Collector + negotiator on the login node."""
        ready = Path(self.layout.pool_local, LEASE_READY)
        return self.pool.start_pool(settings, config=lease_config(settings), ready=ready)

    def stop_central_manager(self) -> None:
        self.pool.stop_pool()
        self.pool.wait_gone(None)

    def extend(self) -> LeaseExtended:
        """One more round of pilots (launch.json's count), whatever is alive."""
        pool = self.pool
        if not pool_processes(self.layout, "condor_master"):
            raise AgentError(
                f"the pool of {self.layout.name} is not running; create the lease again"
            )
        return LeaseExtended(pool.submit_pilots(pool.settings(), always=True))

    def lease_status(self) -> LeaseStatus:
        pool = self.pool
        try:
            pilots = {k: str(v) for k, v in pool.pilot_states().items()}
        except BatchError as exc:
            pilots = {"error": str(exc)}
        running = bool(pool_processes(self.layout, "condor_master"))
        alive = any(state in ALIVE for state in pilots.values())
        if running:
            try:
                startds, schedds, accounting = pool.role.collector_ads()
                return LeaseStatus(running, pilots, alive, startds, schedds, accounting)
            except AgentError as exc:  # a collector just starting: the pilots still count
                return LeaseStatus(running, pilots, alive, collector_error=str(exc))
        return LeaseStatus(running, pilots, alive)

    # ---- an export's schedd joined to a lease whose central manager runs here --------

    def lease_runs(self, lease: ExportLayout) -> bool:
        return bool(pool_processes(lease, "condor_master"))

    def joined_settings(self, lease_settings: PoolSettings) -> PoolSettings:
        """The lease's address and port; the rest (its trust domain too) the export's own."""
        plan = self.pool.need_plan()
        return self.pool.settings_of(
            replace(plan, address=lease_settings.address, port=lease_settings.port)
        )

    def join(
        self, lease: Pool, lease_settings: PoolSettings
    ) -> tuple[PoolStarted, PilotsSubmitted]:
        """Start only a schedd reporting to the lease's collector, then (if none of the
        lease's pilots is alive and jobs are idle) a round of its pilots."""
        pool, role = self.pool, self.pool.role
        settings = self.joined_settings(lease_settings)
        config = joined_schedd_config(settings, lease_settings.trust_domain)
        role.advertise_token(lease, lease_settings)
        started = pool.start_pool(settings, config=config)
        role.negotiator_token_of(settings)  # in the export's container, running now
        make_private(self.layout.root)
        pilots = lease.submit_pilots(
            lease_settings, waiting=lambda: job_counts(self.layout).get("idle", 0)
        )
        return started, pilots

    def leave(self) -> Stopped:
        """Stop the schedd (as `stop`), then take the lease's negotiator's token back."""
        answer = self.stop()
        self.pool.role.forget_negotiator_token()
        return answer
