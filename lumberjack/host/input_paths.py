"""A path named by input the access point did not write itself (a bundle's manifest, a
file list), refused with one line unless it stays inside its root (the rule itself is
core.safepath's, which the site applies too)."""

from __future__ import annotations

from lumberjack.core.safepath import why_unsafe
from lumberjack.errors import BadInput


def check_relative(path: str, source: str) -> str:
    """Refuse a bundle path that could point outside the bundle."""
    if why_unsafe(path) is not None:
        raise BadInput(f"{source}: unsafe path {path!r}")
    return path
