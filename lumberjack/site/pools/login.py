"""Schedd placement "login": schedd, collector and negotiator on the login node, in the
profile's container runtime; the pilots' startds report to them.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from lumberjack.core.answers import Launched
from lumberjack.core.crashpoints import crash_point
from lumberjack.site.files import make_private
from lumberjack.site.job_queue import place_queue
from lumberjack.site.pools.base import Pool


class LoginPool(Pool):
    """The whole pool on the login node; pilots while idle jobs are left."""

    def launch(self) -> Launched:
        self.prepare()
        settings = self.settings()
        placed = place_queue(self.layout, settings.site_user, settings.trust_domain)
        crash_point("launch.after-place")
        pool = self.start_pool(settings)
        make_private(self.layout.root)  # the daemons' first files (logs, certificates, addresses)
        crash_point("launch.after-pool")
        pilots = self.submit_pilots(settings)
        crash_point("launch.after-pilots")
        return Launched(placed, pool, pilots)
