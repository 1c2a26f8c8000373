"""An export joined to a lease with schedd placement "allocation": nothing of it runs on
the login node. `launch` places the queue, writes the schedd's config and start script
and a join request in the lease's `joined/`; the head node of the lease's running round
(and of every later one) starts the schedd there, SPOOL on the shared filesystem.
`stop` writes a release request and waits (bounded) for the head's acknowledgement,
after which no schedd holds the spool and `fetch` may copy it.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from lumberjack.core.answers import Launched, PoolStarted, Stopped
from lumberjack.core.crashpoints import crash_point
from lumberjack.site import gather_logs, remote_pool
from lumberjack.site.files import AgentError, make_private, read_plan, write_whole
from lumberjack.site.job_queue import job_counts, place_queue
from lumberjack.site.pools.allocation import AllocationPool, resumable
from lumberjack.site.pools.base import Pool, login_address
from lumberjack.site.pools.joined import JoinedPool
from lumberjack.site.pools.lease_alloc import (
    HOLDING,
    AllocationLeasePool,
    release_ack,
    release_request,
)
from lumberjack.site.remote_pool import PoolSettings

#: How long `stop` waits for the head to stop the schedd and acknowledge.
RELEASE_TIMEOUT_S = 300


class JoinedAllocationPool(JoinedPool, AllocationPool):
    """A schedd the lease's head node runs; its status is AllocationPool's (the log's)."""

    MINTS_IN_FRESH_CONTAINER = True  # nothing of the lease or the export runs here

    def lease(self) -> AllocationLeasePool:
        lease = self.pilot_holder
        plan = read_plan(lease)
        if plan is None or not Path(lease.joined).is_dir():
            raise AgentError(
                f"{lease.name} does not run at the site; see `condor_lumberjack lease status`"
            )
        return AllocationLeasePool(lease, plan)

    def settings(self) -> PoolSettings:
        """The export's own, its trust domain too (see JoinedPool); the address is the
        head's."""
        plan = replace(self.need_plan(), address=login_address(), port=1)
        return replace(self.settings_of(plan), port=0)

    def request(self) -> Path:
        return Path(self.pilot_holder.joined, self.layout.name)

    def launch(self) -> Launched:
        """Queue, config and join request in place; a round of the lease's pilots when
        none is alive and jobs wait."""
        lease = self.lease()
        if release_request(self.request()).exists():
            raise AgentError(f"{self.layout.name} has left {lease.layout.name}; fetch it")
        self.prepare()
        settings = self.settings()
        placed_now = place_queue(self.layout, settings.site_user, settings.trust_domain)
        crash_point("joined.after-place")
        lease_settings = lease.settings()
        # The two tokens, minted here (short commands, no daemon): see JoinedPool. The
        # first also makes the pool's local directories and the export's signing key.
        self.advertise_token(lease, lease_settings)
        config = remote_pool.joined_alloc_schedd_config(settings, lease_settings.trust_domain)
        Path(self.layout.pool_config).write_text(config)
        self.negotiator_token_of(settings)
        Path(self.layout.schedd_script).write_text(remote_pool.schedd_script(settings))
        os.chmod(self.layout.schedd_script, 0o700)
        make_private(self.layout.root)
        write_whole(self.request(), self.layout.root + "\n")
        pilots = lease.submit_round(
            lease_settings, waiting=lambda: resumable(job_counts(self.layout))
        )
        return Launched(placed_now, PoolStarted(False, placement="allocation"), pilots,
                        lease=lease.layout.name)  # fmt: skip

    def stop(self) -> Stopped:
        """Ask the head to stop the schedd; wait for its acknowledgement while a round
        runs (a round that starts later never starts a released schedd)."""
        released = False
        if Path(self.pilot_holder.joined).is_dir():
            write_whole(release_request(self.request()), "")
            crash_point("joined.after-release-request")
            released = self.wait_released()
        self.forget_negotiator_token()
        return Stopped(released, [], gather_logs.gather_safely(self.layout.root, self.plan))

    def wait_released(self) -> bool:
        """True once the head acknowledged; False when no round runs (nothing to stop)."""
        ack = release_ack(self.request())
        lease = Pool(self.pilot_holder, self.plan)
        deadline = time.monotonic() + RELEASE_TIMEOUT_S
        while not ack.exists():
            if not any(state in HOLDING for state in lease.pilot_states().values()):
                return False
            if time.monotonic() > deadline:
                raise AgentError(
                    f"the head of {self.pilot_holder.name} did not release the schedd of "
                    f"{self.layout.name} in {RELEASE_TIMEOUT_S} s; the spool is not final yet"
                )
            time.sleep(1)
        return True
