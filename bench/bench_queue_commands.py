"""What the queue's commands and condor_q's attributes add to each `sync` round of an
export of N jobs: the full query of the local jobs (edits are changes of any
attribute), the decisions, and the attribute edits (`show`), on the testbed's local
schedd, twice (the first round writes every attribute, later ones only changes).

    CONDOR_CONFIG=... PYTHONPATH=containers/testbed python bench/bench_queue_commands.py N

Not part of bench/run.py's targets: a measurement to read, no goal to hold.
"""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import htcondor2
import journey
import testbed

from lumberjack.ap import home_queue
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core.answers import RemoteJob, Status
from lumberjack.state import queue_commands


def main(count: int) -> None:
    base = testbed.testbed_dir() / "work" / f"bench-qc-{os.getpid()}"
    base.mkdir(mode=0o755)
    os.chown(base, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    cluster = journey.submit(journey.make_job_dir(base, "jobs"), count)
    schedd = LocalSchedd()
    raw = schedd._schedd
    try:
        export_dir = base / "export"
        export_dir.mkdir()
        os.chown(export_dir, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
        try:
            raw.export_jobs([str(cluster)], str(export_dir), "/nonexistent/spool")
        except htcondor2.HTCondorException:  # answered after the bindings' 20 s
            pass
        managed = f'ClusterId == {cluster} && Managed == "External"'
        while len(raw.query(managed, ["ProcId"])) < count:
            time.sleep(1)
        jobs = [f"{cluster}.{proc}" for proc in range(count)]
        record = SimpleNamespace(clusters=[cluster], jobs=jobs, site="testbed", name="bench")
        remote = {job: RemoteJob(2, RemoteHost='"slot1@c1"') for job in jobs}
        status = Status({"running": count}, count, False, False, 0, 0, None, True, True, {},
                        remote_jobs=remote)  # fmt: skip
        memory = home_queue.Forwarded()
        for round_ in (1, 2):
            started = time.monotonic()
            ads = queue_commands.local_jobs(schedd, record)
            queried = time.monotonic()
            home_queue.plan_round(ads, memory, "testbed")
            decided = time.monotonic()
            edits = queue_commands.show(schedd, record, status)
            shown = time.monotonic()
            print(
                f"round {round_}: {count} jobs: query {queried - started:.2f} s, decisions "
                f"{decided - queried:.3f} s, condor_q attributes {shown - decided:.2f} s "
                f"({edits} edits); memory {len(str(memory.to_json()))} bytes"
            )
    finally:
        raw.unexport_jobs([str(cluster)])
        raw.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
