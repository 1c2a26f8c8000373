"""`make demo`: the site journey shown to a person, step by step, on real daemons.

alice logs in once to the testbed's emulated HPC site, which asks for a one-time code as
MFA sites do (the demo's "person" reads it from the testbed's authenticator, askpass.py);
she submits jobs to the access-point pool; condor_lumberjack exports them for the site,
ships the bundle over SSH riding that one login, launches a remote pool there
(a schedd in an Apptainer instance on the login node, startds started by a Slurm pilot
on the compute nodes c1..c3), waits for the jobs, fetches the results, imports them
where alice's submit file expects them, and cleans up the site.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import journey  # noqa: E402
import testbed  # noqa: E402

JOBS = 12
SITE = "testbed-mfa"  # the testbed's login node behind an sshd that asks for a code
MFA_PORT = 2223
FAILING = {5: 3}  # job 5 exits 3: lumberjack brings failures home as they are


def step(number: int, text: str) -> None:
    print(f"\n\033[1m== {number}. {text}\033[0m", flush=True)


def show(args: list[str]) -> str:
    print("$ condor_lumberjack " + " ".join(args), flush=True)
    started = time.monotonic()
    result = journey.lumberjack(*args)
    print(result.stdout.rstrip(), flush=True)
    print(f"  ({time.monotonic() - started:.1f} s)", flush=True)
    return result.stdout


def status_line(elapsed: float, answer: dict) -> str:
    jobs = ", ".join(f"{n} {state}" for state, n in sorted(answer["jobs"].items()))
    pilots = ", ".join(f"pilot {job} {state}" for job, state in answer["pilots"].items())
    return f"  {elapsed:5.0f} s  jobs: {jobs or '-'};  {pilots or 'no pilots'}"


def authentications() -> int:
    """Logins the site's MFA sshd accepted so far (its own auth log)."""
    log = testbed.site().auth_log(MFA_PORT)
    return log.read_text().count("Accepted ") if log.exists() else 0


def show_where(state: Path) -> None:
    """How to point your own condor_lumberjack at this demo's ledger and testbed."""
    env = {"LUMBERJACK_STATE_DIR": str(state), **testbed.env()}
    print(f"\nThe demo's ledger stays in {state / 'ledger.sqlite'}; to look at it yourself:")
    print("  export " + " ".join(f"{key}={value}" for key, value in env.items()))
    print("  condor_lumberjack exports      # (make testbed-up first for commands that need the")
    print("                                 #  access point's schedd or the site)")


def main() -> int:
    ap_was_running = testbed.ACCESS_POINT.is_running()
    site_was_running = testbed.site().is_running()
    step(1, "Start the testbed: the access point's pool and the emulated HPC site")
    if testbed.site().is_running() and not testbed.site().mfa_ready():
        testbed.site().down()  # started by an older recipe: no MFA sshd yet
    os.environ.update(testbed.up())
    print("access point: HTCondor pool on loopback; site: login node hpc-login (sshd),")
    print("Slurm with 3 nodes of 2 cores (c1..c3), Apptainer; reached over SSH only")
    work = testbed.testbed_dir() / "work" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    state = testbed.root_state_dir("demo")
    shutil.rmtree(state, ignore_errors=True)
    os.environ["LUMBERJACK_STATE_DIR"] = str(testbed.root_state_dir("demo"))
    os.environ["PYTHONPATH"] = str(HERE.parent.parent)
    name = time.strftime("demo-%Y%m%d-%H%M%S")
    remote_dir = ""
    try:
        step(2, "Log in once: the site asks for a one-time code; later commands ride the login")
        os.environ.update(SSH_ASKPASS=str(HERE / "askpass.py"), SSH_ASKPASS_REQUIRE="force")
        os.environ.pop("DISPLAY", None)
        testbed.site().reset_otp()
        logins_before = authentications()
        show(["login", SITE, "--persist", "1h"])
        print(f"logins accepted by the site so far: {authentications() - logins_before}")

        step(3, f"alice submits {JOBS} jobs (input with a space, a subdirectory, a remap, "
                "one fails)")  # fmt: skip
        job_dir = journey.make_job_dir(work)
        # Each job sleeps 3 s, so that the work spreads over the three nodes.
        cluster = journey.submit(
            job_dir, JOBS, exit_codes=FAILING, arguments="$(Process) $(code) 3"
        )
        print(f"cluster {cluster} submitted from {job_dir}")

        step(4, "Export for the site: the request is checked against the site's profile")
        out = show(["export", "--ids", str(cluster), "--site", SITE, "--nodes", "3",
                    "--cores", "2", "--walltime", "20m", "--name", name])  # fmt: skip
        remote_dir = f"/home/hpcuser/lumberjack/{name}"
        assert remote_dir in out, out
        ads = journey.query(f"ClusterId == {cluster}", ["ProcId", "Managed"])
        print(f"local jobs now Managed = {sorted({a.get('Managed') for a in ads})}: "
              "the local schedd will not run them")  # fmt: skip

        step(5, "Ship the bundle over SSH (verified by sha256); again: nothing moves")
        show(["ship", name])
        show(["ship", name])

        step(6, "Launch: the remote schedd starts on the shipped queue, a Slurm pilot starts")
        show(["launch", name])
        print("$ squeue  (at the site)")
        print(journey.site_run("squeue -u hpcuser -o '%.6i %.34j %.8T %.6D %N'").rstrip())

        step(7, "Status, until every job finished at the site")
        print(f"$ condor_lumberjack status {name} --json   (every 5 s)")
        started = time.monotonic()
        journey.wait_finished(
            name,
            timeout=600,
            poll=5,
            on_status=lambda answer: print(status_line(time.monotonic() - started, answer),
                                           flush=True),
        )  # fmt: skip
        show(["status", name])

        step(8, "Fetch: the remote schedd stops, its spool and the outputs come back")
        show(["fetch", name])

        step(9, "Import: outputs placed where the submit file said, job ads merged")
        show(["import", name])
        print("the jobs' ads in the local history (after the schedd's next sweep):", flush=True)
        projection = ["ProcId", "JobStatus", "ExitCode", "Owner", "LastRemoteHost"]
        history = journey.history(cluster, projection, expect=JOBS)
        for ad in history:
            node = re.search(r"@pilot-\w+-(c\d)@", ad.get("LastRemoteHost", ""))
            print(f"  job {cluster}.{ad['ProcId']:<2}  JobStatus {ad['JobStatus']}  "
                  f"ExitCode {ad['ExitCode']}  Owner {ad['Owner']}  "
                  f"ran on {node.group(1) if node else '?'}")  # fmt: skip

        step(10, "alice's directory now")
        for path in sorted(job_dir.rglob("*")):
            if path.is_file():
                print(f"  {path.relative_to(job_dir)}  ({path.stat().st_size} bytes)")
        print("\nout.0 says:            ", (job_dir / "out.0").read_text().strip())
        print("results/renamed-5.txt: ", (job_dir / "results/renamed-5.txt").read_text().strip())

        step(11, "Clean up: the site directory and the local bundle go")
        show(["cleanup", name])
        show(["exports"])
        time.sleep(2)  # Slurm finishes a cancelled pilot in a moment
        left = journey.site_leftovers(name, remote_dir)
        print("left at the site (Slurm jobs, instances, mounts, processes):",
              "nothing" if not left else "\n  " + "\n  ".join(left))  # fmt: skip
        remote_dir = ""
        print(f"logins accepted by the site for the whole journey: "
              f"{authentications() - logins_before} (one code)")  # fmt: skip
        show(["logout", SITE])
        show_where(Path(os.environ["LUMBERJACK_STATE_DIR"]))
    finally:
        journey.lumberjack("logout", SITE, check=False)
        if remote_dir:
            journey.stop_at_site(name, remote_dir)
        if not ap_was_running:
            testbed.ACCESS_POINT.stop()
        if not site_was_running:
            testbed.site().down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
