"""Owners apart at the site: the nested job container of a pilot's startd, the job guard,
the launch guard where a site has no container, and the pilots' short-lived token."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import classad2
import pytest
from conftest import load_fixture_module

from lumberjack.core.contract import ExportLayout
from lumberjack.errors import BadInput
from lumberjack.profiles import isolation
from lumberjack.profiles.sites import find_profile
from lumberjack.site import job_container, pilot_token, remote_pool
from lumberjack.site.remote_pool import PoolSettings
from lumberjack.state.isolation_guard import account_facts, check_isolation, check_lease_isolation
from lumberjack.state.ledger import Ledger
from lumberjack.transport.login_account import login_account

site_bundle = load_fixture_module("site_bundle")

IMAGE = "/images/lumberjack-site.sif"


def settings(runtime: str = "apptainer") -> PoolSettings:
    return PoolSettings(
        layout=ExportLayout("/scratch/lj/calib"), site_user="hpcuser", address="10.0.0.5",
        port=40123, image=IMAGE, runtime_name=runtime,
        release="/scratch/lj/release" if runtime == "none" else "",
    )  # fmt: skip


values = load_fixture_module("condor_config").config_values  # rendered configs, read


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_every_job_runs_in_a_fixed_container_of_the_site_image(runtime: str) -> None:
    config = values(remote_pool.pilot_config(settings(runtime)))
    assert config["SINGULARITY_JOB"] == "TRUE"
    assert config["SINGULARITY"] == job_container.INNER_APPTAINER
    # Image, binds and extra arguments are constants: HTCondor's defaults read the job ad.
    # The site image unless the job names an image shipped to this export (test_job_images).
    assert config["SINGULARITY_IMAGE_EXPR"].endswith(f'"{IMAGE}"))')
    assert config["SINGULARITY_BIND_EXPR"] == '""'
    assert config["SINGULARITY_EXTRA_ARGUMENTS"] == '"--no-eval"'
    assert config["SINGULARITY_USE_PID_NAMESPACES"] == "TRUE"  # -C: own PID, IPC, env
    assert config["SINGULARITY_MOUNT_HOME"] == "FALSE"
    assert config["SINGULARITY_TARGET_DIR"] == "/srv"
    # No `apptainer test` container before each job's own (it isolates nothing).
    assert config["SINGULARITY_RUN_TEST_BEFORE_JOB"] == "FALSE"
    assert config["START"].startswith(f"($(START)) && {job_container.JOB_GUARD} && ")


@pytest.mark.parametrize("runtime", ["none", "podman-hpc"])
def test_runtimes_without_a_job_container_say_so(runtime: str) -> None:
    config = remote_pool.pilot_config(settings(runtime))
    assert "SINGULARITY_JOB" not in config
    assert "shared_account" in config
    assert values(config)["START"] == "time() < LUMBERJACK_RETIRE_TIME"


@pytest.mark.parametrize(
    ("job", "starts"),
    [
        ({"JobUniverse": 5}, True),
        ({"JobUniverse": 5, "Environment": "A=1 B=two"}, True),
        # The job's environment steers nothing outside its container (site/job_wrapper.py).
        ({"JobUniverse": 5, "Environment": "APPTAINER_BIND=/home/hpcuser/lumberjack"}, True),
        ({"JobUniverse": 5, "Env": "LD_PRELOAD=./x.so;SINGULARITY_BIND=/home"}, True),
        ({"JobUniverse": 14, "ContainerImage": "/home/hpcuser/lumberjack/other.sif"}, False),
        ({"JobUniverse": 5, "WantDockerImage": True, "ContainerImage": "docker://x"}, False),
        ({"JobUniverse": 5, "WantSandboxImage": True, "ContainerImage": "/img/"}, False),
        ({"JobUniverse": 5, "WantDocker": True, "DockerImage": "debian"}, False),
        ({"JobUniverse": 7}, False),
    ],
)
def test_the_job_guard(job: dict, starts: bool) -> None:
    guard = classad2.ExprTree(job_container.JOB_GUARD)
    assert guard.eval(classad2.ClassAd({}), classad2.ClassAd(job)) is starts


def test_the_startd_container_binds_the_image_for_the_nested_one() -> None:
    wrapped = settings().runtime.wrap("/c", "condor_master")
    assert f"--bind {IMAGE}:{IMAGE}:ro {IMAGE} " in wrapped


def test_isolation_of_profiles() -> None:
    contained = find_profile("testbed")
    bare = find_profile("testbed-nocontainer")
    assert isolation.isolation_of(contained) == isolation.CONTAINED
    assert isolation.isolation_of(bare) == isolation.ONE_OWNER
    assert isolation.isolation_of(bare, shared_account=True) == isolation.SHARED
    shared = dataclasses.replace(bare, shared_account=True)
    assert isolation.isolation_of(shared) == isolation.SHARED
    assert "one owner's exports at a time" in isolation.isolation_note(bare)
    assert "other owners' too" in isolation.isolation_note(shared)
    assert "only its sandbox" in isolation.isolation_note(contained)


def _export(
    ledger: Ledger, name: str, owner: str, site: str | None, phase: str, **info: object
) -> None:
    ledger.create(
        name, site=site, bundle_dir=Path("/nowhere") / name, remote_spool=f"/r/{name}/spool",
        owner=owner, clusters=[1], jobs=["1.0"],
    )  # fmt: skip
    ledger.set_phase(name, phase)
    if info:
        ledger.update_info(name, **info)


def _shipped(ledger: Ledger, name: str, owner: str, site: str, phase: str = "shipped") -> None:
    """An export as ship leaves it: its account and how its jobs run, recorded."""
    _export(ledger, name, owner, site, phase, **account_facts(find_profile(site)))


ACCOUNT = "hpcuser@10.251.0.2"


def test_the_account_is_the_login_not_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("testbed", "testbed-nocontainer", "testbed-mfa", "testbed-alloc")
    assert {login_account(find_profile(name)) for name in names} == {ACCOUNT}  # ports differ
    bare = find_profile("testbed-nocontainer")
    renamed = dataclasses.replace(bare, name="elsewhere", base_dir="/other/place")
    assert login_account(renamed) == ACCOUNT
    assert login_account(dataclasses.replace(bare, login_host="Login.Example.ORG.")) == (
        "hpcuser@login.example.org"
    )
    assert login_account(dataclasses.replace(bare, user="alice1")) == "alice1@10.251.0.2"
    # A Host alias of the SSH configuration is the host it names, as for the transport.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host tb\n  HostName 10.251.0.2\n  User hpcuser\n")
    assert login_account(dataclasses.replace(bare, login_host="tb", user=None)) == ACCOUNT


def test_launch_refuses_another_owner_where_jobs_get_no_container(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    site = "testbed-nocontainer"
    bare = find_profile(site)
    _shipped(ledger, "alice-calib", "alice", site, "running")
    _shipped(ledger, "alice-more", "alice", site)
    _export(ledger, "carol-old", "carol", site, "cleaned")  # gone from the site
    # another account on the same host
    _export(ledger, "dave-elsewhere", "dave", site, "running", site_account="dave@10.251.0.2",
            isolation=isolation.ONE_OWNER)  # fmt: skip
    check_isolation(ledger, ledger.get("alice-more"), bare)  # the same owner: fine
    _export(ledger, "bob-calib", "bob", site, "exported")
    with pytest.raises(BadInput, match="export alice-calib of alice is there") as refused:
        check_isolation(ledger, ledger.get("bob-calib"), bare)
    assert "\n" not in str(refused.value)
    assert f"on the same site account {ACCOUNT}" in str(refused.value)
    assert "site_account" not in ledger.get("bob-calib").info  # refused: nothing recorded
    check_isolation(ledger, ledger.get("bob-calib"), bare, shared_account=True)
    check_isolation(ledger, ledger.get("bob-calib"), dataclasses.replace(bare, shared_account=True))
    assert ledger.get("bob-calib").info["site_account"] == ACCOUNT
    assert ledger.get("bob-calib").info["isolation"] == isolation.SHARED


def test_a_profile_of_another_name_is_the_same_account(tmp_path: Path) -> None:
    """The issue's case: alice at testbed (apptainer), bob by testbed-nocontainer (same
    host, user and base_dir): refused whichever comes second."""
    ledger = Ledger(tmp_path / "state")
    _shipped(ledger, "alice-calib", "alice", "testbed", "running")
    _export(ledger, "bob-calib", "bob", "testbed-nocontainer", "exported")
    with pytest.raises(
        BadInput,
        match="export alice-calib of alice is there .running. on "
        f"the same site account {ACCOUNT} .site testbed.: each owner's",
    ):
        check_isolation(ledger, ledger.get("bob-calib"), find_profile("testbed-nocontainer"))
    # Contained beside uncontained: the uncontained one's jobs reach the contained files.
    ledger.set_phase("alice-calib", "cleaned")
    _shipped(ledger, "bob-first", "bob", "testbed-nocontainer")
    _export(ledger, "alice-next", "alice", "testbed", "exported")
    with pytest.raises(
        BadInput,
        match="export bob-first of bob is there .shipped. .* its "
        "jobs get no container: they could read this export's files",
    ):
        check_isolation(ledger, ledger.get("alice-next"), find_profile("testbed"))
    # Both contained (two profiles, two ports, one account): side by side.
    ledger.set_phase("bob-first", "cleaned")
    _shipped(ledger, "bob-mfa", "bob", "testbed-mfa", "running")
    check_isolation(ledger, ledger.get("alice-next"), find_profile("testbed"))
    # Another user of the same host is another account: the kernel keeps them apart.
    _shipped(ledger, "erin-bare", "erin", "testbed-nocontainer")
    other_user = dataclasses.replace(find_profile("testbed-nocontainer"), user="alice1")
    _export(ledger, "alice-own", "alice", "testbed-nocontainer", "exported")
    check_isolation(ledger, ledger.get("alice-own"), other_user)
    assert ledger.get("alice-own").info["site_account"] == "alice1@10.251.0.2"


def test_what_was_recorded_at_ship_counts_not_the_profile_now(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    bare = find_profile("testbed-nocontainer")
    # Shipped by a profile since renamed or removed: its recorded account still counts.
    _export(ledger, "alice-old", "alice", "retired-name", "launched", site_account=ACCOUNT,
            isolation=isolation.ONE_OWNER)  # fmt: skip
    _export(ledger, "bob-calib", "bob", "testbed-nocontainer", "exported")
    with pytest.raises(BadInput, match="export alice-old of alice is there"):
        check_isolation(ledger, ledger.get("bob-calib"), bare)
    ledger.set_phase("alice-old", "cleaned")
    # A ship cut short, or handed back without cleanup: files may be there.
    _export(ledger, "alice-cut", "alice", "testbed", "unexported", site_account=ACCOUNT,
            isolation=isolation.CONTAINED)  # fmt: skip
    with pytest.raises(BadInput, match="export alice-cut of alice is there .unexported."):
        check_isolation(ledger, ledger.get("bob-calib"), bare)
    ledger.set_phase("alice-cut", "cleaned")
    # Never shipped (no account recorded), or an offline bundle: nothing at a site.
    _export(ledger, "alice-local", "alice", "testbed", "unexported")
    _export(ledger, "alice-offline", "alice", None, "imported")
    check_isolation(ledger, ledger.get("bob-calib"), bare)
    # A record from before accounts were kept: its profile's account now; with the
    # profile gone, its site's name is all there is to compare.
    _export(ledger, "bob-more", "bob", "testbed-nocontainer", "exported")
    _export(ledger, "alice-legacy", "alice", "testbed", "running")
    with pytest.raises(BadInput, match="export alice-legacy of alice"):
        check_isolation(ledger, ledger.get("bob-more"), bare)
    ledger.set_phase("alice-legacy", "cleaned")
    _export(ledger, "alice-gone", "alice", "no-such-profile", "running")
    check_isolation(ledger, ledger.get("bob-more"), bare)
    gone = dataclasses.replace(bare, name="no-such-profile")
    _export(ledger, "bob-gone", "bob", "no-such-profile", "exported")
    with pytest.raises(BadInput, match="export alice-gone of alice"):
        check_isolation(ledger, ledger.get("bob-gone"), gone)


def test_a_lease_follows_the_same_rules(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    bare = find_profile("testbed-nocontainer")
    facts = account_facts(bare)
    ledger.create_lease("calib", site="testbed-nocontainer",
                        info={"owner": "alice", "share_with": ["bob"], **facts})  # fmt: skip
    # Shared with bob, but its jobs get no container: bob's export may not join it.
    _export(ledger, "alice-calib", "alice", "testbed-nocontainer", "exported", lease="calib")
    check_isolation(ledger, ledger.get("alice-calib"), bare)
    _export(ledger, "bob-calib", "bob", "testbed-nocontainer", "exported", lease="calib")
    with pytest.raises(BadInput, match="export alice-calib of alice is there .exported."):
        check_isolation(ledger, ledger.get("bob-calib"), bare)
    # The lease alone is alice's too: its key and its pilots' token are on the account.
    ledger.set_phase("alice-calib", "cleaned")
    with pytest.raises(BadInput, match="lease calib of alice is there .creating."):
        check_isolation(ledger, ledger.get("bob-calib"), bare)
    check_isolation(ledger, ledger.get("bob-calib"), bare, shared_account=True)
    ledger.set_phase("bob-calib", "cleaned")
    # Nor a plain export of carol's, by a profile of any name, contained or not.
    _export(ledger, "carol-calib", "carol", "testbed", "exported")
    with pytest.raises(BadInput, match="lease calib of alice is there"):
        check_isolation(ledger, ledger.get("carol-calib"), find_profile("testbed"))
    # Nor a new lease of carol's on the account.
    with pytest.raises(BadInput, match="lease calib of alice is there"):
        check_lease_isolation(ledger, "carol-lease", "carol", find_profile("testbed"))
    # A contained lease carries several owners' contained exports.
    ledger.update_lease_info("calib", **account_facts(find_profile("testbed")))
    _export(ledger, "bob-again", "bob", "testbed", "shipped", lease="calib",
            **account_facts(find_profile("testbed")))  # fmt: skip
    check_isolation(ledger, ledger.get("carol-calib"), find_profile("testbed"))
    assert check_lease_isolation(ledger, "carol-lease", "carol", find_profile("testbed-mfa")) == {
        "site_account": ACCOUNT, "isolation": isolation.CONTAINED,
    }  # fmt: skip


def _token(iat: float, exp: float) -> str:
    body = base64.urlsafe_b64encode(json.dumps({"iat": iat, "exp": exp}).encode()).decode()
    return f"eyJhbGciOiJIUzI1NiJ9.{body.rstrip('=')}.c2ln"


def test_a_waiting_pilot_gets_a_fresh_token_after_half_the_margin(tmp_path: Path) -> None:
    layout = ExportLayout(str(tmp_path / "calib"))
    launch = site_bundle.launch_plan(token_lifetime_s=1800 + 900)
    tokens = Path(layout.pilot_tokens)
    tokens.mkdir(parents=True)
    assert pilot_token.stale(layout, launch)  # no token at all
    pilot_token.token_file(layout).write_text(_token(1000, 1000 + 2700) + "\n")
    assert pilot_token.claims(pilot_token.token_file(layout).read_text())["exp"] == 3700
    assert not pilot_token.stale(layout, launch, now=1000 + 450)
    assert pilot_token.stale(layout, launch, now=1000 + 451)
    # Nothing queued: nothing to refresh (and no pool is asked).
    assert not pilot_token.refresh_for_waiting(layout, settings(), launch, {"7": "running"})


def test_an_account_that_ran_jobs_without_a_container_stays_its_owners(tmp_path: Path) -> None:
    """bob's uncontained export ran its jobs, then was cleaned: what they could have left
    in the account (shell startup files, ~/.ssh) runs with every later command there, so
    another owner's export waits for a person's --shared-account; bob's own go on, and
    an uncontained export that never launched leaves nothing suspect."""
    ledger = Ledger(tmp_path / "state")
    _shipped(ledger, "bob-never", "bob", "testbed-nocontainer", "cleaned")  # never launched
    _shipped(ledger, "bob-ran", "bob", "testbed-nocontainer", "cleaned")
    ledger.update_info("bob-ran", ran_uncontained=True)
    _export(ledger, "alice-next", "alice", "testbed", "exported")
    with pytest.raises(BadInput, match="export bob-ran of bob ran its jobs without a container "
                       f"on the same site account {ACCOUNT}") as refused:  # fmt: skip
        check_isolation(ledger, ledger.get("alice-next"), find_profile("testbed"))
    assert "~/.ssh" in str(refused.value) and "\n" not in str(refused.value)
    _export(ledger, "bob-next", "bob", "testbed", "exported")
    check_isolation(ledger, ledger.get("bob-next"), find_profile("testbed"))
    check_isolation(ledger, ledger.get("alice-next"), find_profile("testbed"), shared_account=True)


def test_a_first_launch_without_a_container_marks_the_export(tmp_path: Path) -> None:
    from conftest import load_fixture_module

    from lumberjack.state import lifecycle
    from lumberjack.state.isolation_guard import RAN_UNCONTAINED

    fake = load_fixture_module("fake_site")
    ledger = Ledger(tmp_path / "state")
    record, site, _ = fake.exported(ledger, tmp_path, load_fixture_module("site_bundle"))
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    assert RAN_UNCONTAINED not in ledger.get("calib").info  # testbed: apptainer
