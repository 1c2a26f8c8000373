"""`make demo`: the local journey shown to a person, step by step, on real daemons.

Submits jobs to the access-point pool, exports them with condor_lumberjack, runs the
bundle in a second, independent pool (standing in for the HPC site), brings the
results back with `import`, and shows where every output landed.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import journey  # noqa: E402
import testbed  # noqa: E402


def step(number: int, text: str) -> None:
    print(f"\n\033[1m== {number}. {text}\033[0m", flush=True)


def show(args: list[str]) -> str:
    print("$ condor_lumberjack " + " ".join(args), flush=True)
    result = journey.lumberjack(*args)
    print(result.stdout.rstrip(), flush=True)
    return result.stdout


def main() -> int:
    started_here = not testbed.ACCESS_POINT.is_running()
    step(1, "Start the access point's HTCondor pool (real daemons, loopback only)")
    os.environ.update(testbed.up())
    work = testbed.testbed_dir() / "work" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    os.environ["LUMBERJACK_STATE_DIR"] = str(work / "state")
    os.environ["PYTHONPATH"] = str(HERE.parent.parent)
    try:
        step(2, "alice submits 4 jobs (input with a space, a subdirectory, a remap, one fails)")
        job_dir = journey.make_job_dir(work)
        cluster = journey.submit(job_dir, 4, exit_codes={3: 7})
        print(f"cluster {cluster} submitted from {job_dir}")

        bundle, spool = work / "bundle", work / "remote-spool"
        step(3, "Preview the export (changes nothing)")
        show(["export", "--ids", str(cluster), "--out", str(bundle),
              "--remote-spool", str(spool), "--name", "demo", "--dry-run"])  # fmt: skip

        step(4, "Export: the local schedd lets go; a bundle is written")
        show(["export", "--ids", str(cluster), "--out", str(bundle),
              "--remote-spool", str(spool), "--name", "demo"])  # fmt: skip
        ads = journey.query(f"ClusterId == {cluster}", ["ProcId", "Managed"])
        print(f"local jobs now Managed = {sorted({a.get('Managed') for a in ads})}")

        step(5, "The bundle's queue, every path rewritten for the other schedd's SPOOL")
        show(["inspect", str(bundle / "spool" / "job_queue.log")])

        step(6, "A second, independent pool runs the jobs from that SPOOL")
        t0 = time.monotonic()
        journey.run_in_second_pool(bundle, spool, expect_jobs=4)
        print(f"all 4 jobs finished there in {time.monotonic() - t0:.0f} s")
        journey.fetch_back(spool, bundle)

        step(7, "Import: outputs placed where the submit file said, ads merged")
        show(["import", "--in", str(bundle)])
        history = journey.history(cluster, ["ProcId", "JobStatus", "ExitCode"], expect=4)
        for ad in history:
            print(f"  job {cluster}.{ad['ProcId']}: JobStatus {ad['JobStatus']}, "
                  f"ExitCode {ad['ExitCode']}")  # fmt: skip

        step(8, "alice's directory now")
        for path in sorted(job_dir.rglob("*")):
            if path.is_file():
                print(f"  {path.relative_to(job_dir)}  ({path.stat().st_size} bytes)")
        print("\nout.0 says:", (job_dir / "out.0").read_text().strip())
        show(["exports"])
    finally:
        if started_here:
            testbed.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
