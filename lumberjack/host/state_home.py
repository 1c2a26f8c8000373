"""Where lumberjack keeps its state on the access point (the ledger, bundles, logins):
one directory per account, chosen here for every side that needs it."""

from __future__ import annotations

import os
from pathlib import Path

#: root's state on an access point: a system directory no user can write.
ROOT_STATE_DIR = Path("/var/lib/condor-lumberjack")


def state_dir() -> Path:
    explicit = os.environ.get("LUMBERJACK_STATE_DIR")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return ROOT_STATE_DIR
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "condor-lumberjack"
