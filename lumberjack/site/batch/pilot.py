"""The words every batch system shares: a pilot's spec (what to render) and state come
from the contract (lumberjack/core/contract.py, shared with the access point); its
status (what a query answers, with the batch system's own words) is the batch modules'
own. Plain data, stdlib only."""

from __future__ import annotations

from typing import NamedTuple

from lumberjack.core.contract import ALIVE, PilotRequest, PilotSpec, PilotState

__all__ = ["ALIVE", "PilotRequest", "PilotSpec", "PilotState", "PilotStatus"]


class PilotStatus(NamedTuple):
    """One pilot's state plus the batch system's own words for it (for reports)."""

    state: PilotState
    raw: str = ""  # e.g. "PENDING", "Q", "queued"; "" when the job was not listed
    reason: str = ""  # e.g. Slurm's reason, PBS's comment or exit status
