"""Placement "allocation": no daemon on the login node. The first node of a pilot (the
head, chosen by an atomic mkdir) runs the pool inside the site image with SPOOL on the
shared filesystem, mints the pilots' token and writes the collector's address to
`collector_file`; every node (the head too) waits for that address and runs a startd.
When the allocation ends the queue stays in SPOOL and the next pilot's head resumes it
(jobs that were running come back idle).

For each role: an export's own pool runs on the head of its one pilot; a lease's head
runs its collector and negotiator, announces them in the lease's directory, and runs
the schedd of every export that joined (a request in `joined/`) until that export
leaves (a release request, acknowledged by the head). `status` reads the spool's
job_queue.log; `stop` waits until nobody holds the spool, so that `fetch` may copy it.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import replace
from pathlib import Path

from lumberjack.core.answers import (
    Acted,
    LeaseExtended,
    LeaseStatus,
    PilotsSubmitted,
    PoolStarted,
    Status,
    Stopped,
)
from lumberjack.core.contract import ALIVE, ExportLayout, PilotState
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.site_python import PYTHON3
from lumberjack.site import gather_logs, queue_commands
from lumberjack.site.batch import BatchError, BatchSystem
from lumberjack.site.files import AgentError, make_private, make_signing_key, write_whole
from lumberjack.site.job_container import write_wrapper
from lumberjack.site.job_queue import (
    expire_leases,
    held_report,
    job_counts,
    placed,
    queue_ads,
)
from lumberjack.site.pools.joined import joined_schedd_config
from lumberjack.site.pools.lease import HOLDING, release_ack, release_request
from lumberjack.site.pools.pool import (
    Placement,
    Pool,
    Queues,
    Waiting,
    all_finished,
    login_address,
    make_local_dirs,
)
from lumberjack.site.remote_pool import (
    PILOT_AUTHZ,
    RETIRE_POLL_S,
    PoolSettings,
    node_script,
    pilot_config,
    pool_config,
)
from lumberjack.site.templating import render

#: The directory of the head's template files (package data, shipped in the zipapp).
TEMPLATES = "templates"

#: How long a joined export's `stop` waits for the head to stop its schedd and acknowledge.
RELEASE_TIMEOUT_S = 300


def resumable(counts: dict[str, int]) -> int:
    """Jobs the next pilot runs: idle ones, and those the log still says are running
    while no pilot lives (their schedd died with its allocation; the next one makes
    them idle again when it reads the log)."""
    return counts.get("idle", 0) + counts.get("running", 0)


class InAllocation(Placement):
    """The pool on the head node of a pilot; the queues stay in SPOOL between them."""

    MINTS_IN_FRESH_CONTAINER = True  # nothing of the lease or the export runs here

    def settings(self) -> PoolSettings:
        # The pool's address and port are the head node's, known there only (head_config).
        pool = self.pool
        plan = replace(pool.need_plan(), address=login_address(), port=1)
        return replace(pool.settings_of(plan), port=0)

    def write_pilot_files(self, settings: PoolSettings) -> None:
        pool = self.pool
        plan = pool.need_plan()
        layout, spec = self.layout, plan.spec
        make_local_dirs(layout, "log", "execute")
        role = pool.role  # a lease's head runs its central manager and joined schedds
        Path(layout.pool_config).write_text(head_config(settings) + role.config_lines(settings))
        tokens = Path(layout.pilot_tokens)
        tokens.mkdir(parents=True, exist_ok=True)
        os.chmod(tokens, 0o700)
        Path(layout.pilot_config).write_text(allocation_pilot_config(settings))
        write_wrapper(settings.layout.pilots, settings.runtime_name, settings.image)
        node = allocation_node_script(
            settings, batch=pool.batch, cores=spec.cores_per_node,
            memory_mb=spec.memory_per_node_mb, walltime_s=spec.walltime_s,
            retire_s=spec.retire_s, login_address=settings.address,
            token_lifetime_s=plan.token_lifetime_s, **role.head_options(),
        )  # fmt: skip
        pool.write_node_script(node)
        os.chmod(layout.node_script, 0o755)

    def check_launch(self) -> None:
        if self.pool.need_plan().pilots != 1:
            raise AgentError("the schedd runs inside the allocation: one pilot at a time")

    def start(
        self, settings: PoolSettings, config: str | None = None, ready: Path | None = None
    ) -> PoolStarted:
        """Nothing starts here: the head of the next pilot starts the pool."""
        return PoolStarted(False, placement="allocation")

    def waiting(self, layout: ExportLayout) -> Waiting:
        return lambda: resumable(job_counts(layout))

    def submit_round(
        self, settings: PoolSettings, waiting: Waiting, queues: Queues
    ) -> PilotsSubmitted:
        """A round when none is alive (one at a time holds the pool). The jobs a dead
        round's schedds left running get their job lease expired first, so each schedd
        the new head starts makes them idle at once instead of reconnecting for long."""
        pool = self.pool
        if not pool.alive_pilots():
            for queue in queues():
                expire_leases(queue)
        return pool.submit_pilots(settings, waiting=waiting)

    def status(self, known: dict[str, PilotState] | None, masters: set[str] | None) -> Status:
        """The log's jobs (a dead allocation's "running" ones are idle again) and the
        pilots: while one lives it holds the pool; `known` and `masters` are not needed."""
        pool = self.pool
        ads = queue_ads(self.layout)
        counts = job_counts(self.layout, ads)
        try:
            states = Pool(pool.pilot_holder, pool.plan).pilot_states()
            pilots = {k: str(v) for k, v in states.items()}
            held = any(state in ALIVE for state in states.values())
        except BatchError as exc:
            pilots, held = {"error": str(exc)}, True
        interrupted = 0
        if not held and counts.get("running"):
            # No pilot holds the spool: "running" in the log is a schedd that died with
            # its allocation; the next one starts those jobs again.
            interrupted = counts.pop("running")
            counts["idle"] = counts.get("idle", 0) + interrupted
        return Status(
            jobs=counts, total=sum(counts.values()), finished=all_finished(counts),
            **held_report(ads, pool.release_window_s(), time.time()),
            pool_running=held, placement="allocation", interrupted=interrupted,
            placed=placed(self.layout), pilots=pilots,
            remote_jobs=queue_commands.remote_jobs(ads),
        )  # fmt: skip

    def act(self) -> Acted:
        """The schedd runs on a compute node, out of the login node's reach."""
        raise AgentError(
            "the local queue's commands reach a schedd on the login node only "
            "(this export's runs in the allocation); they take effect at import"
        )

    def stop(self) -> Stopped:
        """Cancel the pilots and wait until the batch system reports them gone: then no
        schedd holds the spool (its log final) and it can be copied."""
        pool = self.pool
        cancelled = pool.cancel_pilots()
        pool.wait_pilots_gone("the spool is not final yet")
        return Stopped(bool(cancelled), cancelled,
                       gather_logs.gather_safely(self.layout.root, pool.plan))  # fmt: skip

    # ---- a lease's central manager on the head of each round -------------------------

    def start_central_manager(self, settings: PoolSettings) -> PoolStarted:
        """Nothing starts here: the directory exports join through is made, and the
        lease's signing key (an export that joins before the first round starts gets its
        schedd's token of it at once)."""
        Path(self.layout.joined).mkdir(mode=0o700, exist_ok=True)
        make_local_dirs(self.layout, "log", "execute")
        make_signing_key(Path(self.layout.pool_local, "passwords.d", "POOL"))
        return PoolStarted(False, placement="allocation")

    def stop_central_manager(self) -> None:
        """The heads ended with their pilots: nothing runs on the login node."""

    def extend(self) -> LeaseExtended:
        """The next round, once the current one is gone (two heads would run two
        schedds on one queue)."""
        pool = self.pool
        alive = pool.alive_pilots()
        if alive:
            raise AgentError(
                f"pilot {', '.join(alive)} of {self.layout.name} still holds its pool "
                '(placement "allocation": one round at a time); extend once it has ended'
            )
        return LeaseExtended(pool.role.submit_round(pool.settings()))

    def lease_status(self) -> LeaseStatus:
        """Pilots, the collector the running round's head announced, the exports joined."""
        try:
            states = self.pool.pilot_states()
        except BatchError as exc:
            states, error = {}, str(exc)
        else:
            error = ""
        pilots = {k: str(v) for k, v in states.items()} if not error else {"error": error}
        holding = [job for job, state in states.items() if state in HOLDING]
        owner, collector = head_announced(self.layout)
        return LeaseStatus(
            placement="allocation", pilots=pilots,
            pilots_alive=bool(error) or any(s in ALIVE for s in states.values()),
            pool_running=owner in holding, collector=collector if owner in holding else "",
            joined=self.joined_states(),
        )  # fmt: skip

    def joined_states(self) -> dict[str, str]:
        """Each export that joined: "joined", "leaving" (release asked) or "released"."""
        states = {}
        for request in sorted(Path(self.layout.joined).glob("*")):
            if "~" in request.name:
                continue
            leaving = release_request(request).exists()
            done = release_ack(request).exists()
            states[request.name] = "released" if done else "leaving" if leaving else "joined"
        return states

    # ---- an export's schedd on the head of its lease's rounds --------------------------

    def lease_runs(self, lease: ExportLayout) -> bool:
        return Path(lease.joined).is_dir()

    def joined_settings(self, lease_settings: PoolSettings) -> PoolSettings:
        """The export's own, its trust domain too (see joined.py); the address is the
        head's."""
        return self.settings()

    def join(
        self, lease: Pool, lease_settings: PoolSettings
    ) -> tuple[PoolStarted, PilotsSubmitted]:
        """Config, start script and join request in place for the lease's heads; a round
        of the lease's pilots when none is alive and jobs wait."""
        role, layout = self.pool.role, self.layout
        settings = self.settings()
        # The two tokens, minted here (short commands, no daemon): see joined.py. The
        # first also makes the pool's local directories and the export's signing key.
        role.advertise_token(lease, lease_settings)
        config = joined_alloc_schedd_config(settings, lease_settings.trust_domain)
        Path(layout.pool_config).write_text(config)
        role.negotiator_token_of(settings)
        Path(layout.schedd_script).write_text(schedd_script(settings))
        os.chmod(layout.schedd_script, 0o700)
        make_private(layout.root)
        write_whole(role.request(), layout.root + "\n")
        pilots = lease.role.submit_round(lease_settings, waiting=self.waiting(layout))
        return PoolStarted(False, placement="allocation"), pilots

    def leave(self) -> Stopped:
        """Ask the head to stop the schedd; wait for its acknowledgement while a round
        runs (a round that starts later never starts a released schedd)."""
        released = False
        if Path(self.pool.pilot_holder.joined).is_dir():
            write_whole(release_request(self.pool.role.request()), "")
            crash_point("joined.after-release-request")
            released = self.wait_released()
        self.pool.role.forget_negotiator_token()
        return Stopped(released, [], gather_logs.gather_safely(self.layout.root, self.pool.plan))

    def wait_released(self) -> bool:
        """True once the head acknowledged; False when no round runs (nothing to stop)."""
        ack = release_ack(self.pool.role.request())
        lease = Pool(self.pool.pilot_holder, self.pool.plan)
        deadline = time.monotonic() + RELEASE_TIMEOUT_S
        while not ack.exists():
            if not any(state in HOLDING for state in lease.pilot_states().values()):
                return False
            if time.monotonic() > deadline:
                raise AgentError(
                    f"the head of {self.pool.pilot_holder.name} did not release the schedd of "
                    f"{self.layout.name} in {RELEASE_TIMEOUT_S} s; the spool is not final yet"
                )
            time.sleep(1)
        return True


def head_announced(layout: ExportLayout) -> tuple[str, str]:
    """(pilot id, collector) the last head of `layout` announced; ("", "") for none."""
    try:
        words = Path(collector_file(layout)).read_text().split()
    except OSError:
        return "", ""
    return (words[0], words[1]) if len(words) == 2 else ("", "")


# ---- the head's configs and scripts ----------------------------------------------------

#: Environment node.sh sets on the head for head_config, and on every node for the startd.
HEAD_ADDRESS_ENV = "LJ_HEAD_ADDRESS"
HEAD_PORT_ENV = "LJ_HEAD_PORT"
HEAD_RUN_ENV = "LJ_HEAD_RUN"
COLLECTOR_ENV = "LJ_COLLECTOR"
#: How long the head waits for its schedd, and the other nodes for the head's address.
HEAD_START_TIMEOUT_S = 180


def collector_file(layout: ExportLayout) -> str:
    """`<pilot id> <address>:<port>` of the running head, on the shared filesystem."""
    return f"{layout.pool}/collector-address"


def heads_dir(layout: ExportLayout) -> str:
    """One directory per pilot, made by the node that became its head."""
    return f"{layout.pilots}/heads"


def head_config(settings: PoolSettings) -> str:
    """pool_config for the head node: its address and port come from the environment
    node.sh sets there (known only on that node), sockets and locks stay node-local."""
    base = pool_config(replace(settings, address=f"$ENV({HEAD_ADDRESS_ENV})", port=0))
    return base + (
        '# Schedd placement "allocation": the head node\'s address and port, from node.sh;\n'
        "# sockets and locks on the node (a shared filesystem may hold no sockets).\n"
        f"SHARED_PORT_PORT = $ENV({HEAD_PORT_ENV})\n"
        f"COLLECTOR_HOST = $(CONDOR_HOST):$ENV({HEAD_PORT_ENV})\n"
        f"RUN = $ENV({HEAD_RUN_ENV})/run\n"
        f"LOCK = $ENV({HEAD_RUN_ENV})/lock\n"
        "DAEMON_SOCKET_DIR = $(RUN)\n"
    )


def allocation_pilot_config(settings: PoolSettings) -> str:
    """pilot_config whose collector is the one the head of this pilot announced."""
    return pilot_config(settings) + (
        f"# The head of this pilot announced its collector (see collector_file).\n"
        f"COLLECTOR_HOST = $ENV({COLLECTOR_ENV})\n"
    )


def _in_image_pool(settings: PoolSettings, *command: str) -> str:
    """`command` run the runtime's way, with the pool's config, on the head node: its
    sockets and locks in the head's node-local directory (node-head.sh.tmpl)."""
    run = f'"${HEAD_RUN_ENV}"'
    return settings.runtime.wrap(settings.layout.pool_config, *command, node_local=run)


# The address of this node on the route to the login node (which every node reaches),
# and a free port on it.
_PYTHON = " ".join(PYTHON3)  # isolated: the account's planted .pth files do not run
_ROUTE_ADDRESS = (
    f"{_PYTHON} -c 'import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    "s.connect((sys.argv[1], 9)); print(s.getsockname()[0])'"
)
_FREE_PORT = (
    f"{_PYTHON} -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); "
    "print(s.getsockname()[1])'"
)


def allocation_node_script(
    settings: PoolSettings, *, batch: BatchSystem, login_address: str, token_lifetime_s: int,
    ready: str = "", joined_dir: str = "", **sizes: int,
) -> str:  # fmt: skip
    """node.sh for placement "allocation": node_script, plus on the head the pool before
    the startd (templates/node-head.sh.tmpl) and its orderly end after the last startd
    of the pilot is gone (templates/node-head-end.sh.tmpl). `ready`: the file that says
    the pool is up (default: the schedd's address); `joined_dir`: a lease's, whose
    exports' schedds the head runs (templates/node-head-joined.sh.tmpl)."""
    layout = settings.layout
    q = shlex.quote
    authz = " ".join(f"-authz {a}" for a in PILOT_AUTHZ)
    mint = _in_image_pool(
        settings, "condor_token_create", "-identity", q(settings.pilot_identity),
        "-lifetime", str(int(token_lifetime_s)), authz,
    )  # fmt: skip
    names = dict(address_env=HEAD_ADDRESS_ENV, port_env=HEAD_PORT_ENV, run_env=HEAD_RUN_ENV)
    head = render(
        __package__, f"{TEMPLATES}/node-head.sh.tmpl", **names,
        heads_dir=q(heads_dir(layout)), route_address=_ROUTE_ADDRESS,
        login_address=q(login_address), free_port=_FREE_PORT,
        ready=q(ready or layout.schedd_address),
        pool=_in_image_pool(settings, "condor_master", "-f"), timeout_s=HEAD_START_TIMEOUT_S,
        pool_local=layout.pool_local, tokens=q(layout.pilot_tokens), mint=mint,
        address_file=q(collector_file(layout)), collector_env=COLLECTOR_ENV,
    )  # fmt: skip
    tick = ""
    if joined_dir:
        head += render(
            __package__, f"{TEMPLATES}/node-head-joined.sh.tmpl", run_env=HEAD_RUN_ENV,
            joined_dir=q(joined_dir), timeout_s=HEAD_START_TIMEOUT_S,
        )  # fmt: skip
        tick = "    joined_tick\n"
    head_end = render(
        __package__, f"{TEMPLATES}/node-head-end.sh.tmpl", run_env=HEAD_RUN_ENV,
        startds=_in_image_pool(settings, "condor_status", "-startd", "-af", "Name"),
        retire_poll_s=RETIRE_POLL_S, tick=tick and "    " + tick,
        before_stop="    joined_stop_all\n" if joined_dir else "",
    )  # fmt: skip
    # sizes: node_script's cores, memory_mb, walltime_s and retire_s.
    return node_script(settings, batch=batch, head=head, head_end=head_end, tick=tick, **sizes)


def joined_alloc_schedd_config(settings: PoolSettings, lease_domain: str) -> str:
    """joined_schedd_config for a schedd the lease's head node runs: the head's address
    and collector from the environment node.sh sets there, sockets and locks on the node."""
    name = settings.layout.name
    head = replace(settings, address=f"$ENV({HEAD_ADDRESS_ENV})")
    base = joined_schedd_config(head, lease_domain)
    return base + (
        '# On the lease\'s head node (placement "allocation"): its address and collector.\n'
        f"COLLECTOR_HOST = $ENV({COLLECTOR_ENV})\n"
        f"RUN = $ENV({HEAD_RUN_ENV})/{name}/run\n"
        f"LOCK = $ENV({HEAD_RUN_ENV})/{name}/lock\n"
        "DAEMON_SOCKET_DIR = $(RUN)\n"
    )


def schedd_script(settings: PoolSettings) -> str:
    """pool/schedd.sh: how the lease's head node starts a joined export's schedd."""
    name = settings.layout.name
    run = f'"${HEAD_RUN_ENV}"/{shlex.quote(name)}'
    return (
        "#!/bin/bash\n"
        f"# condor_lumberjack: the schedd of export {name}, on the head node of its lease.\n"
        "set -u\n"
        f"mkdir -p {run}/run {run}/lock\n"
        f"exec {_in_image_pool(settings, 'condor_master', '-f')}\n"
    )
