"""A lease at a site that runs the schedd inside the allocation (profile testbed-alloc):
the head node of each round of the lease's pilots runs its collector and negotiator and
the schedd of every export that joined; nothing of it runs on the login node at any
time. Two exports join at different times, a round is cancelled mid-job and the next
one resumes both queues, every output comes home byte-identical, and a crash in the
join and in the release handshake is finished by `sync`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import testbed
from journey import (
    alive_pilots,
    expected_outputs,
    last_json,
    lumberjack,
    on_login_node,
    poll_status,
    site_path,
    site_run,
    tree,
)
from test_mfa_login import authentications, mfa_site, prompts  # noqa: F401  (a fixture)
from test_site_leases import (
    JOBS,
    SITE_BASE,
    at_site,  # noqa: F401  (the fixture)
    come_home,
    crashing,
    join,
    lease_status,
    poll,
    slurm_jobs,
    started,
    unique,
)

from lumberjack.profiles.sites import PROFILES_ENV, shipped_profile_dir
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

SITE = "testbed-alloc"


def nothing_on_login_node(*names: str) -> None:
    for name in names:
        assert on_login_node(name) == {}, name


def sync_until(name: str, phase: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    said = ""
    while (now := Ledger().get(name).phase) != phase:
        assert time.monotonic() < deadline, f"{name} still {now}; sync said: {said}"
        said = lumberjack("sync", "--name", name, "--json", check=False).stdout[-600:]
        time.sleep(2)


def test_a_lease_in_the_allocation(workspace: Path, state_dir: Path, at_site: dict) -> None:  # noqa: F811
    lease = unique("alease")
    lease_dir = f"lease-{lease}"
    at_site["leases"].append(lease)
    begun = time.monotonic()
    created = last_json(
        lumberjack(
            "lease", "create", lease, "--site", SITE, "--nodes", "1", "--cores", "2",
            "--walltime", "20m", "--idle-shutdown", "5m", "--owner", testbed.SUBMITTER,
            "--json",
        )
    )  # fmt: skip
    assert created["phase"] == "active" and created["site"] == SITE
    assert created["pool"]["started"] is False and created["pool"]["placement"] == "allocation"
    (first_round,) = created["pilots"]["submitted"]
    nothing_on_login_node(lease_dir)
    # One round at a time holds the pool: no second one while it lives.
    refused = lumberjack("lease", "extend", lease, "--json", check=False)
    assert refused.returncode != 0 and "one round at a time" in refused.stdout + refused.stderr

    # The first export joins; its launch dies after placing the queue (no join request
    # yet) and `sync` finishes it.
    first, dir_a, before_a, _ = join(workspace, lease, "first")
    at_site["exports"].append(first)
    crashed = crashing("launch", first, crash="joined.after-place")
    assert crashed.returncode != 0, crashed
    assert "crash point joined.after-place reached" in crashed.stdout + crashed.stderr
    sync_until(first, "launched")
    poll_status(first, started, "running", every=1)
    first_job = time.monotonic() - begun
    head = poll("the head announced", lambda: lease_status(lease), lambda a: a["pool_running"])
    assert head["collector"] and head["joined"] == {first: "joined"}
    nothing_on_login_node(lease_dir, first)

    # The second joins later with longer jobs; the lease's round is alive: no new one.
    second, dir_b, before_b, _ = join(workspace, lease, "second", seconds=25)
    at_site["exports"].append(second)
    second_launch = time.monotonic()
    launched = last_json(lumberjack("launch", second, "--json"))
    assert launched["pilots"]["submitted"] == [] and launched["lease"] == lease_dir
    running = poll_status(second, lambda a: a["jobs"].get("running", 0) >= 1, "running", every=1)
    assert alive_pilots(running) == [first_round]
    nothing_on_login_node(lease_dir, first, second)

    # The round is cancelled mid-job: the queues stay in their spools, the next round's
    # head starts both schedds again and the cut-off jobs run again.
    site_run(f"scancel {first_round}")
    gone = poll_status(second, lambda a: not alive_pilots(a), "without a pilot", timeout=180)
    assert gone["interrupted"] >= 1 and "running" not in gone["jobs"]
    assert sum(gone["jobs"].values()) == JOBS
    relaunched = last_json(lumberjack("sync", "--name", second, "--json"))["exports"][0]
    assert "launch" in relaunched["steps"], relaunched
    for name in (first, second):
        poll_status(name, lambda a: a["finished"], "finished", timeout=300, every=3)
    nothing_on_login_node(lease_dir, first, second)

    # Home: the first's fetch dies after asking the head for the release; `sync`
    # finishes the handshake, the fetch and the import.
    crashed = crashing("fetch", first, crash="joined.after-release-request")
    assert crashed.returncode != 0, crashed
    assert lease_status(lease)["joined"][first] in ("leaving", "released")
    sync_until(first, "imported")
    after_a = tree(dir_a)
    expected = expected_outputs(dir_a, range(JOBS))
    assert {path for path in after_a if path not in before_a} == set(expected)
    assert {path: after_a[path] for path in expected} == expected
    come_home(second, dir_b, before_b)
    print(f"[alloc lease] create -> first job running: {first_job:.0f} s; launch of the "
          f"second -> its outputs at home (a round cancelled between): "
          f"{time.monotonic() - second_launch:.0f} s")  # fmt: skip
    assert lease_status(lease)["joined"] == {first: "released", second: "released"}
    nothing_on_login_node(lease_dir, first, second)

    ended = last_json(lumberjack("lease", "shutdown", lease, "--json"))
    assert ended["phase"] == "ended" and ended["stop"]["pool_stopped"]
    assert not site_path(f"{SITE_BASE}/{lease_dir}").exists()
    assert slurm_jobs(f"lj-lease-{lease}") == []
    nothing_on_login_node(lease_dir, first, second)


MFA_SITE = "testbed-mfa-alloc"
MFA_PORT = 2223  # testbed-mfa's sshd: key AND a one-time code


@pytest.fixture
def mfa_alloc_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test-only profile: testbed-mfa with the schedd inside the allocation."""
    text = (shipped_profile_dir() / "testbed-mfa.toml").read_text()
    text = text.replace('name = "testbed-mfa"', f'name = "{MFA_SITE}"')
    text = text.replace('placement = "login"', 'placement = "allocation"')
    assert f'name = "{MFA_SITE}"' in text and 'placement = "allocation"' in text
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / f"{MFA_SITE}.toml").write_text(text)
    monkeypatch.setenv(PROFILES_ENV, str(profiles))
    yield MFA_SITE
    lumberjack("logout", MFA_SITE, check=False)


def test_a_lease_in_the_allocation_through_one_mfa_login(
    workspace: Path,
    state_dir: Path,
    mfa_site,  # noqa: F811
    mfa_alloc_profile: str,
    at_site: dict,  # noqa: F811
) -> None:
    before, asked = authentications(mfa_site, MFA_PORT), prompts(mfa_site)
    assert last_json(lumberjack("login", mfa_alloc_profile, "--persist", "1h", "--json"))["live"]
    lease = unique("mfalease")
    at_site["leases"].append(lease)
    created = last_json(
        lumberjack(
            "lease", "create", lease, "--site", mfa_alloc_profile, "--nodes", "1",
            "--cores", "2", "--walltime", "15m", "--idle-shutdown", "3m",
            "--owner", testbed.SUBMITTER, "--json",
        )
    )  # fmt: skip
    assert created["phase"] == "active" and created["site"] == mfa_alloc_profile
    name, job_dir, before_jobs, _ = join(workspace, lease, "mfa", seconds=1)
    at_site["exports"].append(name)
    lumberjack("launch", name, "--json")
    poll_status(name, lambda a: a["finished"], "finished", timeout=300, every=3)
    come_home(name, job_dir, before_jobs)
    nothing_on_login_node(f"lease-{lease}", name)
    ended = last_json(lumberjack("lease", "shutdown", lease, "--json"))
    assert ended["phase"] == "ended"
    assert slurm_jobs(f"lj-lease-{lease}") == []
    # One code for all of it: create, export, ship, launch, status, fetch, import, shutdown.
    assert authentications(mfa_site, MFA_PORT) == before + 1
    assert prompts(mfa_site) == asked + 1
