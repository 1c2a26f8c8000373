"""The pool's HTCondor daemons as the login node's /proc shows them, found by the
CONDOR_CONFIG they run with: a container may have its own PID namespace, but its
processes are visible (and, being this account's, readable) in /proc.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import os
from pathlib import Path

from lumberjack.core.contract import ExportLayout


def pool_processes(layout: ExportLayout, program: str | None = None) -> list[int]:
    """PIDs of this export's HTCondor daemons; `program` as /proc's comm has it: at most
    15 characters ("condor_collecto"), so a lease's pool is found by its condor_master."""
    return [
        pid
        for pid, (config, comm) in condor_processes().items()
        if config == layout.pool_config and (program is None or comm == program)
    ]


def running_masters() -> set[str]:
    """The CONDOR_CONFIG of every running condor_master of this account."""
    return {config for config, comm in condor_processes().values() if comm == "condor_master"}


def condor_processes() -> dict[int, tuple[str, str]]:
    """PID -> (CONDOR_CONFIG, program name) of this account's HTCondor processes."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"CONDOR_CONFIG="):
                found[int(entry.name)] = (os.fsdecode(item[len(b"CONDOR_CONFIG=") :]), comm)
    return found
