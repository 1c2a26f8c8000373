"""What the idle jobs at the site ask of a slot, for the access point to match.

A job can become unmatchable after it left: an evicted job's RequestMemory may grow with
its MemoryUsage. The status answer carries, per distinct shape of the idle jobs (their
Requirements and requests, as the remote schedd's log holds them), how many and one
example; the access point evaluates them against the export's slot ad with HTCondor's
ClassAd library (ap/matchmaking.py), treating them as the site's word: checked, capped.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from typing import Any

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.answers import IdleShape
from lumberjack.core.jobstatus import JobStatus, status_of

#: Attributes of a job its match depends on (MemoryUsage: RequestMemory may read it).
SHAPE_ATTRS = (
    "Requirements", "RequestCpus", "RequestMemory", "RequestDisk", "RequestGPUs",
    "MemoryUsage", "DiskUsage",
)  # fmt: skip
MAX_SHAPES = 20
MAX_TEXT = 4000


def idle_shapes(ads: dict[str, jql.Ad]) -> list[IdleShape]:
    """Distinct shapes of the idle procs: {"attrs": {name: text}, "jobs": n, "example": id}."""
    clusters = {
        jql.parse_key(key).cluster: ad for key, ad in ads.items() if jql.key_kind(key) == "cluster"
    }
    shapes: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc":
            continue
        if status_of(ad.get("JobStatus") or JobStatus.IDLE) != JobStatus.IDLE:
            continue
        job = jql.parse_key(key)
        cluster = clusters.get(job.cluster)
        attrs = {}
        for name in SHAPE_ATTRS:
            text = ad.get(name) or (cluster.get(name) if cluster is not None else None)
            if text is not None and len(text) <= MAX_TEXT:
                attrs[name] = text
        shape = tuple(sorted(attrs.items()))
        if shape not in shapes:
            if len(shapes) >= MAX_SHAPES:
                continue
            shapes[shape] = {"attrs": attrs, "jobs": 0, "example": f"{job.cluster}.{job.proc}"}
        shapes[shape]["jobs"] += 1
    return [IdleShape(**shape) for shape in shapes.values()]
