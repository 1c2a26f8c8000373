"""An export joined to a lease: only its own schedd runs on the login node, reporting
to the lease's collector; its pilots are the lease's (a new round of them when none is
alive and jobs are idle), shared with the lease's other exports, never cancelled by it.

Each joined export keeps its own trust domain and signing key, as a plain export has
(see remote_pool.joined_schedd_config): two tokens, one of each key, are all the lease
and the export know of each other, and stopping the export takes the lease's back.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from lumberjack.core.answers import Launched, Stopped
from lumberjack.core.contract import ExportLayout
from lumberjack.site import pilot_token, remote_pool
from lumberjack.site.files import AgentError, make_private, make_signing_key, read_plan
from lumberjack.site.job_queue import job_counts, place_queue
from lumberjack.site.pools.base import Pool, make_local_dirs
from lumberjack.site.pools.lease import LeasePool
from lumberjack.site.processes import pool_processes
from lumberjack.site.remote_pool import PoolSettings


class JoinedPool(Pool):
    """A schedd in a lease's pool."""

    #: Where the two tokens are made: in the pools running on the login node (the
    #: lease's, the export's once started), or in a fresh container where none runs.
    MINTS_IN_FRESH_CONTAINER: ClassVar[bool] = False

    @property
    def pilot_holder(self) -> ExportLayout:
        return ExportLayout(self.need_plan().lease or "")

    def lease(self) -> LeasePool:
        """The lease, which must run."""
        lease = self.pilot_holder
        plan = read_plan(lease)
        if plan is None or not pool_processes(lease, "condor_master"):
            raise AgentError(
                f"{lease.name} does not run at the site; see `condor_lumberjack lease status`"
            )
        return LeasePool(lease, plan)

    def settings(self, lease_settings: PoolSettings | None = None) -> PoolSettings:
        """The lease's address and port (from `lease_settings`, when the caller has them);
        the rest (its trust domain too) the export's own."""
        lease = lease_settings or self.lease().settings()
        return self.settings_of(replace(self.need_plan(), address=lease.address, port=lease.port))

    def launch(self) -> Launched:
        """Place the queue, start only a schedd reporting to the lease's collector, and
        (if none of the lease's pilots is alive and jobs are idle) a round of its pilots."""
        self.prepare()
        lease = self.lease()
        lease_settings = lease.settings()
        settings = self.settings(lease_settings)
        placed = place_queue(self.layout, settings.site_user, settings.trust_domain)
        config = remote_pool.joined_schedd_config(settings, lease_settings.trust_domain)
        self.advertise_token(lease, lease_settings)
        pool = self.start_pool(settings, config=config)
        self.negotiator_token_of(settings)  # in the export's container, running now
        make_private(self.layout.root)
        pilots = lease.submit_pilots(
            lease_settings, waiting=lambda: job_counts(self.layout).get("idle", 0)
        )
        return Launched(placed, pool, pilots, lease=lease.layout.name)

    def advertise_token(self, lease: LeasePool, lease_settings: PoolSettings) -> None:
        """The export's own signing key, and its schedd's token of the lease's key (to
        advertise to the lease's collector)."""
        layout = self.layout
        make_local_dirs(layout, "log", "lock", "run", "execute")
        make_signing_key(Path(layout.pool_local, "passwords.d", "POOL"))
        identity = remote_pool.joined_identity(layout.name, lease_settings.trust_domain)
        token = self.token(
            lease_settings, lease.layout.pool_config, identity, remote_pool.JOINED_SCHEDD_AUTHZ
        )
        pilot_token.write(Path(layout.pool_local, "tokens.d", remote_pool.JOINED_TOKEN), token)

    def negotiator_token_of(self, settings: PoolSettings) -> None:
        """The lease negotiator's token of the export's key (to negotiate with its schedd)."""
        identity = f"{remote_pool.NEGOTIATOR_IDENTITY}@{settings.trust_domain}"
        token = self.token(
            settings, self.layout.pool_config, identity, remote_pool.NEGOTIATOR_AUTHZ
        )
        pilot_token.write(self.negotiator_token(), token)

    def token(
        self, settings: PoolSettings, config: str, identity: str, authz: tuple[str, ...]
    ) -> str:
        try:
            return pilot_token.create(
                settings, config, identity, authz, fresh=self.MINTS_IN_FRESH_CONTAINER
            )
        except RuntimeError as exc:
            raise AgentError(str(exc)) from None

    def negotiator_token(self) -> Path:
        """The lease negotiator's token for this export's schedd, in the lease's pool."""
        tokens = Path(self.pilot_holder.pool_local, "tokens.d")
        return tokens / remote_pool.negotiator_token_name(self.layout.name)

    def stop(self) -> Stopped:
        """Stop the schedd (see Pool.stop), then take the lease's negotiator's token back."""
        answer = super().stop()
        self.forget_negotiator_token()
        return answer

    def forget_negotiator_token(self) -> None:
        """Nothing of this export's domain stays trusted in the lease once it stopped."""
        if self.plan is not None and self.plan.lease:
            with contextlib.suppress(FileNotFoundError):
                self.negotiator_token().unlink()
