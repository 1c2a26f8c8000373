"""The conformance suite's HTCondor client, run as a process of its own against one
pool (its CONDOR_CONFIG in the environment, authenticated as the submitter), so that
both runs are submitted and read by the same code:

    python conformance_client.py submit '{"case": "/dir/of/case", ...}'
        -> {"case": cluster, ...}: each job.sub submitted from its directory (relative
           paths, `executable` included, resolve there), its own queue statement
    python conformance_client.py snapshot '{"clusters": [..], "attrs": [..]}'
        -> {"cluster": [{"ad": {..}, "in_queue": bool}, ..], ..}
    python conformance_client.py remove '[cluster, ..]'
        -> {"removed": N}: the clusters' jobs left in the queue (held, left in queue)
    python conformance_client.py remove_where '"constraint"'
        -> {"removed": N}: the jobs the constraint matches (a DAG's held node)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import htcondor2


def schedd() -> htcondor2.Schedd:
    collector = htcondor2.Collector()
    return htcondor2.Schedd(
        collector.locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )


def submit(cases: dict[str, str]) -> dict[str, int]:
    """Each case's job.sub, as condor_submit would from its directory."""
    clusters = {}
    for name, directory in cases.items():
        os.chdir(directory)
        description = htcondor2.Submit(Path("job.sub").read_text())
        clusters[name] = schedd().submit(description).cluster()
    return clusters


def plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # an expression: its text


def snapshot(clusters: list[int], attrs: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each cluster's jobs: the queue's ad where the job is still queued, else the
    history's (asked again while the schedd writes its history file)."""
    the_schedd = schedd()
    found: dict[str, list[dict[str, Any]]] = {}
    for cluster in clusters:
        constraint = f"ClusterId == {cluster}"
        queued = {ad["ProcId"]: ad for ad in the_schedd.query(constraint, attrs)}
        for attempt in range(10):
            try:
                old = list(the_schedd.history(constraint, attrs, match=-1))
                break
            except htcondor2.HTCondorException:
                if attempt == 9:
                    raise
                time.sleep(0.5)
        done = {ad["ProcId"]: ad for ad in old if ad["ProcId"] not in queued}
        jobs = [(ad, True) for ad in queued.values()] + [(ad, False) for ad in done.values()]
        found[str(cluster)] = [
            {"ad": {key: plain(ad.get(key)) for key in attrs if key in ad}, "in_queue": queue}
            for ad, queue in sorted(jobs, key=lambda pair: pair[0]["ProcId"])
        ]
    return found


def main(argv: list[str]) -> int:
    command, argument = argv[0], json.loads(argv[1])
    if command == "submit":
        print(json.dumps(submit(argument)))
    elif command == "remove":
        constraint = " || ".join(f"ClusterId == {int(c)}" for c in argument) or "false"
        result = schedd().act(htcondor2.JobAction.Remove, constraint)
        print(json.dumps({"removed": result.get("TotalSuccess", 0)}))
    elif command == "remove_where":  # the schedd refuses an action that matches no job
        the_schedd = schedd()
        ids = [f"{ad['ClusterId']}.{ad['ProcId']}"
               for ad in the_schedd.query(str(argument), ["ClusterId", "ProcId"])]  # fmt: skip
        if ids:
            the_schedd.act(htcondor2.JobAction.Remove, ids)
        print(json.dumps({"removed": len(ids)}))
    elif command == "snapshot":
        print(json.dumps(snapshot(argument["clusters"], argument["attrs"])))
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
