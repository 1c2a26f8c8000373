"""`Pool`: the work every kind of remote pool shares, and the two parts a kind is made
of (see the package's docstring): a `Placement` (where the pool's daemons run: login.py,
allocation.py) and a `Role` (whose pool it is: own.py, lease.py, joined.py). The pool
starts and stops daemons in the profile's container runtime, submits and asks about the
pilots, and removes the directory; launch, status, act and stop are its parts'.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, ClassVar

from lumberjack.core.answers import (
    Acted,
    Launched,
    LeaseExtended,
    LeaseStatus,
    PilotsSubmitted,
    PoolStarted,
    Removed,
    Status,
    Stopped,
)
from lumberjack.core.contract import (
    ALIVE,
    ExportLayout,
    LaunchPlan,
    PilotState,
    PoolState,
    SubmittedPilots,
)
from lumberjack.core.jobstatus import FINISHED
from lumberjack.site import gpus, pilot_token, remote_pool
from lumberjack.site import runtime as runtime_mod
from lumberjack.site.batch import BatchError, BatchSystem, get_batch_system
from lumberjack.site.files import AgentError, make_private, read_contract, write_contract
from lumberjack.site.job_queue import job_counts
from lumberjack.site.processes import pool_processes
from lumberjack.site.remote_pool import PoolSettings
from lumberjack.site.runtime import (
    POLL_S,
    ContainerRuntime,
    RuntimeFailure,
    get_runtime,
    last_line,
)

#: What counts the jobs that need a pilot; what lists the queues a round of pilots serves.
Waiting = Callable[[], int]
Queues = Callable[[], list[ExportLayout]]

SCHEDD_TIMEOUT_S = 120
#: How long `stop` waits for cancelled pilots to be gone (Slurm's KillWait is 30 s).
PILOTS_GONE_TIMEOUT_S = 300


class Part:
    """A placement or a role, bound to the pool it is part of."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    @property
    def layout(self) -> ExportLayout:
        return self.pool.layout


class Placement(Part):
    """Where the pool's daemons run, and so how they start, report and stop: the half of
    each role's work that depends on it (login.py, allocation.py)."""

    #: Where a joined export's two tokens are made: in the pools running here, or (with
    #: no daemon here) in a fresh container.
    MINTS_IN_FRESH_CONTAINER: ClassVar[bool] = False

    def settings(self) -> PoolSettings:
        """What the configs depend on (the address and port the pool runs on)."""
        return self.pool.settings_of(self.pool.need_plan())

    def unsupported(self, what: str) -> AgentError:
        return AgentError(f"{self.layout.name}: no {what} without a placement")

    # An export's own pool.
    def write_pilot_files(self, settings: PoolSettings) -> None:
        raise self.unsupported("pilot files")

    def check_launch(self) -> None:
        """Refuse a plan this placement cannot run, before anything changes."""

    def start(
        self, settings: PoolSettings, config: str | None = None, ready: Path | None = None
    ) -> PoolStarted:
        raise self.unsupported("start")

    def waiting(self, layout: ExportLayout) -> Waiting:
        """What counts the jobs of `layout` that need a pilot."""
        return lambda: job_counts(layout).get("idle", 0)

    def submit_round(
        self, settings: PoolSettings, waiting: Waiting, queues: Queues
    ) -> PilotsSubmitted:
        """Pilots for this pool (`queues`: the queues they will serve)."""
        return self.pool.submit_pilots(settings, waiting=waiting)

    def status(self, known: dict[str, PilotState] | None, masters: set[str] | None) -> Status:
        raise self.unsupported("status")

    def act(self) -> Acted:
        raise self.unsupported("queue")

    def stop(self) -> Stopped:
        raise self.unsupported("stop")

    # A lease's central manager.
    def start_central_manager(self, settings: PoolSettings) -> PoolStarted:
        raise self.unsupported("central manager")

    def stop_central_manager(self) -> None:
        raise self.unsupported("central manager")

    def extend(self) -> LeaseExtended:
        raise self.unsupported("lease")

    def lease_status(self) -> LeaseStatus:
        raise self.unsupported("lease")

    # An export joined to a lease.
    def lease_runs(self, lease: ExportLayout) -> bool:
        raise self.unsupported("lease")

    def joined_settings(self, lease_settings: PoolSettings) -> PoolSettings:
        raise self.unsupported("lease")

    def join(
        self, lease: Pool, lease_settings: PoolSettings
    ) -> tuple[PoolStarted, PilotsSubmitted]:
        raise self.unsupported("lease")

    def leave(self) -> Stopped:
        raise self.unsupported("lease")


class Role(Part):
    """Whose pool it is (an export's own, a lease's, an export joined to a lease), and so
    how it launches and stops."""

    #: What the access point runs to write a missing launch.json.
    PLAN_HINT: ClassVar[str] = "run launch from the access point"

    @property
    def pilot_holder(self) -> ExportLayout:
        """The directory whose pilots serve this pool (a joined export's: its lease's)."""
        return self.layout

    def settings(self) -> PoolSettings:
        return self.pool.placement.settings()

    def config_lines(self, settings: PoolSettings) -> str:
        """What this role adds to its placement's pool config (a lease: no schedd)."""
        return ""

    def head_options(self) -> dict[str, str]:
        """More of a head node's script options (allocation.allocation_node_script)."""
        return {}

    def launch(self) -> Launched:
        raise AgentError(f"{self.layout.name} has no launch of its own")

    def stop(self) -> Stopped:
        raise AgentError(f"{self.layout.name} has no stop of its own")


class Pool:
    """One export's (or lease's) pool at the site, as its launch.json asks for it: a
    placement and a role over the shared work. Without them (`Pool(layout, plan)`) it
    only asks about the pilots of `layout`."""

    def __init__(
        self,
        layout: ExportLayout,
        plan: LaunchPlan | None,
        placement: type[Placement] = Placement,
        role: type[Role] = Role,
    ) -> None:
        self.layout = layout
        self.plan = plan
        self.placement = placement(self)
        self.role = role(self)

    def __repr__(self) -> str:
        kind = f"{type(self.placement).__name__}, {type(self.role).__name__}"
        return f"Pool({self.layout.name}: {kind})"

    # ---- what its parts do -----------------------------------------------------------

    def launch(self) -> Launched:
        """Place the queue, start what runs on the login node, submit pilots."""
        return self.role.launch()

    def status(
        self, known: dict[str, PilotState] | None = None, masters: set[str] | None = None
    ) -> Status:
        """Jobs by status, pilots, pool running or not. `known`: pilot states already
        asked of the batch system; `masters`: the CONDOR_CONFIGs of running
        condor_masters (both found once for many exports by the agent's `status`)."""
        return self.placement.status(known, masters)

    def act(self) -> Acted:
        """The local queue's commands (queue-actions.json) on the jobs' copies here."""
        return self.placement.act()

    def stop(self) -> Stopped:
        return self.role.stop()

    def settings(self) -> PoolSettings:
        """What the configs depend on."""
        return self.role.settings()

    def write_pilot_files(self, settings: PoolSettings) -> None:
        self.placement.write_pilot_files(settings)

    @property
    def pilot_holder(self) -> ExportLayout:
        return self.role.pilot_holder

    def settings_of(self, plan: LaunchPlan) -> PoolSettings:
        """`plan`, and the address and port the pool was started on (PoolState) or is
        about to be."""
        state = read_contract(PoolState, self.layout.pool_state, None)
        address = plan.address or (state and state.address) or login_address()
        port = plan.port or (state and state.port) or choose_port(address)
        release = plan.condor_release.dir if plan.condor_release else ""
        return PoolSettings(
            layout=self.layout, site_user=getpass.getuser(), address=address, port=int(port),
            image=plan.image, binds=plan.binds, runtime_name=plan.runtime, release=release,
            idle_shutdown_s=plan.idle_shutdown_s, max_running_jobs=plan.max_running_jobs,
            **gpus.pool_settings(plan),
        )  # fmt: skip

    # ---- the plan and the runtime ----------------------------------------------------

    def need_plan(self) -> LaunchPlan:
        if self.plan is None:
            hint = self.role.PLAN_HINT
            raise AgentError(f"{self.layout.launch_plan} is missing; {hint}")
        return self.plan

    @property
    def batch(self) -> BatchSystem:
        return get_batch_system(self.need_plan().batch_system)

    @property
    def runtime(self) -> ContainerRuntime:
        """The runtime launch.json names (Apptainer when there is no plan)."""
        plan = self.plan
        if plan is None:
            return get_runtime("apptainer", self.layout.root)
        release = plan.condor_release.dir if plan.condor_release else ""
        return get_runtime(
            plan.runtime, self.layout.root, image=plan.image, binds=plan.binds, release=release
        )

    def prepare(self) -> None:
        """Before a launch: the tree private, the release unpacked, the image there."""
        plan = self.need_plan()
        make_private(self.layout.root)
        ensure_release(plan)
        missing = self.runtime.missing_image()
        if missing:
            raise AgentError(missing)
        self.runtime.write_files()

    def write_node_script(self, text: str) -> None:
        Path(self.layout.node_script).write_text(text)
        os.chmod(self.layout.node_script, 0o700)

    # ---- the pool's daemons ----------------------------------------------------------

    def start_pool(
        self, settings: PoolSettings, *, config: str | None = None, ready: Path | None = None
    ) -> PoolStarted:
        """Start the pool's master with `config` (default: pool_config) and wait for the
        file that says it is up (`ready`; default: the schedd's address file in SPOOL)."""
        layout = self.layout
        if pool_processes(layout, "condor_master"):
            return PoolStarted(False, reason="already running")
        make_local_dirs(layout, "log", "lock", "run", "execute")
        Path(layout.pool_config).write_text(config or remote_pool.pool_config(settings))
        runtime = settings.runtime
        if runtime.pool_exists() is False:
            try:
                runtime.start_container()
            except RuntimeFailure as exc:
                raise AgentError(
                    f"{runtime.NAME} could not start the pool's container from "
                    f"{settings.image}: {exc}"
                ) from None
        address_file = Path(ready or layout.schedd_address)
        address_file.unlink(missing_ok=True)
        self.in_pool(*runtime.master_command(layout.master_pid), runtime=runtime)
        deadline = time.monotonic() + SCHEDD_TIMEOUT_S
        while not address_file.exists():
            if time.monotonic() > deadline:
                what = "schedd" if ready is None else address_file.name
                raise AgentError(
                    f"no {what} after {SCHEDD_TIMEOUT_S} s; see {layout.pool_local}/log"
                )
            time.sleep(POLL_S)
        write_contract(layout.pool_state, PoolState(settings.address, settings.port))
        return PoolStarted(True, collector=settings.collector)

    def in_pool(self, *command: str, runtime: ContainerRuntime | None = None) -> str:
        """Run an HTCondor command in the pool's container, as the site account."""
        code, output = (runtime or self.runtime).run_in_pool(self.layout.pool_config, *command)
        if code != 0:
            raise AgentError(f"{command[0]} failed: {last_line(output)}")
        return output

    def instance_running(self) -> bool:
        """Whether the pool's container exists (its daemons, for runtime "none")."""
        exists = self.runtime.pool_exists()
        return bool(pool_processes(self.layout, "condor_master")) if exists is None else exists

    def stop_pool(self) -> None:
        """Stop the pool's container, or (runtime "none") its condor_master, which takes
        its daemons down with it."""
        runtime = self.runtime
        if runtime.pool_exists() is not None:
            runtime.stop_container()
            return
        for pid in pool_processes(self.layout, "condor_master"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def wait_gone(self, program: str | None) -> None:
        deadline = time.monotonic() + SCHEDD_TIMEOUT_S
        while pool_processes(self.layout, program):
            if time.monotonic() > deadline:
                what = program or "the pool"
                raise AgentError(f"{what} still running after {SCHEDD_TIMEOUT_S} s")
            time.sleep(POLL_S)

    # ---- pilots ----------------------------------------------------------------------

    def submitted(self) -> list[str]:
        report = read_contract(SubmittedPilots, self.layout.pilot_list, SubmittedPilots())
        return list(report.job_ids)

    def pilot_states(self, job_ids: list[str] | None = None) -> dict[str, PilotState]:
        job_ids = self.submitted() if job_ids is None else job_ids
        return query_pilots(self.batch, job_ids)

    def alive_pilots(self) -> list[str]:
        return [job for job, state in self.pilot_states().items() if state in ALIVE]

    def submit_pilots(
        self,
        settings: PoolSettings,
        *,
        waiting: Callable[[], int] | None = None,
        always: bool = False,
    ) -> PilotsSubmitted:
        """Pilots for idle jobs when none is queued or running: `waiting()` counts the
        jobs that need a pilot (default: the idle ones); `always`: submit whatever is
        alive or idle (a lease's first or next round)."""
        plan, layout, batch = self.need_plan(), self.layout, self.batch
        waiting = waiting or (lambda: job_counts(layout).get("idle", 0))
        submitted = self.submitted()
        alive = [job for job, state in self.pilot_states(submitted).items() if state in ALIVE]
        if alive and not always:
            return PilotsSubmitted([], alive, reason="pilots queued or running")
        if not always and not waiting():
            return PilotsSubmitted([], [], reason="no idle jobs")
        Path(layout.pilot_output).mkdir(parents=True, exist_ok=True)
        self.write_pilot_files(settings)
        new = []
        for index in range(plan.pilots):
            number = len(submitted) + index + 1
            name, text = remote_pool.pilot_script(plan.spec, layout, batch, number)
            script = Path(layout.pilots, f"{name}.sh")
            script.write_text(text)
            script.chmod(0o700)
            result = subprocess.run(
                batch.submit_command(str(script)), capture_output=True, text=True,
                cwd=layout.pilots,
            )  # fmt: skip
            job_id = batch.parse_submit_output(result.stdout, result.stderr, result.returncode)
            # Recorded at once: a crash after this line still knows the pilot exists.
            submitted.append(job_id)
            write_contract(layout.pilot_list, SubmittedPilots(tuple(submitted)))
            new.append(job_id)
        return PilotsSubmitted(new, alive)

    def cancel_pilots(self) -> list[str]:
        alive = self.alive_pilots()
        if alive:
            subprocess.run(self.batch.cancel_command(alive), capture_output=True, text=True)
        return alive

    def wait_pilots_gone(self, why: str) -> None:
        submitted = self.submitted()
        deadline = time.monotonic() + PILOTS_GONE_TIMEOUT_S
        while True:
            states = self.pilot_states(submitted)
            alive = [job for job, state in states.items() if state in ALIVE]
            if not alive:
                return
            if time.monotonic() > deadline:
                raise AgentError(
                    f"pilots {', '.join(alive)} still in the batch system after "
                    f"{PILOTS_GONE_TIMEOUT_S} s; {why}"
                )
            time.sleep(2)

    # ---- what every placement reports, and remove ----------------------------------

    def release_window_s(self) -> int:
        """How long a held job the site may release is waited for: the pilots' walltime."""
        return self.plan.spec.walltime_s if self.plan is not None else 0

    def pilot_report(self, known: dict[str, PilotState] | None) -> dict[str, str]:
        """The pilots' states as words (or the batch system's error); while one waits
        in the queue, a fresh token for it when the current one is stale."""
        holder = Pool(self.pilot_holder, self.plan)
        submitted = holder.submitted()
        try:
            if known is not None and all(job in known for job in submitted):
                states = {job: known[job] for job in submitted}
            else:
                states = holder.pilot_states(submitted)
        except BatchError as exc:
            return {"error": str(exc)}
        pilots = {k: str(v) for k, v in states.items()}
        if self.pilot_holder is self.layout:  # a waiting pilot must find a valid token
            with contextlib.suppress(RuntimeError, RuntimeFailure, OSError):
                pilot_token.refresh_for_waiting(self.layout, self.settings(), self.plan, pilots)
        return pilots

    def remove(self) -> Removed:
        if pool_processes(self.layout) or self.instance_running():
            raise AgentError(f"the pool of {self.layout.name} still runs; stop it first")
        root = Path(self.layout.root)
        existed = root.exists()
        if existed:
            shutil.rmtree(root)
        return Removed(existed)


# ---- shared helpers ----------------------------------------------------------------------


def query_pilots(batch: BatchSystem, job_ids: list[str]) -> dict[str, PilotState]:
    """The batch system's state of each pilot (one query for all of them)."""
    if not job_ids:
        return {}
    result = subprocess.run(batch.query_command(job_ids), capture_output=True, text=True)
    return batch.parse_query_output(result.stdout, job_ids, result.stderr, result.returncode)


def all_finished(counts: dict[str, int]) -> bool:
    total = sum(counts.values())
    return total > 0 and sum(counts.get(s.word, 0) for s in FINISHED) == total


def make_local_dirs(layout: ExportLayout, *subdirs: str) -> None:
    """pool/local/ with `subdirs`, and the private key and token directories (0700)."""
    local = Path(layout.pool_local)
    for sub in (*subdirs, "passwords.d", "tokens.d"):
        (local / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(local / "passwords.d", 0o700)
    os.chmod(local / "tokens.d", 0o700)


def choose_port(address: str) -> int:
    # The kernel picks a free port; the collector binds it a moment later.
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def login_address() -> str:
    """The address of this login node that its compute nodes reach."""
    return socket.gethostbyname(socket.gethostname())


def ensure_release(plan: LaunchPlan) -> bool:
    """Runtime "none": the shipped HTCondor tarball unpacked once, next to it."""
    release = plan.condor_release
    if release is None:
        return False
    try:
        unpacked = runtime_mod.unpack_release(release.tarball, release.dir, release.sha256)
    except runtime_mod.ReleaseError as exc:
        raise AgentError(str(exc)) from None
    return bool(unpacked)
