"""DAGMan's view of a DAG, read from the files DAGMan itself writes, so that one DAG run
in a plain pool and through lumberjack can be compared node by node:

- the node status file (NODE_STATUS_FILE): each node's NodeStatus, its StatusDetails
  (job ids made neutral: they differ between pools) and its RetryCount;
- the nodes' log (`<dag>.nodes.log`): each node's user-log event types, attempt after
  attempt, as conformance_cases.event_sequence compares them;
- the rescue DAG (`<dag>.rescue001`): the nodes it marks DONE.

Pure logic (the unit tier tests it); test_conformance_dag.py runs the DAG.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conformance_cases import event_sequence

#: A job id in DAGMan's words ("(12.0.0)", "12.0"): neutral, since pools number apart.
JOB_ID = re.compile(r"\b\d+\.\d+(\.\d+)?\b")
#: The node a submit event names: 25.x writes `DAGNodeName = "A"` in its notes
#: (older DAGMan wrote "DAG Node: A").
NODE_NOTE = re.compile(r'DAGNodeName = "([^"]+)"|DAG Node: (\S+)')


def node_status(path: Path) -> dict[str, dict[str, Any]]:
    """Node -> what the status file says of it (its last update)."""
    import classad2

    nodes = {}
    for ad in classad2.parseAds(path.read_text()):
        if ad.get("Type") != "NodeStatus":
            continue
        nodes[ad["Node"]] = {
            "NodeStatus": ad.get("NodeStatus"),
            "StatusDetails": JOB_ID.sub("J", str(ad.get("StatusDetails", ""))),
            "RetryCount": ad.get("RetryCount"),
        }
    return nodes


def rescue_done(path: Path) -> list[str]:
    """The nodes a rescue DAG marks DONE (sorted), [] without one."""
    if not path.is_file():
        return []
    return sorted(line.split()[1] for line in path.read_text().splitlines()
                  if line.startswith("DONE "))  # fmt: skip


def node_events(log: Path) -> dict[str, list[str]]:
    """Node -> its jobs' event types in order (one job per attempt), by the "DAG Node"
    note of each job's submit event."""
    import htcondor2

    node_of: dict[int, str] = {}
    per_job: dict[int, list[str]] = {}
    with htcondor2.JobEventLog(str(log)) as events:
        for event in events.events(stop_after=0):
            kind = htcondor2.JobEventType(event.type)
            if kind == htcondor2.JobEventType.SUBMIT:
                found = NODE_NOTE.search(str(event.get("LogNotes", "")))
                if found:
                    node_of[event.cluster] = found.group(1) or found.group(2)
            per_job.setdefault(event.cluster, []).append(f"ULOG_{kind.name}")
    nodes: dict[str, list[str]] = {}
    for cluster in sorted(per_job):  # DAGMan submits a node's attempts one after another
        if cluster in node_of:
            nodes.setdefault(node_of[cluster], []).extend(event_sequence(per_job[cluster]))
    return nodes


def dag_view(directory: Path, dag: str) -> dict[str, Any]:
    """Everything compared of one DAG run in `directory` (the DAG job's ad aside)."""
    view: dict[str, Any] = {"(rescue DONE)": rescue_done(directory / f"{dag}.rescue001")}
    for node, status in node_status(directory / "nodes.status").items():
        for key, value in status.items():
            view[f"{node} {key}"] = value
    for node, events in node_events(directory / f"{dag}.nodes.log").items():
        view[f"{node} (events)"] = events
    for post in sorted(directory.glob("post-*.return")):
        view[f"({post.name})"] = post.read_text().strip()
    return view


#: An end, then a removal: only a job left in the queue after it ended can be removed.
ENDS = ("ULOG_JOB_TERMINATED", "ULOG_POST_SCRIPT_TERMINATED")


def without_late_aborts(view: dict[str, Any]) -> dict[str, Any]:
    """The view with every aborted event that follows a node job's end left out: the
    known difference test_conformance_dag pins on its own (see there)."""
    kept = dict(view)
    for name, events in view.items():
        if name.endswith("(events)") and events:
            kept[name] = [
                e
                for i, e in enumerate(events)
                if not (e == "ULOG_JOB_ABORTED" and i and events[i - 1] in ENDS)
            ]
    return kept  # fmt: skip


def dag_differences(reference: dict[str, Any], lumberjack: dict[str, Any]) -> list[str]:
    """One line per value of DAGMan's view that differs: what, and both values."""
    return [
        f"{name}: reference pool {reference.get(name)!r}, through lumberjack "
        f"{lumberjack.get(name)!r}"
        for name in dict.fromkeys([*reference, *lumberjack])
        if reference.get(name) != lumberjack.get(name)
    ]
