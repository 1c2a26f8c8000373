"""A lease with schedd placement "allocation": nothing on the login node. The head node
of each round (the first node of its one pilot) runs the lease's collector and
negotiator (remote_pool.lease_head_config), announces them in the lease's directory,
and runs the schedd of every export that joined (a request in `joined/`, see
joined_alloc.py) until that export leaves. A round that ends leaves every queue in its
export's SPOOL; the next round's head starts the central manager and those schedds
again, and the jobs the log says were running start again.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from lumberjack.core.answers import LeaseExtended, LeaseStatus, PilotsSubmitted, PoolStarted
from lumberjack.core.contract import ALIVE, ExportLayout, PilotState
from lumberjack.site import remote_pool
from lumberjack.site.batch import BatchError
from lumberjack.site.files import AgentError, make_signing_key
from lumberjack.site.job_queue import expire_leases
from lumberjack.site.pools.allocation import AllocationPool
from lumberjack.site.pools.base import make_local_dirs
from lumberjack.site.pools.lease import LeasePool
from lumberjack.site.remote_pool import PoolSettings

#: Pilot states in which a round's head may hold the pool (and run joined schedds).
HOLDING = (PilotState.RUNNING, PilotState.FINISHING, PilotState.UNKNOWN)


def release_request(request: Path) -> Path:
    """Beside an export's join request in `joined/`: the export asks to leave (the head's
    script, templates/node-head-joined.sh.tmpl, spells the same two names)."""
    return Path(f"{request}~release")


def release_ack(request: Path) -> Path:
    """The head's answer: that export's schedd is stopped, its spool final."""
    return Path(f"{request}~released")


class AllocationLeasePool(AllocationPool, LeasePool):
    """The lease's central manager and its joined schedds on the head node of a round."""

    PLAN_HINT = LeasePool.PLAN_HINT

    def head_config(self, settings: PoolSettings) -> str:
        return remote_pool.lease_head_config(settings)

    def head_options(self) -> dict[str, str]:
        ready = str(Path(self.layout.pool_local, "log", ".collector_address"))
        return {"ready": ready, "joined_dir": self.layout.joined}

    def start_central_manager(self, settings: PoolSettings) -> PoolStarted:
        """Nothing starts here: the directory exports join through is made, and the
        lease's signing key (an export that joins before the first round starts gets its
        schedd's token of it at once)."""
        Path(self.layout.joined).mkdir(mode=0o700, exist_ok=True)
        make_local_dirs(self.layout, "log", "execute")
        make_signing_key(Path(self.layout.pool_local, "passwords.d", "POOL"))
        return PoolStarted(False, placement="allocation")

    def stop_central_manager(self) -> None:
        """The heads ended with their pilots: nothing runs on the login node."""

    def submit_round(
        self, settings: PoolSettings, waiting: Callable[[], int] = lambda: 1
    ) -> PilotsSubmitted:
        """A round when none is alive (one at a time holds the pool). The jobs a dead
        round's schedds left running get their job lease expired first, so each schedd
        the new head starts makes them idle at once instead of reconnecting for long."""
        if not self.alive_pilots():
            for export in self.members():
                expire_leases(export)
        return self.submit_pilots(settings, waiting=waiting)

    def members(self) -> list[ExportLayout]:
        """The exports joined and not released (the head runs their schedds)."""
        found = []
        for request in sorted(Path(self.layout.joined).glob("*")):
            if "~" in request.name or release_request(request).exists():
                continue
            found.append(ExportLayout(request.read_text().strip()))
        return found

    def extend(self) -> LeaseExtended:
        """The next round, once the current one is gone (two heads would run two
        schedds on one queue)."""
        self.need_plan()
        alive = self.alive_pilots()
        if alive:
            raise AgentError(
                f"pilot {', '.join(alive)} of {self.layout.name} still holds its pool "
                '(placement "allocation": one round at a time); extend once it has ended'
            )
        return LeaseExtended(self.submit_round(self.settings()))

    def lease_status(self) -> LeaseStatus:
        """Pilots, the collector the running round's head announced, the exports joined."""
        self.need_plan()
        try:
            states = self.pilot_states()
        except BatchError as exc:
            states, error = {}, str(exc)
        else:
            error = ""
        pilots = {k: str(v) for k, v in states.items()} if not error else {"error": error}
        holding = [job for job, state in states.items() if state in HOLDING]
        owner, collector = head_announced(self.layout)
        return LeaseStatus(
            placement="allocation", pilots=pilots,
            pilots_alive=bool(error) or any(s in ALIVE for s in states.values()),
            pool_running=owner in holding, collector=collector if owner in holding else "",
            joined=self.joined_states(),
        )  # fmt: skip

    def joined_states(self) -> dict[str, str]:
        """Each export that joined: "joined", "leaving" (release asked) or "released"."""
        states = {}
        for request in sorted(Path(self.layout.joined).glob("*")):
            if "~" in request.name:
                continue
            leaving = release_request(request).exists()
            done = release_ack(request).exists()
            states[request.name] = "released" if done else "leaving" if leaving else "joined"
        return states


def head_announced(layout: ExportLayout) -> tuple[str, str]:
    """(pilot id, collector) the last head of `layout` announced; ("", "") for none."""
    try:
        words = Path(remote_pool.collector_file(layout)).read_text().split()
    except OSError:
        return "", ""
    return (words[0], words[1]) if len(words) == 2 else ("", "")
