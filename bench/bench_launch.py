"""Launch latency at the testbed site: `condor_lumberjack launch` vs plain Slurm.

Side by side on the testbed's emulated site (Slurm nodes c1-c3, 2 cores each):

  baselines, timed at the site by its own clock:
    sbatch of a trivial job until squeue says RUNNING;
    `srun -N1 apptainer exec SITE_IMAGE condor_version` (a node runs the image);
    sbatch of a job that runs that same apptainer exec, until it has run;
  lumberjack, for a shipped export of 4 short jobs (1 node): from the start of
    `condor_lumberjack launch NAME` (CLI start-up, SSH, queue placement, the pool's
    Apptainer instance, the pilot token, sbatch) until the first job runs at the site;
    with a breakdown: the launch command returning, the first node.sh starting;
  lumberjack, 30 short jobs on 3 nodes: from launch until every job is done.

A watcher at the site (python3 with the shipped agent on its path) polls the
schedd's own job_queue.log every 0.1 s with the agent's reader; the site shares this
machine's clock (same kernel), so its timestamps and ours are comparable. Every export
is fetched, imported and cleaned up afterwards, so nothing is left running. Shipping is
not part of the launch time (bench_shipping.py measures it). Run alone with
`python bench/bench_launch.py` (testbed up, as root), or by `make bench`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "containers" / "testbed"))
sys.path.insert(0, str(ROOT / "bench"))

import journey  # noqa: E402
import testbed  # noqa: E402
from bench_shipping import ssh_command  # noqa: E402

from lumberjack.profiles.sites import SiteProfile, find_profile  # noqa: E402
from lumberjack.state.steps import Site  # noqa: E402

SMALL_JOBS = 4
MANY_JOBS = 30
NODES = 3
BASELINE_REPEATS = 2
GOAL_FIRST_JOB_S = 6.0  # issue P5
# The watcher's events of the 4-job launch, in order, and what each step between the
# previous one and it is.
STEPS = (
    ("plan_written", "CLI start-up, SSH connection, launch.json written (helper put)"),
    ("queue_placed", "the agent starts (python3 -I, verified), places the queue"),
    ("schedd_up", "Apptainer instance of the pool; master, collector, negotiator, schedd"),
    ("pilot_token", "the pilots' token made (condor_token_create in the instance)"),
    ("pilot_submitted", "pilot script written, sbatch"),
    ("launch_returned", "the agent's answer back over SSH; the CLI exits"),
    ("first_node", "Slurm starts the pilot; node.sh starts"),
    ("startd_up", "condor_master, then the startd, in the site image (apptainer exec)"),
    ("matched", "startd's first ad; wait for the next negotiation cycle; match"),
    ("claimed", "schedd claims the slot (REQUEST_CLAIM to the startd)"),
    ("shadow", "schedd starts the shadow"),
    ("starter", "startd starts the job's starter (claim activated)"),
    ("job_dir", "starter sets up the job's sandbox: the job starts"),
)
SMALL_TIMEOUT_S = 150
MANY_TIMEOUT_S = 240

# Runs at the site: prints a JSON line per event, timestamps from the site's clock. Each
# event is the first poll (every 0.1 s) that sees it; log lines are matched by text (the
# daemons' own timestamps are whole seconds).
_WATCHER = r"""
import glob, json, os, re, sys, time
root, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sys.path.insert(0, sys.argv[4])  # the agent lumberjack shipped (ExportLayout.agent_file)
from lumberjack.core import jobqueuelog as jql
def say(event, **extra):
    print(json.dumps(dict(event=event, t=time.time(), **extra)), flush=True)
say("ready")
log = os.path.join(root, "spool", "job_queue.log")
pool_log = os.path.join(root, "pool", "local", "log")
nodes = os.path.join(root, "pilots", "nodes")
def exists(pattern):
    return bool(glob.glob(os.path.join(root, pattern)))
def logged(pattern, regex):
    for path in glob.glob(os.path.join(root, pattern)):
        try:
            with open(path, errors="replace") as f:
                if re.search(regex, f.read()):
                    return True
        except OSError:
            pass
    return False
# (event, test): the path from the pool's start to the job's first process, in order
steps = [
    ("plan_written", lambda: exists("launch.json")),
    ("queue_placed", lambda: exists("pool/queue-placed")),
    ("schedd_up", lambda: exists("spool/.schedd_address") or exists("pool/*/*/.schedd_address")),
    ("pilot_token", lambda: exists("pilots/tokens.d/*")),
    ("pilot_submitted", lambda: exists("pilots/submitted.json")),
    ("first_node", lambda: os.path.isdir(nodes) and bool(os.listdir(nodes))),
    ("startd_up", lambda: exists("pilots/nodes/*/log/.startd_address")),
    ("matched", lambda: logged("pool/local/log/NegotiatorLog", r"Matched ")),
    ("claimed", lambda: logged("pilots/nodes/*/log/StartLog", r"-> Claimed")),
    ("shadow", lambda: exists("pool/local/log/ShadowLog")),
    ("starter", lambda: exists("pilots/nodes/*/log/StarterLog.slot*")),
    ("job_dir", lambda: exists("pilots/nodes/*/execute/dir_*")),
]
seen = set()
cycles = []
started = done = 0
deadline = time.time() + timeout
while time.time() < deadline:
    for event, test in steps:
        if event not in seen and test():
            seen.add(event); say(event)
    # negotiation cycles started while we watch (the log's lines, counted)
    try:
        with open(os.path.join(pool_log, "NegotiatorLog"), errors="replace") as f:
            n = f.read().count("Started Negotiation Cycle")
    except OSError:
        n = 0
    while len(cycles) < n:
        cycles.append(time.time()); say("cycle", n=len(cycles))
    try:
        ads = jql.read_log(log)
    except (OSError, ValueError):
        ads = {}
    status = [ad.get("JobStatus") for key, ad in ads.items() if jql.key_kind(key) == "proc"]
    started = sum(1 for s in status if s in ("2", "4", "6"))
    done = sum(1 for s in status if s in ("3", "4"))
    if "run" not in seen and started:
        seen.add("run"); say("first_running")
    if done >= want:
        say("all_done", jobs=done)
        sys.exit(0)
    time.sleep(0.1)
say("timeout", started=started, done=done)
sys.exit(1)
"""


def remote(profile: SiteProfile, script: str, timeout: float = 120) -> str:
    result = subprocess.run(
        [*ssh_command(profile), script], capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(f"at the site: {script[:60]}...: {result.stderr.strip()[-300:]}")
    return result.stdout


def slurm_baselines(profile: SiteProfile, image: str, scratch: str) -> dict:
    """Best of BASELINE_REPEATS of each, timed at the site."""
    img = shlex.quote(image)
    marker = f"{scratch}/baseline-done"
    scripts = {
        # sbatch until the job is RUNNING (then cancelled)
        "sbatch_to_running_s": (
            "t0=$(date +%s.%N); id=$(sbatch --parsable -p debug -N1 -t 2 -o /dev/null "
            "--wrap 'sleep 60'); until [ \"$(squeue -h -j $id -o %T)\" = RUNNING ]; do "
            "sleep 0.05; done; t1=$(date +%s.%N); scancel $id; echo $t0 $t1"
        ),
        # a node runs the site image (srun is interactive: no batch queueing delay)
        "srun_apptainer_s": (
            f"t0=$(date +%s.%N); srun -p debug -N1 -t 2 apptainer -s exec {img} "
            "condor_version >/dev/null; t1=$(date +%s.%N); echo $t0 $t1"
        ),
        # sbatch of that same apptainer exec, until it has run
        "sbatch_apptainer_done_s": (
            f"rm -f {marker}; t0=$(date +%s.%N); sbatch -Q -p debug -N1 -t 2 -o /dev/null "
            f"--wrap 'apptainer -s exec {img} condor_version >/dev/null && touch {marker}'; "
            f"until [ -e {marker} ]; do sleep 0.05; done; t1=$(date +%s.%N); rm -f {marker}; "
            "echo $t0 $t1"
        ),
    }
    best: dict[str, float] = {}
    for _ in range(BASELINE_REPEATS):
        for key, script in scripts.items():
            t0, t1 = (float(x) for x in remote(profile, script).split()[-2:])
            best[key] = min(best.get(key, float("inf")), t1 - t0)
    return {key: round(value, 2) for key, value in best.items()}


def lumberjack(*args: str) -> dict:
    result = journey.lumberjack(*args, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"condor_lumberjack {' '.join(args)}: {result.stderr.strip()}")
    lines = result.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if "--json" in args else {}
    except (ValueError, IndexError):
        return {}


def agent_at(export_dir: str) -> str:
    from lumberjack.ap.agent_zipapp import shipped_agent
    from lumberjack.core.contract import ExportLayout

    return ExportLayout(export_dir).agent_file(shipped_agent().sha256)


def timed_launch(profile: SiteProfile, name: str, export_dir: str, want: int, timeout: float):
    """Launch `name` and watch it at the site; events relative to the launch's start."""
    watcher = subprocess.Popen(
        [*ssh_command(profile), shlex.join(["python3", "-c", _WATCHER, export_dir, str(want),
                                             str(timeout), agent_at(export_dir)])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watcher.stdout is not None
    events: dict[str, float] = {}
    ready = json.loads(watcher.stdout.readline())  # the watcher runs: now launch
    assert ready["event"] == "ready", ready
    started = time.time()
    lumberjack("launch", name)
    events["launch_returned"] = time.time()
    out, err = watcher.communicate(timeout=timeout + 30)
    cycles = []
    for line in out.splitlines():
        event = json.loads(line)
        if event["event"] == "cycle":
            cycles.append(round(event["t"] - started, 2))
        else:
            events[event["event"]] = event["t"]
    if "first_running" not in events:
        raise RuntimeError(f"{name}: no job ran in {timeout} s: {out.strip()} {err.strip()}")
    result: dict = {key: round(value - started, 2) for key, value in events.items()}
    result["negotiation_cycles"] = cycles
    if "all_done" not in events:  # reported as such; cleanup brings the jobs back
        result["all_done"] = f"not within {timeout:.0f}"
    return result


def export_and_ship(work: Path, name: str, jobs: int, nodes: int) -> None:
    job_dir = journey.make_job_dir(work, f"jobs-{name}")
    cluster = journey.submit(job_dir, jobs)
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", name,
               "--nodes", str(nodes), "--cores", "2", "--walltime", "10m")  # fmt: skip
    lumberjack("ship", name)


def finish(name: str) -> list[str]:
    """fetch, import, cleanup; on an export that did not get that far, unexport."""
    problems = []
    for step in ("fetch", "import", "cleanup"):
        result = journey.lumberjack(step, name, check=False)
        if result.returncode != 0:
            problems.append(f"{step}: {result.stderr.strip()[-200:]}")
    if problems:
        result = journey.lumberjack("unexport", name, check=False)
        if result.returncode == 0:
            problems.append("unexported")
    return problems


def measure(work: Path, profile: SiteProfile, name: str, jobs: int, nodes: int, timeout: float):
    export_and_ship(work, name, jobs, nodes)
    try:
        with Site(profile) as site:
            export_dir = site.export_dir(name)
            # the testbed's Slurm is shared: other batch jobs delay the pilot's start
            others = site.conn.run("squeue -h | wc -l").stdout.strip()
        events = timed_launch(profile, name, export_dir, jobs, timeout)
    finally:
        problems = finish(name)
    return {"jobs": jobs, "nodes": nodes, **events, "other_batch_jobs": int(others or 0),
            "cleanup_problems": problems}  # fmt: skip


def launch_costs(profile: SiteProfile) -> dict:
    """What `launch` spends before the site does anything, best of 3: the CLI's start-up
    (`condor_lumberjack --help`: interpreter, click, the commands' imports) and one SSH
    connection with a command (paramiko: TCP, key exchange, key login, one channel)."""
    cli = ssh = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        journey.lumberjack("--help")
        cli = min(cli, time.perf_counter() - started)
        started = time.perf_counter()
        with Site(profile) as site:
            site.conn.run("true")
        ssh = min(ssh, time.perf_counter() - started)
    return {"cli_start_s": round(cli, 2), "ssh_connect_s": round(ssh, 2)}


def run(work: Path) -> dict:
    """Baselines and both launches; `work` is a local scratch dir (removed afterwards)."""
    os.environ.setdefault("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))
    profile = find_profile("testbed")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    tag = os.getpid()
    with Site(profile) as site:
        image = site.conn.expand(profile.container.image)
        scratch = site.conn.expand(f"~/bench-launch-{tag}")
        site.conn.run(f"mkdir -p {shlex.quote(scratch)}")
    try:
        baseline = slurm_baselines(profile, image, scratch)
        costs = launch_costs(profile)
        small = measure(work, profile, f"bench-launch-{tag}", SMALL_JOBS, 1, SMALL_TIMEOUT_S)
        many = measure(work, profile, f"bench-many-{tag}", MANY_JOBS, NODES, MANY_TIMEOUT_S)
    finally:
        remote(profile, f"rm -rf {shlex.quote(scratch)}")
        shutil.rmtree(work, ignore_errors=True)
    first = small.get("job_dir", small["first_running"])
    return {
        "baseline": baseline,
        "launch_costs": costs,
        "small": small,
        "first_job_s": first,
        "ratio_first_job_vs_goal": round(first / GOAL_FIRST_JOB_S, 2),
        "many": many,
        "ratio_first_running_vs_sbatch": round(
            small["first_running"] / baseline["sbatch_to_running_s"], 1
        ),
        "ratio_first_running_vs_sbatch_apptainer": round(
            small["first_running"] / baseline["sbatch_apptainer_done_s"], 1
        ),
    }


def breakdown(small: dict) -> str:
    rows, before = [], 0.0
    for event, what in STEPS:
        if not isinstance(small.get(event), (int, float)):
            continue
        at = small[event]
        rows.append(f"| {event} | {what} | {at:.2f} s | +{at - before:.2f} s |")
        before = at
    return "\n".join(rows)


def markdown(results: dict) -> str:
    b, s, m = results["baseline"], results["small"], results["many"]
    c = results["launch_costs"]
    cycles = ", ".join(f"{t:.1f}" for t in s.get("negotiation_cycles", [])[:8]) or "none seen"
    return f"""## Launch: `condor_lumberjack launch` to the first job running, vs plain Slurm

On the testbed's emulated site (Slurm, 3 nodes of 2 cores), baseline and lumberjack side
by side, times at the site's clock (best of {BASELINE_REPEATS} for the baselines, one launch
each for lumberjack, shipping excluded; bench/bench_launch.py). A watcher at the site
polls every 0.1 s for each step's trace (files the daemons write, lines in their logs).

| baseline | seconds |
|---|---:|
| sbatch of a trivial job until RUNNING | {b["sbatch_to_running_s"]} s |
| `srun -N1 apptainer exec` of the site image | {b["srun_apptainer_s"]} s |
| sbatch of that apptainer exec, until it has run | {b["sbatch_apptainer_done_s"]} s |

Lumberjack, {s["jobs"]} jobs on {s["nodes"]} node, from the start of `launch`, step by step:

| trace | what happened since the previous one | at | step |
|---|---|---:|---:|
{breakdown(s)}
| all {s["jobs"]} jobs done | | {s["all_done"]} s | |

**First job running (its sandbox made by the starter): {results["first_job_s"]} s**, goal
{GOAL_FIRST_JOB_S:g} s (issue P5): **{results["ratio_first_job_vs_goal"]}x** the goal;
{results["ratio_first_running_vs_sbatch"]}x plain sbatch-to-RUNNING (JobStatus 2 in the
queue's log on disk at {s["first_running"]} s). Negotiation cycles began at {cycles} s.
Of `launch`'s own time, the CLI's start-up is {c["cli_start_s"]} s and one SSH
connection with a command {c["ssh_connect_s"]} s (best of 3 each).

Each second left, by the table: `launch` itself (to the pilot submitted) is the CLI's
start-up (interpreter, click, the commands' imports), the SSH login, the helper that
writes launch.json, the agent's start and the queue's placement (about a tenth), then
the pool's Apptainer instance with master, shared port, collector, negotiator and
schedd until the schedd answers (about a second: the image's start and five daemons'
start-up on 2 cores), then the pilots' token (`condor_token_create` run in the
instance: another apptainer exec). Slurm starts the pilot within a tenth; node.sh's
apptainer exec and the master and startd take under half a second. The largest step is
the wait for the negotiator: a new startd is matched only by the next cycle, and
nothing tells the negotiator it arrived. The cycles now come every 2 s
(`NEGOTIATOR_INTERVAL = 2`, `NEGOTIATOR_CYCLE_DELAY = 2`, `NEGOTIATOR_MIN_INTERVAL = 1`
in the pool's config; they were 5 s, and this step was 3.8 s before the change: first
job at 7.6 s); on average half a cycle is waited, at worst a whole one. Claim, shadow,
starter and sandbox follow within a few tenths. What would move it further: the pilot
token made once with the pool's own key at launch without a second apptainer exec, the
CLI importing only the command it runs, and starting the pool's daemons without
waiting on the schedd before the token.

{m["jobs"]} short jobs on {m["nodes"]} nodes (one pilot, 6 cores): `launch` returned after
{m["launch_returned"]} s, the pilot's first node.sh started after {m.get("first_node", "n/a")} s,
the first job ran after {m.get("job_dir", m["first_running"])} s, all {m["jobs"]} were done
after **{m["all_done"]} s** from the start of `launch`. Other batch jobs in the site's queue
at launch: {s["other_batch_jobs"]} (4-job run), {m["other_batch_jobs"]} ({m["jobs"]}-job run);
the testbed's Slurm is shared, and a pilot waits for nodes another job holds.
"""


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    import standalone

    sys.exit(standalone.main("launch", run, markdown))
