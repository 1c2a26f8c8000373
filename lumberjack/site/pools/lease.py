"""A lease: a central manager (collector + negotiator) on the login node and pilots that
exports join (see joined.py). Its directory has the shape of an export's (pool/, pilots/,
launch.json, agent.pyz) without bundle or spool. Its pilots are submitted at once (jobs
may still be on their way) and end by idle shutdown, the walltime, or lease-stop.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from lumberjack.core.answers import (
    Accounting,
    Ad,
    LeaseExtended,
    LeaseStarted,
    LeaseStatus,
    LeaseStopped,
    PilotsSubmitted,
    PoolStarted,
)
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

    def start(self) -> LeaseStarted:
        """Collector + negotiator on the login node and the first round of pilots; again:
        starts what is not running, submits pilots only when none is alive."""
        self.prepare()
        settings = self.settings()
        Path(self.layout.spool).mkdir(parents=True, exist_ok=True)  # the accountant's log
        pool = self.start_central_manager(settings)
        make_private(self.layout.root)
        crash_point("lease.after-pool")
        pilots = self.submit_round(settings)
        return LeaseStarted(pool, pilots)

    def start_central_manager(self, settings: PoolSettings) -> PoolStarted:
        """Collector + negotiator on the login node."""
        ready = Path(self.layout.pool_local, "log", ".collector_address")
        return self.start_pool(settings, config=remote_pool.lease_config(settings), ready=ready)

    def stop_central_manager(self) -> None:
        self.stop_pool()
        self.wait_gone(None)

    def submit_round(
        self, settings: PoolSettings, waiting: Callable[[], int] = lambda: 1
    ) -> PilotsSubmitted:
        """A round of pilots unless one is queued or running (`waiting`: the idle jobs)."""
        return self.submit_pilots(settings, waiting=waiting)

    def extend(self) -> LeaseExtended:
        """One more round of pilots (launch.json's count), whatever is alive."""
        self.need_plan()
        if not pool_processes(self.layout, "condor_master"):
            raise AgentError(
                f"the pool of {self.layout.name} is not running; create the lease again"
            )
        return LeaseExtended(self.submit_pilots(self.settings(), always=True))

    def lease_status(self) -> LeaseStatus:
        self.need_plan()
        try:
            pilots = {k: str(v) for k, v in self.pilot_states().items()}
        except BatchError as exc:
            pilots = {"error": str(exc)}
        running = bool(pool_processes(self.layout, "condor_master"))
        alive = any(state in ALIVE for state in pilots.values())
        startds: list[Ad] = []
        schedds: list[Ad] = []
        accounting: dict[str, Accounting] = {}
        collector_error = ""
        if running:
            try:
                # Slot ads (condor_status's default): -startd lists the startd daemons' own.
                startds = [Ad(**ad) for ad in self.ads(None, "name", "state", "activity")]
                schedds = [Ad(**ad) for ad in self.ads("-schedd", "name", "idle", "running")]
                accounting = self.accounting(schedds)
            except AgentError as exc:  # a collector just starting: the pilots still count
                collector_error = str(exc)
        return LeaseStatus(running, pilots, alive, startds, schedds, accounting,
                           collector_error)  # fmt: skip

    def accounting(self, schedds: list[Ad]) -> dict[str, Accounting]:
        """Per joined export (its schedd `X@lumberjack-X`, its submitter
        `<site account>@lumberjack-X`): its jobs idle and running as its schedd
        advertises them, and the lease's accountant's usage (slot-seconds, and weighted
        by cores) and slots in use, which stay after the export came home (the
        negotiator's, through condor_userprio)."""
        per: dict[str, dict[str, float]] = {}
        for ad in schedds:
            export = export_of(ad.name)
            if export:
                jobs = {"idle": _number(ad.idle), "running": _number(ad.running)}
                per.setdefault(export, _no_usage()).update(jobs)
        for usage in self.usage():
            export = export_of(usage["name"])
            if export:
                entry = per.setdefault(export, {"idle": 0, "running": 0, **_no_usage()})
                entry["usage_s"] += _number(usage["usage"])
                entry["weighted_usage_s"] += _number(usage["weighted"])
                entry["slots_in_use"] += _number(usage["in_use"])
        return {export: Accounting(**entry) for export, entry in per.items()}

    def usage(self) -> list[dict[str, str]]:
        """The accountant's record of every submitter and group, from the negotiator
        (condor_userprio -l: one ad each, a blank line between them)."""
        records: list[dict[str, str]] = [{}]
        for line in self.in_pool("condor_userprio", "-allusers", "-l").splitlines():
            key, sep, value = line.partition(" = ")
            if not line.strip():
                records.append({})
            elif sep:
                records[-1][key.strip()] = value.strip().strip('"')
        return [{"name": ad.get("Name", ""), "usage": ad.get("AccumulatedUsage", ""),
                 "weighted": ad.get("WeightedAccumulatedUsage", ""),
                 "in_use": ad.get("ResourcesUsed", "")} for ad in records if ad]  # fmt: skip

    def ads(self, kind: str | None, *keys: str) -> list[dict[str, str]]:
        """The lease's collector's ads of `kind` (None: slots), each as {key: value}."""
        words = [kind] if kind else []
        out = self.in_pool("condor_status", *words, "-af", *(_AD_ATTRS[key] for key in keys))
        return [dict(zip(keys, line.split() + [""] * len(keys))) for line in out.splitlines()]

    def lease_stop(self) -> LeaseStopped:
        """Cancel the pilots and wait until the batch system reports them gone, then stop
        the pool: nothing of the lease runs at the site afterwards."""
        self.need_plan()
        cancelled = self.cancel_pilots()
        self.wait_pilots_gone("the lease's pool keeps running")
        crash_point("lease.after-pilots-gone")
        self.stop_central_manager()
        return LeaseStopped(cancelled, pool_stopped=True)


def export_of(name: str) -> str:
    """The export a joined schedd's or submitter's name (`...@lumberjack-X`) is of."""
    _, _, domain = name.rpartition("@")
    prefix = remote_pool.DOMAIN_PREFIX
    return domain[len(prefix) :] if domain.startswith(prefix) else ""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:  # "undefined": none yet
        return 0
    return int(value) if value.is_integer() else round(value, 1)


def _no_usage() -> dict[str, float]:
    return {"usage_s": 0, "weighted_usage_s": 0, "slots_in_use": 0}
