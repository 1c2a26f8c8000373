"""Role "joined": an export joined to a lease runs only its own schedd (on the login node
or on the lease's head node: its placement), reporting to the lease's collector; its
pilots are the lease's (a new round of them when none is alive and jobs are idle),
shared with the lease's other exports, never cancelled by it.

Each joined export keeps its own trust domain and signing key, as a plain export has
(see joined_schedd_config): two tokens, one of each key, are all the lease
and the export know of each other, and stopping the export takes the lease's back.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from lumberjack.core.answers import Launched, Stopped
from lumberjack.core.contract import ExportLayout
from lumberjack.core.crashpoints import crash_point
from lumberjack.site import pilot_token
from lumberjack.site.files import AgentError, make_signing_key, read_plan
from lumberjack.site.job_queue import place_queue
from lumberjack.site.pools.lease import (
    JOINED_SCHEDD_AUTHZ,
    Lease,
    joined_identity,
    release_request,
)
from lumberjack.site.pools.pool import Pool, Role, make_local_dirs
from lumberjack.site.remote_pool import PoolSettings, pool_config

#: The lease negotiator's identity at a joined schedd (`negotiator@<export domain>`, a
#: token of the export's key) and what it allows: negotiating, nothing else.
NEGOTIATOR_IDENTITY = "negotiator"
NEGOTIATOR_AUTHZ = ("NEGOTIATOR",)
#: The file names of those tokens: in the export's pool (for its schedd) and in the
#: lease's (for its negotiator, one per joined export).
JOINED_TOKEN = "lease"
NEGOTIATOR_TOKEN_PREFIX = "joined-"


def negotiator_token_name(export: str) -> str:
    return f"{NEGOTIATOR_TOKEN_PREFIX}{export}"


class Joined(Role):
    """A schedd in a lease's pool."""

    @property
    def pilot_holder(self) -> ExportLayout:
        return ExportLayout(self.pool.need_plan().lease or "")

    def lease(self) -> Pool:
        """The lease, which must run (placed as this export is)."""
        lease = self.pilot_holder
        plan = read_plan(lease)
        placement = self.pool.placement
        if plan is None or not placement.lease_runs(lease):
            raise AgentError(
                f"{lease.name} does not run at the site; see `condor_lumberjack lease status`"
            )
        return Pool(lease, plan, type(placement), Lease)

    def settings(self) -> PoolSettings:
        """See the placement's `joined_settings`."""
        return self.pool.placement.joined_settings(self.lease().settings())

    def request(self) -> Path:
        """The export's join request in the lease's `joined/` (placement "allocation")."""
        return Path(self.pilot_holder.joined, self.layout.name)

    def launch(self) -> Launched:
        """Place the queue and start (or have the lease's head start) only a schedd
        reporting to the lease's collector; a round of the lease's pilots when none is
        alive and jobs wait."""
        pool = self.pool
        lease = self.lease()
        if release_request(self.request()).exists():
            raise AgentError(f"{self.layout.name} has left {lease.layout.name}; fetch it")
        pool.prepare()
        lease_settings = lease.settings()
        settings = pool.placement.joined_settings(lease_settings)
        placed = place_queue(self.layout, settings.site_user, settings.trust_domain)
        crash_point("joined.after-place")
        started, pilots = pool.placement.join(lease, lease_settings)
        return Launched(placed, started, pilots, lease=lease.layout.name)

    def advertise_token(self, lease: Pool, lease_settings: PoolSettings) -> None:
        """The export's own signing key, and its schedd's token of the lease's key (to
        advertise to the lease's collector)."""
        layout = self.layout
        make_local_dirs(layout, "log", "lock", "run", "execute")
        make_signing_key(Path(layout.pool_local, "passwords.d", "POOL"))
        identity = joined_identity(layout.name, lease_settings.trust_domain)
        token = self.token(lease_settings, lease.layout.pool_config, identity, JOINED_SCHEDD_AUTHZ)
        pilot_token.write(Path(layout.pool_local, "tokens.d", JOINED_TOKEN), token)

    def negotiator_token_of(self, settings: PoolSettings) -> None:
        """The lease negotiator's token of the export's key (to negotiate with its schedd)."""
        identity = f"{NEGOTIATOR_IDENTITY}@{settings.trust_domain}"
        token = self.token(settings, self.layout.pool_config, identity, NEGOTIATOR_AUTHZ)
        pilot_token.write(self.negotiator_token(), token)

    def token(
        self, settings: PoolSettings, config: str, identity: str, authz: tuple[str, ...]
    ) -> str:
        try:
            fresh = self.pool.placement.MINTS_IN_FRESH_CONTAINER
            return pilot_token.create(settings, config, identity, authz, fresh=fresh)
        except RuntimeError as exc:
            raise AgentError(str(exc)) from None

    def negotiator_token(self) -> Path:
        """The lease negotiator's token for this export's schedd, in the lease's pool."""
        tokens = Path(self.pilot_holder.pool_local, "tokens.d")
        return tokens / negotiator_token_name(self.layout.name)

    def stop(self) -> Stopped:
        """Stop the schedd (or have the lease's head stop it); the lease's negotiator's
        token of this export is taken back either way."""
        return self.pool.placement.leave()

    def forget_negotiator_token(self) -> None:
        """Nothing of this export's domain stays trusted in the lease once it stopped."""
        if self.pool.plan is not None and self.pool.plan.lease:
            with contextlib.suppress(FileNotFoundError):
                self.negotiator_token().unlink()


# ---- the joined schedd's config ------------------------------------------------------


def joined_schedd_config(settings: PoolSettings, lease_domain: str) -> str:
    """condor_config of a joined export's schedd: it reports to the lease's collector.

    Trust: like a flocking schedd, it stays in its own trust domain with its own
    signing key (as a plain export's pool), so nothing of one joined export is good at
    another's schedd. It advertises to the lease's collector with a token of the
    lease's key (tokens.d/lease, JOINED_SCHEDD_AUTHZ); the lease's negotiator reaches it
    with a token of this export's key (NEGOTIATOR_AUTHZ) and only that identity may
    negotiate. Claims on the lease's startds go through the match's claim session
    (SEC_ENABLE_MATCH_PASSWORD_AUTHENTICATION, on by default): the startds trust
    nothing of this domain. `settings` carry the lease's address and port."""
    if settings.domain:
        raise ValueError("a joined export keeps its own trust domain")
    negotiator = f"{NEGOTIATOR_IDENTITY}@{settings.trust_domain}"
    return pool_config(settings) + (
        "# Joined to a lease: only a schedd here; collector and negotiator are the lease's\n"
        f"# (trust domain {lease_domain}). Only the lease's negotiator, with a token of this\n"
        "# export's key, may negotiate: never by FS, which any process of the site account\n"
        "# passes.\n"
        "DAEMON_LIST = MASTER, SCHEDD\n"
        "USE_SHARED_PORT = FALSE\n"
        "SEC_NEGOTIATOR_AUTHENTICATION_METHODS = IDTOKENS\n"
        f"ALLOW_NEGOTIATOR = {negotiator}\n"
        "# The schedd and its master reach the lease's collector with their token only\n"
        "# (tokens.d/lease): the collector always knows them by that identity.\n"
        "SCHEDD.SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
        "MASTER.SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
    )
