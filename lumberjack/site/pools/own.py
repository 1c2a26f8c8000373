"""Role "own": an export with a pool of its own (its schedd, collector and negotiator,
wherever its placement runs them) and pilots of its own while idle jobs are left.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from typing import Any

from lumberjack.core.crashpoints import crash_point
from lumberjack.site.job_queue import place_queue
from lumberjack.site.pools.pool import Role


class Own(Role):
    """An export's own pool: place the queue, start the pool, submit its pilots."""

    def launch(self) -> dict[str, Any]:
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
        return {"place": placed, "pool": started, "pilots": pilots}

    def stop(self) -> dict[str, Any]:
        return self.pool.placement.stop()
