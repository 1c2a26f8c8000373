"""The resource-request flags, shared by `sites check`, `export --site` and `run`, and
`--show-script` (the pilots' batch scripts, before anything is spent).

@request_options
def export(..., **request_flags):
    request = request_from_options(profile, **request_flags, job_runtimes_s=runtimes)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, TypeVar

import click

from lumberjack.cli.completion import complete_queue
from lumberjack.core.units import parse_walltime
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.request import (
    REQUEST_FIELDS,
    ResourceRequest,
    RuntimeLike,
    build_request,
)

F = TypeVar("F", bound=Callable[..., Any])


class Duration(click.ParamType):
    """A duration in the syntax every option takes ("30s", "90m", "2h", "1d12h",
    "HH:MM:SS"); a bare number counts `bare_unit`s (seconds for polls and timeouts,
    minutes for walltimes, as sbatch reads them). The value is seconds (int)."""

    name = "duration"

    def __init__(self, bare_unit: str = "s") -> None:
        self.bare_unit = bare_unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        try:
            if text.isdigit():
                return int(text) * (60 if self.bare_unit == "m" else 1)
            return parse_walltime(text)
        except ValueError as exc:
            self.fail(f"{value!r} {exc}", param, ctx)


_OPTIONS = (
    click.option(
        "--nodes", type=int, default=None, metavar="N",
        help="Nodes in total over all pilots (default: the profile's).",
    ),
    click.option(
        "--cores", type=int, default=None, metavar="N", show_default="the profile's",
        help="Cores per node (whole-node queues: all of them).",
    ),
    click.option(
        "--memory", default=None, metavar="SIZE", show_default="the profile's",
        help='Memory per node: "4GB", "4000MB" or MB (whole-node queues: all of it).',
    ),
    click.option(
        "--gpus", type=int, default=None, metavar="N", show_default="the profile's",
        help="GPUs per node.",
    ),
    click.option(
        "--walltime", default=None, metavar="TIME",
        help='Pilot walltime: "HH:MM:SS", "90m", "2h", "1d12h"; a bare number is refused '
        "(default: from the jobs' runtimes, else the profile's).",
    ),
    click.option(
        "--queue", default=None, metavar="NAME", show_default="the profile's",
        shell_complete=complete_queue,
        help="Queue from the site profile.",
    ),
    click.option(
        "--allocation", default=None, metavar="NAME", show_default="the profile's, if any",
        help="Allocation (project/account) to charge.",
    ),
    click.option(
        "--pilots", type=int, default=None, metavar="N",
        help="Split the nodes into N batch jobs (nodes must be a multiple of N; default 1).",
    ),
    click.option(
        "--idle-shutdown", default=None, metavar="TIME",
        help='A node with no job for this long ends its part of the pilot ("5m"; default 5m).',
    ),
)  # fmt: skip


#: Where a shown script's export would live when no export is named (`sites check`).
SHOWN_EXPORT = "EXPORT"


#: --show-script: print the batch script each pilot is submitted with.
show_script_option = click.option(
    "--show-script",
    is_flag=True,
    help="Also print the batch script each pilot would be submitted with, as the site "
    "agent renders it (--json: pilot_scripts).",
)


def shown_scripts(
    request: ResourceRequest, profile: SiteProfile, root: str
) -> tuple[dict[str, Any], str]:
    """The pilots' scripts for --show-script: the JSON part and the text to append."""
    from lumberjack.site.batch import get_batch_system
    from lumberjack.state.plans import pilot_scripts

    scripts = pilot_scripts(request, profile, root)
    submit = get_batch_system(profile.batch_system).SUBMIT[0]
    # Without a login the site's variables ($HOME, $SCRATCH) stay as base_dir has them.
    where = "; base_dir's variables expanded at the site" if "$" in root else ""
    text = "".join(
        f"\n--- pilot script {item['name']} (for {submit}; rendered by the site agent's "
        f"code{where}) ---\n{item['script'].rstrip()}\n--- end of {item['name']} ---"
        for item in scripts
    )
    return {"pilot_scripts": scripts}, text


def request_options(func: F) -> F:
    """Add --nodes --cores --memory --gpus --walltime --queue --allocation --pilots
    --idle-shutdown."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def request_from_options(
    profile: SiteProfile,
    *,
    job_runtimes_s: Sequence[RuntimeLike] = (),
    **opts: Any,
) -> ResourceRequest:
    """A checked ResourceRequest from the flags' values (other keyword names are ignored,
    so a command may pass all of its parameters). Raises BadInput."""
    flags = {name: opts.get(name) for name in REQUEST_FIELDS}
    return build_request(profile, job_runtimes_s=job_runtimes_s, **flags)


def check_request(site: str, lease: str | None, **opts: Any) -> SiteProfile:
    """The site's profile, and the flags checked against it before a schedd or the site
    is asked anything (the jobs' runtimes are checked again once selected). A lease
    brings its own request (leases.site_to_join refuses flags)."""
    from lumberjack.profiles.sites import check_not_retired, find_profile

    profile = find_profile(site)
    check_not_retired(profile)  # before its request: a retired site takes none
    if lease is None:
        request_from_options(profile, **opts)
    return profile
