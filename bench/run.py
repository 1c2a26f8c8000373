"""`make bench`: lumberjack's costs as ratios against a baseline run side by side.

- export, ship and import of N jobs: `condor_lumberjack export` / the bundle's upload /
  `import --in` against the bare `Schedd.export_jobs` / `tar -c | ssh` /
  `import_exported_job_results` on identical jobs, N = 1,000, 10,000, 30,000 and 100,000,
  on the testbed's real access-point schedd and site; peak memory of each, and of
  export's and import's own work at 10,000 to 100,000 jobs (bench/bench_export_import.py).
- job_queue.log throughput: records/s to read, replay+rewrite, and write.
- shipping to the testbed site: upload vs `tar -c | ssh site tar -x`; resume after a cut
  (bench/bench_shipping.py).
- launch at the testbed site: `condor_lumberjack launch` to the first job running vs plain
  Slurm (sbatch to RUNNING, apptainer exec of the site image); 30 jobs on 3 nodes to all
  done (bench/bench_launch.py).
- sync with nothing to do, 50 exports at one site: its time and its SSH logins
  (bench/bench_sync.py).
- `run --wait` end to end, 200 jobs of 1 s on the 3-node testbed site, against the ideal
  (bench/bench_run.py).
- many exports at once: 20 exports (in one lease) driven by `sync` rounds through one
  MFA login, every output checked, the no-change sync of all 20 timed (bench/bench_many.py).

Results go to BENCHMARKS.md (and bench/results/latest.json). Timings on a shared machine
are noisy: read the ratios, not the seconds.

    python bench/run.py [SECTION ...]     SECTION: export log shipping launch sync run
                                          many (default: all)

A section left out keeps its part of BENCHMARKS.md as it was.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "containers" / "testbed"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_export_import  # noqa: E402
import bench_jobqueuelog  # noqa: E402
import bench_launch  # noqa: E402
import bench_many  # noqa: E402
import bench_run  # noqa: E402
import bench_shipping  # noqa: E402
import bench_sync  # noqa: E402
import targets  # noqa: E402
import testbed  # noqa: E402


def owned_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.chown(path, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    return path


SECTIONS = ("export", "log", "shipping", "launch", "sync", "run", "many")
#: The sections that need the testbed up.
ON_TESTBED = {"export", "shipping", "launch", "sync", "run", "many"}
# The BENCHMARKS.md headings each section writes (kept as they were when it is not run).
HEADINGS = {
    "export": ("## Export", "## The bundle to the site", "## Import", "## Peak memory"),
    "log": ("## job_queue.log",),
    "shipping": ("## Shipping",),
    "launch": ("## Launch",),
    "sync": ("## Sync",),
    "run": ("## run --wait",),
    "many": ("## Many exports",),
}


#: The keys of each section's results (bench/results/latest.json).
RESULT_KEYS = ("export", "job_queue_log", "shipping", "launch", "sync", "run", "many")


def main(argv: list[str]) -> int:
    sections = argv or list(SECTIONS)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        print(f"unknown section(s) {', '.join(unknown)}; choose from {' '.join(SECTIONS)}")
        return 2
    results: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "sections": sections,
        # The machine is shared: how busy it was says how far the seconds can be trusted.
        "load_at_start": round(os.getloadavg()[0], 2),
    }
    if ON_TESTBED & set(sections):
        # A testbed already up (shared with others) is used as it is; one started here
        # is stopped afterwards.
        started_here = not (testbed.ACCESS_POINT.is_running() and testbed.site().is_running())
        os.environ.update(testbed.up() if started_here else testbed.env())
        os.environ["PYTHONPATH"] = str(ROOT)
        # Of this run alone: two runs of different sections may share the testbed.
        work = owned_dir(testbed.testbed_dir() / "work" / f"bench-{os.getpid()}")
        os.environ["LUMBERJACK_STATE_DIR"] = str(testbed.root_state_dir(f"bench-{os.getpid()}"))
        try:
            if "export" in sections:
                results["export"] = bench_export_import.run(work / "export", **export_sizes())
            if "shipping" in sections:
                results["shipping"] = bench_shipping.run(work / "shipping")
            if "launch" in sections:
                results["launch"] = bench_launch.run(work / "launch")
            if "sync" in sections:
                results["sync"] = bench_sync.run(work / "sync")
            if "run" in sections:
                results["run"] = bench_run.run(work / "run")
            if "many" in sections:
                results["many"] = bench_many.run(work / "many")
        finally:
            if started_here:
                testbed.down()
    if "log" in sections:
        results["job_queue_log"] = {
            **bench_jobqueuelog.run(200_000),
            **bench_jobqueuelog.inspect_vs_naive(606_000),
        }
    latest = ROOT / "bench" / "results" / "latest.json"
    # Sections not rerun keep their last figures (as their text in BENCHMARKS.md does).
    earlier = json.loads(latest.read_text()) if latest.exists() else {}
    kept = {key: value for key, value in earlier.items() if key in RESULT_KEYS}
    results = {**kept, **results}
    latest.parent.mkdir(exist_ok=True)
    latest.write_text(json.dumps(results, indent=1))
    write_markdown(results)
    print(json.dumps(results, indent=1))
    print(targets.markdown(results, old_target_rows()))
    return 0


def export_sizes() -> dict[str, tuple[int, ...]]:
    """LUMBERJACK_BENCH_SIZES="1000,10000" runs the export section side by side at those
    sizes only (a busy shared schedd takes many minutes for 100,000); its cloned-queue
    part still goes to 100,000. Unset: every size."""
    sizes = os.environ.get("LUMBERJACK_BENCH_SIZES")
    if not sizes:
        return {}
    return {"sizes": tuple(int(n) for n in sizes.split(",")), "memory_jobs": (10_000, 100_000)}


def old_target_rows() -> dict[str, str]:
    """The rows of the current BENCHMARKS.md's targets table, by id ("P6" -> its line):
    a section not rerun keeps its row as it keeps its text, raw results or not."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else ""
    rows = re.findall(r"^\| (P\d+) \|.*\|$", text, re.MULTILINE)
    lines = re.findall(r"^\| P\d+ \|.*\|$", text, re.MULTILINE)
    return dict(zip(rows, lines))


def old_blocks(headings: tuple[str, ...]) -> str:
    """The parts of the current BENCHMARKS.md under these headings, as they are."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else ""
    blocks = ["## " + b for b in text.split("\n## ")[1:]]
    return "".join(b.rstrip("\n") + "\n\n" for b in blocks if b.startswith(headings))


#: The directories of a source file in a profile line ("/x/y/pathlib.py:56(parse_parts)"):
#: this machine's, not the project's business; results kept from older runs may hold them.
_PROFILE_DIRS = re.compile(r"(?<![\w.-])/(?:[^\s/:()]+/)+(?=[^\s/:()]+\.py:\d)")


def _inspect_text(log: dict) -> str:
    """`inspect --json` against a replay without checks (a log bench of older runs has
    no such figures)."""
    if "inspect_ratio" not in log:
        return ""
    inspect, naive, ratio = log["inspect_json_s"], log["naive_replay_s"], log["inspect_ratio"]
    return f"""
`condor_lumberjack inspect --json` of a log of {log["inspect_records"]:,} records against a
replay of it without any check (bench_jobqueuelog.NAIVE_REPLAY: no key, name, value or
torn-write checks, names case-sensitive; the same JSON, compared), each a process of its
own, best of 3: {inspect} s against {naive} s, **{ratio}x**.
inspect's time is one pass that reads, checks and plays each line as the schedd would
(`jobqueuelog_onepass`: transactions, case-insensitive names, keys by their numbers; a log
it cannot settle as it goes is left to `parse_file` and `replay`), the JSON (`json.dumps`
of the ads), and `python -m lumberjack`'s start-up (`inspect --json FILE` without click).
"""


def write_markdown(results: dict) -> None:
    parts = {}
    if "export" in results:
        parts["export"] = bench_export_import.markdown(results["export"]) + "\n"
    if "job_queue_log" in results:
        log = results["job_queue_log"]
        rates = "\n".join(
            f"| {key} | {value:,.0f} |" for key, value in log.items() if key.endswith("per_s")
        )
        parts["log"] = f"""## job_queue.log throughput (pure Python)

A synthetic, schedd-shaped log of {log["n_records"]:,} records ({log["n_ads"]:,} ads;
bench/bench_jobqueuelog.py); best of {log["repeat"]} runs of each operation.

| operation | records/s |
|---|---:|
{rates}
{_inspect_text(log)}
"""
    if "shipping" in results:
        parts["shipping"] = bench_shipping.markdown(results["shipping"]) + "\n"
    if "launch" in results:
        parts["launch"] = bench_launch.markdown(results["launch"]) + "\n"
    if "sync" in results:
        parts["sync"] = bench_sync.markdown(results["sync"]) + "\n"
    if "run" in results:
        parts["run"] = bench_run.markdown(results["run"]) + "\n"
    if "many" in results:
        parts["many"] = bench_many.markdown(results["many"]) + "\n"
    body = targets.markdown(results, old_target_rows()) + "".join(
        parts.get(s) or old_blocks(HEADINGS[s]) for s in SECTIONS
    )
    body = _PROFILE_DIRS.sub("", body)
    path = ROOT / "BENCHMARKS.md"
    old = path.read_text() if path.exists() else ""
    when = targets.measured_when(old, results["sections"], results["date"], results["machine"])
    load = (
        f"\nLoad average at the start of this run: {results['load_at_start']} (1 min): other"
        " work shared the\nmachine; each baseline ran beside its measurement, under `nice`.\n"
        if "load_at_start" in results
        else ""
    )
    path.write_text(
        f"""# Benchmarks

{when}
on the testbed's real HTCondor schedd. Machines are shared and noisy: compare the ratios,
not the seconds. Rerun everything with `make bench`, or some sections with
`python bench/run.py export log` (export, log, shipping, launch, sync, run, many; a section not
rerun keeps its text below); raw numbers in bench/results/latest.json (not committed).
{load}
{body.rstrip()}
"""
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
