"""The site agent: the part of lumberjack that runs ON the HPC login node.

The access point ships it as a zipapp (agent.pyz, see agent_zipapp.py) next to the
bundle, so nothing but python3 (>= 3.9) and the profile's container runtime
(apptainer, singularity, podman-hpc; or none, with a shipped HTCondor release) must
exist at the site. It acts on one export directory (see remote_pool.ExportLayout) and prints one
JSON object on stdout; errors are {"error": "..."} with a non-zero exit code.

    python3 agent.pyz launch EXPORT_DIR    place the queue, start the pool, submit pilots
    python3 agent.pyz status EXPORT_DIR    jobs by status, pilots, pool running or not
    python3 agent.pyz status DIR DIR ...   the same for several exports, in one process:
                                           {"status": {DIR: answer or {"error": ...}}}
    python3 agent.pyz stop   EXPORT_DIR    condor_off -schedd, cancel pilots, stop the pool
    python3 agent.pyz remove EXPORT_DIR    delete the export directory (pool must be down)

    python3 agent.pyz lease-start  LEASE_DIR   start a lease's collector + negotiator, pilots
    python3 agent.pyz lease-extend LEASE_DIR   one more round of the lease's pilots
    python3 agent.pyz lease-status LEASE_DIR   pilots, startds and joined schedds
    python3 agent.pyz lease-stop   LEASE_DIR   cancel the lease's pilots, stop its pool

`launch` reads EXPORT_DIR/launch.json (written by the access point: runtime, image,
binds, the shipped HTCondor release, batch system, pilot count and spec). Every command
is idempotent; `launch` never puts a queue in place again once a schedd has started on
it (that could run a job twice), and submits pilots only when idle jobs are left and no
pilot of this export is queued or running.
With schedd placement "allocation" (launch.json) no daemon starts on the login node: see
the section of that name below. An export whose launch.json names a lease runs only its
schedd, reporting to that lease's collector; its pilots are the lease's (see "leases").
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.jobstatus import FINISHED, JobStatus, status_of
from lumberjack.core.manifest import MANIFEST, ManifestError, read_manifest
from lumberjack.site import gather_logs, gpus, pilot_token, remote_pool
from lumberjack.site import runtime as runtime_mod
from lumberjack.site.batch import BatchError, PilotSpec, PilotState, get_batch_system
from lumberjack.site.batch.pilot import ALIVE
from lumberjack.site.idle_jobs import idle_shapes
from lumberjack.site.remote_pool import ExportLayout, PoolSettings
from lumberjack.site.runtime import ContainerRuntime, RuntimeFailure, get_runtime, last_line

QUEUE_LOG = "job_queue.log"
PLACED_MARK = "queue-placed"  # in pool/: the queue went in; never again
SCHEDD_TIMEOUT_S = 120
#: JobLeaseDuration of every job at the site, in seconds (HTCondor's default is 2400).
#: When a pilot dies (scancel, node failure, walltime kill) its starters die with it and
#: nobody tells the remote schedd: each shadow keeps the job Running and waits for the
#: starter to reconnect until the job lease runs out, and only then puts the job back to
#: idle for the next pilot. The lease is also how long a starter cut off from the
#: shadow keeps its job running, so it is the one clock both sides agree on, whatever
#: the batch system reports (or fails to report). Two minutes: the login node and the
#: compute nodes share a site network, where an outage that long is rare and costs a
#: rerun of the job (never two runs at once: the starter gives up when the shadow does).
JOB_LEASE_S = 120


class AgentError(Exception):
    """A one-line reason the command could not be done."""


# ---- placing the queue ---------------------------------------------------------------


def place_queue(layout: ExportLayout, site_user: str, trust_domain: str) -> dict[str, Any]:
    """Install bundle/spool as the schedd's SPOOL, jobs owned by the site account."""
    mark = Path(layout.pool, PLACED_MARK)
    if mark.exists():
        return {"placed": False, "reason": "already placed"}
    bundle = Path(layout.bundle)
    try:
        manifest = read_manifest(bundle / MANIFEST)
    except (OSError, ManifestError) as exc:
        raise AgentError(str(exc)) from exc
    if os.path.realpath(manifest.remote_spool) != os.path.realpath(layout.spool):
        raise AgentError(
            f"the bundle was exported for spool {manifest.remote_spool}, "
            f"not {layout.spool}; export it again for this site"
        )
    source = bundle / "spool"
    spool = Path(layout.spool)
    spool.mkdir(parents=True, exist_ok=True)
    linked = 0
    for entry in manifest.files:
        relative = entry.path
        if relative == QUEUE_LOG:
            continue
        target = spool / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            _link_or_copy(source / relative, target)
            linked += 1
    for iwd in manifest.remote_iwds():
        Path(iwd).mkdir(parents=True, exist_ok=True)
    ads = jql.read_log(source / QUEUE_LOG)
    owners = run_as_site_account(ads, site_user, trust_domain)
    short_lease(ads)
    # The queue goes in last, atomically: a schedd never sees jobs without their inputs.
    jqlw.write_log(spool / QUEUE_LOG, ads)
    Path(layout.pool).mkdir(parents=True, exist_ok=True)
    mark.write_text(f"{time.time():.0f}\n")
    return {"placed": True, "files": linked, "jobs": _count_procs(ads), "owners": owners}


def run_as_site_account(ads: dict[str, jql.Ad], site_user: str, trust_domain: str) -> list[str]:
    """Make every job the site account's: a schedd that is not root runs only its own.

    Import restores the original Owner/User from the access point's own copy.
    """
    before = set()
    for key, ad in ads.items():
        if jql.key_kind(key) not in ("cluster", "proc"):
            continue
        owner = ad.get("Owner")
        if owner is not None:
            before.add(owner.strip('"'))
            ad.set("Owner", json.dumps(site_user))
        if ad.get("User") is not None:
            ad.set("User", json.dumps(f"{site_user}@{trust_domain}"))
    return sorted(before)


def short_lease(ads: dict[str, jql.Ad]) -> None:
    """Every job's lease JOB_LEASE_S (see there): a dead pilot's jobs come back soon.

    Import takes only results from the site's ads, so the access point's own lease is
    what the job keeps at home.
    """
    for key, ad in ads.items():
        kind = jql.key_kind(key)
        if kind == "cluster" or (kind == "proc" and ad.get("JobLeaseDuration") is not None):
            ad.set("JobLeaseDuration", str(JOB_LEASE_S))


def _link_or_copy(source: Path, target: Path) -> None:
    # Inputs are read-only for the jobs: a hard link saves scratch space.
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _count_procs(ads: dict[str, jql.Ad]) -> int:
    return sum(1 for key in ads if jql.key_kind(key) == "proc")


# ---- the pool on the login node, in the profile's container runtime --------------------


def runtime_of(layout: ExportLayout, plan: dict | None) -> ContainerRuntime:
    """The runtime launch.json names (Apptainer for a plan written before runtimes)."""
    plan = plan or {}
    release = plan.get("condor_release") or {}
    return get_runtime(
        plan.get("runtime", "apptainer"), layout.root, image=plan.get("image") or "",
        binds=tuple(plan.get("binds", ())), release=release.get("dir", ""),
    )  # fmt: skip


def instance_running(layout: ExportLayout, runtime: ContainerRuntime) -> bool:
    """Whether the pool's container exists (its daemons, for runtime "none")."""
    exists = runtime.pool_exists()
    return bool(pool_processes(layout, "condor_master")) if exists is None else exists


def pool_processes(layout: ExportLayout, program: str | None = None) -> list[int]:
    """PIDs of this export's HTCondor daemons, found by their CONDOR_CONFIG; `program`
    as /proc's comm has it: at most 15 characters ("condor_collecto"), so a lease's
    pool is found by its condor_master.

    A container may have its own PID namespace, but its processes are visible (and,
    being ours, readable) in /proc on the login node.
    """
    return [
        pid
        for pid, (config, comm) in _condor_processes().items()
        if config == layout.pool_config and (program is None or comm == program)
    ]


def _condor_processes() -> dict[int, tuple[str, str]]:
    """PID -> (CONDOR_CONFIG, program name) of this account's HTCondor processes."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"CONDOR_CONFIG="):
                found[int(entry.name)] = (os.fsdecode(item[len(b"CONDOR_CONFIG=") :]), comm)
    return found


def start_pool(
    layout: ExportLayout,
    settings: PoolSettings,
    *,
    config: str | None = None,
    ready: Path | None = None,
) -> dict[str, Any]:
    """Start the pool's master with `config` (default: pool_config) and wait for the file
    that says it is up (`ready`; default: the schedd's address file in SPOOL)."""
    if pool_processes(layout, "condor_master"):
        return {"started": False, "reason": "already running"}
    local = Path(layout.pool_local)
    for sub in ("log", "lock", "run", "execute", "passwords.d", "tokens.d"):
        (local / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(local / "passwords.d", 0o700)
    os.chmod(local / "tokens.d", 0o700)
    Path(layout.pool_config).write_text(config or remote_pool.pool_config(settings))
    runtime = settings.runtime
    if runtime.pool_exists() is False:
        try:
            runtime.start_container()
        except RuntimeFailure as exc:
            raise AgentError(
                f"{runtime.NAME} could not start the pool's container from {settings.image}: {exc}"
            ) from None
    address_file = ready or Path(layout.spool, ".schedd_address")
    address_file.unlink(missing_ok=True)
    _in_pool(runtime, layout, *runtime.master_command(layout.master_pid))
    deadline = time.monotonic() + SCHEDD_TIMEOUT_S
    while not address_file.exists():
        if time.monotonic() > deadline:
            what = "schedd" if ready is None else address_file.name
            raise AgentError(f"no {what} after {SCHEDD_TIMEOUT_S} s; see {layout.pool_local}/log")
        time.sleep(0.5)
    _write_json(Path(layout.pool_state), {"address": settings.address, "port": settings.port})
    return {"started": True, "collector": settings.collector}


def _in_pool(runtime: ContainerRuntime, layout: ExportLayout, *command: str) -> str:
    """Run an HTCondor command in the pool's container, as the site account."""
    code, output = runtime.run_in_pool(layout.pool_config, *command)
    if code != 0:
        raise AgentError(f"{command[0]} failed: {last_line(output)}")
    return output


def choose_port(address: str) -> int:
    # The kernel picks a free port; the collector binds it a moment later.
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def login_address() -> str:
    """The address of this login node that its compute nodes reach."""
    return socket.gethostbyname(socket.gethostname())


# ---- pilots ---------------------------------------------------------------------------


def submit_pilots(
    layout: ExportLayout,
    settings: PoolSettings,
    launch: dict,
    *,
    write_files: Any = None,
    waiting: Any = None,
    always: bool = False,
) -> dict[str, Any]:
    """Pilots for idle jobs when none is queued or running. `write_files` writes their
    config, token and node.sh (write_pilot_files); `waiting()` counts the jobs that
    need a pilot (default: the idle ones); `always`: submit whatever is alive or idle
    (a lease's first or next round)."""
    write_files = write_files or write_pilot_files
    waiting = waiting or (lambda: job_counts(layout).get("idle", 0))
    batch = get_batch_system(launch["batch_system"])
    submitted = _read_json(Path(layout.pilot_list), [])
    states = pilot_states(layout, batch, submitted)
    alive = [job for job, state in states.items() if state in _ALIVE]
    if alive and not always:
        return {"submitted": [], "alive": alive, "reason": "pilots queued or running"}
    if not always and not waiting():
        return {"submitted": [], "alive": [], "reason": "no idle jobs"}
    pilots_dir = Path(layout.pilots)
    (pilots_dir / "out").mkdir(parents=True, exist_ok=True)
    write_files(layout, settings, launch)
    spec_fields = {f.name for f in fields(PilotSpec)}
    new = []
    for index in range(launch["pilots"]):
        spec = PilotSpec(
            **{key: value for key, value in launch["spec"].items() if key in spec_fields},
        )
        spec.name = f"lj-{layout.name}-{len(submitted) + index + 1}"[:63]
        spec.node_command = shlex.quote(layout.node_script)  # a command for `bash -c`
        spec.retire_command = remote_pool.retire_command(layout, batch)
        spec.output_dir = str(pilots_dir / "out")
        script = pilots_dir / f"{spec.name}.sh"
        script.write_text(batch.render_pilot_script(spec))
        script.chmod(0o700)
        result = subprocess.run(
            batch.submit_command(str(script)), capture_output=True, text=True, cwd=pilots_dir
        )
        job_id = batch.parse_submit_output(result.stdout, result.stderr, result.returncode)
        # Recorded at once: a crash after this line still knows the pilot exists.
        submitted.append(job_id)
        _write_json(Path(layout.pilot_list), submitted)
        new.append(job_id)
    return {"submitted": new, "alive": alive}


def write_pilot_files(layout: ExportLayout, settings: PoolSettings, launch: dict) -> None:
    spec = launch["spec"]
    try:
        pilot_token.mint(layout, settings, int(launch["token_lifetime_s"]))
    except RuntimeError as exc:
        raise AgentError(str(exc)) from None
    Path(layout.pilot_config).write_text(remote_pool.pilot_config(settings))
    node = remote_pool.node_script(
        settings,
        batch=get_batch_system(launch["batch_system"]),
        cores=spec["cores_per_node"],
        memory_mb=spec["memory_per_node_mb"],
        walltime_s=spec["walltime_s"],
        retire_s=spec["retire_s"],
    )
    Path(layout.node_script).write_text(node)
    os.chmod(layout.node_script, 0o700)


_ALIVE = ALIVE


def pilot_states(layout: ExportLayout, batch: Any, job_ids: list[str]) -> dict[str, PilotState]:
    if not job_ids:
        return {}
    result = subprocess.run(batch.query_command(job_ids), capture_output=True, text=True)
    return batch.parse_query_output(result.stdout, job_ids, result.stderr, result.returncode)


def cancel_pilots(layout: ExportLayout, batch: Any) -> list[str]:
    submitted = _read_json(Path(layout.pilot_list), [])
    states = pilot_states(layout, batch, submitted)
    alive = [job for job, state in states.items() if state in _ALIVE]
    if alive:
        subprocess.run(batch.cancel_command(alive), capture_output=True, text=True)
    return alive


# ---- status and stop -----------------------------------------------------------------


def queue_ads(layout: ExportLayout) -> dict[str, jql.Ad]:
    """The remote schedd's own log (works while it is down, too)."""
    path = Path(layout.spool, QUEUE_LOG)
    if not path.exists():
        path = Path(layout.bundle, "spool", QUEUE_LOG)
    return jql.read_log(path)


def job_counts(layout: ExportLayout, ads: dict[str, jql.Ad] | None = None) -> dict[str, int]:
    """Jobs by status, read from the schedd's own log."""
    ads = queue_ads(layout) if ads is None else ads
    counts: Counter[str] = Counter()
    for key, ad in ads.items():
        if jql.key_kind(key) == "proc":
            status = status_of(ad.get("JobStatus") or JobStatus.IDLE)
            counts[status.word if status is not None else "other"] += 1
    return dict(counts)


def status(
    layout: ExportLayout,
    launch: dict | None,
    known: dict[str, PilotState] | None = None,
    masters: set[str] | None = None,
) -> dict[str, Any]:
    """Jobs by status, pilots, pool running or not. `known`: pilot states already asked
    of the batch system; `masters`: the CONDOR_CONFIGs of running condor_masters (both
    found once for many exports by `status_many`)."""
    if launch and in_allocation(launch):
        return allocation_status(layout, launch)
    ads = queue_ads(layout)
    counts = job_counts(layout, ads)
    total = sum(counts.values())
    pilots: dict[str, str] = {}
    if launch:
        batch = get_batch_system(launch["batch_system"])
        # A joined export's pilots are its lease's.
        holder = ExportLayout(launch["lease"]) if launch.get("lease") else layout
        submitted = _read_json(Path(holder.pilot_list), [])
        try:
            if known is not None and all(job in known for job in submitted):
                states = {job: known[job] for job in submitted}
            else:
                states = pilot_states(holder, batch, submitted)
            pilots = {k: str(v) for k, v in states.items()}
            if holder is layout:  # a waiting pilot must find a token for its walltime
                with contextlib.suppress(RuntimeError, RuntimeFailure, OSError):
                    settings = settings_for(layout, launch)
                    pilot_token.refresh_for_waiting(layout, settings, launch, pilots)
        except BatchError as exc:
            pilots = {"error": str(exc)}
    if masters is None:
        running = bool(pool_processes(layout, "condor_master"))
    else:
        running = layout.pool_config in masters
    return {
        "jobs": counts,
        "total": total,
        "finished": total > 0 and sum(counts.get(s.word, 0) for s in FINISHED) == total,
        "pool_running": running,
        "placed": Path(layout.pool, PLACED_MARK).exists(),
        "pilots": pilots,
        "idle_shapes": idle_shapes(ads) if counts.get("idle") else [],
    }


def status_many(roots: list[str]) -> dict[str, Any]:
    """`status` of several exports in one process (sync asks for every export of a site
    at once): the pilots of all of them asked of each batch system in one query, /proc
    read once for the pools' masters. An export that cannot answer gets its error."""
    layouts = [ExportLayout(root) for root in roots]
    plans = {layout.root: _read_json(Path(layout.root, "launch.json"), None) for layout in layouts}
    wanted: dict[str, set[str]] = {}
    for layout in layouts:
        plan = plans[layout.root]
        if plan:
            holder = ExportLayout(plan["lease"]) if plan.get("lease") else layout
            jobs = _read_json(Path(holder.pilot_list), [])
            wanted.setdefault(plan["batch_system"], set()).update(jobs)
    known: dict[str, PilotState] = {}
    for system, jobs in wanted.items():
        try:
            known.update(pilot_states(layouts[0], get_batch_system(system), sorted(jobs)))
        except BatchError:
            pass  # each export asks again on its own and reports the error
    masters = {config for config, comm in _condor_processes().values() if comm == "condor_master"}
    answers: dict[str, Any] = {}
    for layout in layouts:
        try:
            answers[layout.root] = status(layout, plans[layout.root], known, masters)
        except (AgentError, BatchError, jql.JobQueueLogError, OSError, ValueError) as exc:
            answers[layout.root] = {"error": str(exc)}
    return {"status": answers}


def stop(layout: ExportLayout, launch: dict | None) -> dict[str, Any]:
    """Stop the schedd cleanly (its log final), then the pilots, then the instance."""
    if launch and in_allocation(launch):
        return allocation_stop(layout, launch)
    stopped_schedd = False
    runtime = runtime_of(layout, launch)
    if pool_processes(layout, "condor_schedd") and instance_running(layout, runtime):
        _in_pool(runtime, layout, "condor_off", "-graceful", "-schedd")
        _wait_gone(layout, "condor_schedd")
        stopped_schedd = True
        crash_point("stop.after-schedd")
    # A joined export never cancels pilots: they are its lease's, shared with others.
    own_pilots = launch and not launch.get("lease")
    cancelled = (
        cancel_pilots(layout, get_batch_system(launch["batch_system"])) if own_pilots else []
    )
    stop_pool(layout, runtime)
    _wait_gone(layout, None)
    return {"stopped_schedd": stopped_schedd, "cancelled_pilots": cancelled,
            "logs": gather_logs.gather_safely(layout.root, launch)}  # fmt: skip


def stop_pool(layout: ExportLayout, runtime: ContainerRuntime) -> None:
    """Stop the pool's container, or (runtime "none") its condor_master, which takes
    its daemons down with it."""
    if runtime.pool_exists() is not None:
        runtime.stop_container()
        return
    for pid in pool_processes(layout, "condor_master"):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _wait_gone(layout: ExportLayout, program: str | None) -> None:
    deadline = time.monotonic() + SCHEDD_TIMEOUT_S
    while pool_processes(layout, program):
        if time.monotonic() > deadline:
            raise AgentError(f"{program or 'the pool'} still running after {SCHEDD_TIMEOUT_S} s")
        time.sleep(0.5)


def remove(layout: ExportLayout, plan: dict | None = None) -> dict[str, Any]:
    if pool_processes(layout) or instance_running(layout, runtime_of(layout, plan)):
        raise AgentError(f"the pool of {layout.name} still runs; stop it first")
    root = Path(layout.root)
    existed = root.exists()
    if existed:
        shutil.rmtree(root)
    return {"removed": existed}


# ---- helpers and entry point ---------------------------------------------------------


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def settings_for(layout: ExportLayout, launch: dict) -> PoolSettings:
    state = _read_json(Path(layout.pool_state), {})
    address = launch.get("address") or state.get("address") or login_address()
    port = launch.get("port") or state.get("port") or choose_port(address)
    return PoolSettings(
        layout=layout,
        site_user=getpass.getuser(),
        address=address,
        port=int(port),
        image=launch.get("image") or "",
        binds=tuple(launch.get("binds", ())),
        runtime_name=launch.get("runtime", "apptainer"),
        release=(launch.get("condor_release") or {}).get("dir", ""),
        idle_shutdown_s=int(launch.get("idle_shutdown_s", 300)),
        max_running_jobs=launch.get("max_running_jobs"),
        **gpus.pool_settings(launch),
    )


def make_private(root: str) -> int:
    """Take group and other bits off everything under `root` (and root itself): other
    accounts on the site read no input, output, queue, key or token. Files that arrived
    with a wider mode (the transfer keeps the executable bit, and the ssh session's umask
    decides the rest) are narrowed here; the pool's own daemons run as this account, so
    they lose nothing. Links are not followed. Returns how many modes changed."""
    changed = 0
    for _, _, files, dir_fd in os.fwalk(root):  # each directory comes as "." once
        for name in (".", *files):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
                continue
            os.chmod(name, stat.S_IMODE(st.st_mode) & 0o700, dir_fd=dir_fd)
            changed += 1
    return changed


def ensure_release(plan: dict) -> dict[str, Any]:
    """Runtime "none": the shipped HTCondor tarball unpacked once, next to it."""
    release = plan.get("condor_release")
    if not release:
        return {}
    try:
        unpacked = runtime_mod.unpack_release(
            release["tarball"], release["dir"], release.get("sha256", "")
        )
    except runtime_mod.ReleaseError as exc:
        raise AgentError(str(exc)) from None
    return {"unpacked": unpacked}


def launch(layout: ExportLayout) -> dict[str, Any]:
    plan = _read_json(Path(layout.root, "launch.json"), None)
    if plan is None:
        raise AgentError(f"{layout.root}/launch.json is missing; run launch from the access point")
    make_private(layout.root)
    ensure_release(plan)
    missing = runtime_of(layout, plan).missing_image()
    if missing:
        raise AgentError(missing)
    if in_allocation(plan):
        return allocation_launch(layout, plan)
    if plan.get("lease"):
        return joined_launch(layout, plan)
    settings = settings_for(layout, plan)
    placed = place_queue(layout, settings.site_user, settings.trust_domain)
    crash_point("launch.after-place")
    pool = start_pool(layout, settings)
    make_private(layout.root)  # the daemons' first files (logs, certificates, addresses)
    crash_point("launch.after-pool")
    pilots = submit_pilots(layout, settings, plan)
    crash_point("launch.after-pilots")
    return {"place": placed, "pool": pool, "pilots": pilots}


# ---- schedd placement "allocation": no daemon on the login node -------------------------
#
# `launch` places the queue, writes the head's config and submits one pilot; the pilot's
# first node runs the pool (remote_pool.allocation_node_script). `status` reads the
# spool's job_queue.log; `stop` cancels the pilots and waits until the batch system
# reports them gone, so that nobody holds the spool when `fetch` copies it.

#: How long `stop` waits for cancelled pilots to be gone (Slurm's KillWait is 30 s).
PILOTS_GONE_TIMEOUT_S = 300


def in_allocation(plan: dict) -> bool:
    return plan.get("placement") == "allocation"


def allocation_settings(layout: ExportLayout, plan: dict) -> PoolSettings:
    # The pool's address and port are the head node's, known there only (head_config).
    return replace(settings_for(layout, {**plan, "address": login_address(), "port": 1}), port=0)


def resumable(counts: dict[str, int]) -> int:
    """Jobs the next pilot runs: idle ones, and those the log still says are running
    while no pilot lives (their schedd died with its allocation; the next one makes
    them idle again when it reads the log)."""
    return counts.get("idle", 0) + counts.get("running", 0)


def write_allocation_files(layout: ExportLayout, settings: PoolSettings, launch: dict) -> None:
    spec = launch["spec"]
    local = Path(layout.pool_local)
    for sub in ("log", "execute", "passwords.d", "tokens.d"):
        (local / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(local / "passwords.d", 0o700)
    os.chmod(local / "tokens.d", 0o700)
    Path(layout.pool_config).write_text(remote_pool.head_config(settings))
    tokens = Path(layout.pilot_tokens)
    tokens.mkdir(parents=True, exist_ok=True)
    os.chmod(tokens, 0o700)
    Path(layout.pilot_config).write_text(remote_pool.allocation_pilot_config(settings))
    node = remote_pool.allocation_node_script(
        settings,
        batch=get_batch_system(launch["batch_system"]),
        cores=spec["cores_per_node"],
        memory_mb=spec["memory_per_node_mb"],
        walltime_s=spec["walltime_s"],
        retire_s=spec["retire_s"],
        login_address=settings.address,
        token_lifetime_s=int(launch["token_lifetime_s"]),
    )
    Path(layout.node_script).write_text(node)
    os.chmod(layout.node_script, 0o755)


def expire_leases(layout: ExportLayout) -> list[str]:
    """Jobs a dead allocation's schedd left running, their lease made expired, so that
    the next schedd makes them idle when it starts (as it does with a lease gone) instead
    of trying for JOB_LEASE_S to reconnect to a startd that died with that allocation.
    Only while no pilot lives: then nothing else holds the log."""
    path = Path(layout.spool, QUEUE_LOG)
    if not path.exists():
        return []
    ads = jql.read_log(path)
    cut_off = [
        key
        for key, ad in ads.items()
        if jql.key_kind(key) == "proc" and status_of(ad.get("JobStatus")) == JobStatus.RUNNING
    ]
    if cut_off:
        for key in cut_off:
            ads[key].set("LastJobLeaseRenewal", "0")
        jqlw.write_log(path, ads)
    return cut_off


def allocation_launch(layout: ExportLayout, plan: dict) -> dict[str, Any]:
    if int(plan.get("pilots", 1)) != 1:
        raise AgentError("the schedd runs inside the allocation: one pilot at a time")
    settings = allocation_settings(layout, plan)
    placed = place_queue(layout, settings.site_user, settings.trust_domain)
    batch = get_batch_system(plan["batch_system"])
    states = pilot_states(layout, batch, _read_json(Path(layout.pilot_list), []))
    if not any(state in _ALIVE for state in states.values()):
        expire_leases(layout)
    pilots = submit_pilots(
        layout, settings, plan, write_files=write_allocation_files,
        waiting=lambda: resumable(job_counts(layout)),
    )  # fmt: skip
    return {"place": placed, "pool": {"started": False, "placement": "allocation"},
            "pilots": pilots}  # fmt: skip


def allocation_status(layout: ExportLayout, launch: dict) -> dict[str, Any]:
    counts = job_counts(layout)
    batch = get_batch_system(launch["batch_system"])
    submitted = _read_json(Path(layout.pilot_list), [])
    try:
        states = pilot_states(layout, batch, submitted)
        pilots = {k: str(v) for k, v in states.items()}
        held = any(state in _ALIVE for state in states.values())
    except BatchError as exc:
        pilots, held = {"error": str(exc)}, True
    interrupted = 0
    if not held and counts.get("running"):
        # No pilot holds the spool: "running" in the log is a schedd that died with its
        # allocation; the next one starts those jobs again.
        interrupted = counts.pop("running")
        counts["idle"] = counts.get("idle", 0) + interrupted
    total = sum(counts.values())
    return {
        "jobs": counts,
        "total": total,
        "finished": total > 0 and sum(counts.get(s.word, 0) for s in FINISHED) == total,
        "pool_running": held,
        "placement": "allocation",
        "interrupted": interrupted,
        "placed": Path(layout.pool, PLACED_MARK).exists(),
        "pilots": pilots,
    }


def allocation_stop(layout: ExportLayout, launch: dict) -> dict[str, Any]:
    """Cancel the pilots and wait until the batch system reports them gone: then no
    schedd holds the spool (its log is final) and it can be copied."""
    batch = get_batch_system(launch["batch_system"])
    cancelled = cancel_pilots(layout, batch)
    wait_pilots_gone(layout, batch, "the spool is not final yet")
    return {"stopped_schedd": bool(cancelled), "cancelled_pilots": cancelled,
            "logs": gather_logs.gather_safely(layout.root, launch)}  # fmt: skip


def wait_pilots_gone(layout: ExportLayout, batch: Any, why: str) -> None:
    submitted = _read_json(Path(layout.pilot_list), [])
    deadline = time.monotonic() + PILOTS_GONE_TIMEOUT_S
    while True:
        states = pilot_states(layout, batch, submitted)
        alive = [job for job, state in states.items() if state in _ALIVE]
        if not alive:
            return
        if time.monotonic() > deadline:
            raise AgentError(
                f"pilots {', '.join(alive)} still in the batch system after "
                f"{PILOTS_GONE_TIMEOUT_S} s; {why}"
            )
        time.sleep(2)


# ---- leases: a central manager and pilots that exports join ----------------------------
#
# A lease's directory has the shape of an export's (pool/, pilots/, launch.json,
# agent.pyz) without bundle or spool. Its pool is collector + negotiator; its pilots
# are submitted at once (jobs may still be on their way) and end by idle shutdown, the
# walltime, or lease-stop. A joined export's launch.json names the lease's directory.


def _collector_ready(layout: ExportLayout) -> Path:
    return Path(layout.pool_local, "log", ".collector_address")


def _lease_plan(layout: ExportLayout) -> dict:
    plan = _read_json(Path(layout.root, "launch.json"), None)
    if plan is None:
        raise AgentError(f"{layout.root}/launch.json is missing; run `lease create` again")
    return plan


def lease_start(layout: ExportLayout) -> dict[str, Any]:
    """Collector + negotiator on the login node and the first round of pilots; again:
    starts what is not running, submits pilots only when none is alive."""
    plan = _lease_plan(layout)
    make_private(layout.root)
    ensure_release(plan)
    missing = runtime_of(layout, plan).missing_image()
    if missing:
        raise AgentError(missing)
    settings = settings_for(layout, plan)
    Path(layout.spool).mkdir(parents=True, exist_ok=True)  # the negotiator's accountant log
    pool = start_pool(
        layout, settings, config=remote_pool.lease_config(settings),
        ready=_collector_ready(layout),
    )  # fmt: skip
    make_private(layout.root)
    crash_point("lease.after-pool")
    pilots = submit_pilots(layout, settings, plan, waiting=lambda: 1)
    return {"pool": pool, "pilots": pilots}


def lease_extend(layout: ExportLayout) -> dict[str, Any]:
    """One more round of pilots (launch.json's count), whatever is alive."""
    plan = _lease_plan(layout)
    if not pool_processes(layout, "condor_master"):
        raise AgentError(f"the pool of {layout.name} is not running; create the lease again")
    return {"pilots": submit_pilots(layout, settings_for(layout, plan), plan, always=True)}


def lease_status(layout: ExportLayout) -> dict[str, Any]:
    plan = _lease_plan(layout)
    batch = get_batch_system(plan["batch_system"])
    submitted = _read_json(Path(layout.pilot_list), [])
    try:
        pilots = {k: str(v) for k, v in pilot_states(layout, batch, submitted).items()}
    except BatchError as exc:
        pilots = {"error": str(exc)}
    running = bool(pool_processes(layout, "condor_master"))
    answer: dict[str, Any] = {"pool_running": running, "pilots": pilots, "startds": [],
                              "schedds": [], "pilots_alive": any(
                                  state in _ALIVE
                                  for state in pilots.values())}  # fmt: skip
    if running:
        try:
            # Slot ads (condor_status's default): -startd lists the startd daemons' own.
            answer["startds"] = _ads(layout, plan, None, "name", "state", "activity")
            answer["schedds"] = _ads(layout, plan, "-schedd", "name", "idle", "running")
        except AgentError as exc:  # a collector just starting: the pilots still count
            answer["collector_error"] = str(exc)
    return answer


_AD_ATTRS = {"name": "Name", "state": "State", "activity": "Activity",
             "idle": "TotalIdleJobs", "running": "TotalRunningJobs"}  # fmt: skip


def _ads(layout: ExportLayout, plan: dict, kind: str | None, *keys: str) -> list[dict[str, str]]:
    """The lease's collector's ads of `kind` (None: slots), each as {key: value}."""
    words = [kind] if kind else []
    out = _in_pool(runtime_of(layout, plan), layout, "condor_status", *words, "-af",
                   *(_AD_ATTRS[key] for key in keys))  # fmt: skip
    return [dict(zip(keys, line.split() + [""] * len(keys))) for line in out.splitlines()]


def lease_stop(layout: ExportLayout) -> dict[str, Any]:
    """Cancel the pilots and wait until the batch system reports them gone, then stop
    the pool: nothing of the lease runs at the site afterwards."""
    plan = _lease_plan(layout)
    batch = get_batch_system(plan["batch_system"])
    cancelled = cancel_pilots(layout, batch)
    wait_pilots_gone(layout, batch, "the lease's pool keeps running")
    crash_point("lease.after-pilots-gone")
    stop_pool(layout, runtime_of(layout, plan))
    _wait_gone(layout, None)
    return {"cancelled_pilots": cancelled, "pool_stopped": True}


def lease_of(plan: dict) -> tuple[ExportLayout, dict, PoolSettings]:
    """A joined export's lease: its layout, plan and settings; the lease must run."""
    lease = ExportLayout(plan["lease"])
    lease_plan = _read_json(Path(lease.root, "launch.json"), None)
    if lease_plan is None or not pool_processes(lease, "condor_master"):
        raise AgentError(
            f"{lease.name} does not run at the site; see `condor_lumberjack lease status`"
        )
    return lease, lease_plan, settings_for(lease, lease_plan)


def joined_launch(layout: ExportLayout, plan: dict) -> dict[str, Any]:
    """Place the queue, start only a schedd reporting to the lease's collector, and (if
    none of the lease's pilots is alive and jobs are idle) a new round of its pilots."""
    lease, lease_plan, lease_settings = lease_of(plan)
    own = {**plan, "address": lease_settings.address, "port": lease_settings.port}
    settings = replace(settings_for(layout, own), domain=lease_settings.trust_domain)
    placed = place_queue(layout, settings.site_user, settings.trust_domain)
    pool = start_pool(layout, settings, config=remote_pool.joined_schedd_config(settings, lease))
    make_private(layout.root)
    pilots = submit_pilots(
        lease, lease_settings, lease_plan, waiting=lambda: job_counts(layout).get("idle", 0)
    )
    return {"place": placed, "pool": pool, "pilots": pilots, "lease": lease.name}


LEASE_COMMANDS = {
    "lease-start": lease_start,
    "lease-extend": lease_extend,
    "lease-status": lease_status,
    "lease-stop": lease_stop,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.pyz", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("launch", "status", "stop", "remove", *LEASE_COMMANDS))
    parser.add_argument("export_dir", nargs="+", help="one; several for status only")
    args = parser.parse_args(argv)
    # Everything the agent and the daemons it starts create is this account's alone.
    os.umask(0o077)
    roots = [os.path.abspath(root) for root in args.export_dir]
    if len(roots) > 1:
        if args.command != "status":
            parser.error(f"{args.command} acts on one export directory")
        print(json.dumps(status_many(roots)))
        return 0
    layout = ExportLayout(roots[0])
    plan = _read_json(Path(layout.root, "launch.json"), None)
    try:
        if args.command == "launch":
            result = launch(layout)
        elif args.command == "status":
            result = status(layout, plan)
        elif args.command == "stop":
            result = stop(layout, plan)
        elif args.command in LEASE_COMMANDS:
            result = LEASE_COMMANDS[args.command](layout)
        else:
            result = remove(layout, plan)
    except (AgentError, BatchError, jql.JobQueueLogError, OSError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
