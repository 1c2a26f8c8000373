"""How a site keeps the exports of different local owners apart, from its profile alone.

Every export at a site runs as the profile's one site account. With runtime apptainer or
singularity each job runs in a container of its own that holds only its sandbox
(lumberjack/site/job_container.py): exports of different owners may run side by side.
Runtimes "none" and podman-hpc have no such container: a job there can read and write
everything the site account can, other exports included. So while the jobs of either
get no container, exports (and leases) of different owners must not be on one site
account at once, unless the operator declares the account shared on purpose (`[site]
shared_account = true`, or `--shared-account`), accepting that its users trust each
other. The account is the login's user and host, whatever profile names it and
wherever its base_dir is. state/isolation_guard.py enforces it at ship, launch and
lease create.
"""

from __future__ import annotations

from lumberjack.profiles.model import SiteProfile
from lumberjack.site.job_container import ISOLATING_RUNTIMES as CONTAINED_RUNTIMES

CONTAINED = "contained"
SHARED = "shared"
ONE_OWNER = "one-owner"


def isolation_of(profile: SiteProfile, shared_account: bool = False) -> str:
    """contained: each job sees only its own sandbox; shared: no container, the operator
    accepts that the account's users see each other's exports; one-owner: no container,
    so one local owner at a time at this site."""
    if profile.container.runtime in CONTAINED_RUNTIMES:
        return CONTAINED
    return SHARED if (profile.shared_account or shared_account) else ONE_OWNER


def isolation_note(profile: SiteProfile) -> str:
    """One line for `sites check`: what the site account means for other owners' exports."""
    runtime = profile.container.runtime
    kind = isolation_of(profile)
    if kind == CONTAINED:
        return (
            f"each job runs in its own {runtime} container that holds only its sandbox: "
            "exports of different owners may share the site account, unless one of them "
            "came by a profile whose jobs get no container"
        )
    if kind == SHARED:
        return (
            f"runtime {runtime} gives jobs no container and [site] shared_account = true: "
            "every job can read and write every export of the site account, other owners' too"
        )
    return (
        f"runtime {runtime} gives jobs no container: one owner's exports at a time on this "
        "site account, whichever profile they came by (ship and launch refuse another "
        "owner's; [site] shared_account = true if its users may see each other's files)"
    )
