"""The names a person gives exports and leases: each becomes a directory name, here
(bundles, work dirs) and at the site, so one pattern decides them all."""

from __future__ import annotations

import re

from lumberjack.errors import BadInput

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name: str, what: str = "export") -> str:
    if not NAME_PATTERN.match(name):
        raise BadInput(
            f"{what} name {name!r} is not valid; use letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)"
        )
    return name
