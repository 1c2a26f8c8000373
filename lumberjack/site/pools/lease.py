"""A lease: a central manager (collector + negotiator) on the login node and pilots that
exports join (see joined.py). Its directory has the shape of an export's (pool/, pilots/,
launch.json, agent.pyz) without bundle or spool. Its pilots are submitted at once (jobs
may still be on their way) and end by idle shutdown, the walltime, or lease-stop.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lumberjack.core.contract import ALIVE
from lumberjack.core.crashpoints import crash_point
from lumberjack.site import remote_pool
from lumberjack.site.batch import BatchError
from lumberjack.site.files import AgentError, make_private
from lumberjack.site.pools.base import Pool
from lumberjack.site.processes import pool_processes
from lumberjack.site.remote_pool import PoolSettings

_AD_ATTRS = {"name": "Name", "state": "State", "activity": "Activity",
             "idle": "TotalIdleJobs", "running": "TotalRunningJobs"}  # fmt: skip


class LeasePool(Pool):
    """Collector + negotiator and rounds of pilots; each joined export runs its schedd."""

    PLAN_HINT = "run `lease create` again"

    def start(self) -> dict[str, Any]:
        """Collector + negotiator on the login node and the first round of pilots; again:
        starts what is not running, submits pilots only when none is alive."""
        self.prepare()
        settings = self.settings()
        Path(self.layout.spool).mkdir(parents=True, exist_ok=True)  # the accountant's log
        pool = self.start_central_manager(settings)
        make_private(self.layout.root)
        crash_point("lease.after-pool")
        pilots = self.submit_round(settings)
        return {"pool": pool, "pilots": pilots}

    def start_central_manager(self, settings: PoolSettings) -> dict[str, Any]:
        """Collector + negotiator on the login node."""
        ready = Path(self.layout.pool_local, "log", ".collector_address")
        return self.start_pool(settings, config=remote_pool.lease_config(settings), ready=ready)

    def stop_central_manager(self) -> None:
        self.stop_pool()
        self.wait_gone(None)

    def submit_round(
        self, settings: PoolSettings, waiting: Callable[[], int] = lambda: 1
    ) -> dict[str, Any]:
        """A round of pilots unless one is queued or running (`waiting`: the idle jobs)."""
        return self.submit_pilots(settings, waiting=waiting)

    def extend(self) -> dict[str, Any]:
        """One more round of pilots (launch.json's count), whatever is alive."""
        self.need_plan()
        if not pool_processes(self.layout, "condor_master"):
            raise AgentError(
                f"the pool of {self.layout.name} is not running; create the lease again"
            )
        return {"pilots": self.submit_pilots(self.settings(), always=True)}

    def lease_status(self) -> dict[str, Any]:
        self.need_plan()
        try:
            pilots = {k: str(v) for k, v in self.pilot_states().items()}
        except BatchError as exc:
            pilots = {"error": str(exc)}
        running = bool(pool_processes(self.layout, "condor_master"))
        answer: dict[str, Any] = {
            "pool_running": running, "pilots": pilots, "startds": [], "schedds": [],
            "pilots_alive": any(state in ALIVE for state in pilots.values()),
        }  # fmt: skip
        if running:
            try:
                # Slot ads (condor_status's default): -startd lists the startd daemons' own.
                answer["startds"] = self.ads(None, "name", "state", "activity")
                answer["schedds"] = self.ads("-schedd", "name", "idle", "running")
            except AgentError as exc:  # a collector just starting: the pilots still count
                answer["collector_error"] = str(exc)
        return answer

    def ads(self, kind: str | None, *keys: str) -> list[dict[str, str]]:
        """The lease's collector's ads of `kind` (None: slots), each as {key: value}."""
        words = [kind] if kind else []
        out = self.in_pool("condor_status", *words, "-af", *(_AD_ATTRS[key] for key in keys))
        return [dict(zip(keys, line.split() + [""] * len(keys))) for line in out.splitlines()]

    def lease_stop(self) -> dict[str, Any]:
        """Cancel the pilots and wait until the batch system reports them gone, then stop
        the pool: nothing of the lease runs at the site afterwards."""
        self.need_plan()
        cancelled = self.cancel_pilots()
        self.wait_pilots_gone("the lease's pool keeps running")
        crash_point("lease.after-pilots-gone")
        self.stop_central_manager()
        return {"cancelled_pilots": cancelled, "pool_stopped": True}
