"""The site agent: the part of lumberjack that runs ON the HPC login node.

The access point ships it as a zipapp (agent.pyz, see agent_zipapp.py) next to the
bundle, so nothing but python3 (>= 3.9) and the profile's container runtime
(apptainer, singularity, podman-hpc; or none, with a shipped HTCondor release) must
exist at the site. It acts on one export directory (see core/contract.ExportLayout) and
prints its answer on stdout, one JSON object of the type core/answers.py gives each
command (encoded by the one codec, core/records.encode); errors are answers.Failed
({"error": "..."}) with a non-zero exit code.

    python3 agent.pyz launch EXPORT_DIR    place the queue, start the pool, submit pilots
    python3 agent.pyz status EXPORT_DIR    jobs by status, pilots, pool running or not
    python3 agent.pyz status DIR DIR ...   the same for several exports, in one process
                                           (answers.Statuses)
    python3 agent.pyz stop   EXPORT_DIR    condor_off -schedd, cancel pilots, stop the pool
    python3 agent.pyz remove EXPORT_DIR    delete the export directory (pool must be down)
    python3 agent.pyz act    EXPORT_DIR    the local queue's commands (queue-actions.json)
                                           on the jobs' copies: condor_rm, condor_hold,
                                           condor_release, condor_qedit

    python3 agent.pyz lease-start  LEASE_DIR   start a lease's collector + negotiator, pilots
    python3 agent.pyz lease-extend LEASE_DIR   one more round of the lease's pilots
    python3 agent.pyz lease-status LEASE_DIR   pilots, startds and joined schedds
    python3 agent.pyz lease-stop   LEASE_DIR   cancel the lease's pilots, stop its pool

`launch` reads EXPORT_DIR/launch.json (a LaunchPlan, written by the access point and
only read here; what the agent learns goes to its own files). Every command is
idempotent; `launch` never puts a queue in place again once a schedd has started on it
(that could run a job twice), and submits pilots only when idle jobs are left and no
pilot of this export is queued or running. This module only dispatches: each kind of
pool (a schedd on the login node, in the allocation, a lease, an export joined to one)
is one class in lumberjack/site/pools/.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.answers import Answer, Failed, Status, Statuses
from lumberjack.core.contract import ContractError, ExportLayout, PilotState
from lumberjack.core.records import encode
from lumberjack.site.batch import BatchError, BatchSystem, get_batch_system
from lumberjack.site.files import AgentError, read_plan
from lumberjack.site.pools import Lease, Pool, lease_for, pool_for
from lumberjack.site.pools.pool import query_pilots
from lumberjack.site.processes import running_masters

#: What a command may fail with: its one-line message becomes {"error": ...}.
FAILURES = (AgentError, BatchError, ContractError, jql.JobQueueLogError, OSError, ValueError)

COMMANDS: dict[str, Callable[[Pool], Answer]] = {
    "launch": lambda pool: pool.launch(),
    "status": lambda pool: pool.status(),
    "stop": lambda pool: pool.stop(),
    "remove": lambda pool: pool.remove(),
    "act": lambda pool: pool.act(),
}
LEASE_COMMANDS: dict[str, Callable[[Lease], Answer]] = {
    "lease-start": lambda pool: pool.start(),
    "lease-extend": lambda pool: pool.extend(),
    "lease-status": lambda pool: pool.lease_status(),
    "lease-stop": lambda pool: pool.lease_stop(),
}


def run(command: str, root: str) -> Answer:
    """One command on one export's (or lease's) directory."""
    layout = ExportLayout(root)
    plan = read_plan(layout)
    if command in LEASE_COMMANDS:
        return LEASE_COMMANDS[command](lease_for(layout, plan))
    return COMMANDS[command](pool_for(layout, plan))


def status_many(
    roots: list[str],
    *,
    query: Callable[[BatchSystem, list[str]], dict[str, PilotState]] = query_pilots,
    masters: set[str] | None = None,
) -> Statuses:
    """`status` of several exports in one process (sync asks for every export of a site
    at once): the pilots of all of them asked of each batch system in one query, /proc
    read once for the pools' masters. An export that cannot answer gets its error.
    `query` and `masters` are the seams where the agent meets a batch system and
    running daemons (the unit tests' site gives its own)."""
    pools: dict[str, Pool | Exception] = {}
    wanted: dict[str, set[str]] = {}
    for root in roots:
        try:
            layout = ExportLayout(root)
            pool = pools[root] = pool_for(layout, read_plan(layout))
            if pool.plan is not None:
                jobs = Pool(pool.pilot_holder, pool.plan).submitted()
                wanted.setdefault(pool.plan.batch_system, set()).update(jobs)
        except FAILURES as exc:
            pools[root] = exc
    known: dict[str, PilotState] = {}
    for system, jobs in wanted.items():
        try:
            known.update(query(get_batch_system(system), sorted(jobs)))
        except BatchError:
            pass  # each export asks again on its own and reports the error
    masters = running_masters() if masters is None else masters
    answers: dict[str, Status] = {}
    errors: dict[str, str] = {}
    for root, pool in pools.items():
        if isinstance(pool, Exception):
            errors[root] = str(pool)
            continue
        try:
            answers[root] = pool.status(known, masters)
        except FAILURES as exc:
            errors[root] = str(exc)
    return Statuses(answers, errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.pyz", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=(*COMMANDS, *LEASE_COMMANDS))
    parser.add_argument("export_dir", nargs="+", help="one; several for status only")
    args = parser.parse_args(argv)
    # Everything the agent and the daemons it starts create is this account's alone.
    os.umask(0o077)
    roots = [os.path.abspath(root) for root in args.export_dir]
    if len(roots) > 1:
        if args.command != "status":
            parser.error(f"{args.command} acts on one export directory")
        print(encode(status_many(roots)))
        return 0
    try:
        result = run(args.command, roots[0])
    except FAILURES as exc:
        print(encode(Failed(str(exc))))
        return 1
    print(encode(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
