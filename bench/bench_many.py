"""20 exports running at once at one site, through one login, driven by `sync` as cron
would (issue P10).

One `condor_lumberjack login testbed-mfa` (the testbed's MFA sshd: key and a one-time
code) carries the whole section. COUNT clusters of JOBS jobs (1 to 5 s each, an input
with a space in its name, one in a subdirectory, a remapped output) are submitted from
directories of their own and exported each as its own export; then plain
`condor_lumberjack sync --json` rounds, one after the other as cron runs them, ship,
launch, watch, fetch and import them all. Checked: every output of every job byte for
byte (journey.expected_outputs), no error and no lock contention in any answer or on
stderr ("locked", "busy"), the logins the site accepted (its MFA sshd's log) and the SSH
master of the login (one process for the whole section). Measured: one `sync` with no
change while all COUNT exports are launched at the site (time, logins, sessions).
Afterwards each export is cleaned up (in `finally`, failed or not) and nothing may be
left at the site (journey.site_leftovers).

The pilots are submitted held (`#SBATCH --hold` in a copy of the testbed-mfa profile, as
a busy batch queue keeps them) and released by the section after QUIET_ROUNDS no-change
syncs: jobs of 1 to 5 s would otherwise finish during the round that launches the last
exports, and no sync of all of them would be without change.

How the exports run at the site: in one lease (`lease create`: one collector and
negotiator, 3 pilots of one node x 2 cores), then COUNT exports with `--lease NAME`, each
with only its own schedd; and, for comparison, COMPARE exports each with a pool of its
own (schedd, collector and negotiator in an Apptainer instance, its own pilot of one
core). Both work on the testbed; measured once, 20 of each (2 cores, 3 nodes of 2 cores):

    20 in one lease: all imported in 160 s, 3 pilot jobs, at most 107 processes and
    1,218 MiB at the site, no-change sync 0.79 s
    20 with pools of their own: all imported in 206 s, 20 pilot jobs, at most 224
    processes and 2,804 MiB at the site (with only 6 of the 20 pilots running at a time),
    no-change sync 0.59 s

A site admin running 20 exports at once uses the lease: one central manager and a few
pilot jobs in the batch queue instead of 20 of each (on a real site every pilot waits in
the queue on its own, and a pilot of one export idles while the others' jobs wait), and
each export costs the login node one schedd rather than a whole pool. The lease's one
pilot of 3 whole nodes waited for nodes other work held; 3 pilots of one node each start
as nodes free up. A sync while a lease is open also asks the site for the lease's own
status and the local schedd for jobs opted into a lease: its no-change sync takes a
little longer.

    python bench/bench_many.py                   (testbed up, as root)
    COUNT=3 COMPARE=0 python bench/bench_many.py (a quick run while developing)
    COUNT=20 MODE=own python bench/bench_many.py (20 with pools of their own only)

or by `make bench` / `python bench/run.py many`. Bounded: the rounds stop after
ROUNDS_TIMEOUT_S; the lease run of 20 and the comparison take about 4 minutes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "containers" / "testbed"))

import journey  # noqa: E402
import testbed  # noqa: E402

from lumberjack.profiles.sites import PROFILES_ENV  # noqa: E402

SITE = "testbed-mfa"
MFA_PORT = 2223
COUNT = int(os.environ.get("COUNT", "20"))
#: Exports of the comparison run with a pool of their own each (0: none).
COMPARE = int(os.environ.get("COMPARE", "3"))
#: "own": only a run of COUNT exports with a pool each (what the comparison measures).
MODE = os.environ.get("MODE", "lease")
JOBS = 3
ROUNDS_TIMEOUT_S = 480
#: No-change syncs measured while every export is launched and its pilots wait (held).
QUIET_ROUNDS = 3
ROUND_PAUSE_S = 3
GOAL_SECONDS = 3.0
GOAL_LOGINS = 1
#: What a lock or a busy ledger looks like in an answer or on stderr.
CONTENTION = re.compile(r"locked|busy|being worked on", re.IGNORECASE)
#: Phases in which an export's pool is up at the site and sync only asks its status.
AT_SITE = ("launched", "running")


def authentications() -> int:
    """Logins the site's MFA sshd accepted so far (each took a one-time code)."""
    log = testbed.site().auth_log(MFA_PORT)
    return log.read_text(errors="replace").count("Accepted ") if log.exists() else 0


def master_pid(state: Path) -> int | None:
    """The PID of the login's SSH master (the one connection every command rides)."""
    check = subprocess.run(["ssh", "-S", str(state / "ssh" / SITE), "-O", "check", "x"],
                           capture_output=True, text=True)  # fmt: skip
    found = re.search(r"pid=(\d+)", check.stderr)
    return int(found.group(1)) if found else None


def cli(*args: str) -> tuple[dict, subprocess.CompletedProcess[str], float]:
    """Run the CLI; its JSON answer (or {}), the process, its seconds."""
    started = time.perf_counter()
    result = journey.lumberjack(*args, check=False)
    seconds = time.perf_counter() - started
    try:
        answer = journey.last_json(result) if result.stdout.strip() else {}
    except json.JSONDecodeError:
        answer = {}
    return answer, result, seconds


class Run:
    """The section's state: what it made (to clean up) and what it saw."""

    def __init__(self, work: Path, mode: str, count: int) -> None:
        self.work, self.mode, self.count = work, mode, count
        self.tag = f"{mode[0]}{os.getpid() % 100000}"
        self.lease = f"many-{self.tag}" if mode == "lease" else None
        self.started = time.perf_counter()
        self.names: list[str] = []
        self.dirs: dict[str, Path] = {}
        self.before: dict[str, dict[str, bytes]] = {}
        self.clusters: list[int] = []
        self.errors: list[str] = []
        self.contention: list[str] = []
        self.rounds: list[dict] = []

    def check(self, what: str, answer: dict, result: subprocess.CompletedProcess[str]) -> None:
        """Every error and every sign of lock contention in a command's answer or stderr."""
        if result.returncode != 0:
            self.errors.append(f"{what}: exit {result.returncode}: {result.stderr.strip()[-200:]}")
        for entry in answer.get("exports", []):
            said = json.dumps(entry)
            if "error" in entry:
                self.errors.append(f"{what}: {entry.get('name')}: {entry['error'][:200]}")
            if CONTENTION.search(said):
                self.contention.append(f"{what}: {said[:200]}")
        for line in result.stderr.splitlines():
            if CONTENTION.search(line):
                self.contention.append(f"{what}: {line[:200]}")

    def command(self, what: str, *args: str) -> dict:
        answer, result, _ = cli(*args)
        self.check(what, answer, result)
        if result.returncode != 0:
            raise RuntimeError(self.errors[-1])
        return answer


def submit_and_export(run: Run) -> None:
    """COUNT clusters, each exported as its own export (into the lease, or with its own
    pool and one pilot of one core)."""
    for n in range(run.count):
        job_dir = journey.make_job_dir(run.work, f"jobs-{n:02d}")
        seconds = 1 + n % 5
        cluster = journey.submit(job_dir, JOBS, arguments=f"$(Process) $(code) {seconds}")
        run.clusters.append(cluster)
        name = f"many-{run.tag}-{n:02d}"
        run.dirs[name], run.before[name] = job_dir, journey.tree(job_dir)
        where = (["--lease", run.lease] if run.lease else
                 ["--site", SITE, "--nodes", "1", "--cores", "1", "--walltime", "15m",
                  "--idle-shutdown", "1m"])  # fmt: skip
        run.command("export", "export", "--ids", str(cluster), "--name", name, *where, "--json")
        run.names.append(name)


def held_profile(work: Path) -> Path:
    """A copy of the testbed-mfa profile whose pilots are submitted held (`#SBATCH
    --hold`): they wait in the batch queue as on a busy site until the section releases
    them, so that every export is launched and none can finish during the no-change
    syncs. Returns the directory to put in $LUMBERJACK_SITE_PROFILES."""
    shipped = ROOT / "site-profiles" / f"{SITE}.toml"
    text = shipped.read_text()
    assert "extra_directives = []" in text, f"{shipped}: no empty extra_directives"
    profiles = work / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / f"{SITE}.toml").write_text(
        text.replace("extra_directives = []", 'extra_directives = ["#SBATCH --hold"]')
    )
    return profiles


def release_pilots(run: Run) -> list[str]:
    """Release this section's held pilots (the site's queue frees up); their job ids."""
    listing = journey.site_run("squeue -h -u hpcuser -t PD -o '%i %j'")
    mine = [line.split()[0] for line in listing.splitlines()
            if len(line.split()) == 2 and f"many-{run.tag}" in line.split()[1]]  # fmt: skip
    if mine:
        journey.site_run("scontrol release " + ",".join(mine))
    print(f"[many] released pilots {mine}", flush=True)
    return mine


def phases(run: Run) -> dict[str, str]:
    listed = run.command("exports", "exports", "--json")
    return {e["name"]: e["phase"] for e in listed.get("exports", []) if e["name"] in run.names}


def site_cost(run: Run) -> dict:
    """The processes this section runs at the site (the site has no PID namespace: read
    from /proc here) and their resident memory."""
    dirs = [f"{journey.SITE_BASE}/{name}" for name in run.names]
    if run.lease:
        dirs.append(f"{journey.SITE_BASE}/lease-{run.lease}")
    pids: dict[int, str] = {}
    for remote_dir in dirs:
        pids.update(journey.processes_of(remote_dir))
    rss_kib = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+)", status, re.MULTILINE)
        rss_kib += int(found.group(1)) if found else 0
    daemons = sum(1 for cmd in pids.values() if re.search(r"condor_(?!starter)\w+", cmd))
    return {"processes": len(pids), "condor_daemons": daemons, "rss_mib": round(rss_kib / 1024)}


def sync_round(run: Run, label: str) -> dict:
    """One `sync --json` as cron runs it: its time, the logins it made, what it did."""
    before = authentications()
    answer, result, seconds = cli("sync", "--json")
    time.sleep(0.3)  # the sshd writes its line as it accepts a login
    run.check(f"sync {label}", answer, result)
    mine = [e for e in answer.get("exports", []) if e.get("name") in run.names]
    changed = [e["name"] for e in mine if e.get("steps")]
    entry = {"round": label, "at_s": round(time.perf_counter() - run.started, 1),
             "seconds": round(seconds, 2), "logins": authentications() - before,
             "exports": len(mine), "changed": len(changed),
             "phases": sorted({e.get("phase", "?") for e in mine})}  # fmt: skip
    run.rounds.append(entry)
    print(f"[many] sync {label}: {entry}", flush=True)
    return entry


def drive(run: Run) -> dict:
    """Sync rounds until every export is imported. A round is a no-change sync when all
    the exports were launched at the site before and after it and none moved; the
    site's cost is the largest seen in such a round."""
    deadline = time.monotonic() + ROUNDS_TIMEOUT_S
    quiet: list[dict] = []
    cost: dict = {}
    released: list[str] | None = None
    n = 0
    while True:
        n += 1
        before = phases(run)
        entry = sync_round(run, str(n))
        after = phases(run)
        if all(before.get(x) in AT_SITE and after.get(x) in AT_SITE for x in run.names):
            seen = site_cost(run)
            cost = max(cost, seen, key=lambda c: c.get("rss_mib", 0))
            if entry["changed"] == 0 and before == after and released is None:
                quiet.append(entry)
        if released is None and (len(quiet) >= QUIET_ROUNDS or n > QUIET_ROUNDS + 3):
            released = release_pilots(run)
        if all(after.get(x) == "imported" for x in run.names):
            return {"rounds": n, "quiet": quiet, "site_cost": cost, "released": released}
        if time.monotonic() > deadline:
            raise TimeoutError(f"not all imported after {ROUNDS_TIMEOUT_S} s: {after}")
        time.sleep(ROUND_PAUSE_S)


def outputs_checked(run: Run) -> tuple[int, list[str]]:
    """Every job's outputs, byte for byte; (files checked, what differed)."""
    checked, wrong = 0, []
    for name in run.names:
        job_dir = run.dirs[name]
        after = journey.tree(job_dir)
        expected = journey.expected_outputs(job_dir, range(JOBS))
        extra = {p for p in after if p not in run.before[name]} - set(expected)
        wrong += [f"{name}: unexpected {p}" for p in sorted(extra)]
        for path, content in expected.items():
            checked += 1
            if after.get(path) != content:
                wrong.append(f"{name}: {path} differs or is missing")
    return checked, wrong


def clean_up(run: Run) -> list[str]:
    """Every export cleaned up (unexported first if it did not come home), the lease shut
    down, the login closed; what is left at the site afterwards."""
    for name in run.names:
        _, done, _ = cli("cleanup", name)
        if done.returncode != 0:
            cli("unexport", name)
            cli("cleanup", name)
    if run.lease:
        cli("lease", "shutdown", run.lease, "--force")
    time.sleep(2)  # Slurm ends a cancelled pilot in a moment
    left = []
    for name in run.names:
        remote_dir = f"{journey.SITE_BASE}/{name}"
        left += journey.site_leftovers(name, remote_dir)
        if journey.site_path(remote_dir).exists():
            left.append(f"directory {remote_dir}")
            journey.stop_at_site(name, remote_dir)
    if run.lease:
        lease_dir = f"{journey.SITE_BASE}/lease-{run.lease}"
        left += journey.site_leftovers(f"lease-{run.lease}", lease_dir)
        if journey.site_path(lease_dir).exists():
            left.append(f"directory {lease_dir}")
            journey.site_run(f"{journey.agent_line(lease_dir, 'lease-stop', lease_dir)}; "
                             f"{journey.agent_line(lease_dir, 'remove', lease_dir)}; "
                             f"rm -rf {lease_dir}",
                             check=False)  # fmt: skip
    return left


def remove_jobs(clusters: list[int]) -> None:
    """Jobs of a run that failed half-way (imported ones have left the queue already)."""
    import htcondor2

    if not clusters:
        return
    htcondor2.reload_config()
    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    schedd.act(htcondor2.JobAction.Remove, " || ".join(f"ClusterId == {c}" for c in clusters))


def log_in(state: Path) -> tuple[int, int | None]:
    """One login as a person makes it (the code from the testbed's authenticator);
    the site's count of logins before it, and the SSH master's PID."""
    if not testbed.site().mfa_ready():
        raise RuntimeError("the testbed site has no MFA sshd (started by an older recipe)")
    os.environ.update(SSH_ASKPASS=str(ROOT / "containers" / "testbed" / "askpass.py"),
                      SSH_ASKPASS_REQUIRE="force")  # fmt: skip
    os.environ.pop("DISPLAY", None)
    testbed.site().reset_otp()
    before = authentications()
    answer, result, _ = cli("login", SITE, "--persist", "1h", "--json")
    if result.returncode != 0 or not answer.get("live"):
        raise RuntimeError(f"login {SITE} failed: {result.stderr.strip()}")
    return before, master_pid(state)


def run_mode(work: Path, mode: str, count: int) -> dict:
    """The whole section for `count` exports run at the site the `mode` way."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    state = Path(os.environ["LUMBERJACK_STATE_DIR"])
    job = Run(work, mode, count)
    os.environ[PROFILES_ENV] = str(held_profile(work))
    logins_before, master = log_in(state)
    outcome: dict = {}
    try:
        if job.lease:
            job.command("lease create", "lease", "create", job.lease, "--site", SITE,
                        "--nodes", "3", "--cores", "2", "--pilots", "3", "--walltime", "20m",
                        "--idle-shutdown", "5m", "--owner", testbed.SUBMITTER,
                        "--json")  # fmt: skip
        submit_and_export(job)
        outcome = drive(job)
        seconds = time.perf_counter() - job.started
        checked, wrong = outputs_checked(job)
        master_after = master_pid(state)
    finally:
        left = clean_up(job)
        print(f"[many] left at the site after cleanup: {left or 'nothing'}", flush=True)
        if not outcome:
            remove_jobs(job.clusters)
        logins = authentications() - logins_before
        cli("logout", SITE)
        os.environ.pop(PROFILES_ENV, None)
        shutil.rmtree(work, ignore_errors=True)
    times = sorted(q["seconds"] for q in outcome["quiet"])
    return {
        "exports": count, "jobs_per_export": JOBS, "mode": mode, "site": SITE,
        "seconds": round(seconds, 1), "rounds": outcome["rounds"],
        "no_change_syncs": len(times),
        "no_change_sync_s": times[len(times) // 2] if times else None,
        "no_change_range_s": [times[0], times[-1]] if times else [],
        "no_change_logins": max((q["logins"] for q in outcome["quiet"]), default=None),
        "logins": logins, "one_master": master is not None and master == master_after,
        "outputs_checked": checked, "outputs_wrong": wrong[:5],
        "errors": job.errors[:5], "contention": job.contention[:5],
        "site_cost": outcome["site_cost"], "pilots_released": len(outcome["released"] or []),
        "leftovers": left[:5],
        "sync_rounds": job.rounds,
    }  # fmt: skip


def run(work: Path) -> dict:
    """COUNT exports in one lease; then, for comparison, COMPARE with a pool each."""
    os.environ.setdefault("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))
    if MODE == "own":
        return run_mode(work / "own", "own", COUNT)
    results = run_mode(work / "lease", "lease", COUNT)
    if COMPARE:
        results["own_pools"] = run_mode(work / "own", "own", COMPARE)
    return results


def _per_export(r: dict) -> str:
    cost = r.get("site_cost") or {}
    if not cost:
        return "not measured"
    n = r["exports"]
    return (f"{cost['processes']} processes ({cost['condor_daemons']} of them HTCondor "
            f"daemons) and {cost['rss_mib']} MiB resident, {cost['processes'] / n:.1f} "
            f"processes and {cost['rss_mib'] / n:.0f} MiB per export")  # fmt: skip


def _fill(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=90)


def _compare(r: dict) -> str:
    own = r.get("own_pools")
    if not own:
        return ""
    return (
        _fill(f"""For comparison, {own["exports"]} exports each with a pool of its own (its
        own schedd, collector and negotiator in an Apptainer instance, its own pilot of one
        core), driven the same way: all imported in {own["seconds"]} s in {own["rounds"]}
        rounds, no-change sync {own["no_change_sync_s"]} s, {own["pilots_released"]} pilots,
        outputs wrong {len(own["outputs_wrong"])}, errors {len(own["errors"])}, contention
        {len(own["contention"])}; at the site at most {_per_export(own)}. Both ways work on
        the testbed (20 pools of their own were measured once too: see bench/bench_many.py);
        a site admin running 20 exports at once uses the lease: one central manager and 3
        pilot jobs in the batch queue instead of 20 of each; an export with a pool of its
        own costs {_ratio(own, r, "processes")} the processes and {_ratio(own, r, "rss_mib")}
        the memory at the site of one in the lease; and every export's jobs start on pilots
        already running instead of each waiting for its own.""")
        + "\n"
    )


def _ratio(own: dict, lease: dict, key: str) -> str:
    a, b = own.get("site_cost") or {}, lease.get("site_cost") or {}
    if not a.get(key) or not b.get(key):
        return "(not measured)"
    return f"{(a[key] / own['exports']) / (b[key] / lease['exports']):.1f}x"


def markdown(r: dict) -> str:
    quiet = r["no_change_sync_s"]
    ratio = f"**{quiet / GOAL_SECONDS:.2f}x**" if quiet is not None else "—"
    rounds = r["sync_rounds"]
    slowest = max(rounds, key=lambda x: x["seconds"]) if rounds else {"seconds": 0, "round": "-"}
    spread = "–".join(str(x) for x in r["no_change_range_s"]) or "—"
    launching = " (the one that ships and launches them all)" if slowest["round"] == "1" else ""
    intro = _fill(f"""{r["exports"]} clusters of {r["jobs_per_export"]} jobs (1 to 5 s, inputs
        and remapped outputs), each exported as its own export to `{r["site"]}` (the
        testbed's MFA sshd: key and a one-time code) into one lease (`lease create`: one
        collector and negotiator, 3 pilots of one node x 2 cores), each export with only its
        own schedd. One `condor_lumberjack login`, then plain `sync --json` rounds one after
        the other, as cron runs them, until every export was imported (bench/bench_many.py).
        The pilots are submitted held (`#SBATCH --hold` in a copy of the profile: a busy
        queue) and released after {r["no_change_syncs"]} no-change syncs, so that every
        export is launched and none can finish while they are timed.""")
    seen = _fill(f"""Start to all imported: {r["seconds"]} s in {r["rounds"]} sync rounds;
        the slowest round, {slowest["seconds"]} s, was round {slowest["round"]}{launching}.
        The no-change syncs took {spread} s, each with
        {r["no_change_logins"]} new logins; one SSH master carried the whole section:
        {r["one_master"]}. Outputs checked byte for byte: {r["outputs_checked"]} files, wrong
        {len(r["outputs_wrong"])}. Errors in answers or on stderr: {len(r["errors"])}; lock
        or busy contention: {len(r["contention"])}. At the site at most {_per_export(r)}.
        Left at the site after cleanup: {"; ".join(r["leftovers"]) or "nothing"}.""")
    return f"""## Many exports at once: {r["exports"]} exports at one site through one login

{intro}

| measure | today | goal (issue P10) | ratio |
|---|---:|---:|---:|
| logins for the whole section | {r["logins"]} | {GOAL_LOGINS} | {r["logins"] / GOAL_LOGINS:.2f}x |
| no-change `sync` of all {r["exports"]} (median) | {quiet} s | {GOAL_SECONDS:g} s | {ratio} |

{seen}

{_compare(r)}"""


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    import standalone

    sys.exit(standalone.main("many", run, markdown))
