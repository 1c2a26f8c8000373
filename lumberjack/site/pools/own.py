"""Role "own": an export with a pool of its own (its schedd, collector and negotiator,
wherever its placement runs them) and pilots of its own while idle jobs are left.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from lumberjack.core.answers import Launched, Stopped
from lumberjack.core.crashpoints import crash_point
from lumberjack.site.job_queue import place_queue
from lumberjack.site.pools.pool import Role


class Own(Role):
    """An export's own pool: place the queue, start the pool, submit its pilots."""

    def launch(self) -> Launched:
        pool, placement = self.pool, self.pool.placement
        pool.prepare()
        placement.check_launch()
        settings = pool.settings()
        placed = place_queue(self.layout, settings.site_user, settings.trust_domain)
        crash_point("launch.after-place")
        started = placement.start(settings)
        crash_point("launch.after-pool")
        pilots = placement.submit_round(
            settings, placement.waiting(self.layout), lambda: [self.layout]
        )
        crash_point("launch.after-pilots")
        return Launched(placed, started, pilots)

    def stop(self) -> Stopped:
        return self.pool.placement.stop()
