"""Conformance, DAGMan's view (issue 34): one DAG (conformance_dags/nodes) run by
condor_dagman at home in a plain pool (reference_pool.py) and, from another copy, at the
access point, whose node jobs opt into one lease (`MY.LumberjackLease`) and run at the
testbed site: `condor_lumberjack sync` rounds alone (as root, as cron runs it) export
each node's job once it waits idle, ship, run, fetch and import it, so a retried or a
later node is a later export. Then what DAGMan saw is compared (conformance_dag.py):
each node's status and retries in the node status file, each node's events in the
nodes' log, what its POST script was given as $RETURN, the rescue DAG, and the DAG
job's own end (exit code, DAG_Status, nodes done and failed).

Node C is held at its exit: the runner removes it in each pool once it is held, as a
user would (DAGMan sees held, then aborted); E's ABORT-DAG-ON ends the DAG after that.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import testbed
from conformance_dag import dag_differences, dag_view, without_late_aborts
from journey import SITE_BASE, chown_tree, last_json, lumberjack, stop_at_site, submitter_command
from reference_pool import reference_pool
from test_conformance import client

pytestmark = pytest.mark.integration

DAG_DIR = Path(__file__).resolve().parent / "conformance_dags" / "nodes"
DAG = "nodes.dag"
#: Held at its exit; removed by the runner, as a user would.
HELD_NODE = "C"
DAG_ATTRS = ["JobStatus", "ExitCode", "ExitBySignal", "DAG_Status", "DAG_NodesDone",
             "DAG_NodesFailed", "ProcId", "ClusterId"]  # fmt: skip
#: Seconds: until both DAGs have left their queues; pause between sync rounds.
DAG_TIMEOUT, ROUND_PAUSE = 900, 3


@dataclass
class DagRuns:
    reference: dict[str, Any] = field(default_factory=dict)
    lumberjack: dict[str, Any] = field(default_factory=dict)
    exports: list[str] = field(default_factory=list)
    seconds: float = 0.0


def copy_dag(into: Path, lease: str) -> Path:
    """A fresh copy of the DAG's directory, the submitter's, its nodes given `lease`."""
    shutil.copytree(DAG_DIR, into)
    with open(into / DAG, "a") as dag:
        dag.write(f'VARS ALL_NODES lease="{lease}"\n')
    chown_tree(into)
    return into


def submit_dag(pool: testbed.Pool, directory: Path) -> int:
    """condor_submit_dag in the pool's own host, as the submitter: the DAG's cluster."""
    result = submitter_command(
        f"cd '{directory}' && condor_submit_dag -batch-name nodes {DAG}", pool
    )
    found = re.search(r"submitted to cluster (\d+)", result.stdout)
    assert found, f"condor_submit_dag: {result.stdout}{result.stderr}"
    return int(found.group(1))


def dag_job(env: dict[str, str], cluster: int) -> dict[str, Any] | None:
    """The DAG job's ad once it has left the queue, else None (also when the schedd did
    not answer in time: the access point's is shared, and busy, on the testbed)."""
    try:
        jobs = client(env, "snapshot", {"clusters": [cluster], "attrs": DAG_ATTRS})
    except AssertionError:
        return None
    (job,) = jobs[str(cluster)] or [{"in_queue": True}]
    return None if job["in_queue"] else job["ad"]


def remove_held_node(env: dict[str, str], cluster: int) -> None:
    """condor_rm of the DAG's held node, once held (a schedd too busy: next round)."""
    try:
        client(env, "remove_where", f'DAGManJobId == {cluster} && DAGNodeName == '
                                    f'"{HELD_NODE}" && JobStatus == 5')  # fmt: skip
    except AssertionError:
        pass


def lease_exports(lease: str) -> list[str]:
    listed = last_json(lumberjack("leases", "--json"))["leases"]
    return [name for entry in listed if entry["name"] == lease for name in entry["exports"]]


@pytest.fixture(scope="module")
def dag_runs(access_point: testbed.Pool, site: Any) -> Iterator[DagRuns]:
    started = time.monotonic()
    work = testbed.testbed_dir() / "work" / f"conformance-dag-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True, mode=0o755)
    saved = os.environ.get("LUMBERJACK_STATE_DIR")
    os.environ["LUMBERJACK_STATE_DIR"] = str(testbed.root_state_dir(work.name))
    lease = f"dag-{uuid.uuid4().hex[:6]}"
    ap_env = testbed.ACCESS_POINT.client_env_of(testbed.SUBMITTER)
    result = DagRuns()
    clusters: dict[str, int] = {}
    try:
        lumberjack("lease", "create", lease, "--site", "testbed", "--nodes", "1", "--cores",
                   "2", "--walltime", "20m", "--idle-shutdown", "15m", "--owner",
                   testbed.SUBMITTER, "--json")  # fmt: skip
        with reference_pool() as pool:
            ref_env = pool.client_env_of(testbed.SUBMITTER)
            ref_dir = copy_dag(work / "reference", "reference")
            lj_dir = copy_dag(work / "lumberjack", lease)
            clusters = {"reference": submit_dag(pool, ref_dir),
                        "lumberjack": submit_dag(testbed.ACCESS_POINT, lj_dir)}  # fmt: skip
            ends: dict[str, dict[str, Any]] = {}
            envs = {"reference": ref_env, "lumberjack": ap_env}
            rounds = 0
            while len(ends) < 2:
                assert time.monotonic() - started < DAG_TIMEOUT, f"DAGs not done: {ends}"
                # As cron: a round that fails (a schedd too busy to answer on this shared
                # testbed) is followed by the next one.
                lumberjack("sync", "--json", check=False)
                rounds += 1
                for run, env in envs.items():
                    if run not in ends:
                        remove_held_node(env, clusters[run])
                        if (ad := dag_job(env, clusters[run])) is not None:
                            ends[run] = ad
                time.sleep(ROUND_PAUSE)
        result.exports = lease_exports(lease)
        for run, directory in (("reference", ref_dir), ("lumberjack", lj_dir)):
            view = dag_view(directory, DAG)
            ad = ends[run]
            view.update({f"(DAG job) {k}": v for k, v in ad.items()
                         if k not in ("ClusterId", "ProcId")})  # fmt: skip
            setattr(result, run, view)
        result.seconds = time.monotonic() - started
        print(f"DAG conformance: {rounds} sync rounds, exports {result.exports}, "
              f"{result.seconds:.0f} s")  # fmt: skip
        yield result
    finally:
        for name in lease_exports(lease):
            stop_at_site(name, f"{SITE_BASE}/{name}")
        lumberjack("lease", "shutdown", lease, "--json", check=False)
        if clusters.get("lumberjack"):
            client(ap_env, "remove_where", f"DAGManJobId == {clusters['lumberjack']} || "
                                           f"ClusterId == {clusters['lumberjack']}")  # fmt: skip
        if saved is None:
            os.environ.pop("LUMBERJACK_STATE_DIR", None)
        else:
            os.environ["LUMBERJACK_STATE_DIR"] = saved


def test_dagman_sees_its_nodes_as_in_a_plain_pool(dag_runs: DagRuns) -> None:
    reference = dag_runs.reference
    # The DAG did what it was written for, in the plain pool (else the comparison is moot).
    assert reference["(DAG job) ExitCode"] == 2, reference  # ABORT-DAG-ON E 2 RETURN 2
    assert reference["A RetryCount"] == 1 and reference["(post-B.return)"] == "3", reference
    assert reference["(rescue DONE)"] == ["A", "B"], reference
    problems = dag_differences(without_late_aborts(reference),
                               without_late_aborts(dag_runs.lumberjack))  # fmt: skip
    assert not problems, json.dumps(reference, indent=1) + "\n" + "\n".join(problems)


# Not strict: whether the sweep came before ABORT-DAG-ON's condor_rm depends on when
# the nodes came home, so the difference shows in most runs but not in every one.
@pytest.mark.xfail(
    strict=False,
    reason=(
        "known difference: an imported node job that completed stays in the local queue "
        "(no shadow ends it) until the schedd's next periodic policy pass; the "
        "condor_rm of ABORT-DAG-ON then removes it and the schedd writes an aborted event "
        "after its terminated one. In a plain pool the job has left the queue already."
    ),
)
def test_no_node_is_removed_after_it_ended(dag_runs: DagRuns) -> None:
    problems = [line for line in dag_differences(dag_runs.reference, dag_runs.lumberjack)
                if "(events)" in line]  # fmt: skip
    assert not problems, "\n".join(problems)


def test_each_later_node_was_a_later_export(dag_runs: DagRuns) -> None:
    # A, B, C, D at first; A's retry; then E: each exported by sync once idle.
    assert len(dag_runs.exports) >= 3, dag_runs.exports
