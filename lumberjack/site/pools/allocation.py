"""Schedd placement "allocation": no daemon on the login node. `launch` places the queue,
writes the head's config and submits one pilot; the pilot's first node runs the pool
(remote_pool.allocation_node_script). `status` reads the spool's job_queue.log; `stop`
cancels the pilots and waits until the batch system reports them gone, so that nobody
holds the spool when `fetch` copies it.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from lumberjack.core.answers import Acted, Launched, PoolStarted, Status, Stopped
from lumberjack.core.contract import ALIVE, PilotState
from lumberjack.site import gather_logs, queue_commands, remote_pool
from lumberjack.site.batch import BatchError
from lumberjack.site.files import AgentError
from lumberjack.site.job_container import write_wrapper
from lumberjack.site.job_queue import (
    expire_leases,
    held_report,
    job_counts,
    place_queue,
    placed,
    queue_ads,
)
from lumberjack.site.pools.base import Pool, all_finished, login_address, make_local_dirs
from lumberjack.site.remote_pool import PoolSettings


def resumable(counts: dict[str, int]) -> int:
    """Jobs the next pilot runs: idle ones, and those the log still says are running
    while no pilot lives (their schedd died with its allocation; the next one makes
    them idle again when it reads the log)."""
    return counts.get("idle", 0) + counts.get("running", 0)


class AllocationPool(Pool):
    """The pool on the first node of the one pilot; the queue stays in SPOOL between them."""

    def settings(self) -> PoolSettings:
        # The pool's address and port are the head node's, known there only (head_config).
        plan = replace(self.need_plan(), address=login_address(), port=1)
        return replace(self.settings_of(plan), port=0)

    def head_config(self, settings: PoolSettings) -> str:
        """The config the head node runs its pool with."""
        return remote_pool.head_config(settings)

    def head_options(self) -> dict[str, str]:
        """More of allocation_node_script's options (a lease's head differs)."""
        return {}

    def write_pilot_files(self, settings: PoolSettings) -> None:
        plan = self.need_plan()
        layout, spec = self.layout, plan.spec
        make_local_dirs(layout, "log", "execute")
        Path(layout.pool_config).write_text(self.head_config(settings))
        tokens = Path(layout.pilot_tokens)
        tokens.mkdir(parents=True, exist_ok=True)
        os.chmod(tokens, 0o700)
        Path(layout.pilot_config).write_text(remote_pool.allocation_pilot_config(settings))
        write_wrapper(settings.layout.pilots, settings.runtime_name, settings.image)
        node = remote_pool.allocation_node_script(
            settings, batch=self.batch, cores=spec.cores_per_node,
            memory_mb=spec.memory_per_node_mb, walltime_s=spec.walltime_s,
            retire_s=spec.retire_s, login_address=settings.address,
            token_lifetime_s=plan.token_lifetime_s, **self.head_options(),
        )  # fmt: skip
        self.write_node_script(node)
        os.chmod(layout.node_script, 0o755)

    def launch(self) -> Launched:
        self.prepare()
        if self.need_plan().pilots != 1:
            raise AgentError("the schedd runs inside the allocation: one pilot at a time")
        settings = self.settings()
        placed_now = place_queue(self.layout, settings.site_user, settings.trust_domain)
        if not self.alive_pilots():
            expire_leases(self.layout)
        pilots = self.submit_pilots(settings, waiting=lambda: resumable(job_counts(self.layout)))
        return Launched(placed_now, PoolStarted(False, placement="allocation"), pilots)

    def status(
        self, known: dict[str, PilotState] | None = None, masters: set[str] | None = None
    ) -> Status:
        """The log's jobs (a dead allocation's "running" ones are idle again) and the
        pilots: while one lives it holds the pool; `known` and `masters` are not needed."""
        ads = queue_ads(self.layout)
        counts = job_counts(self.layout, ads)
        try:
            states = Pool(self.pilot_holder, self.plan).pilot_states()
            pilots = {k: str(v) for k, v in states.items()}
            held = any(state in ALIVE for state in states.values())
        except BatchError as exc:
            pilots, held = {"error": str(exc)}, True
        interrupted = 0
        if not held and counts.get("running"):
            # No pilot holds the spool: "running" in the log is a schedd that died with
            # its allocation; the next one starts those jobs again.
            interrupted = counts.pop("running")
            counts["idle"] = counts.get("idle", 0) + interrupted
        return Status(
            jobs=counts, total=sum(counts.values()), finished=all_finished(counts),
            **held_report(ads, self.release_window_s(), time.time()),
            pool_running=held, placement="allocation", interrupted=interrupted,
            placed=placed(self.layout), pilots=pilots,
            remote_jobs=queue_commands.remote_jobs(ads),
        )  # fmt: skip

    def act(self) -> Acted:
        """The schedd runs on a compute node, out of the login node's reach."""
        raise AgentError(
            "the local queue's commands reach a schedd on the login node only "
            "(this export's runs in the allocation); they take effect at import"
        )

    def stop(self) -> Stopped:
        """Cancel the pilots and wait until the batch system reports them gone: then no
        schedd holds the spool (its log final) and it can be copied."""
        cancelled = self.cancel_pilots()
        self.wait_pilots_gone("the spool is not final yet")
        return Stopped(bool(cancelled), cancelled,
                       gather_logs.gather_safely(self.layout.root, self.plan))  # fmt: skip
