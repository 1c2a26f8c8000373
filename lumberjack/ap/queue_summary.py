"""The queue a person reads from a job_queue.log: clusters and procs with the attributes
that matter to a person, as `inspect` prints them. Access point only: the site agent
reads and writes the log (core/jobqueuelog.py) but never shows it to anyone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lumberjack.core.classad_text import int_or_none, unquote_string
from lumberjack.core.jobqueuelog import Ad, JobQueueLogError, key_kind, parse_key
from lumberjack.core.jobstatus import status_of

#: Attribute -> field of a proc's row.
_PROC_FIELDS = (
    ("Owner", "owner"),
    ("Cmd", "cmd"),
    ("Iwd", "iwd"),
    ("Managed", "managed"),
    ("ManagedManager", "managed_manager"),
    ("ExitCode", "exit_code"),
    ("QDate", "qdate"),
)


def display(expr: str | None) -> Any:
    """A value a person wants to see: int for integer literals, text for string literals
    (old ClassAd syntax, as the log holds it), otherwise the expression text itself."""
    if expr is None:
        return None
    number = int_or_none(expr)
    if number is not None:
        return number
    text = expr.strip()
    literal = unquote_string(text)
    return text if literal is None else literal


def _get(ads: tuple[Ad, ...], name: str) -> str | None:
    """The first of `ads` that has `name` decides (a proc's own value, else its cluster's:
    the schedd chains proc ads to their cluster ad)."""
    for ad in ads:
        value = ad.get(name)
        if value is not None:
            return value
    return None


def _args(ads: tuple[Ad, ...]) -> str | None:
    # "Arguments" is the current (V2) syntax; "Args" the old one. Both may exist.
    value = _get(ads, "Arguments")
    return value if value is not None else _get(ads, "Args")


def _status(number: Any) -> str:
    if isinstance(number, int):
        status = status_of(number)
        return status.title if status is not None else f"Unknown ({number})"
    return "Unknown" if number is None else str(number)


def _proc_row(cluster: int, proc: int, key: str, chain: tuple[Ad, ...]) -> dict[str, Any]:
    number = display(_get(chain, "JobStatus"))
    row: dict[str, Any] = {"id": f"{cluster}.{proc}", "key": key, "cluster": cluster}
    row.update(proc=proc, job_status=number, status=_status(number))
    for attr, out_name in _PROC_FIELDS:
        row[out_name] = display(_get(chain, attr))
    row["args"] = display(_args(chain))
    return row


def queue_summary(ads: Mapping[str, Ad]) -> dict[str, Any]:
    """Clusters and procs with the attributes that matter to a person.

    A proc's attribute is its own value, else its cluster ad's. Values are decoded when
    they are plain literals (``"/bin/echo"`` -> ``/bin/echo``, ``2`` -> 2) and left as
    expression text otherwise. Keys that are not clusters or procs (header, users,
    jobsets, cluster-private ads) are only counted.
    """
    cluster_ads: dict[int, Ad] = {}
    cluster_keys: dict[int, str] = {}
    procs: dict[int, list[tuple[int, str, Ad]]] = {}
    other = 0
    for key, ad in ads.items():
        try:
            kind = key_kind(key)
        except JobQueueLogError:
            kind = None
        if kind not in ("cluster", "proc"):
            other += 1
            continue
        number = parse_key(key)
        if kind == "cluster":
            cluster_ads[number.cluster] = ad
            cluster_keys[number.cluster] = key
        else:
            procs.setdefault(number.cluster, []).append((number.proc, key, ad))

    status_counts: dict[str, int] = {}
    clusters_out: list[dict[str, Any]] = []
    for cluster in sorted(set(cluster_ads) | set(procs)):
        base = cluster_ads.get(cluster)
        own = (base,) if base is not None else ()
        rows = [
            _proc_row(cluster, proc, key, (ad, *own))
            for proc, key, ad in sorted(procs.get(cluster, []), key=lambda p: p[:2])
        ]
        for row in rows:
            status_counts[row["status"]] = status_counts.get(row["status"], 0) + 1
        clusters_out.append(
            {
                "cluster": cluster,
                "key": cluster_keys.get(cluster),
                "num_procs": len(rows),
                "owner": display(_get(own, "Owner")),
                "cmd": display(_get(own, "Cmd")),
                "iwd": display(_get(own, "Iwd")),
                "args": display(_args(own)),
                "qdate": display(_get(own, "QDate")),
                "procs": rows,
            }
        )
    return {
        "num_clusters": len(clusters_out),
        "num_procs": sum(len(c["procs"]) for c in clusters_out),
        "num_other_ads": other,
        "status_counts": status_counts,
        "clusters": clusters_out,
    }
