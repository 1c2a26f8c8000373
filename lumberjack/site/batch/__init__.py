"""Batch systems: render a pilot script, submit it, ask about it, cancel it.

A **pilot** is one batch job that starts an HTCondor startd on each of its nodes (inside
the site's container image) and keeps them running until its walltime is nearly over.
Every batch system lumberjack knows is one small `BatchSystem` subclass in its own module
here (header lines, commands, job-id pattern, state words); `SYSTEMS` registers them by
the name site profiles use and `get_batch_system(name)` returns one. Adding a batch
system = one module (+ optionally its own script template) + one line in `SYSTEMS`.

This package is shipped in the zipapp the site agent runs on HPC login nodes, where
only a bare `python3` (>= 3.9) may exist: it imports nothing but the standard library.
"""

from __future__ import annotations

from lumberjack.site.batch.base import BatchError, BatchSystem
from lumberjack.site.batch.cobalt import Cobalt
from lumberjack.site.batch.pbs import Pbs
from lumberjack.site.batch.pilot import PilotRequest, PilotSpec, PilotState, PilotStatus
from lumberjack.site.batch.slurm import Slurm

__all__ = [
    "SYSTEMS",
    "BatchError",
    "BatchSystem",
    "PilotRequest",
    "PilotSpec",
    "PilotState",
    "PilotStatus",
    "get_batch_system",
]

#: The batch systems lumberjack can drive, by the name used in site profiles.
SYSTEMS: dict[str, type[BatchSystem]] = {cls.NAME: cls for cls in (Slurm, Pbs, Cobalt)}


def get_batch_system(name: str) -> BatchSystem:
    """The batch system `name` ("slurm", "pbs" or "cobalt")."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown batch system {name!r}; known: {', '.join(SYSTEMS)}")
    return SYSTEMS[name]()
