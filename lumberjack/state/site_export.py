"""An export bound for a site, the one way every command takes jobs there (`export
--site`, `run`, and `sync` for jobs opted into a lease).

`prepare` checks everything before anything changes: the jobs, the resource request
against the site's profile (or the lease's request), and, over one SSH connection, that
the export's directory at the site is still free. `SiteExport.write` then takes the jobs
out of the local schedd and writes the bundle (ap/export.py), recording the export in
the ledger as phase exported.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

from lumberjack.ap import export as export_mod
from lumberjack.ap import matchmaking
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core.contract import ExportLayout
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.request import (
    REQUEST_FIELDS,
    ResourceRequest,
    build_request,
    report_dict,
    report_lines,
)
from lumberjack.profiles.sites import check_not_retired, find_profile
from lumberjack.state import plans
from lumberjack.state.exporting import run_export
from lumberjack.state.ledger import Ledger
from lumberjack.state.steps import Site


@dataclass
class SiteExport:
    """A checked export for `site`: what it takes, where it goes, what it asks for."""

    plan: export_mod.Plan
    site: str
    info: dict[str, Any]  # what the ledger keeps: remote_dir, request, lease
    answer: dict[str, Any]  # what the command reports besides the plan
    report: list[str] = field(default_factory=list)  # the request, one line per value

    def dry_run(self) -> dict[str, Any]:
        return {"ok": True, "dry_run": True, **self.plan.to_json(), **self.answer}

    def write(
        self, schedd: LocalSchedd, ledger: Ledger, progress: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Export the jobs and write the bundle; the command's answer."""
        written = run_export(
            schedd, ledger, self.plan, site=self.site, info=self.info,
            progress=progress,
        )  # fmt: skip
        return {"ok": True, **self.plan.to_json(), **self.answer, **written}


def prepare(
    ledger: Ledger,
    schedd: LocalSchedd,
    selection: export_mod.Selection,
    site: str,
    name: str,
    request_flags: dict[str, object],
    held: Site | None = None,
    lease: str | None = None,
    skip_unmatched: bool = False,
) -> SiteExport:
    """Check an export of `selection` to `site` as `name`; nothing changes. The request
    comes from `request_flags`, the jobs and the profile, or with `lease` (checked by
    leases.site_to_join) is the lease's. Every job is matched against the slots the
    pilots will advertise: clusters that can never run are refused (matchmaking.Unmatched),
    or with `skip_unmatched` left in the queue. `held` is a connection the caller keeps
    open (else one of its own). Raises BadInput."""
    profile = find_profile(site)
    check_not_retired(profile)
    # checks the jobs, too; one query for the plan and the matchmaking
    jobs, queried = export_mod.select_jobs_with_ads(schedd, selection, matchmaking.MATCH_ATTRS)
    lease_info: dict[str, Any] = {}
    if lease is not None:
        lease_record = ledger.get_lease(lease)
        lease_record.check_may_join([str(job.get("Owner")) for job in jobs])
        lease_info = {"lease": lease, "lease_dir": lease_record.info["remote_dir"]}

    def request_for(ads: list[Any], runtimes: list[int]) -> ResourceRequest:
        if lease is not None:
            return plans.request_of(lease_record.info)
        return _request_following_jobs(profile, request_flags, ads, runtimes)

    request, analysis, kept = _match(
        schedd, jobs, queried, profile, site, request_for, skip_unmatched
    )
    del queried
    if kept is not None:
        selection = export_mod.Selection(ids=tuple(str(c) for c in kept))
        jobs = [j for j in jobs if j["ClusterId"] in kept]
    with contextlib.nullcontext(held) if held else Site(profile) as connection:
        remote_dir = connection.export_dir(name)
        # An older export's directory (its queue already placed) would be reused as is.
        connection.refuse_existing(remote_dir, "export", "--name")
    plan, _ = export_mod.plan_export(
        schedd, selection, name=name, bundle_dir=ledger.bundles_dir() / name,
        remote_spool=ExportLayout(remote_dir).spool, selected=jobs,
    )  # fmt: skip
    return SiteExport(
        plan=plan,
        site=site,
        info={"remote_dir": remote_dir, "request": plans.request_info(request), **lease_info},
        answer={
            "site": site,
            "remote_dir": remote_dir,
            "request": report_dict(request, profile),
            "matchmaking": analysis.to_json(),
            **lease_info,
        },  # fmt: skip
        report=report_lines(request, profile) + matchmaking.report_lines(analysis),
    )


def check_selection(
    schedd: LocalSchedd,
    selection: export_mod.Selection,
    site: str,
    request_flags: dict[str, object],
) -> tuple[ResourceRequest, matchmaking.Analysis]:
    """The request that follows the selected jobs and their matchmaking at `site`, as
    `prepare` makes them, for `sites check`; nothing changes and no site is asked.
    Raises matchmaking.Unmatched (a BadInput) when a cluster can never run there."""
    profile = find_profile(site)
    check_not_retired(profile)
    jobs, queried = export_mod.select_jobs_with_ads(schedd, selection, matchmaking.MATCH_ATTRS)

    def request_for(ads: list[Any], runtimes: list[int]) -> ResourceRequest:
        return _request_following_jobs(profile, request_flags, ads, runtimes)

    request, analysis, _ = _match(schedd, jobs, queried, profile, site, request_for, False)
    return request, analysis


def _request_following_jobs(
    profile: SiteProfile, request_flags: dict[str, object], ads: list[Any], runtimes: list[int]
) -> ResourceRequest:
    """The flags' request; what they leave out grows to the largest of the jobs."""
    flags = {key: request_flags.get(key) for key in REQUEST_FIELDS}
    return build_request(
        profile, job_runtimes_s=runtimes, job_needs=matchmaking.needs_of(ads), **flags
    )


def _match(
    schedd: LocalSchedd,
    jobs: list[dict],
    queried: list[Any],
    profile: SiteProfile,
    site: str,
    request_for: Callable[[list[Any], list[int]], ResourceRequest],
    skip_unmatched: bool,
) -> tuple[ResourceRequest, matchmaking.Analysis, list[int] | None]:
    """The request and the matchmaking of the selected jobs (`queried`: their ads as
    the selection's query gave them); with refused clusters and `skip_unmatched`, the
    clusters that can run (else None: all of them). Raises matchmaking.Unmatched when a
    cluster can never run and none is to be skipped."""
    clusters = sorted({j["ClusterId"] for j in jobs})
    ads = matchmaking.job_ads(schedd, clusters, queried)
    request = request_for(ads, export_mod.runtimes_s(jobs))
    analysis = matchmaking.analyze(ads, profile, request)
    if not analysis.refused:
        return request, analysis, None
    if not skip_unmatched or not analysis.matched:
        raise matchmaking.Unmatched(analysis, site)
    # Only the clusters that can run leave; the request follows them alone.
    refused = set(analysis.refused_clusters)
    kept_ads = [a for a in ads if a["ClusterId"] not in refused]
    kept_jobs = [j for j in jobs if j["ClusterId"] not in refused]
    request = request_for(kept_ads, export_mod.runtimes_s(kept_jobs))
    left = analysis.refused
    analysis = matchmaking.analyze(kept_ads, profile, request)
    analysis.refused = left  # reported as left in the queue
    return request, analysis, [c for c in clusters if c not in refused]
