"""Paths on this machine that a profile names (a key file, known_hosts, the HTCondor
tarball): ${VAR} and $VAR from the environment, ~ expanded, relative to the profile's
directory."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Optional

ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_local_path(value: str, relative_to: Path, unset: Callable[[str], Exception]) -> Path:
    """`value` as an absolute path on this machine; raises `unset(VAR)` for the first
    variable the environment does not hold."""

    def expand(match: re.Match[str]) -> str:
        var = match.group(1) or match.group(2)
        if var not in os.environ:
            raise unset(var)
        return os.environ[var]

    expanded = Path(ENV_REF.sub(expand, value)).expanduser()
    return expanded if expanded.is_absolute() else relative_to / expanded


class _Unset(Exception):
    pass


def tarball_path(value: str, relative_to: Path) -> Optional[Path]:
    """[container].condor_tarball as a path on this machine; None while it names a ${VAR}
    that is not set (checked again when the tarball is used, see
    SiteProfile.condor_tarball_path)."""
    try:
        return expand_local_path(value, relative_to, _Unset)
    except _Unset:
        return None
