"""Leases: a remote pool's central manager and its pilots at one site, that exports join.

    lease create --> creating --(agent lease-start)--> active --lease shutdown-->
    stopping --(agent lease-stop, remove)--> ended

A lease is created before (or without) any export: its pilots wait in the batch queue
while jobs are exported and shipped. An export made with `--lease NAME` keeps its own
schedd and spool but no central manager or pilots of its own (see agent.joined_launch);
it is fetched and imported on its own, and fetching it never touches the lease.

A lease has an owner (who created it, or for root `--owner USER`) and may be shared with
named local users (`--share-with`, `lease share`): only their jobs join it, one owner's
per export. At the site each joined export keeps its own schedd and trust domain (see
site/pools/joined.py), so sharing the pilots shares nothing else.

Every step is recorded in the ledger before and after it acts and is idempotent, so
`sync` finishes a lease left half-created or half-stopped by a crash, and ends an active
lease whose pilots are gone (idle shutdown, walltime) once no joined export needs it.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
from typing import Any

from lumberjack.ap.job_channels import CHANNEL_ATTRS, channel_problem
from lumberjack.core.answers import Accounting, LeaseStatus
from lumberjack.core.contract import PLACEMENTS, ExportLayout
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.records import to_json
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.request import ResourceRequest
from lumberjack.profiles.sites import check_not_retired
from lumberjack.state.isolation_guard import GUARD_LOCK, check_lease_isolation
from lumberjack.state.ledger import ExportRecord, LeaseRecord, Ledger, lease_key
from lumberjack.state.lifecycle import ship_condor_release
from lumberjack.state.phases import LeasePhase, Phase, lease_move
from lumberjack.state.plans import (
    check_pilots,
    check_runtime,
    pool_plan,
    request_info,
    request_of,
)
from lumberjack.state.steps import Site, reported, run_step

#: Phases of a joined export that still need the lease (its collector, new pilots).
NEEDS_LEASE = (Phase.SELECTED, Phase.EXPORTING, Phase.EXPORTED, Phase.SHIPPED,
               Phase.LAUNCHED, Phase.RUNNING)  # fmt: skip


def check_site(profile: SiteProfile) -> None:
    """BadInput, in one line, for a site where leases cannot run (yet)."""
    check_not_retired(profile)
    check_placement(profile)
    check_runtime(profile)


def check_request(request: ResourceRequest, profile: SiteProfile) -> None:
    """BadInput, in one line, for a request the site's placement cannot run (with the
    pool in the allocation: more than one pilot at a time)."""
    check_pilots(request, profile)


def check_placement(profile: SiteProfile) -> None:
    """Leases run with either placement: the central manager on the login node ("login")
    or on the head node of each round of pilots ("allocation", where a joined export's
    schedd runs there too). Anything else is refused."""
    if profile.schedd.placement not in PLACEMENTS:
        raise BadInput(
            f"site {profile.name} names schedd placement {profile.schedd.placement!r}, where "
            f"leases cannot run; use one of {', '.join(PLACEMENTS)}"
        )


def layout_of(record: LeaseRecord) -> ExportLayout:
    return ExportLayout(record.info["remote_dir"])


def invoking_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def local_users(names: str, what: str) -> list[str]:
    """`names` (comma-separated) as a sorted list of local accounts; BadInput (one line)
    for a name with no account here."""
    users = sorted({n.strip() for n in names.split(",") if n.strip()})
    unknown = []
    for user in users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            unknown.append(user)
    if unknown:
        raise BadInput(f"{what}: no local user {', '.join(unknown)}")
    return users


def sharing(owner: str | None, share_with: str | None) -> dict[str, Any]:
    """A new lease's owner and share list (its ledger info); BadInput (one line) for an
    --owner other than the invoking user unless root, an unknown user."""
    me = invoking_user()
    if owner is None:
        owner = me
    elif owner != me and os.geteuid() != 0:
        raise BadInput(f"--owner {owner}: only root creates a lease for another user")
    local_users(owner, "--owner")
    shared = [u for u in local_users(share_with or "", "--share-with") if u != owner]
    return {"owner": owner, "share_with": shared}


def share(ledger: Ledger, name: str, add: str | None, remove: str | None) -> dict[str, Any]:
    """Add users to, or take them off, the share list (only the owner, or root); exports
    that joined already stay until fetched."""
    record = ledger.get_lease(name)
    owner = record.owner
    me = invoking_user()
    if os.geteuid() != 0 and me != owner:
        raise BadInput(f"lease {name!r} is {owner or 'nobody'}'s: only its owner or root shares it")
    shared = set(record.info.get("share_with", []))
    shared |= set(local_users(add or "", "--add"))
    shared -= {n.strip() for n in (remove or "").split(",")}
    shared.discard(owner or "")
    ledger.update_lease_info(name, share_with=sorted(shared))
    if owner is None:
        ledger.update_lease_info(name, owner=me)
    return {"owner": owner or me, "share_with": sorted(shared)}


def create(
    ledger: Ledger,
    site: Site,
    name: str,
    request: ResourceRequest,
    shared: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Record the lease (`shared`: its owner and share list, see `sharing`), then
    start it at the site. Again for a lease still creating (a crash): finishes it; any
    other existing name is refused."""
    profile = site.profile
    check_site(profile)
    check_request(request, profile)
    record = ledger.find_lease(name)
    if record is None:
        remote_dir = site.lease_dir(name)
        site.refuse_existing(remote_dir, "lease", "name")
        info = {"remote_dir": remote_dir, "request": request_info(request), **(shared or {})}
        # Its key and pilots' token lie on the site account: the same rule as an export's.
        with ledger.lock(GUARD_LOCK, wait=True):
            info |= check_lease_isolation(ledger, name, info.get("owner"), profile)
            record = ledger.create_lease(name, site=profile.name, info=info)
    elif record.phase != LeasePhase.CREATING or record.site != profile.name:
        raise BadInput(
            f"a lease named {name!r} already exists (site {record.site}, {record.phase}); "
            "choose another name"
        )
    return start(ledger, site, record)


def start(ledger: Ledger, site: Site, record: LeaseRecord) -> dict[str, Any]:
    """Directory, agent and plan at the site, then the agent's lease-start (pool and the
    first round of pilots); idempotent."""
    layout = layout_of(record)

    def act() -> dict[str, Any]:
        conn = site.conn
        root = shlex.quote(layout.root)
        conn.run(f"mkdir -p {root} && chmod 700 {root}")
        site.put_agent(layout)
        ship_condor_release(site, layout)
        plan = pool_plan(request_of(record.info), site.profile, layout)
        site.put_launch_plan(layout, plan)
        crash_point("lease.after-dir")
        answer = to_json(site.agent(layout, "lease-start"))
        crash_point("lease.before-ledger")
        return answer

    result = run_step(ledger, lease_key(record.name), "create", act)
    ledger.move_lease(record.name, "create")
    return result


def status(ledger: Ledger, site: Site, record: LeaseRecord) -> dict[str, Any]:
    """Pilots, startds and joined schedds from the site (when it runs there), and the
    exports the ledger says joined, each with its owner and accounting (jobs idle and
    running, the accountant's usage)."""
    answer: LeaseStatus | None = None
    if record.phase in (LeasePhase.CREATING, LeasePhase.ACTIVE):
        answer = site.agent(layout_of(record), "lease-status")
    if answer is None:
        return {"exports": _joined(ledger, record.name)}
    shown = to_json(answer)
    del shown["accounting"]  # by export, below: only those the ledger knows
    return {**shown, "exports": _joined(ledger, record.name, answer.accounting)}


#: What the site reports per joined export (lease-status's "accounting"), all numbers.
ACCOUNTING_KEYS = ("idle", "running", "usage_s", "weighted_usage_s", "slots_in_use")


def _joined(
    ledger: Ledger, name: str, accounting: dict[str, Accounting] | None = None
) -> list[dict[str, Any]]:
    """The ledger's exports of the lease; with the site's accounting, only numbers of
    exports the ledger knows (a site's answer is checked, not trusted)."""
    per = accounting or {}
    exports = []
    for r in ledger.joined(name):
        entry: dict[str, Any] = {"name": r.name, "phase": r.phase.value, "owner": r.owner}
        site_entry = per.get(r.name)
        if site_entry is not None:
            entry["accounting"] = {k: _count(getattr(site_entry, k)) for k in ACCOUNTING_KEYS}
        exports.append(entry)
    return exports


def _count(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return value if ok and value == value and value != float("inf") else 0


def extend(ledger: Ledger, site: Site, record: LeaseRecord) -> dict[str, Any]:
    """One more round of pilots, whatever runs."""
    ledger.move_lease(record.name, "extend")
    result = run_step(
        ledger,
        lease_key(record.name),
        "extend",
        lambda: to_json(site.agent(layout_of(record), "lease-extend")),
    )
    ledger.update_lease_info(record.name, rounds=int(record.info.get("rounds", 1)) + 1)
    return result


def still_needed_by(ledger: Ledger, name: str) -> list[ExportRecord]:
    """Joined exports whose jobs are (or will be) at the site and not yet fetched."""
    return [r for r in ledger.joined(name) if r.phase in NEEDS_LEASE]


def shutdown(
    ledger: Ledger, site: Site, record: LeaseRecord, *, force: bool = False
) -> dict[str, Any]:
    """Cancel the pilots, stop the pool, remove the lease's directory at the site.
    Refused while a joined export still needs the lease, unless `force` (its jobs then
    wait idle until it is fetched)."""
    waiting = still_needed_by(ledger, record.name)
    if waiting and not force and record.phase != LeasePhase.STOPPING:
        names = ", ".join(f"{r.name} ({r.phase})" for r in waiting)
        raise BadInput(f"lease {record.name!r} still serves {names}; fetch them first, or --force")
    ledger.move_lease(record.name, "shutdown")
    layout = layout_of(record)

    def act() -> dict[str, Any]:
        result: dict[str, Any] = {}
        if site.holds(layout):
            result["stop"] = to_json(site.agent(layout, "lease-stop"))
            result["remote"] = to_json(site.agent(layout, "remove"))
        else:
            result["remote"] = {"removed": False, "reason": "nothing at the site"}
        crash_point("lease.before-ended")
        return result

    result = run_step(ledger, lease_key(record.name), "shutdown", act)
    ledger.move_lease(record.name, "ended")
    return result


def sync_one(ledger: Ledger, site: Site, record: LeaseRecord) -> list[str]:
    """What `sync` does for a lease: finish a create or a shutdown a crash cut short;
    end an active lease whose pilots are all gone once no joined export needs it."""
    if record.phase == LeasePhase.CREATING:
        start(ledger, site, record)
        return ["created"]
    if record.phase == LeasePhase.STOPPING:
        shutdown(ledger, site, record)
        return ["ended"]
    if record.phase != LeasePhase.ACTIVE:
        return []
    answer: LeaseStatus = site.agent(layout_of(record), "lease-status")
    if answer.pilots_alive or still_needed_by(ledger, record.name):
        return []
    shutdown(ledger, site, ledger.get_lease(record.name))
    return ["idle: ended"]


#: The job attribute that opts a job into a lease (`+LumberjackLease = "NAME"` in its
#: submit file): `sync` exports its cluster into lease NAME once all of it waits idle, so
#: every node of a DAG runs at the site with no command per node.
OPT_IN_ATTR = "LumberjackLease"


def site_to_join(
    ledger: Ledger, lease: str, site: str | None, request_flags: dict[str, object]
) -> str:
    """The site of lease `lease`, which an export may join now; BadInput (one line) for
    a site where leases do not run, an unknown lease, another --site, request flags."""
    from lumberjack.profiles.request import REQUEST_FIELDS
    from lumberjack.profiles.sites import find_profile

    if site is not None:
        check_placement(find_profile(site))
    record = ledger.get_lease(lease)
    if site is not None and site != record.site:
        raise BadInput(f"lease {lease!r} is at site {record.site}, not {site}; drop --site")
    check_site(find_profile(record.site))
    lease_move(record.phase, "join", lease)
    given = [n for n in REQUEST_FIELDS if request_flags.get(n) is not None]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise BadInput(
            f"{flags}: an export in lease {lease!r} runs on the lease's pilots; "
            "give the request to `lease create` (more pilots: `lease extend`)"
        )
    return record.site


def opted_in(schedd: Any, lease: str) -> dict[str, list[int]]:
    """Clusters of the local schedd whose every job opted into `lease` and waits idle,
    not exported yet (an exported job is Managed "External"), by owner. A job that asks
    for a channel no site may give it (ap/job_channels.py) is held with the reason, as
    HTCondor holds a job it cannot run, instead of keeping its owner's other clusters
    away minute after minute; its cluster waits until the owner fixes and releases it."""
    jobs = schedd.query(
        f"{OPT_IN_ATTR} == {json.dumps(lease)}",
        ["ClusterId", "ProcId", "JobStatus", "Managed", "Owner", *CHANNEL_ATTRS],
    )
    clusters: dict[int, bool] = {}
    owners: dict[int, str] = {}
    for job in jobs:
        ready = job.get("JobStatus") == 1 and job.get("Managed") != "External"
        if ready and (problem := channel_problem(job)) is not None:
            schedd.hold([f"{job['ClusterId']}.{job['ProcId']}"], f"condor_lumberjack: {problem}")
            ready = False
        clusters[job["ClusterId"]] = clusters.get(job["ClusterId"], True) and ready
        owners[job["ClusterId"]] = str(job.get("Owner"))
    by_owner: dict[str, list[int]] = {}
    for cluster in sorted(c for c, ready in clusters.items() if ready):
        by_owner.setdefault(owners[cluster], []).append(cluster)
    return by_owner


def export_opted_in(
    ledger: Ledger, schedd: Any, sites: dict[str, Site], hold: bool = False
) -> list[dict[str, Any]]:
    """For every lease that exports may join: its opted-in clusters exported into it,
    one export named LEASE-DATE-TIME per owner (never two owners' jobs in one); an
    owner who may not join gets a one-line error and keeps the jobs. `sync` then ships
    and launches the exports."""
    results = []
    for record in ledger.leases():
        if record.phase not in (LeasePhase.CREATING, LeasePhase.ACTIVE):
            continue
        try:
            groups = opted_in(schedd, record.name)
        except LumberjackError as exc:
            groups = {}
            results.append(_opt_in_entry(ledger, record, error=exc))
        for owner, clusters in groups.items():
            results.append(_export_owner(ledger, schedd, sites, hold, record, owner, clusters))
    return results


def _opt_in_entry(
    ledger: Ledger, record: LeaseRecord, error: LumberjackError | None = None, **more: Any
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": lease_key(record.name), "lease": record.name, **more}
    if error is not None:
        entry["error"] = str(error)
        entry["exit_code"] = error.exit_code
    entry["phase"] = ledger.get_lease(record.name).phase.value
    return entry


def _export_owner(
    ledger: Ledger,
    schedd: Any,
    sites: dict[str, Site],
    hold: bool,
    record: LeaseRecord,
    owner: str,
    clusters: list[int],
) -> dict[str, Any]:
    """One owner's opted-in clusters exported into the lease as one export."""
    from lumberjack.ap import export as export_mod
    from lumberjack.profiles.sites import find_profile
    from lumberjack.state import site_export

    try:
        record.check_may_join([owner])  # before any connection (prepare checks it too)
        if record.site not in sites:
            sites[record.site] = Site(find_profile(record.site), hold=hold)
        name = export_mod.default_name(record.name, taken=lambda n: ledger.find(n) is not None)
        selection = export_mod.Selection(None, tuple(str(c) for c in clusters))
        site_export.prepare(
            ledger, schedd, selection, record.site, name, {}, sites[record.site],
            lease=record.name,
        ).write(schedd, ledger)  # fmt: skip
    except LumberjackError as exc:
        return _opt_in_entry(ledger, record, error=exc, owner=owner)
    steps = [f"exported clusters {', '.join(map(str, clusters))} as {name}"]
    return _opt_in_entry(ledger, record, steps=steps, export=name, owner=owner)


def sync(ledger: Ledger, sites: dict[str, Site], hold: bool = False) -> list[dict[str, Any]]:
    """sync_one for every lease not ended, under its lock; one line of result each.
    `sites` holds the connections of this sync (one per site, opened here if missing)."""
    from lumberjack.profiles.sites import find_profile

    results = []
    for record in ledger.leases():
        if record.phase == LeasePhase.ENDED:
            continue
        entry: dict[str, Any] = {"name": lease_key(record.name), "lease": record.name}
        with reported(entry), ledger.lock(lease_key(record.name)):
            current = ledger.get_lease(record.name)
            if current.site not in sites:
                sites[current.site] = Site(find_profile(current.site), hold=hold)
            entry["steps"] = sync_one(ledger, sites[current.site], current)
        entry["phase"] = ledger.get_lease(record.name).phase.value
        results.append(entry)
    return results
