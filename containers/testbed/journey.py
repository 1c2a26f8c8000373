"""The journey's moving parts, shared by the integration tests and `make demo`: submit
real jobs as the testbed's submitter, run a bundle in the second pool, drive an export
through the emulated site, look at what came back and at what is left at the site."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import testbed
from site_spool import install_spool, remote_iwds_from_manifest

JOB_SCRIPT = """#!/bin/sh
# A test job: reads its inputs, writes outputs, sleeps $3 seconds (default 0), exits
# with the code it is given.
echo "stdout of job $1"
echo "stderr of job $1" >&2
cat "in put.txt" data.txt > result.txt
echo "renamed $1" > renamed.txt
sleep "${3:-0}"
exit "$2"
"""


def chown_tree(path: Path, uid: int = testbed.SUBMITTER_UID) -> None:
    for item in [path, *path.rglob("*")]:
        os.chown(item, uid, uid, follow_symlinks=False)


def submit_as(user: str, job_dir: Path, count: int, **extra: str) -> int:
    """`submit`, authenticated as `user`, in a process of its own: a process keeps the
    security session it opened with the schedd, whoever's token a later call names."""
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "import journey; args = json.loads(sys.argv[2]); "
        "print(journey.submit(Path(args['dir']), args['count'], **args['extra']))"
    )
    args = json.dumps({"dir": str(job_dir), "count": count, "extra": extra})
    env = {**os.environ, **testbed.ACCESS_POINT.client_env_of(user)}
    result = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), args],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    return int(result.stdout.split()[-1])


@contextlib.contextmanager
def as_submitter(user: str) -> Iterator[None]:
    """Within: the CLI (run as a process of its own by `lumberjack`) authenticates as
    `user`; in this process, only a fresh session would (see submit_as)."""
    import htcondor2

    variable = "_CONDOR_SEC_TOKEN_DIRECTORY"
    before = os.environ.get(variable)
    os.environ[variable] = testbed.ACCESS_POINT.client_env_of(user)[variable]
    htcondor2.reload_config()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before
        htcondor2.reload_config()


def submitter_command(
    command: str, pool: testbed.Pool = testbed.ACCESS_POINT
) -> subprocess.CompletedProcess:
    """A shell command in `pool`'s own host, as the submitter: HTCondor's command-line
    tools, for what the bindings cannot do (condor_submit_dag, condor_rm -transfer)."""
    return testbed.run_in_rootfs(
        testbed.rootfs_path(), ["runuser", "-u", testbed.SUBMITTER, "--", "sh", "-c", command],
        binds=pool.binds(), env={"CONDOR_CONFIG": str(pool.config_file)},
    )  # fmt: skip


def make_job_dir(workspace: Path, name: str = "job", uid: int = testbed.SUBMITTER_UID) -> Path:
    job_dir = workspace / name
    (job_dir / "sub").mkdir(parents=True)
    (job_dir / "results").mkdir()
    (job_dir / "run.sh").write_text(JOB_SCRIPT)
    (job_dir / "run.sh").chmod(0o755)
    (job_dir / "in put.txt").write_text("input with a space in its name\n")
    (job_dir / "sub" / "data.txt").write_bytes(os.urandom(2048))
    chown_tree(job_dir, uid)
    return job_dir


def submit(
    job_dir: Path,
    count: int,
    exit_codes: dict[int, int] | None = None,
    naps: dict[int, int] | None = None,
    **extra: str,
) -> int:
    """Submit `count` procs of run.sh from job_dir (proc P exits with exit_codes[P] after
    sleeping naps[P] seconds, 0 and 0 by default); returns the cluster id."""
    codes = exit_codes or {}
    itemdata = [{"code": str(codes.get(p, 0))} for p in range(count)]
    if naps:
        for p, item in enumerate(itemdata):
            item["nap"] = str(naps.get(p, 0))
    ours = {
        "arguments": "$(Process) $(code) $(nap)" if naps else "$(Process) $(code)",
        "transfer_input_files": "in put.txt, sub/data.txt",
        "transfer_output_remaps": '"renamed.txt = results/renamed-$(Process).txt"',
    }
    return submit_items(job_dir, itemdata, **{**ours, **extra})


def submit_items(job_dir: Path, itemdata: list[dict[str, str]], **extra: str) -> int:
    """Submit job_dir's run.sh once per item (file transfer, out.N, err.N, job.log);
    returns the cluster id."""
    import htcondor2

    htcondor2.reload_config()
    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    description = {
        "executable": str(job_dir / "run.sh"),
        "initialdir": str(job_dir),
        "should_transfer_files": "YES",
        "output": "out.$(Process)",
        "error": "err.$(Process)",
        "log": "job.log",
        "request_memory": "64",
        "request_disk": "1024",
        **extra,
    }
    result = schedd.submit(htcondor2.Submit(description), itemdata=iter(itemdata))
    return result.cluster()


def query(constraint: str, projection: list[str]) -> list[dict]:
    import htcondor2

    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    return [dict(ad) for ad in schedd.query(constraint=constraint, projection=projection)]


def history(cluster: int, projection: list[str], expect: int, timeout: float = 180) -> list[dict]:
    """Imported finished jobs leave the queue for the history file at the schedd's next
    periodic sweep (up to a minute or two)."""
    import htcondor2

    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = schedd.history(f"ClusterId == {cluster}", projection, match=-1)
            ads = [dict(a) for a in found]
        except htcondor2.HTCondorException:
            # "Failed to receive history ad": the schedd was writing the history file
            # (its sweep moves finished jobs there); ask again.
            if time.monotonic() > deadline:
                raise
            ads = []
        if len(ads) >= expect or time.monotonic() > deadline:
            return sorted(ads, key=lambda a: a["ProcId"])
        time.sleep(0.5)


#: A Python repr in text meant for a person (a dict, a list, True/False/None, an object).
PYTHON_REPR = re.compile(r"\{'[^'\n]*': |\['|\b(True|False|None)\b|<\w[\w.]* object at ")

#: Commands whose human output quotes files as they are (job logs, queue logs).
QUOTES_FILES = {"logs", "inspect"}


def lumberjack(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would; its human output (no --json) must read as text,
    never a Python repr, whichever test runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "lumberjack", *args], capture_output=True, text=True, env=os.environ
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"condor_lumberjack {' '.join(args)} failed ({result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    if "--json" not in args and not QUOTES_FILES & set(args[:1]):
        found = PYTHON_REPR.search(result.stdout + result.stderr)
        if found:
            raise AssertionError(
                f"condor_lumberjack {' '.join(args)} printed a Python repr "
                f"({found.group(0)!r}):\n{result.stdout}{result.stderr}"
            )
    return result


def tree(path: Path) -> dict[str, bytes]:
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def run_in_second_pool(bundle: Path, spool: Path, expect_jobs: int, timeout: float = 180) -> None:
    """Start the independent pool from the bundle, wait for every job to finish, stop it."""
    import shutil

    rootfs = testbed.rootfs_path()
    install_spool(
        bundle / "spool",
        spool,
        remote_iwds_from_manifest(bundle / "manifest.json"),
        schedd_ids=testbed.rootfs_ids(rootfs, "condor"),
        job_ids=(testbed.SUBMITTER_UID, testbed.SUBMITTER_UID),
    )
    pool = testbed.remote_pool(spool)
    try:
        pool.start(rootfs)
        deadline = time.monotonic() + timeout
        while True:
            statuses = pool.condor(rootfs, "condor_q", "-allusers", "-af", "JobStatus").split()
            if len(statuses) == expect_jobs and all(s == "4" for s in statuses):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs did not finish in the second pool: {statuses}")
            time.sleep(1)
        pool.condor(rootfs, "condor_off", "-schedd", "-name", f"{pool.name}@{testbed.UID_DOMAIN}")
    finally:
        pool.stop()
        shutil.rmtree(pool.local_dir, ignore_errors=True)


def fetch_back(spool: Path, bundle: Path) -> None:
    """What fetching does for an offline bundle: the remote spool replaces bundle/spool.
    The submitter brings it back, so it is the submitter's (import reads it as them)."""
    import shutil

    shutil.rmtree(bundle / "spool")
    shutil.copytree(spool, bundle / "spool", symlinks=True)
    chown_tree(bundle / "spool")


# ---- the site journey ------------------------------------------------------------------


def expected_outputs(job_dir: Path, procs: range) -> dict[str, bytes]:
    """What run.sh deterministically leaves in job_dir for procs (submitted by `submit`):
    out.P, err.P, results/renamed-P.txt and the one result.txt they all write."""
    inputs = (job_dir / "in put.txt").read_bytes() + (job_dir / "sub" / "data.txt").read_bytes()
    expected = {"result.txt": inputs}
    for p in procs:
        expected[f"out.{p}"] = f"stdout of job {p}\n".encode()
        expected[f"err.{p}"] = f"stderr of job {p}\n".encode()
        expected[f"results/renamed-{p}.txt"] = f"renamed {p}\n".encode()
    return expected


def last_json(result: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def wait_finished(
    name: str,
    timeout: float = 300,
    poll: float = 3,
    on_status: Callable[[dict], None] | None = None,
) -> dict:
    """Poll `status NAME --json` until the site says finished; the last answer.
    on_status(answer) is called with every answer (for a demo, or to look around)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = last_json(lumberjack("status", name, "--json"))
        if on_status is not None:
            on_status(answer)
        if answer.get("finished"):
            return answer
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not finished at the site after {timeout:.0f} s: {answer}")
        time.sleep(poll)


def site_path(remote_path: str) -> Path:
    """The host path of a path under /home at the site (the site's /home is a bind)."""
    relative = Path(remote_path).relative_to("/home")
    return testbed.site().home / relative


def site_run(command: str, check: bool = True) -> str:
    """Run a shell command at the site's login node as the site account, over SSH."""
    from lumberjack.profiles.sites import find_profile
    from lumberjack.transport import SiteConnection

    with SiteConnection(find_profile("testbed")) as conn:
        return conn.run(command, check=check).stdout


def processes_of(remote_dir: str) -> dict[int, str]:
    """PID -> command of every process on this machine that belongs to the export at
    remote_dir: those whose command line or environment names that directory (the
    Apptainer instance, the daemons, the pilots' scripts) and all their descendants
    (squashfuse, starters, jobs). Read as root from /proc: the site has no PID namespace."""
    marker = (remote_dir.rstrip("/") + "/").encode()
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    roots = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        if marker in cmdline or marker in environ or remote_dir.encode() + b"\0" in cmdline:
            roots.add(pid)
    found = set(roots)
    changed = True
    while changed:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        changed = bool(children)
    found.discard(os.getpid())
    return {pid: commands[pid] for pid in sorted(found)}


def _in_batch_job(pid: int) -> bool:
    """Whether a process descends from a slurmstepd (the testbed's compute nodes share
    the login node's host: a pilot's processes are on it, but inside a batch job)."""
    while pid > 1:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmstepd":
                return True
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True  # gone meanwhile: not left over
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def on_login_node(name: str) -> dict[int, str]:
    """Processes of the export (or lease directory) `name` under SITE_BASE outside batch
    jobs: what the login node keeps running."""
    found = processes_of(f"{SITE_BASE}/{name}")
    return {pid: cmd for pid, cmd in found.items() if not _in_batch_job(pid)}


def site_leftovers(name: str, remote_dir: str) -> list[str]:
    """What still runs or is mounted at the site for export `name`; [] when clean."""
    left = []
    jobs = site_run("squeue -h -u hpcuser -o '%i %j %T'")
    left += [f"slurm job: {line}" for line in jobs.splitlines() if f" lj-{name}" in line]
    instances = site_run("apptainer instance list")
    left += [f"instance: {line}" for line in instances.splitlines() if f"lumberjack-{name}" in line]
    mounts = site_run("cat /proc/mounts")
    left += [
        f"mount: {line}"
        for line in mounts.splitlines()
        if "squashfuse" in line or remote_dir in line or "/apptainer/mnt/" in line
    ]
    left += [f"process {pid}: {cmd}" for pid, cmd in processes_of(remote_dir).items()]
    return left


def stop_at_site(name: str, remote_dir: str) -> None:
    """Whatever state export `name` is in: stop its pool and pilots at the site and
    remove its directory there (for tests and the demo that stop half-way)."""
    if not site_path(remote_dir).exists():
        return
    site_run(
        f"{agent_line(remote_dir, 'stop', remote_dir)}; "
        f"pilots=$(squeue -h -u hpcuser -o %j | grep '^lj-{name}-' | paste -sd, -); "
        f'[ -n "$pilots" ] && scancel -u hpcuser -n "$pilots"; '
        f"{agent_line(remote_dir, 'remove', remote_dir)}; rm -rf {remote_dir}",
        check=False,
    )


def agent_line(remote_dir: str, *args: str) -> str:
    """The site agent as lumberjack runs it (python3 -I, its bytes checked first), for
    the export or lease at `remote_dir`; where lumberjack never shipped it, it runs
    nothing (exit core/agent_loader.MISSING)."""
    from lumberjack.ap.agent_zipapp import agent_command, shipped_agent
    from lumberjack.core.contract import ExportLayout

    agent = shipped_agent()
    return agent_command(ExportLayout(remote_dir).agent_file(agent.sha256), agent.sha256, *args)


def site_connection(site, known_hosts: Path | None = None):  # -> fabric.Connection
    """A fabric connection to the emulated site as hpcuser, its host key pinned."""
    import paramiko
    from fabric import Connection

    conn = Connection(
        site.host,
        user=site.user,
        port=site.port,
        connect_timeout=10,
        connect_kwargs={
            "key_filename": str(site.client_key),
            "look_for_keys": False,
            "allow_agent": False,
        },
    )
    # Fabric auto-adds unknown host keys; the site's key must be pinned instead.
    conn.client.load_host_keys(str(known_hosts or site.known_hosts))
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return conn


def site_sh(conn, command: str, warn: bool = False):
    """Run a command at the site quietly (no stdin: pytest captures it)."""
    return conn.run(command, hide=True, warn=warn, in_stream=False)


# ---- one export at the testbed site, step by step ----------------------------------------

#: base_dir of the testbed's site profiles (testbed, testbed-alloc, testbed-nocontainer).
SITE_BASE = "/home/hpcuser/lumberjack"
#: Pilot states in which a pilot may still run jobs.
PILOT_ALIVE = ("queued", "running", "finishing", "unknown")


def sync_one(name: str) -> dict:
    """`sync --name NAME --json`: this export's entry, which must hold no error."""
    result = lumberjack("sync", "--name", name, "--json", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    entry = json.loads(result.stdout)["exports"][0]
    assert "error" not in entry, entry
    return entry


def sync_until_imported(name: str, timeout: float = 300) -> int:
    """`sync` as cron runs it, every few seconds, until the export is imported; the
    number of rounds it took."""
    from lumberjack.state.ledger import Ledger

    started, rounds = time.monotonic(), 0
    while (phase := Ledger().get(name).phase) != "imported":
        assert time.monotonic() - started < timeout, f"{name} still {phase} after {rounds} syncs"
        if rounds:
            time.sleep(3)
        sync_one(name)
        rounds += 1
    print(f"{name}: imported by sync after {rounds} rounds, {time.monotonic() - started:.0f} s")
    return rounds


def status_of(name: str) -> dict:
    return last_json(lumberjack("status", name, "--json"))


def poll_status(
    name: str, until: Callable[[dict], bool], what: str, timeout: float = 400, every: float = 2
) -> dict:
    """`status` every few seconds until `until(answer)`; the answer that met it."""
    deadline = time.monotonic() + timeout
    while True:
        answer = status_of(name)
        if until(answer):
            return answer
        assert time.monotonic() < deadline, f"{name}: not {what} after {timeout:.0f} s: {answer}"
        time.sleep(every)


def alive_pilots(answer: dict) -> list[str]:
    """The pilots of a `status` answer that may still run jobs."""
    return [job for job, state in answer["pilots"].items() if state in PILOT_ALIVE]
