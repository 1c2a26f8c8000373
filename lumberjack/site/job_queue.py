"""The remote schedd's queue: placing the shipped one in its SPOOL (once), and reading
it back (jobs by status; those a dead allocation's schedd left running).

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.answers import Placed
from lumberjack.core.contract import QUEUE_LOG, ExportLayout
from lumberjack.core.jobstatus import JobStatus, can_run_again, status_of
from lumberjack.core.manifest import MANIFEST, ManifestError, read_manifest
from lumberjack.site.files import AgentError

#: HoldReasonCode of condor_hold (HTCondor's UserRequest): at the site only the local
#: queue's commands hold a job so (site/queue_commands.py).
USER_HOLD = "1"
PLACED_MARK = "queue-placed"  # in pool/: the queue went in; never again
#: JobLeaseDuration of every job at the site, in seconds (HTCondor's default is 2400).
#: When a pilot dies (scancel, node failure, walltime kill) its starters die with it and
#: nobody tells the remote schedd: each shadow keeps the job Running and waits for the
#: starter to reconnect until the job lease runs out, and only then puts the job back to
#: idle for the next pilot. The lease is also how long a starter cut off from the
#: shadow keeps its job running, so it is the one clock both sides agree on, whatever
#: the batch system reports (or fails to report). Two minutes: the login node and the
#: compute nodes share a site network, where an outage that long is rare and costs a
#: rerun of the job (never two runs at once: the starter gives up when the shadow does).
JOB_LEASE_S = 120


def placed(layout: ExportLayout) -> bool:
    return Path(layout.pool, PLACED_MARK).exists()


def place_queue(layout: ExportLayout, site_user: str, trust_domain: str) -> Placed:
    """Install bundle/spool as the schedd's SPOOL, jobs owned by the site account."""
    mark = Path(layout.pool, PLACED_MARK)
    if mark.exists():
        return Placed(False, reason="already placed")
    bundle = Path(layout.bundle)
    try:
        manifest = read_manifest(bundle / MANIFEST)
    except (OSError, ManifestError) as exc:
        raise AgentError(str(exc)) from exc
    if os.path.realpath(manifest.remote_spool) != os.path.realpath(layout.spool):
        raise AgentError(
            f"the bundle was exported for spool {manifest.remote_spool}, "
            f"not {layout.spool}; export it again for this site"
        )
    source = bundle / "spool"
    spool = Path(layout.spool)
    spool.mkdir(parents=True, exist_ok=True)
    linked = 0
    for entry in manifest.files:
        relative = entry.path
        if relative == QUEUE_LOG:
            continue
        target = spool / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            _link_or_copy(source / relative, target)
            linked += 1
    for relative in manifest.dirs:  # the inputs' directories, empty ones too
        if relative.startswith("/") or ".." in relative.split("/"):
            raise AgentError(f"manifest names directory {relative!r} outside the spool")
        (spool / relative).mkdir(parents=True, exist_ok=True)
    for iwd in manifest.remote_iwds():
        Path(iwd).mkdir(parents=True, exist_ok=True)
    ads = jql.read_log(source / QUEUE_LOG)
    owners = run_as_site_account(ads, site_user, trust_domain)
    short_lease(ads)
    # The queue goes in last, atomically: a schedd never sees jobs without their inputs.
    jqlw.write_log(spool / QUEUE_LOG, ads)
    Path(layout.pool).mkdir(parents=True, exist_ok=True)
    mark.write_text(f"{time.time():.0f}\n")
    return Placed(True, files=linked, jobs=_count_procs(ads), owners=owners)


def run_as_site_account(ads: dict[str, jql.Ad], site_user: str, trust_domain: str) -> list[str]:
    """Make every job the site account's: a schedd that is not root runs only its own.

    Import restores the original Owner/User from the access point's own copy.
    """
    before = set()
    for key, ad in ads.items():
        if jql.key_kind(key) not in ("cluster", "proc"):
            continue
        owner = ad.get("Owner")
        if owner is not None:
            before.add(owner.strip('"'))
            ad.set("Owner", json.dumps(site_user))
        if ad.get("User") is not None:
            ad.set("User", json.dumps(f"{site_user}@{trust_domain}"))
    return sorted(before)


def short_lease(ads: dict[str, jql.Ad]) -> None:
    """Every job's lease JOB_LEASE_S (see there): a dead pilot's jobs come back soon.

    Import takes only results from the site's ads, so the access point's own lease is
    what the job keeps at home.
    """
    for key, ad in ads.items():
        kind = jql.key_kind(key)
        if kind == "cluster" or (kind == "proc" and ad.get("JobLeaseDuration") is not None):
            ad.set("JobLeaseDuration", str(JOB_LEASE_S))


def _link_or_copy(source: Path, target: Path) -> None:
    # Inputs are read-only for the jobs: a hard link saves scratch space.
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _count_procs(ads: dict[str, jql.Ad]) -> int:
    return sum(1 for key in ads if jql.key_kind(key) == "proc")


def queue_ads(layout: ExportLayout) -> dict[str, jql.Ad]:
    """The remote schedd's own log (works while it is down, too)."""
    path = Path(layout.spool, QUEUE_LOG)
    if not path.exists():
        path = Path(layout.bundle, "spool", QUEUE_LOG)
    return jql.read_log(path)


def job_counts(layout: ExportLayout, ads: dict[str, jql.Ad] | None = None) -> dict[str, int]:
    """Jobs by status, read from the schedd's own log."""
    ads = queue_ads(layout) if ads is None else ads
    counts: Counter[str] = Counter()
    for key, ad in ads.items():
        if jql.key_kind(key) == "proc":
            status = status_of(ad.get("JobStatus") or JobStatus.IDLE)
            counts[status.word if status is not None else "other"] += 1
    return dict(counts)


def held_report(ads: dict[str, jql.Ad], window_s: int, now: float) -> dict[str, Any]:
    """Whether any job may still run at the site (see jobstatus.can_run_again): "final"
    when none may (completed, removed, or held with nothing here to release it);
    "held_final" and "releasable" count the held jobs each way, "wait_until" is when
    the last releasable one stops being waited for (None: there is none)."""
    clusters = {
        jql.parse_key(key).cluster: ad for key, ad in ads.items() if jql.key_kind(key) == "cluster"
    }
    live = held_final = releasable = 0
    wait_until: float | None = None
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc":
            continue
        status = status_of(ad.get("JobStatus") or JobStatus.IDLE)
        cluster = clusters.get(jql.parse_key(key).cluster)
        release = ad.get("PeriodicRelease")
        if release is None and cluster is not None:
            release = cluster.get("PeriodicRelease")
        if (ad.get("HoldReasonCode") or "").strip() == USER_HOLD:
            # Held by a person at home (a forwarded condor_hold, or a refused edit): a
            # condor_release from home may still come, as a policy's release may.
            release = "true"
        held_since = _number(ad.get("EnteredCurrentStatus"))
        if can_run_again(status, periodic_release=release, held_since=held_since,
                         window_s=window_s, now=now):  # fmt: skip
            live += 1
            if status is JobStatus.HELD:
                releasable += 1
                wait_until = max(wait_until or 0, held_since + window_s)
        elif status is JobStatus.HELD:
            held_final += 1
    total = sum(1 for key in ads if jql.key_kind(key) == "proc")
    return {"final": total > 0 and live == 0, "held_final": held_final,
            "releasable": releasable,
            "wait_until": None if wait_until is None else int(wait_until)}  # fmt: skip


def _number(text: str | None) -> float:
    """A number the schedd wrote (0 when it wrote none: a hold of unknown date is no
    longer waited for)."""
    try:
        return float(text or 0)
    except ValueError:
        return 0


def expire_leases(layout: ExportLayout) -> list[str]:
    """Jobs a dead allocation's schedd left running, their lease made expired, so that
    the next schedd makes them idle when it starts (as it does with a lease gone) instead
    of trying for JOB_LEASE_S to reconnect to a startd that died with that allocation.
    Only while no pilot lives: then nothing else holds the log."""
    path = Path(layout.spool, QUEUE_LOG)
    if not path.exists():
        return []
    ads = jql.read_log(path)
    cut_off = [
        key
        for key, ad in ads.items()
        if jql.key_kind(key) == "proc" and status_of(ad.get("JobStatus")) == JobStatus.RUNNING
    ]
    if cut_off:
        for key in cut_off:
            ads[key].set("LastJobLeaseRenewal", "0")
        jqlw.write_log(path, ads)
    return cut_off
