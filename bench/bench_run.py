"""`condor_lumberjack run --wait` end to end: 200 jobs of 1 s on the testbed site.

The testbed site has 3 nodes of 2 cores: 6 slots. The ideal time of 200 jobs of 1 s is
200 x 1 s / 6 slots; the goal (issue P8) is at most 1.3 x ideal + 20 s for the whole
journey: export, ship, launch (the pool, one pilot of 3 nodes), wait (polled every
POLL_S), fetch, import, all from one command. Where the time went comes from the
ledger's own record of the export's steps. Every job comes back (checked), then the
export is cleaned up. Run alone with `python bench/bench_run.py` (testbed up, as
root), or by `make bench`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "containers" / "testbed"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))

import journey  # noqa: E402
import testbed  # noqa: E402
from targets import P8_GOAL  # noqa: E402

from lumberjack.state.ledger import Ledger  # noqa: E402

JOBS = 200
JOB_S = 1
NODES = 3
CORES = 2
POLL_S = 2
TIMEOUT_S = 600


def ideal_s() -> float:
    return JOBS * JOB_S / (NODES * CORES)


def goal_s() -> float:
    return 1.3 * ideal_s() + 20


def timeline(name: str, started: float) -> list[tuple[str, float]]:
    """(what, seconds from the start of `run`) from the ledger's record of the export."""
    marks: list[tuple[str, float]] = []
    seen: set[str] = set()
    for row in Ledger().steps(name):
        step, status = row["step"], row["status"]
        if step.startswith("phase:"):
            label = f"phase {step.split(':', 1)[1]}"
        elif status == "done" and step != "status":
            label = f"{step} done"
        else:
            continue
        if label not in seen:
            seen.add(label)
            marks.append((label, round(row["time"] - started, 2)))
    return marks


#: A finished job's times as the site reported them (import takes these as results).
TIMES = ["ProcId", "JobCurrentStartDate", "JobCurrentStartExecutingDate", "CompletionDate",
         "LastRemoteHost", "RemoteHost"]  # fmt: skip


def slot_costs(ads: list[dict]) -> dict:
    """Where a slot's time goes, mean seconds per job, from the jobs' own dates (whole
    seconds, so each mean is good to a fraction of a second over 200 jobs):
    `setup`, the shadow's start to the job's executable starting (claim activation,
    input transfer); `run`, the executable's start to completion (with output transfer);
    `gap`, one job's completion to the next job's start on the same slot (the schedd
    reusing the claim at once, or a slot waiting for the negotiator)."""
    by_slot: dict[str, list[dict]] = {}
    for ad in ads:
        slot = ad.get("LastRemoteHost") or ad.get("RemoteHost")
        if slot and all(ad.get(k) for k in TIMES[1:4]):
            by_slot.setdefault(str(slot), []).append(ad)
    setup, run_s, gaps = [], [], []
    for jobs in by_slot.values():
        jobs.sort(key=lambda a: a["JobCurrentStartDate"])
        for before, ad in zip([None, *jobs], jobs):
            setup.append(ad["JobCurrentStartExecutingDate"] - ad["JobCurrentStartDate"])
            run_s.append(ad["CompletionDate"] - ad["JobCurrentStartExecutingDate"])
            if before is not None:
                gaps.append(ad["JobCurrentStartDate"] - before["CompletionDate"])

    def mean(values: list[int]) -> float | None:
        return round(sum(values) / len(values), 2) if values else None

    return {"slots_seen": len(by_slot), "jobs_seen": len(setup), "setup_s": mean(setup),
            "run_s": mean(run_s), "gap_s": mean(gaps),
            "gaps_over_1s": sum(1 for g in gaps if g > 1), "gaps": len(gaps)}  # fmt: skip


#: The second workload: the same jobs, naming their outputs. HTCondor's starter waits 1 s
#: after the input transfer of a job that names none (its outputs are then the files whose
#: modification time changed, in whole seconds); a job that names them skips that second,
#: and meets the shadow's "retry" instead (see _each_second).
NAMED_OUTPUTS = {"transfer_output_files": "result.txt, renamed.txt"}


def journey_once(work: Path, tag: str, **submit: str) -> dict:
    """One `run --wait` of JOBS jobs (`submit`: more of their submit description), timed
    from its start; every job's dates from the history; the export cleaned up after."""
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    name = f"bench-run-{tag}-{os.getpid()}"
    job_dir = journey.make_job_dir(work, "jobs-run")
    cluster = journey.submit(job_dir, JOBS, arguments=f"$(Process) $(code) {JOB_S}", **submit)
    started = time.time()
    try:
        result = journey.lumberjack(
            "run", "--ids", str(cluster), "--site", "testbed", "--name", name,
            "--nodes", str(NODES), "--cores", str(CORES), "--walltime", "20m",
            "--wait", "--poll", str(POLL_S), "--timeout", str(TIMEOUT_S), "--json",
            check=False,
        )  # fmt: skip
        seconds = time.time() - started
        answer = journey.last_json(result) if result.stdout.strip() else {}
        marks = timeline(name, started)
        outputs = sorted(p.name for p in (job_dir / "results").iterdir())
        ads = journey.history(cluster, TIMES, JOBS, timeout=150)
    finally:
        cleaned = journey.lumberjack("cleanup", name, check=False)
        if cleaned.returncode != 0:
            journey.lumberjack("unexport", name, check=False)
            journey.lumberjack("cleanup", name, check=False)
    imported = answer.get("imported") or {}
    return {
        "exit": result.returncode,
        "completed": imported.get("completed"),
        "outputs_back": len(outputs),
        "seconds": round(seconds, 1),
        "ratio_vs_goal": round(seconds / goal_s(), 2),
        "ratio_vs_ideal": round(seconds / ideal_s(), 2),
        "timeline": marks,
        "span": job_span(ads, started),
        "slot_costs": slot_costs(ads),
        "error": result.stderr.strip()[-300:] if result.returncode else "",
    }


def job_span(ads: list[dict], started: float) -> dict:
    """The first shadow's start and the last job's completion, seconds from the start of
    `run` (the jobs' own dates: whole seconds)."""
    starts = [ad["JobCurrentStartDate"] for ad in ads if ad.get("JobCurrentStartDate")]
    ends = [ad["CompletionDate"] for ad in ads if ad.get("CompletionDate")]
    if not starts or not ends:
        return {}
    return {"first_start_s": round(min(starts) - started, 1),
            "last_end_s": round(max(ends) - started, 1)}  # fmt: skip


#: The plain pool: the site pool's slots and negotiation cadence (pool.config.tmpl).
PLAIN_POOL_CONFIG = f"""NUM_CPUS = {NODES * CORES}
NUM_SLOTS = 1
NUM_SLOTS_TYPE_1 = 1
SLOT_TYPE_1 = 100%
SLOT_TYPE_1_PARTITIONABLE = TRUE
NEGOTIATOR_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = 1
NEGOTIATOR_MIN_INTERVAL = 1
"""


def plain_pool_once(work: Path, **submit: str) -> dict:
    """The same JOBS jobs submitted straight to a plain HTCondor pool of the same slots
    (a schedd and one startd, tests/integration/reference_pool.py), timed from the
    submission to the last job leaving the queue: the floor HTCondor itself sets. The
    pool is up and its slots advertised before the clock starts, as a user's pool is."""
    from reference_pool import reference_pool

    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    job_dir = journey.make_job_dir(work, "jobs-plain")
    with reference_pool(PLAIN_POOL_CONFIG) as pool:
        # A process of its own: this one's htcondor2 configuration stays the access point's.
        child = subprocess.run(
            [sys.executable, __file__, "plain-child", str(job_dir), json.dumps(submit)],
            env={**os.environ, **pool.client_env_of(testbed.SUBMITTER)},
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
    if child.returncode != 0:
        raise RuntimeError(f"plain pool run failed: {child.stderr[-1000:]}")
    result = json.loads(child.stdout.splitlines()[-1])
    ads, started = result.pop("ads"), result.pop("started")
    return {**result, "span": job_span(ads, started), "slot_costs": slot_costs(ads)}


def plain_child(job_dir: Path, submit: dict[str, str]) -> dict:
    """In the plain pool's client configuration: wait for its slots, submit, wait for
    the queue to empty; the time and the jobs' dates."""
    import htcondor2

    collector = htcondor2.Collector()
    deadline = time.monotonic() + 120
    # One partitionable slot of all the cores (the site: one of each node's cores).
    while _cores(collector) < NODES * CORES:
        if time.monotonic() > deadline:
            raise RuntimeError("the plain pool's slots never showed up")
        time.sleep(0.2)
    schedd = htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd))
    started = time.time()
    cluster = journey.submit(job_dir, JOBS, arguments=f"$(Process) $(code) {JOB_S}", **submit)
    while schedd.query(f"ClusterId == {cluster}", ["ProcId"], limit=1):
        if time.time() - started > TIMEOUT_S:
            raise RuntimeError(f"plain pool: jobs of {cluster} still queued")
        time.sleep(0.2)
    seconds = time.time() - started
    ads = [dict(a) for a in schedd.history(f"ClusterId == {cluster}", TIMES, match=-1)]
    outputs = len(list((job_dir / "results").iterdir()))
    return {"seconds": round(seconds, 1), "outputs_back": outputs, "started": started,
            "ads": [{k: v for k, v in ad.items() if isinstance(v, (int, float, str))}
                    for ad in ads]}  # fmt: skip


def _cores(collector: Any) -> int:
    import htcondor2

    slots = collector.query(htcondor2.AdType.Startd, projection=["Cpus", "PartitionableSlot"])
    return sum(int(ad.get("Cpus", 0)) for ad in slots if ad.get("PartitionableSlot"))


#: Rounds of the pair (plain pool, then lumberjack) side by side; medians reported.
ROUNDS = 3


def run(work: Path, rounds: int = ROUNDS) -> dict:
    os.environ.setdefault("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))
    shutil.rmtree(work, ignore_errors=True)
    pairs = []
    try:
        for n in range(rounds):
            base = plain_pool_once(work / f"base-{n}")
            ours = journey_once(work / f"plain-{n}", f"plain{n}")
            pairs.append((base, ours))
        named = journey_once(work / "named", "named", **NAMED_OUTPUTS)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [round(ours["seconds"] / base["seconds"], 2) for base, ours in pairs]
    # The round whose ratio is the median stands for all (its timeline, its slot costs).
    middle = sorted(range(rounds), key=lambda i: ratios[i])[rounds // 2]
    base, plain = pairs[middle]
    return {
        "jobs": JOBS,
        "job_s": JOB_S,
        "slots": NODES * CORES,
        "poll_s": POLL_S,
        "ideal_s": round(ideal_s(), 1),
        "goal_s": round(goal_s(), 1),
        **plain,
        "plain_pool": base,
        "rounds": [
            {"plain_pool_s": b["seconds"], "run_s": o["seconds"], "ratio": r}
            for (b, o), r in zip(pairs, ratios)
        ],  # fmt: skip
        "ratio_vs_plain_pool": round(statistics.median(ratios), 2),
        "named_outputs": named,
    }


#: What each change of issue 24 cut, measured once (2026-11) from the site daemons' own
#: logs with sub-second timestamps (D_SUB_SECOND) in 24-job runs and from the commands
#: alone at the site; the bench does not rerun it.
CHANGES = (
    ("`SINGULARITY_RUN_TEST_BEFORE_JOB = FALSE`", "every job",
     "an `apptainer test` container, 0.12-0.31 s, before the job's own", "none",
     "~0.2 s a job: ~6 s of a slot's 33 jobs"),
    ("`FILETRANSFER_PLUGINS`: curl and data only", "startd start",
     "2.8 s to the slot's first state (box, gdrive, onedrive: 1.45 s)", "1.7 s",
     "~1.1 s to the first job"),
    ("`NEGOTIATOR_INTERVAL`, `NEGOTIATOR_CYCLE_DELAY` 2 s → 1 s", "first match",
     "0-2 s after the startd's first ad", "0-1 s", "~0.5 s on average"),
    ("the pool's container ended by SIGTERM to its init", "fetch",
     "`apptainer instance stop`: 2.3 s (1.6 s idle)", "25 ms alone", "~2.2 s"),
    ("launch and stop look for daemons every 0.1 s, not 0.5 s", "launch, fetch",
     "up to 0.5 s a wait", "up to 0.1 s", "~0.2 s a wait, 3 waits"),
)  # fmt: skip


def changes_table() -> str:
    head = "| change | where | before | after | saved |\n|---|---|---|---|---|\n"
    return head + "\n".join("| " + " | ".join(row) + " |" for row in CHANGES)


#: This section's figures before the changes of issue 24 (BENCHMARKS.md of 2026-11-26).
BEFORE = {"running": 7.5, "fetch": 4.2, "per_job": 2.16}

#: Looked at and left as they were (same measurements).
LEFT = """Looked at and left: the nested container's options. `apptainer exec` of the site
image's SIF takes 0.12-0.15 s alone (`--no-init`, `--no-mount` change nothing measurable),
of an unpacked sandbox directory 0.07-0.1 s: 30-50 ms a job, for 3.7 s of unpacking and
the image's size again on every node, not taken. JOB_START_DELAY (0) and JOB_START_COUNT
(1) are HTCondor's defaults and start the shadows within milliseconds; CLAIM_WORKLIFE and
SHADOW_WORKLIFE already let every claim run job after job; STARTER_UPDATE_INTERVAL does
not touch jobs of 1 s."""


def _mean(costs: dict, key: str) -> float:
    return costs.get(key) or 0.0


def _each_second(r: dict) -> str:
    """The timeline of the jobs that name no outputs, explained."""
    c, span = r.get("slot_costs") or {}, r.get("span") or {}
    if not c.get("jobs_seen") or not span:
        return "The jobs' own dates were not found in the history: no breakdown."
    at = dict(r["timeline"])
    launched = at.get("launch done", 0.0)
    per_slot = c["jobs_seen"] / c["slots_seen"]
    per_job = _mean(c, "setup_s") + _mean(c, "run_s") + _mean(c, "gap_s")
    named = (r.get("named_outputs") or {}).get("slot_costs") or {}
    n_span = (r.get("named_outputs") or {}).get("span") or {}
    named_verdict = (
        f"its jobs ran from {n_span['first_start_s']} s to {n_span['last_end_s']} s "
        f"({n_span['last_end_s'] - n_span['first_start_s']:.0f} s, against "
        f"{span['last_end_s'] - span['first_start_s']:.0f} s)"
        if n_span
        else "its jobs' dates were not found"
    )
    running = at.get("phase running", 0.0) - launched
    fetch = at.get("fetch done", 0.0) - at.get("phase finished", 0.0)
    imported = at.get("import done", 0.0) - at.get("fetch done", 0.0)
    return f"""**To the first job** ({span["first_start_s"]} s after `run` started, by the jobs' own
dates; the ledger's "phase running" is the next poll that saw it): the command's start
and its questions to the access point's schedd ({at.get("phase exporting", 0.0):.1f} s), export,
ship and launch (done at {launched:.1f} s: the pool started, the pilot submitted); then at
the site Slurm
starts the pilot (under a second on an idle testbed, more when other jobs hold its
nodes), each node's startd starts (1.7 s: HTCondor's own probes of Java, Docker,
Apptainer with three test containers, and the two file-transfer plugins), sends its
first ad 1 s later, and the next negotiation cycle (at most 1 s) matches it: the schedd
claims the slots and starts the first shadows.

**On a slot** ({per_slot:.1f} jobs each, means over {c["jobs_seen"]} jobs): the shadow's start
to the executable's **{c["setup_s"]} s**: claim activation, a starter, the input transfer
(milliseconds), then **1.0 s of HTCondor's own**: the starter sleeps a second after
the input transfer of a job that names no outputs (it sends back the files whose
modification time changed, in whole seconds). The executable's start to completion
**{c["run_s"]} s**: the nested Apptainer container's start and end (0.1 s alone, 0.2-0.4 s
with six slots on 2 cores), the job's {r["job_s"]} s, the output transfer. One job's end to
the next one's start on the slot **{c["gap_s"]} s** ({c["gaps_over_1s"]} of {c["gaps"]} gaps
over 1 s): claims are reused, no negotiation between jobs. {per_slot:.1f} x
{per_job:.2f} s: the jobs ran from {span["first_start_s"]} s to {span["last_end_s"]} s.

**The tail** ({r["seconds"] - span["last_end_s"]:.1f} s from the last job's end to `run`
returning): the next status poll (every {r["poll_s"]} s) sees every job finished; fetch
({fetch:.1f} s): the schedd stopped with its queue final, the pilots cancelled, the
pool's container stopped, the spool and the logs downloaded; import ({imported:.1f} s, by
the access point's schedd, which other work on this machine shares).

**The same jobs naming their outputs** (`transfer_output_files`): the starter skips its
second but asks the shadow for the go-ahead at once, and a shadow still busy with the
input transfer answers "retry": the starter asks again 5 s later (2 of 12 first asks in
a run with the starters' full debug log). Set-up {named.get("setup_s")} s, run
{named.get("run_s")} s per job; {named_verdict}. So that second ({1 / per_job:.0%} of a
slot's time for jobs of {r["job_s"]} s) is HTCondor's and stays: for jobs this short,
fewer and longer jobs.

What each change cut, each measured on its own (the daemons' logs with sub-second
timestamps in 24-job runs, the commands alone at the site). Against this section's run
before them ("launch done" to "phase running" {BEFORE["running"]} s, fetch {BEFORE["fetch"]} s,
a job's time on its slot {BEFORE["per_job"]} s): {running:.1f} s, fetch {fetch:.1f} s; a
job's time on its slot ({per_job:.2f} s) did not shrink measurably
on this machine, whose 2 cores the slots share with everything else running on it.

{changes_table()}

{LEFT}"""


def against_plain_pool(r: dict) -> str:
    """The rounds against the plain pool, and where the difference goes."""
    base = r.get("plain_pool")
    if not base:
        return ""
    rounds = "\n".join(
        f"| {i + 1} | {x['plain_pool_s']} s | {x['run_s']} s | {x['ratio']}x |"
        for i, x in enumerate(r["rounds"])
    )
    ours_span, base_span = r.get("span") or {}, base.get("span") or {}
    ours_c, base_c = r.get("slot_costs") or {}, base.get("slot_costs") or {}
    if not ours_span or not base_span:
        return f"| round | plain pool | `run --wait` | ratio |\n|---:|---:|---:|---:|\n{rounds}\n"
    first = ours_span["first_start_s"] - base_span["first_start_s"]
    ours_jobs = ours_span["last_end_s"] - ours_span["first_start_s"]
    base_jobs = base_span["last_end_s"] - base_span["first_start_s"]
    tail = (r["seconds"] - ours_span["last_end_s"]) - (base["seconds"] - base_span["last_end_s"])
    return f"""**Against a plain pool** (the floor HTCondor itself sets): the same {r["jobs"]} jobs,
the same submit description, submitted straight to a plain HTCondor pool of the same slots on
the testbed (tests/integration/reference_pool.py: its own schedd and one startd, one
partitionable slot of {r["slots"]} cores where the site has 3 of 2, the site pool's
negotiation cadence), once its slots are advertised, timed to the last job leaving its
queue. The pair side by side, {len(r["rounds"])} rounds (the plain pool, then `run --wait`),
under `nice`, on a machine that other work shared; the median ratio stands, the round of
the median is the one described above and below.

| round | plain pool | `run --wait` | ratio |
|---:|---:|---:|---:|
{rounds}

**Median ratio {r["ratio_vs_plain_pool"]}x** (goal {P8_GOAL}x). Where the
{r["seconds"] - base["seconds"]:.1f} s over the plain pool go, in the median round: to the
first job {first:+.1f} s (export, ship, launch, Slurm and the startds' start: the plain
pool's slots were up; its first job started {base_span["first_start_s"]} s after the
submission); the jobs themselves {ours_jobs - base_jobs:+.1f} s ({ours_jobs:.0f} s against
{base_jobs:.0f} s from the first start to the last end: on a slot set-up {ours_c.get("setup_s")}
against {base_c.get("setup_s")} s, run {ours_c.get("run_s")} against {base_c.get("run_s")} s a
job, the nested container's start included); the tail {tail:+.1f} s (the status poll, fetch
and import against the plain schedd's job leaving its queue). HTCondor's own second a job
(the starter's wait after the input transfer) is in both.
"""


def markdown(r: dict) -> str:
    rows, before = [], 0.0
    for label, at in r["timeline"]:
        rows.append(f"| {label} | {at:.1f} s | +{at - before:.1f} s |")
        before = at
    rows.append(f"| `run` returns | {r['seconds']:.1f} s | +{r['seconds'] - before:.1f} s |")
    steps = "\n".join(rows)
    failed = f" (exit {r['exit']}: {r['error']})" if r["exit"] else ""
    n = r.get("named_outputs") or {}
    named_row = (
        f"| the same jobs naming their outputs | {n['seconds']} s "
        f"(first job at {(n.get('span') or {}).get('first_start_s')} s) | {r['goal_s']} s | "
        f"**{n['ratio_vs_goal']}x** |"
        if n
        else ""
    )
    named_failed = f" (exit {n['exit']}: {n['error']})" if n.get("exit") else ""
    return f"""## run --wait end to end: {r["jobs"]} jobs of {r["job_s"]} s on the testbed site

One `condor_lumberjack run --ids CLUSTER --site testbed --nodes 3 --cores 2 --wait
--poll {r["poll_s"]}`: export, ship, launch (the pool, one pilot of 3 nodes x 2 cores =
{r["slots"]} slots), wait, fetch, import (bench/bench_run.py). Ideal: {r["jobs"]} x
{r["job_s"]} s / {r["slots"]} slots = {r["ideal_s"]} s; goal (issue P8): 1.3 x ideal + 20 s =
{r["goal_s"]} s. Run twice: the jobs as the other sections submit them (no
`transfer_output_files`), and the same jobs naming their outputs.

| measure | today | goal | ratio |
|---|---:|---:|---:|
| `run --wait`, start to return | {r["seconds"]} s | {r["goal_s"]} s | **{r["ratio_vs_goal"]}x** |
{named_row}

{r["completed"]} of {r["jobs"]} jobs came back completed, {r["outputs_back"]} outputs in
place{failed}; {r["ratio_vs_ideal"]}x the ideal (naming their outputs: {n.get("completed")}
completed, {n.get("outputs_back")} outputs{named_failed}). Where the time went (the
ledger's record of the export, from the start of `run`):

| step | at | took |
|---|---:|---:|
{steps}

{against_plain_pool(r)}
{_each_second(r)}
"""


if __name__ == "__main__":
    if sys.argv[1:2] == ["plain-child"]:
        print(json.dumps(plain_child(Path(sys.argv[2]), json.loads(sys.argv[3]))))
        sys.exit(0)
    sys.path.insert(0, str(ROOT / "bench"))
    import standalone

    sys.exit(standalone.main("run", run, markdown))
