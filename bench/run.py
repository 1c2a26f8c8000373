"""`make bench`: lumberjack's costs as ratios against a baseline run side by side.

- export of N jobs: `condor_lumberjack export` (query, preflight, path map, the schedd's
  export, rewrite, input copy, manifest) against the bare `Schedd.export_jobs` call on an
  identical cluster, N = 1,000 and 10,000, on the testbed's real access-point schedd.
- job_queue.log throughput: records/s to read, replay+rewrite, and write.
- shipping to the testbed site: upload vs `tar -c | ssh site tar -x`; resume after a cut
  (bench/bench_shipping.py).
- launch at the testbed site: `condor_lumberjack launch` to the first job running vs plain
  Slurm (sbatch to RUNNING, apptainer exec of the site image); 30 jobs on 3 nodes to all
  done (bench/bench_launch.py).

Results go to BENCHMARKS.md (and bench/results/latest.json). Timings on a shared machine
are noisy: read the ratios, not the seconds.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "containers" / "testbed"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_jobqueuelog  # noqa: E402
import bench_launch  # noqa: E402
import bench_shipping  # noqa: E402
import journey  # noqa: E402
import testbed  # noqa: E402


def owned_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.chown(path, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    return path


def bare_export(cluster: int, target: Path) -> float:
    import htcondor2

    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    started = time.perf_counter()
    result = schedd.export_jobs([str(cluster)], str(target), "/site/spool")
    elapsed = time.perf_counter() - started
    assert int(result["ActionResult"]) == 1, result
    schedd.unexport_jobs([str(cluster)])
    return elapsed


def lumberjack_export(cluster: int, target: Path, name: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "lumberjack", "export", "--ids", str(cluster), "--out",
         str(target), "--remote-spool", "/site/spool", "--name", name, "--json"],
        check=True, capture_output=True, env=os.environ,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    subprocess.run([sys.executable, "-m", "lumberjack", "unexport", name], check=True,
                   capture_output=True, env=os.environ)  # fmt: skip
    return elapsed


def bench_export(work: Path, n: int) -> dict:
    job_dir = journey.make_job_dir(work, f"jobs-{n}")
    cluster = journey.submit(job_dir, n)
    bare = bare_export(cluster, owned_dir(work / f"bare-{n}"))
    ours = lumberjack_export(cluster, work / f"lj-{n}", f"bench-{n}-{os.getpid()}")
    return {"jobs": n, "bare_export_s": round(bare, 3), "lumberjack_export_s": round(ours, 3),
            "ratio": round(ours / bare, 1)}  # fmt: skip


def main() -> int:
    started_here = not testbed.ACCESS_POINT.is_running()
    os.environ.update(testbed.up())
    os.environ["PYTHONPATH"] = str(ROOT)
    work = owned_dir(testbed.testbed_dir() / "work" / "bench")
    os.environ["LUMBERJACK_STATE_DIR"] = str(work / "state")
    try:
        exports = [bench_export(work, n) for n in (1000, 10000)]
        shipping = bench_shipping.run(work / "shipping")
        launch = bench_launch.run(work / "launch")
    finally:
        if started_here:
            testbed.down()
    log = bench_jobqueuelog.run(200_000)
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "export": exports,
        "job_queue_log": log,
        "shipping": shipping,
        "launch": launch,
    }
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "latest.json").write_text(json.dumps(results, indent=1))
    write_markdown(results)
    print(json.dumps(results, indent=1))
    return 0


def write_markdown(results: dict) -> None:
    rows = "\n".join(
        f"| {e['jobs']:,} | {e['bare_export_s']} s | {e['lumberjack_export_s']} s | {e['ratio']}x |"
        for e in results["export"]
    )
    log = results["job_queue_log"]
    rates = "\n".join(
        f"| {key} | {value:,.0f} |" for key, value in log.items() if key.endswith("per_s")
    ) or "\n".join(f"| {k} | {v} |" for k, v in log.items())
    (ROOT / "BENCHMARKS.md").write_text(
        f"""# Benchmarks

Measured by `make bench` on {results["date"]} ({results["machine"]}), on the testbed's
real HTCondor schedd. Machines are shared and noisy: compare the ratios, not the seconds.
Rerun with `make bench`; raw numbers in bench/results/latest.json (not committed).

## Export: condor_lumberjack vs the bare `Schedd.export_jobs` call

Same cluster, side by side. The bare call only writes the schedd's job_queue.log; lumberjack
also queries and checks every job, rewrites every path for the site, copies and hashes the
inputs, and writes the manifest, as a separate process (interpreter start-up included).

| jobs | bare export_jobs | lumberjack export | ratio |
|---:|---:|---:|---:|
{rows}

## job_queue.log throughput (pure Python)

| operation | records/s |
|---|---:|
{rates}

{bench_shipping.markdown(results["shipping"])}
{bench_launch.markdown(results["launch"])}"""
    )


if __name__ == "__main__":
    sys.exit(main())
