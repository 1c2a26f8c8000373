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
from lumberjack.state.isolation_guard import check_isolation
from lumberjack.state.ledger import Ledger

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
    assert config["SINGULARITY_EXTRA_ARGUMENTS"] == '""'
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
        ({"JobUniverse": 5, "Environment": "APPTAINER_BIND=/home/hpcuser/lumberjack"}, False),
        ({"JobUniverse": 5, "Environment": "apptainerenv_x=1"}, False),
        ({"JobUniverse": 5, "Env": "SINGULARITY_BIND=/home"}, False),
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


def _export(ledger: Ledger, name: str, owner: str, site: str, phase: str) -> None:
    ledger.create(
        name, site=site, bundle_dir=Path("/nowhere") / name, remote_spool=f"/r/{name}/spool",
        owner=owner, clusters=[1], jobs=["1.0"],
    )  # fmt: skip
    ledger.set_phase(name, phase)


def test_launch_refuses_another_owner_where_jobs_get_no_container(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    site = "testbed-nocontainer"
    bare = find_profile(site)
    _export(ledger, "alice-calib", "alice", site, "running")
    _export(ledger, "alice-more", "alice", site, "shipped")
    _export(ledger, "carol-old", "carol", site, "cleaned")  # gone from the site
    _export(ledger, "dave-elsewhere", "dave", "testbed", "running")  # another site
    check_isolation(ledger, ledger.get("alice-more"), bare)  # the same owner: fine
    _export(ledger, "bob-calib", "bob", site, "shipped")
    with pytest.raises(BadInput, match="export alice-calib of alice is there") as refused:
        check_isolation(ledger, ledger.get("bob-calib"), bare)
    assert "\n" not in str(refused.value)
    check_isolation(ledger, ledger.get("bob-calib"), bare, shared_account=True)
    check_isolation(ledger, ledger.get("bob-calib"), dataclasses.replace(bare, shared_account=True))
    # Where every job has its own container, owners share the account.
    check_isolation(ledger, ledger.get("bob-calib"), find_profile("testbed"))


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
