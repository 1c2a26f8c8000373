"""The plan a remote pool and its pilots are launched by (launch.json, an export's or a
lease's): the resource request as recorded in the ledger, checked against the site's
profile, turned into what the site agent runs.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, replace
from typing import Any

from lumberjack.ap import bundle as bundle_mod
from lumberjack.core.contract import (
    RUNTIME_NAMES,
    ExportLayout,
    GpuPlan,
    LaunchPlan,
    ReleasePlan,
    release_paths,
)
from lumberjack.errors import BadInput
from lumberjack.profiles.request import ResourceRequest, pilot_request
from lumberjack.profiles.sites import SiteProfile
from lumberjack.site.batch import get_batch_system
from lumberjack.site.remote_pool import pilot_script
from lumberjack.state.ledger import ExportRecord

#: How long a pilot token stays valid beyond the walltime (not days: a token taken from a
#: node is worth little for long); a pilot still queued gets a fresh one (site/pilot_token).
PILOT_TOKEN_MARGIN_S = 15 * 60


def request_info(request: ResourceRequest) -> dict[str, Any]:
    data = asdict(request)
    data["origins"] = [list(pair) for pair in request.origins]
    return data


def request_of(info: dict[str, Any]) -> ResourceRequest:
    """The resource request an export's (or lease's) info holds (see request_info)."""
    data = dict(info["request"])
    data["origins"] = tuple(tuple(pair) for pair in data.get("origins", ()))
    return ResourceRequest(**data)


def launch_plan(record: ExportRecord, profile: SiteProfile, layout: ExportLayout) -> LaunchPlan:
    """launch.json: what the agent needs to start the pool and the pilots. A joined
    export's names its lease's directory (bound into its container too); its pilots
    are the lease's. Its schedd keeps its own trust domain and key (see
    site/pools/joined.py)."""
    plan = pool_plan(request_of(record.info), profile, layout)
    lease_dir = record.info.get("lease_dir")
    if lease_dir:
        plan = replace(plan, lease=lease_dir, binds=(*plan.binds, lease_dir))
    return plan


def pool_plan(request: ResourceRequest, profile: SiteProfile, layout: ExportLayout) -> LaunchPlan:
    """The plan of a remote pool and its pilots (an export's, or a lease's). The pilots'
    names, commands and output directory are the agent's to give (PilotSpec.of)."""
    check_runtime(profile)
    check_pilots(request, profile)
    spec = pilot_request(request, profile)
    release = condor_release(profile, layout)
    queue = profile.queue(request.queue)
    plan = LaunchPlan(
        runtime=profile.container.runtime,
        image=profile.container.image or "",
        binds=tuple(profile.container.bind),
        condor_release=(
            ReleasePlan(release["sha256"], release["tarball"], release["dir"]) if release else None
        ),
        batch_system=profile.batch_system,
        pilots=request.pilots,
        spec=spec,
        address=profile.schedd.address,
        port=profile.schedd.port,
        token_lifetime_s=request.walltime_s + PILOT_TOKEN_MARGIN_S,
        idle_shutdown_s=request.idle_shutdown_s,
        max_running_jobs=profile.schedd.max_running_jobs,
        placement=profile.schedd.placement,
        gpus=GpuPlan(queue.gpu_vendor or "", queue.gpu_model or "", bool(queue.simulate_gpus)),
    )
    plan.check()
    return plan


#: The directory a shown script is rendered under when the site's base_dir holds
#: variables ($HOME, $SCRATCH) only the site expands; shown as base_dir is written.
_STAND_IN = "/lumberjack-base-dir"


def pilot_scripts(
    request: ResourceRequest, profile: SiteProfile, root: str
) -> list[dict[str, str]]:
    """`--show-script`: the batch script of each pilot of `request` for the export or
    lease whose directory at the site is `root`, rendered by the agent's own code
    (remote_pool.pilot_script) from the plan it would be given: byte for byte what
    the agent submits when `root` is the expanded directory (export --dry-run asks the
    site); with base_dir's variables unexpanded, the paths read as base_dir does."""
    check_pilots(request, profile)
    parent = posixpath.dirname(root)
    expanded = parent.startswith("/") and "$" not in parent
    layout = ExportLayout(root if expanded else posixpath.join(_STAND_IN, posixpath.basename(root)))
    spec = pilot_request(request, profile)
    batch = get_batch_system(profile.batch_system)
    shown = []
    for number in range(1, request.pilots + 1):
        name, text = pilot_script(spec, layout, batch, number)
        shown.append(
            {"name": name, "script": text if expanded else text.replace(_STAND_IN, parent)}
        )
    return shown


def check_runtime(profile: SiteProfile) -> None:
    """BadInput, in one line, for a container runtime the agent cannot use: better than
    a launch that fails obscurely at the site."""
    runtime = profile.container.runtime
    if runtime not in RUNTIME_NAMES:  # the agent's
        raise BadInput(
            f"runtime {runtime} is not supported; site {profile.name} needs one of "
            f"{', '.join(RUNTIME_NAMES)} ([container] runtime in its profile)"
        )
    if runtime == "none" and profile.container.condor_tarball is None:
        raise BadInput(
            f'site {profile.name} runs HTCondor without a container (runtime "none") but '
            "names no [container] condor_tarball to ship; add one to its profile"
        )
    if runtime != "none" and not profile.container.image:
        raise BadInput(f"site {profile.name} names no [container] image for {runtime}")
    profile.condor_tarball_path()  # BadInput if set and missing


def check_pilots(request: ResourceRequest, profile: SiteProfile) -> None:
    """With the schedd inside the allocation the first pilot holds the queue: two pilots
    at once would run two schedds on one queue (a job could run twice), so more nodes
    go into the one pilot instead."""
    if request.pilots > 1 and profile.schedd.placement == "allocation":
        raise BadInput(
            f"--pilots {request.pilots}: site {profile.name} runs the schedd inside the "
            'allocation ([schedd] placement = "allocation"), where one pilot at a time '
            "holds the queue; ask again with --pilots 1 (--nodes sets its size)"
        )


def condor_release(profile: SiteProfile, layout: ExportLayout) -> dict[str, str] | None:
    """Runtime "none": the profile's HTCondor tarball (path on this machine, sha256) and
    where it goes at the site: one copy per site, under <base_dir>/htcondor/ (base_dir
    as the site expanded it: the export directory's parent)."""
    local = profile.condor_tarball_path()
    if local is None:
        return None
    sha256 = bundle_mod.sha256_file(local)
    tarball, directory = release_paths(posixpath.dirname(layout.root), sha256)
    return {"local": str(local), "sha256": sha256, "tarball": tarball, "dir": directory}
