"""The resource-request flags, shared by `sites check`, `export --site` and `run`.

@request_options
def export(..., **request_flags):
    request = request_from_options(profile, **request_flags, job_runtimes_s=runtimes)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, TypeVar

import click

from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.request import (
    REQUEST_FIELDS,
    ResourceRequest,
    RuntimeLike,
    build_request,
)

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = (
    click.option(
        "--nodes", type=int, default=None, metavar="N",
        help="Nodes in total over all pilots (default: the profile's).",
    ),
    click.option(
        "--cores", type=int, default=None, metavar="N",
        help="Cores per node (whole-node queues: all of them).",
    ),
    click.option(
        "--memory", default=None, metavar="SIZE",
        help='Memory per node: "4GB", "4000MB" or MB (whole-node queues: all of it).',
    ),
    click.option("--gpus", type=int, default=None, metavar="N", help="GPUs per node."),
    click.option(
        "--walltime", default=None, metavar="TIME",
        help='Pilot walltime: "HH:MM:SS", "90m", "2h", "1d12h" (default: from the jobs\' '
        "runtimes, else the profile's).",
    ),
    click.option("--queue", default=None, metavar="NAME", help="Queue from the site profile."),
    click.option(
        "--allocation", default=None, metavar="NAME",
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
