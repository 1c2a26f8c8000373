"""Role "lease": a central manager (collector + negotiator) and rounds of pilots that
exports join (see joined.py), on the login node or in the allocation (its placement).
Its directory has the shape of an export's (pool/, pilots/, launch.json, agent.pyz)
without bundle or spool. Its pilots are submitted at once (jobs may still be on their
way) and end by idle shutdown, the walltime, or lease-stop. Here too: the lines its
central manager's config adds, and who its collector admits.

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
)
from lumberjack.core.contract import ExportLayout, PilotState
from lumberjack.core.crashpoints import crash_point
from lumberjack.site.files import make_private
from lumberjack.site.pools.pool import Role
from lumberjack.site.remote_pool import DOMAIN_PREFIX, PoolSettings, pool_config

_AD_ATTRS = {"name": "Name", "state": "State", "activity": "Activity",
             "idle": "TotalIdleJobs", "running": "TotalRunningJobs"}  # fmt: skip
#: The file, under pool/local/, that says a lease's collector is up.
LEASE_READY = "log/.collector_address"
#: Pilot states in which a round's head may hold the pool (and run joined schedds).
HOLDING = (PilotState.RUNNING, PilotState.FINISHING, PilotState.UNKNOWN)


def release_request(request: Path) -> Path:
    """Beside an export's join request in `joined/`: the export asks to leave (the head's
    script, templates/node-head-joined.sh.tmpl, spells the same two names)."""
    return Path(f"{request}~release")


def release_ack(request: Path) -> Path:
    """The head's answer: that export's schedd is stopped, its spool final."""
    return Path(f"{request}~released")


class Lease(Role):
    """Collector + negotiator and rounds of pilots; each joined export runs its schedd."""

    PLAN_HINT = "run `lease create` again"

    def start(self) -> LeaseStarted:
        """Collector + negotiator on the login node and the first round of pilots; again:
        starts what is not running, submits pilots only when none is alive."""
        pool = self.pool
        pool.prepare()
        settings = pool.settings()
        Path(self.layout.spool).mkdir(parents=True, exist_ok=True)  # the accountant's log
        started = pool.placement.start_central_manager(settings)
        make_private(self.layout.root)
        crash_point("lease.after-pool")
        pilots = self.submit_round(settings)
        return LeaseStarted(started, pilots)

    def submit_round(
        self, settings: PoolSettings, waiting: Callable[[], int] = lambda: 1
    ) -> PilotsSubmitted:
        """A round of pilots unless one is queued or running (`waiting`: the idle jobs);
        the queues they serve are the joined exports'."""
        return self.pool.placement.submit_round(settings, waiting, self.members)

    def members(self) -> list[ExportLayout]:
        """The exports joined and not released, where the lease's directory lists them
        (placement "allocation": its head runs their schedds)."""
        found = []
        for request in sorted(Path(self.layout.joined).glob("*")):
            if "~" in request.name or release_request(request).exists():
                continue
            found.append(ExportLayout(request.read_text().strip()))
        return found

    def extend(self) -> LeaseExtended:
        """The next round of pilots (launch.json's count)."""
        self.pool.need_plan()
        return self.pool.placement.extend()

    def lease_status(self) -> LeaseStatus:
        self.pool.need_plan()
        return self.pool.placement.lease_status()

    def config_lines(self, settings: PoolSettings) -> str:
        return central_manager_lines(settings)

    def head_options(self) -> dict[str, str]:
        """The head announces the collector, and runs the schedds of `joined/`."""
        ready = str(Path(self.layout.pool_local, LEASE_READY))
        return {"ready": ready, "joined_dir": self.layout.joined}

    def collector_ads(self) -> tuple[list[Ad], list[Ad], dict[str, Accounting]]:
        """The slots, the joined schedds and their accounting, from the lease's collector."""
        # Slot ads (condor_status's default): -startd lists the startd daemons' own.
        startds = [Ad(**ad) for ad in self.ads(None, "name", "state", "activity")]
        schedds = [Ad(**ad) for ad in self.ads("-schedd", "name", "idle", "running")]
        return startds, schedds, self.accounting(schedds)

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
        for line in self.pool.in_pool("condor_userprio", "-allusers", "-l").splitlines():
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
        out = self.pool.in_pool("condor_status", *words, "-af", *(_AD_ATTRS[key] for key in keys))
        return [dict(zip(keys, line.split() + [""] * len(keys))) for line in out.splitlines()]

    def lease_stop(self) -> LeaseStopped:
        """Cancel the pilots and wait until the batch system reports them gone, then stop
        the pool: nothing of the lease runs at the site afterwards."""
        pool = self.pool
        pool.need_plan()
        cancelled = pool.cancel_pilots()
        pool.wait_pilots_gone("the lease's pool keeps running")
        crash_point("lease.after-pilots-gone")
        pool.placement.stop_central_manager()
        return LeaseStopped(cancelled, pool_stopped=True)


def export_of(name: str) -> str:
    """The export a joined schedd's or submitter's name (`...@lumberjack-X`) is of."""
    _, _, domain = name.rpartition("@")
    prefix = DOMAIN_PREFIX
    return domain[len(prefix) :] if domain.startswith(prefix) else ""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:  # "undefined": none yet
        return 0
    return int(value) if value.is_integer() else round(value, 1)


def _no_usage() -> dict[str, float]:
    return {"usage_s": 0, "weighted_usage_s": 0, "slots_in_use": 0}


# ---- the lease's central manager: its config, whom its collector admits ------------


def lease_config(settings: PoolSettings) -> str:
    """condor_config of a lease's central manager on the login node: pool_config with
    central_manager_lines (on a head node: head_config with them)."""
    title = f"condor_lumberjack lease pool {settings.layout.name}"
    return pool_config(settings, title=title) + central_manager_lines(settings)


def central_manager_lines(settings: PoolSettings) -> str:
    """What a lease's central manager adds to its pool's config, wherever it runs."""
    return (
        "# A lease: collector and negotiator only; each joined export runs its own schedd.\n"
        "DAEMON_LIST = MASTER, SHARED_PORT, COLLECTOR, NEGOTIATOR\n"
    ) + lease_collector_rules(settings)


def lease_collector_rules(settings: PoolSettings) -> str:
    """What a lease's central manager adds wherever it runs (login node or head node):
    its collector takes the ads of joined exports' schedds (and masters) only with a
    token of this lease's key, each for the export its identity names
    (COLLECTOR_REQUIREMENTS: one export cannot overwrite another's ad)."""
    joined = f"{JOINED_PREFIX}*@{settings.trust_domain}"
    return (
        "# The negotiator's ad within CLASSAD_LIFETIME: joined schedds and condor_userprio\n"
        "# (lease status's accounting) find the negotiator through it.\n"
        "NEGOTIATOR_UPDATE_INTERVAL = 20\n"
        "# Joined exports keep their own trust domains; their schedds advertise here with a\n"
        f"# token of this lease's key ({JOINED_PREFIX}<export>@<this domain>), never by FS.\n"
        "SEC_ADVERTISE_SCHEDD_AUTHENTICATION_METHODS = IDTOKENS\n"
        "SEC_ADVERTISE_MASTER_AUTHENTICATION_METHODS = IDTOKENS\n"
        f"ALLOW_READ = $(ALLOW_READ) {joined}\n"
        f"ALLOW_ADVERTISE_SCHEDD = $(ALLOW_ADVERTISE_SCHEDD) {joined}\n"
        f"ALLOW_ADVERTISE_MASTER = $(ALLOW_ADVERTISE_MASTER) {joined}\n"
        f"COLLECTOR_REQUIREMENTS = {joined_ads_requirement(settings.trust_domain)}\n"
    )


#: A joined schedd's identity at its lease's collector: `schedd-<export>@<lease domain>`.
JOINED_PREFIX = "schedd-"
#: What the token of a joined schedd (from the lease's key) allows: its schedd's and
#: master's ads (submitter ads are schedd ads), and reading the collector.
JOINED_SCHEDD_AUTHZ = ("ADVERTISE_SCHEDD", "ADVERTISE_MASTER", "READ")


def joined_identity(export: str, lease_domain: str) -> str:
    return f"{JOINED_PREFIX}{export}@{lease_domain}"


def joined_ads_requirement(lease_domain: str) -> str:
    """A ClassAd expression: an ad sent as `schedd-X@<lease domain>` is a schedd,
    submitter or master ad of export X's schedd (named `X@lumberjack-X`, see
    PoolSettings); ads of any other identity (the lease's own daemons, its pilots) pass
    as before. The collector evaluates it against the update (TARGET). No backslash:
    the config file's reading would change it."""
    who = 'ifThenElse(isString(TARGET.AuthenticatedIdentity), TARGET.AuthenticatedIdentity, "")'
    start, end = len(JOINED_PREFIX), len(f"@{lease_domain}")
    export = f"substr({who}, {start}, size({who}) - {start + end})"
    own = f'strcat({export}, "@{DOMAIN_PREFIX}", {export})'
    kind = "TARGET.MyType"
    return (
        f'(!regexp("^{JOINED_PREFIX}", {who})) || '
        f'(({kind} == "Scheduler" || {kind} == "DaemonMaster") && TARGET.Name == {own}) || '
        f'({kind} == "Submitter" && TARGET.ScheddName == {own})'
    )
