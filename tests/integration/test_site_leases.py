"""Leases on the testbed: a lease (one pilot of two nodes) is created first and its
startds wait; two exports join it at different times, each with its own schedd, run on
the lease's startds, and come home on their own (byte-identical outputs) while the lease
keeps running; `lease shutdown` then leaves nothing running at the site."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest
import testbed
from journey import (
    agent_line,
    as_submitter,
    expected_outputs,
    last_json,
    lumberjack,
    make_job_dir,
    processes_of,
    query,
    site_path,
    site_run,
    stop_at_site,
    submit,
    submit_as,
    tree,
)
from link_messages import every_message_decodes, record_link

from lumberjack.core.crashpoints import ENV, POINTS

pytestmark = pytest.mark.integration

SITE_BASE = "/home/hpcuser/lumberjack"  # base_dir of site-profiles/testbed.toml
JOBS = 4


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def poll(what: str, ask: Callable[[], dict], until: Callable[[dict], bool],
         timeout: float = 300, every: float = 2) -> dict:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        answer = ask()
        if until(answer):
            return answer
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:.0f} s: {answer}")
        time.sleep(every)


def lease_status(name: str) -> dict:
    return last_json(lumberjack("lease", "status", name, "--json"))


def status(name: str) -> dict:
    return last_json(lumberjack("status", name, "--json"))


def started(answer: dict) -> bool:
    return any(n for state, n in answer["jobs"].items() if state != "idle")


def lease_processes(lease_dir: str) -> dict[int, str]:
    return processes_of(lease_dir)


def hosts(answer: dict) -> set[str]:
    """The startds' machines (a partitionable slot and its dynamic ones share one)."""
    return {s["name"].split("@", 1)[1] for s in answer["startds"]}


def schedds(answer: dict) -> set[str]:
    return {s["name"].split("@")[0] for s in answer["schedds"]}


def slurm_jobs(prefix: str) -> list[str]:
    listing = site_run("squeue -h -u hpcuser -o '%i %j %T'")
    return [line for line in listing.splitlines() if f" {prefix}" in line]


@pytest.fixture
def at_site(site):
    """Exports and leases this test made: stopped and removed at the site afterwards."""
    made: dict[str, list[str]] = {"exports": [], "leases": []}
    yield made
    for name in made["exports"]:
        stop_at_site(name, f"{SITE_BASE}/{name}")
    for lease in made["leases"]:
        lease_dir = f"{SITE_BASE}/lease-{lease}"
        if site_path(lease_dir).exists():
            site_run(
                f"{agent_line(lease_dir, 'lease-stop', lease_dir)}; "
                f"{agent_line(lease_dir, 'remove', lease_dir)}; rm -rf {lease_dir}",
                check=False,
            )


def join(workspace: Path, lease: str, label: str, seconds: int = 3) -> tuple[str, Path, dict, int]:
    """Submit JOBS jobs of `seconds` each, export them into the lease and ship them."""
    job_dir = make_job_dir(workspace, f"job-{label}")
    cluster = submit(job_dir, JOBS, arguments=f"$(Process) $(code) {seconds}")
    before = tree(job_dir)
    name = unique(label)
    exported = last_json(
        lumberjack("export", "--ids", str(cluster), "--lease", lease, "--name", name, "--json")
    )
    assert exported["lease"] == lease
    assert exported["remote_dir"] == f"{SITE_BASE}/{name}"
    lumberjack("ship", name, "--json")
    return name, job_dir, before, cluster


def come_home(name: str, job_dir: Path, before: dict) -> None:
    fetched = last_json(lumberjack("fetch", name, "--json"))
    assert fetched["phase"] == "fetched"
    assert fetched["stop"]["cancelled_pilots"] == []  # the lease's pilots are not its own
    imported = last_json(lumberjack("import", name, "--json"))
    assert (imported["jobs"], imported["completed"]) == (JOBS, JOBS)
    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(JOBS))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected


#: What crosses the link in the journey below: the plans of the lease and its exports,
#: and the answers of every verb it runs (no queue command, each status on its own).
LEASE_MESSAGES = {"launch.json", "lease-start", "lease-status", "launch", "status", "stop",
                  "remove", "lease-stop"}  # fmt: skip


def test_two_exports_join_one_lease(
    workspace: Path, state_dir: Path, at_site: dict, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    recorded = record_link(monkeypatch, tmp_path)
    lease = unique("lease")
    lease_dir = f"{SITE_BASE}/lease-{lease}"
    at_site["leases"].append(lease)
    created = last_json(
        lumberjack(
            "lease", "create", lease, "--site", "testbed", "--nodes", "2", "--cores", "2",
            "--walltime", "20m", "--idle-shutdown", "10m", "--owner", testbed.SUBMITTER, "--json",
        )
    )  # fmt: skip
    assert created["phase"] == "active" and created["site"] == "testbed"
    assert len(created["pilots"]["submitted"]) == 1  # one pilot of two nodes
    assert created["pool"]["started"]
    # Before any export: the pilot's two startds report to the lease's collector.
    waiting = poll("two startds", lambda: lease_status(lease), lambda a: len(hosts(a)) == 2)
    assert waiting["exports"] == [] and waiting["pilots_alive"]
    assert {s["state"] for s in waiting["startds"]} == {"Unclaimed"}
    assert [line for line in slurm_jobs(f"lj-lease-{lease}") if "RUNNING" in line]

    first, dir_a, before_a, _ = join(workspace, lease, "first")
    at_site["exports"].append(first)
    launched = last_json(lumberjack("launch", first, "--json"))
    assert launched["phase"] == "launched" and launched["lease"] == f"lease-{lease}"
    assert launched["pool"]["started"]
    assert launched["pilots"]["submitted"] == []  # the lease's pilot is alive
    poll(f"{first} running", lambda: status(first), started)

    second, dir_b, before_b, _ = join(workspace, lease, "second")
    at_site["exports"].append(second)
    # Its jobs start on the lease's startds, already up: no pilot of its own is queued.
    launched = last_json(lumberjack("launch", second, "--json"))
    assert launched["phase"] == "launched" and launched["pilots"]["submitted"] == []
    poll(f"{second} running", lambda: status(second), started, every=0.5)
    assert slurm_jobs(f"lj-{second}") == []

    # Both schedds report to the lease's collector.
    both = lease_status(lease)
    assert schedds(both) == {first, second}
    assert {e["name"] for e in both["exports"]} == {first, second}

    for name in (first, second):
        poll(f"{name} finished", lambda name=name: status(name), lambda a: a["finished"],
             timeout=400)  # fmt: skip

    # The first comes home: only its schedd stops, the lease's pilot keeps running.
    come_home(first, dir_a, before_a)
    after_first = poll("the first schedd gone", lambda: lease_status(lease),
                       lambda a: schedds(a) == {second}, timeout=120)  # fmt: skip
    assert after_first["pilots_alive"] and len(hosts(after_first)) == 2
    assert not [pid for pid, cmd in processes_of(f"{SITE_BASE}/{first}").items()
                if "condor_" in cmd]  # fmt: skip
    come_home(second, dir_b, before_b)

    # A third cluster opts in by attribute: `sync` alone exports it into the lease as it
    # waits idle, ships, launches, fetches and imports it (a DAG node needs no command).
    dir_c = make_job_dir(workspace, "job-third")
    opt_in = {"MY.LumberjackLease": f'"{lease}"'}
    good = submit(dir_c, JOBS, arguments="$(Process) $(code) 1", **opt_in)
    # One that asks for Chirp opts in too: cron holds it with the reason and sends the rest.
    chirp = submit(make_job_dir(workspace, "job-chirp"), 1, want_io_proxy="true", **opt_in)
    before_c = tree(dir_c)
    rounds = [last_json(lumberjack("sync", "--json"))]
    third = next(e["export"] for e in rounds[0]["exports"] if e.get("export"))
    at_site["exports"].append(third)
    assert [e["steps"] for e in rounds[0]["exports"] if e.get("export")] == [
        [f"exported clusters {good} as {third}"]
    ]
    (held,) = query(f"ClusterId == {chirp}", ["JobStatus", "HoldReason", "Managed"])
    assert held["JobStatus"] == 5 and held.get("Managed") is None, held
    assert (
        held["HoldReason"].startswith("condor_lumberjack: ") and "WantIOProxy" in held["HoldReason"]
    )
    poll(f"{third} imported by sync", lambda: last_json(lumberjack("sync", "--json")),
         lambda a: {e["name"]: e["phase"] for e in a["exports"]}.get(third) == "imported",
         timeout=400, every=3)  # fmt: skip
    after_c = tree(dir_c)
    expected = expected_outputs(dir_c, range(JOBS))
    assert {path for path in after_c if path not in before_c} == set(expected)
    assert {path: after_c[path] for path in expected} == expected

    listed = last_json(lumberjack("leases", "--json"))["leases"]
    assert [(entry["name"], entry["exports"]) for entry in listed] == [
        (lease, [first, second, third])
    ]

    ended = last_json(lumberjack("lease", "shutdown", lease, "--json"))
    assert ended["phase"] == "ended" and ended["stop"]["pool_stopped"]
    assert ended["stop"]["cancelled_pilots"] == created["pilots"]["submitted"]
    assert not site_path(lease_dir).exists()
    assert slurm_jobs(f"lj-lease-{lease}") == []
    assert lease_processes(lease_dir) == {}
    for name in (first, second, third):
        assert processes_of(f"{SITE_BASE}/{name}") == {}
        assert last_json(lumberjack("cleanup", name, "--json"))["phase"] == "cleaned"
    assert last_json(lumberjack("leases", "--json"))["leases"][0]["phase"] == "ended"
    every_message_decodes(recorded, LEASE_MESSAGES)


LEASE_POINTS = [p for p in POINTS if p.startswith("lease.")]
CREATE_POINTS = ["lease.after-dir", "lease.after-pool", "lease.before-ledger"]
SHUTDOWN_POINTS = ["lease.after-pilots-gone", "lease.before-ended", None]


def crashing(*args: str, crash: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if crash:
        env[ENV] = crash
    return subprocess.run([sys.executable, "-m", "lumberjack", *args, "--json"],
                          capture_output=True, text=True, env=env)  # fmt: skip


def test_a_crash_at_any_lease_step_is_finished_by_sync(
    workspace: Path, state_dir: Path, at_site: dict
) -> None:
    """Each lease dies once while created and once while shut down, at every lease
    point; `sync` finishes it: no lease leaked, no pilot orphaned, nothing left."""
    assert sorted(CREATE_POINTS + [p for p in SHUTDOWN_POINTS if p]) == sorted(LEASE_POINTS)
    for create_at, shutdown_at in zip(CREATE_POINTS, SHUTDOWN_POINTS):
        lease = unique("crash")
        lease_dir = f"{SITE_BASE}/lease-{lease}"
        at_site["leases"].append(lease)
        result = crashing("lease", "create", lease, "--site", "testbed", "--nodes", "1",
                          "--walltime", "15m", crash=create_at)  # fmt: skip
        said = f"crash point {create_at} reached"
        assert result.returncode != 0 and said in result.stderr + result.stdout, result
        assert last_json(lumberjack("leases", "--json"))["leases"][-1]["phase"] == "creating"
        synced = [e for e in last_json(lumberjack("sync", "--json"))["exports"]
                  if e.get("lease") == lease]  # fmt: skip
        assert [(e["steps"], e["phase"]) for e in synced] == [(["created"], "active")], synced
        assert len(slurm_jobs(f"lj-lease-{lease}-")) == 1  # one pilot, none orphaned
        print(f"[lease crash] {create_at}: sync finished the create")

        result = crashing("lease", "shutdown", lease, crash=shutdown_at)
        if shutdown_at:
            said = f"crash point {shutdown_at} reached"
            assert result.returncode != 0 and said in result.stderr + result.stdout, result
            synced = [e for e in last_json(lumberjack("sync", "--json"))["exports"]
                      if e.get("lease") == lease]  # fmt: skip
            assert [(e["steps"], e["phase"]) for e in synced] == [(["ended"], "ended")], synced
            print(f"[lease crash] {shutdown_at}: sync finished the shutdown")
        else:
            assert result.returncode == 0, result.stderr
        assert not site_path(lease_dir).exists()
        assert slurm_jobs(f"lj-lease-{lease}-") == []
        assert processes_of(lease_dir) == {}


# ---- a shared lease: root's lease for alice, shared with bob -------------------------

OWNER, SHARED = testbed.SUBMITTER, testbed.OTHER_SUBMITTER


def in_container(name: str, command: str, env: str = "") -> tuple[int, str]:
    """`command` in export `name`'s container at the site, as the site account, with
    its pool's config (and `env`); its exit code and output."""
    root = f"{SITE_BASE}/{name}"
    out = site_run(
        f"apptainer exec instance://lumberjack-{name} env CONDOR_CONFIG={root}/pool/condor_config "
        f'{env} {command} 2>&1; echo "exit=$?"',
        check=False,
    )
    body, _, code = out.rstrip().rpartition("exit=")
    return int(code), body.strip()


def as_other_export(attacker: str, victim: str, command: str) -> tuple[int, str]:
    """`command` with nothing but what export `attacker` holds at the site: its schedd's
    token of the lease's key, and a token its own key signs claiming the victim's trust
    domain; tokens only (FS would make any process of the site account the site account)."""
    tokens = f"{SITE_BASE}/{attacker}/pool/local/attack.d"
    forge = (
        f"mkdir -p -m 700 {tokens} && cp {SITE_BASE}/{attacker}/pool/local/tokens.d/lease "
        f"{tokens}/ && _CONDOR_TRUST_DOMAIN=lumberjack-{victim} condor_token_create "
        f"-identity hpcuser@lumberjack-{victim} > {tokens}/forged"
    )
    code, out = in_container(attacker, f"sh -c '{forge}'")
    assert code == 0, out
    env = f"_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS _CONDOR_SEC_TOKEN_DIRECTORY={tokens}"
    return in_container(attacker, command, env)


def queue_of(name: str) -> list[tuple[str, str]]:
    """Export `name`'s jobs as its own schedd (by FS, the site account) lists them: each
    one's status and the attribute the attempts would have set."""
    code, out = in_container(name, "condor_q -allusers -af JobStatus LjProbe")
    assert code == 0, out
    return sorted(tuple(line.split()) for line in out.splitlines())  # type: ignore[misc]


def test_a_shared_lease_keeps_each_owners_export_apart(
    workspace: Path, state_dir: Path, at_site: dict
) -> None:
    """Root makes a lease for alice, shared with bob; both export into it and come home
    byte-exact. With everything alice's export holds at the site, her side cannot read,
    edit, hold or remove bob's jobs, nor replace his schedd's ad; once bob is off the
    list his next export is refused in one line; `lease status` accounts per export."""
    lease = unique("shared")
    at_site["leases"].append(lease)
    created = last_json(
        lumberjack(
            "lease", "create", lease, "--site", "testbed", "--nodes", "1", "--cores", "2",
            "--walltime", "20m", "--idle-shutdown", "10m", "--owner", OWNER,
            "--share-with", SHARED, "--json",
        )
    )  # fmt: skip
    assert (created["owner"], created["share_with"]) == (OWNER, [SHARED])

    alice, dir_a, before_a, _ = join(workspace, lease, "alice")
    at_site["exports"].append(alice)
    lumberjack("launch", alice)
    bob_home = workspace / "bob"
    bob_home.mkdir()
    os.chown(bob_home, testbed.OTHER_SUBMITTER_UID, testbed.OTHER_SUBMITTER_UID)
    dir_b = make_job_dir(bob_home, "job", uid=testbed.OTHER_SUBMITTER_UID)
    bob_cluster = submit_as(SHARED, dir_b, 2, arguments="$(Process) $(code) 40")
    before_b = tree(dir_b)
    bob = unique("bob")
    at_site["exports"].append(bob)
    with as_submitter(SHARED):
        lumberjack("export", "--ids", str(bob_cluster), "--lease", lease, "--name", bob)
        lumberjack("ship", bob)
        lumberjack("launch", bob)
    poll(f"{bob} running", lambda: status(bob), started)

    # alice's side against bob's schedd, found through the lease's collector.
    schedd, collector = f"{bob}@lumberjack-{bob}", collector_of_lease(lease)
    target = f"-name {schedd} -pool {collector}"
    before = queue_of(bob)
    tries = {
        "condor_q": f"condor_q {target} -allusers {bob_cluster} -af ClusterId",
        "condor_qedit": f"condor_qedit {target} {bob_cluster} LjProbe 1",
        "condor_hold": f"condor_hold {target} {bob_cluster}",
        "condor_rm": f"condor_rm {target} {bob_cluster}",
    }
    answers = {tool: as_other_export(alice, bob, line) for tool, line in tries.items()}
    for tool, (code, out) in answers.items():
        print(f"[shared lease] {tool} with alice's credentials: exit {code}: {out[-200:]}")
        assert code != 0, (tool, out)
    assert f"{bob_cluster}" not in answers["condor_q"][1].split()
    # nor can her schedd's identity replace his schedd's ad at the lease's collector
    fake = f"{SITE_BASE}/{alice}/pool/local/attack.d/fake.ad"
    site_path(fake).write_text(
        f'MyType = "Scheduler"\nName = "{schedd}"\nMyAddress = "<10.9.9.9:9>"\n'
        "TotalIdleJobs = 999\n"
    )
    print(
        "[shared lease] advertise:",
        as_other_export(alice, bob, f"condor_advertise -pool {collector} UPDATE_SCHEDD_AD {fake}"),
    )
    time.sleep(2)
    ads = {a["name"]: a for a in lease_status(lease)["schedds"]}
    assert ads[schedd]["idle"] != "999", ads
    after = queue_of(bob)
    assert len(after) == len(before) == 2
    # Neither held (5) nor removed (3) nor edited: running, or done.
    assert {probe for _, probe in after} == {"undefined"} and {st for st, _ in after} <= {
        "1", "2", "4",
    }, after  # fmt: skip

    # bob off the list: his next export into the lease is refused, nothing changed.
    assert (
        last_json(lumberjack("lease", "share", lease, "--remove", SHARED, "--json"))["share_with"]
        == []
    )
    late = submit_as(SHARED, dir_b, 1, arguments="$(Process) 0 0", output="late.out",
                     error="late.err", log="late.log")  # fmt: skip
    exports_before = last_json(lumberjack("exports", "--json"))
    with as_submitter(SHARED):
        refused = lumberjack("export", "--ids", str(late), "--lease", lease, check=False)
    remove_cluster(SHARED, late)
    assert refused.returncode == 2, refused
    said = (refused.stderr + refused.stdout).strip().splitlines()
    assert len(said) == 1 and f"{SHARED} may not join" in said[0], said
    assert last_json(lumberjack("exports", "--json")) == exports_before

    for name in (alice, bob):
        poll(f"{name} finished", lambda name=name: status(name), lambda a: a["finished"],
             timeout=300)  # fmt: skip
    # Accounting per export: each owner's usage, as the lease's accountant counts it.
    accounted = poll("usage of both exports", lambda: lease_status(lease),
                     lambda a: all(e.get("accounting", {}).get("usage_s", 0) > 0
                                   for e in a["exports"]), timeout=60)  # fmt: skip
    print("[shared lease] accounting:", accounted["exports"])
    assert {e["name"]: e["owner"] for e in accounted["exports"]} == {alice: OWNER, bob: SHARED}
    assert (accounted["owner"], accounted["share_with"]) == (OWNER, [])

    come_home(alice, dir_a, before_a)
    negotiator_tokens = site_path(f"{SITE_BASE}/lease-{lease}/pool/local/tokens.d")
    assert sorted(p.name for p in negotiator_tokens.iterdir()) == [f"joined-{bob}"]
    with as_submitter(SHARED):
        lumberjack("fetch", bob)
        imported = last_json(lumberjack("import", bob, "--json"))
    assert (imported["jobs"], imported["completed"]) == (2, 2)
    after_b = tree(dir_b)
    expected = expected_outputs(dir_b, range(2))
    assert {path: after_b[path] for path in expected} == expected
    assert not [p for p in after_b if p not in before_b and p not in expected
                and not p.startswith("late.")]  # fmt: skip
    assert last_json(lumberjack("lease", "shutdown", lease, "--json"))["phase"] == "ended"


def collector_of_lease(lease: str) -> str:
    state = site_path(f"{SITE_BASE}/lease-{lease}/pool/state.json").read_text()
    return "{address}:{port}".format(**json.loads(state))


def remove_cluster(user: str, cluster: int) -> None:
    """Remove a cluster of the local schedd as `user`, in a process of its own (see
    journey.submit_as: a process keeps the session it opened as another user)."""
    code = (
        "import sys, htcondor2; schedd = htcondor2.Schedd(htcondor2.Collector().locate("
        "htcondor2.DaemonType.Schedd, htcondor2.param['SCHEDD_HOST'])); "
        "schedd.act(htcondor2.JobAction.Remove, f'ClusterId == {sys.argv[1]}')"
    )
    env = {**os.environ, **testbed.ACCESS_POINT.client_env_of(user)}
    subprocess.run([sys.executable, "-c", code, str(cluster)], env=env, check=True)
