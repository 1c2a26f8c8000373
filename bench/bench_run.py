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

import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "containers" / "testbed"))

import journey  # noqa: E402
import testbed  # noqa: E402

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


def run(work: Path) -> dict:
    os.environ.setdefault("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    name = f"bench-run-{os.getpid()}"
    job_dir = journey.make_job_dir(work, "jobs-run")
    cluster = journey.submit(job_dir, JOBS, arguments=f"$(Process) $(code) {JOB_S}")
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
    finally:
        cleaned = journey.lumberjack("cleanup", name, check=False)
        if cleaned.returncode != 0:
            journey.lumberjack("unexport", name, check=False)
            journey.lumberjack("cleanup", name, check=False)
        shutil.rmtree(work, ignore_errors=True)
    imported = answer.get("imported") or {}
    return {
        "jobs": JOBS,
        "job_s": JOB_S,
        "slots": NODES * CORES,
        "poll_s": POLL_S,
        "exit": result.returncode,
        "completed": imported.get("completed"),
        "outputs_back": len(outputs),
        "seconds": round(seconds, 1),
        "ideal_s": round(ideal_s(), 1),
        "goal_s": round(goal_s(), 1),
        "ratio_vs_goal": round(seconds / goal_s(), 2),
        "ratio_vs_ideal": round(seconds / ideal_s(), 2),
        "timeline": marks,
        "error": result.stderr.strip()[-300:] if result.returncode else "",
    }


def markdown(r: dict) -> str:
    rows, before = [], 0.0
    for label, at in r["timeline"]:
        rows.append(f"| {label} | {at:.1f} s | +{at - before:.1f} s |")
        before = at
    rows.append(f"| `run` returns | {r['seconds']:.1f} s | +{r['seconds'] - before:.1f} s |")
    steps = "\n".join(rows)
    failed = f" (exit {r['exit']}: {r['error']})" if r["exit"] else ""
    return f"""## run --wait end to end: {r["jobs"]} jobs of {r["job_s"]} s on the testbed site

One `condor_lumberjack run --ids CLUSTER --site testbed --nodes 3 --cores 2 --wait
--poll {r["poll_s"]}`: export, ship, launch (the pool, one pilot of 3 nodes x 2 cores =
{r["slots"]} slots), wait, fetch, import (bench/bench_run.py). Ideal: {r["jobs"]} x
{r["job_s"]} s / {r["slots"]} slots = {r["ideal_s"]} s; goal (issue P8): 1.3 x ideal + 20 s =
{r["goal_s"]} s.

| measure | today | goal | ratio |
|---|---:|---:|---:|
| `run --wait`, start to return | {r["seconds"]} s | {r["goal_s"]} s | **{r["ratio_vs_goal"]}x** |

{r["completed"]} of {r["jobs"]} jobs came back completed, {r["outputs_back"]} outputs in
place{failed}; {r["ratio_vs_ideal"]}x the ideal. Where the time went (the ledger's record of
the export, from the start of `run`):

| step | at | took |
|---|---:|---:|
{steps}

What holds it back: the jobs themselves, from the first running to the last done (the
"phase finished" row, polled every {r["poll_s"]} s). {r["jobs"]} jobs on {r["slots"]} slots
ran at about {r["slots"]} jobs per negotiation cycle (2 s): each 1 s job costs its slot
over 2 s, as if a slot took a new job only when the negotiator matched it again rather
than the schedd reusing the claim at once when a job ends; on a 2-core machine the
shadows, starters, their authentication and the file transfers of 6 jobs at a time
(plus the access point's and the site's daemons) also share two cores. Export, ship,
launch, fetch (the schedd stopped gracefully, the spool brought back) and import
together take under 20 s, as the goal allows. What would move it: check the remote
pool's SchedLog for claim reuse after each job (a dynamic slot reused for the next
idle job of the same cluster needs no negotiation), and if the claims are dropped,
find the setting that drops them; then measure on a machine with more cores than
slots.
"""


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    import standalone

    sys.exit(standalone.main("run", run, markdown))
