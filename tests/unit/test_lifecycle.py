"""The lifecycle: its decisions that need no site (the launch plan, pilot rounds), and the
state machine (`advance`, `sync`, each step) against a fake site, in seconds."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from lumberjack.core.contract import ReleasePlan, encode
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile
from lumberjack.state import handback, lifecycle, phases, plans, steps, sync
from lumberjack.state.ledger import Ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "state")


def make_record(ledger: Ledger, **info):
    profile = find_profile("testbed")
    request = build_request(profile, nodes=3, cores=2, walltime="30m")
    ledger.create(
        "calib", site="testbed", bundle_dir=Path("/nonexistent/bundle"),
        remote_spool="/home/hpcuser/lumberjack/calib/spool", owner=site_bundle.BUNDLE_OWNER,
        clusters=[7], jobs=["7.0", "7.1"],
        info={"remote_dir": "/home/hpcuser/lumberjack/calib",
              "request": plans.request_info(request), **info},
    )  # fmt: skip
    ledger.set_phase("calib", "exported")
    return ledger.get("calib")


def test_steps_refuse_the_wrong_phase(ledger: Ledger) -> None:
    record = make_record(ledger)
    with pytest.raises(BadInput, match="'calib' is exported; fetch needs phase launched"):
        steps.check_phase(record, "fetch")
    steps.check_phase(record, "ship")  # no error


def test_launch_plan_comes_from_the_recorded_request(ledger: Ledger) -> None:
    record = make_record(ledger)
    profile = find_profile("testbed")
    plan = plans.launch_plan(record, profile, steps.layout_of(record))
    assert plan.image == profile.container.image
    assert plan.batch_system == "slurm"
    assert plan.pilots == 1
    assert plan.spec.nodes == 3 and plan.spec.cores_per_node == 2
    assert plan.spec.walltime_s == 1800
    assert plan.token_lifetime_s == 1800 + plans.PILOT_TOKEN_MARGIN_S
    # what only the agent knows (the pilots' names, commands, output) is not in the plan
    assert not hasattr(plan.spec, "node_command")
    assert "node_command" not in encode(plan)


def test_launch_plan_carries_the_sites_policy_cap(ledger: Ledger) -> None:
    record = make_record(ledger)
    profile = find_profile("testbed")
    layout = steps.layout_of(record)
    assert plans.launch_plan(record, profile, layout).max_running_jobs is None
    capped = replace(profile, schedd=profile.schedd.model_copy(update={"max_running_jobs": 5}))
    assert plans.launch_plan(record, capped, layout).max_running_jobs == 5


def test_the_agent_turns_the_plans_cap_into_max_jobs_running(ledger: Ledger) -> None:
    from lumberjack.core.contract import LaunchPlan, decode
    from lumberjack.site import remote_pool
    from lumberjack.site.pools import pool_for

    record = make_record(ledger)
    profile = find_profile("testbed")
    capped = replace(profile, schedd=profile.schedd.model_copy(update={"max_running_jobs": 5}))
    layout = steps.layout_of(record)
    shipped = encode(plans.launch_plan(record, capped, layout))
    plan = replace(decode(LaunchPlan, shipped, "launch.json"), address="10.0.0.5", port=40123)
    settings = pool_for(layout, plan).settings()
    assert "\nMAX_JOBS_RUNNING = 5\n" in remote_pool.pool_config(settings)


def test_launch_accepts_every_runtime_and_refuses_an_unusable_one_in_one_line(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = make_record(ledger)
    layout = steps.layout_of(record)
    profile = find_profile("testbed")
    for runtime, image in (("singularity", "/i.sif"), ("podman-hpc", "lumberjack-site:1")):
        other = replace(profile, container=profile.container.model_copy(
            update={"runtime": runtime, "image": image}))  # fmt: skip
        plan = plans.launch_plan(record, other, layout)
        assert (plan.runtime, plan.image, plan.condor_release) == (runtime, image, None)
    # runtime "none" without a tarball to ship: refused before anything reaches the site
    bare = replace(profile, container=profile.container.model_copy(
        update={"runtime": "none", "image": None}))  # fmt: skip
    with pytest.raises(BadInput) as caught:
        plans.launch_plan(record, bare, layout)
    message = str(caught.value)
    assert message.startswith('site testbed runs HTCondor without a container (runtime "none")')
    assert "\n" not in message
    # ... and with one whose file is gone
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
    shipped = find_profile("testbed-nocontainer")
    with pytest.raises(BadInput, match=r"condor_tarball .*htcondor-release.tar.gz is not a file"):
        plans.launch_plan(record, shipped, layout)
    (tmp_path / "htcondor-release.tar.gz").write_bytes(b"release")
    plan = plans.launch_plan(record, shipped, layout)
    digest = hashlib.sha256(b"release").hexdigest()
    assert plan.runtime == "none" and plan.image == ""
    assert plan.condor_release == ReleasePlan(
        sha256=digest,
        tarball=f"/home/hpcuser/lumberjack/htcondor/{digest[:16]}.tar.gz",
        dir=f"/home/hpcuser/lumberjack/htcondor/{digest[:16]}",
    )


def test_allocation_placement_refuses_more_than_one_pilot(ledger: Ledger) -> None:
    profile = find_profile("testbed-alloc")
    assert profile.schedd.placement == "allocation"
    request = build_request(profile, nodes=2, pilots=2)
    ledger.create(
        "two", site="testbed-alloc", bundle_dir=Path("/nonexistent/bundle"),
        remote_spool="/home/hpcuser/lumberjack/two/spool", owner=site_bundle.BUNDLE_OWNER,
        clusters=[7], jobs=["7.0"],
        info={"remote_dir": "/home/hpcuser/lumberjack/two",
              "request": plans.request_info(request)},
    )  # fmt: skip
    record = ledger.get("two")
    with pytest.raises(BadInput, match=r"^--pilots 2: site testbed-alloc runs the schedd inside"):
        plans.launch_plan(record, profile, steps.layout_of(record))
    one = make_record(ledger)  # testbed: the same request with the schedd on the login node
    plan = plans.launch_plan(one, profile, steps.layout_of(one))
    assert plan.placement == "allocation" and plan.pilots == 1


def test_an_offline_export_has_no_site(ledger: Ledger) -> None:
    ledger.create("offline", site=None, bundle_dir=Path("/b"), remote_spool="/s",
                  owner=site_bundle.BUNDLE_OWNER, clusters=[1], jobs=["1.0"])  # fmt: skip
    with pytest.raises(BadInput, match="offline bundle"):
        steps.site_for(ledger.get("offline"))


def test_pilot_rounds_are_bounded(ledger: Ledger) -> None:
    record = make_record(ledger, pilot_rounds=sync.MAX_PILOT_ROUNDS)
    # No site is touched: the limit is checked first (site=None would fail otherwise).
    with pytest.raises(LumberjackError, match="rounds of pilots ended with jobs still idle"):
        sync.relaunch(ledger, None, record)  # type: ignore[arg-type]
    assert ledger.get("calib").info["pilot_rounds"] == sync.MAX_PILOT_ROUNDS


def test_sync_dry_run_changes_nothing(ledger: Ledger, monkeypatch) -> None:
    make_record(ledger)
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(ledger.directory))
    results = sync.sync(ledger, dry_run=True)
    assert results == [{"name": "calib", "phase": "exported", "would": "advance"}]
    assert ledger.get("calib").phase == "exported"


# ---- the state machine against a fake site -------------------------------------------


def load_fixture(name: str):  # -> module
    from conftest import load_fixture_module

    return load_fixture_module(name)


fake = load_fixture("fake_site")
site_bundle = load_fixture("site_bundle")


@pytest.fixture
def at_site(ledger: Ledger, tmp_path: Path):  # -> (record, FakeSite, FakeSchedd)
    """An exported export with a real bundle (two jobs), its site and its local schedd."""
    return fake.exported(ledger, tmp_path, site_bundle)


def phase_changes(ledger: Ledger, name: str = "calib") -> list[str]:
    return [s["step"].split(":")[1] for s in ledger.steps(name) if s["step"].startswith("phase:")]


def sync_once(ledger: Ledger, site, schedd) -> dict:
    results = sync.sync(ledger, schedd=schedd, open_site=lambda record: site)
    assert len(results) <= 1, results
    return results[0] if results else {}


def test_sync_takes_an_export_home_one_table_step_at_a_time(ledger: Ledger, at_site) -> None:
    _, site, schedd = at_site
    # exported: ship, launch, then the site says nobody runs yet: it waits for the pilot
    first = sync_once(ledger, site, schedd)
    assert first == {"name": "calib", "phase": "launched", "steps": ["exported", "shipped"]}
    assert site.pilots == {"1000": "queued"} and site.placed
    # again: nothing to do until the site moves (no second pilot, no second placement)
    assert sync_once(ledger, site, schedd)["steps"] == []
    assert site.launches == 1
    site.start()
    assert sync_once(ledger, site, schedd) == {"name": "calib", "phase": "running", "steps": []}
    site.finish("7.0")
    assert sync_once(ledger, site, schedd)["phase"] == "running"
    site.finish()
    last = sync_once(ledger, site, schedd)
    assert last == {"name": "calib", "phase": "imported", "steps": ["finished", "fetched"]}
    assert phase_changes(ledger) == [
        "exporting", "exported", "shipped", "launched", "running", "finished", "fetched",
        "imported",
    ]  # fmt: skip
    moved = phase_changes(ledger)[1:]  # from exported on, every move was sync's own step
    for before, after in zip(moved, moved[1:]):
        assert after in phases.ends(phases.sync_step(before), before), (before, after)
    # the job ads went to the local schedd once, completed; the site's pool stopped
    assert len(schedd.merged) == 1
    assert {schedd.merged[0][j].get("JobStatus") for j in ("7.0", "7.1")} == {"4"}
    assert ledger.get("calib").info["imported"] == {
        "jobs": 2,
        "completed": 2,
        "handed_back_idle": 0,
    }
    assert not site.pool_running
    # imported: sync has nothing more to do
    assert sync.sync(ledger, schedd=schedd, open_site=lambda r: site) == []


def test_each_step_can_be_repeated(ledger: Ledger, at_site) -> None:
    record, site, schedd = at_site
    shipped = lifecycle.ship(ledger, site, record)
    again = lifecycle.ship(ledger, site, ledger.get("calib"))
    assert shipped["sent_files"] == again["skipped_files"] > 0 and again["sent_files"] == 0
    launched = lifecycle.launch(ledger, site, ledger.get("calib"))
    relaunched = lifecycle.launch(ledger, site, ledger.get("calib"))
    assert launched["place"]["placed"] and not relaunched["place"]["placed"]
    assert relaunched["pilots"]["submitted"] == [] and ledger.get("calib").phase == "launched"
    site.finish()
    lifecycle.fetch(ledger, site, ledger.get("calib"))
    lifecycle.fetch(ledger, site, ledger.get("calib"))
    first = lifecycle.import_results(ledger, schedd, ledger.get("calib"))
    second = lifecycle.import_results(ledger, schedd, ledger.get("calib"))
    assert (first["completed"], second["completed"]) == (2, 2)
    handback.cleanup(ledger, site, ledger.get("calib"))
    assert handback.cleanup(ledger, site, ledger.get("calib"))["remote"]["removed"] is False
    assert ledger.get("calib").phase == "cleaned" and not record.bundle_dir.exists()
    assert phase_changes(ledger)[2:] == ["shipped", "launched", "fetched", "imported", "cleaned"]


def test_a_step_that_fails_keeps_the_phase_and_the_next_sync_goes_on(
    ledger: Ledger, at_site
) -> None:
    _, site, schedd = at_site
    site.reachable = False
    entry = sync_once(ledger, site, schedd)
    assert entry["phase"] == "exported" and "Connection refused" in entry["error"]
    assert [s["status"] for s in ledger.steps("calib") if s["step"] == "ship"] == [
        "started", "failed",
    ]  # fmt: skip
    site.reachable = True
    site.agent_error["launch"] = "site image /images/lj.sif not found"
    entry = sync_once(ledger, site, schedd)
    assert entry["phase"] == "shipped"
    assert entry["error"] == "site agent launch: site image /images/lj.sif not found"
    del site.agent_error["launch"]
    assert sync_once(ledger, site, schedd)["phase"] == "launched"


def test_a_crash_half_way_through_export_is_rolled_back_to_failed(
    ledger: Ledger, tmp_path: Path
) -> None:
    bundle = tmp_path / "crashed"
    (bundle / "native").mkdir(parents=True)
    ledger.create("crashed", site=None, bundle_dir=bundle, remote_spool="/s",
                  owner=site_bundle.BUNDLE_OWNER, clusters=[9], jobs=["9.0"])  # fmt: skip
    ledger.move("crashed", "export")
    schedd = fake.FakeSchedd()
    entry = sync_once(ledger, None, schedd)
    assert entry["phase"] == "failed" and entry["steps"][0].startswith("recovered")
    assert schedd.unexported == [[9]] and not bundle.exists()
    assert sync.sync(ledger, schedd=schedd) == []  # failed waits for a person


def test_pilots_are_resubmitted_a_bounded_number_of_rounds(ledger: Ledger, at_site) -> None:
    _, site, schedd = at_site
    sync_once(ledger, site, schedd)
    site.start("7.0")
    assert sync_once(ledger, site, schedd)["phase"] == "running"
    for round_ in range(2, sync.MAX_PILOT_ROUNDS + 1):
        site.pilots_end()  # walltime: the running job goes back to idle
        entry = sync_once(ledger, site, schedd)
        assert entry == {"name": "calib", "phase": "running", "steps": ["launch"]}
        assert ledger.get("calib").info["pilot_rounds"] == round_
        assert site.launches == round_
    site.pilots_end()
    entry = sync_once(ledger, site, schedd)
    assert "rounds of pilots ended with jobs still idle" in entry["error"]
    assert entry["phase"] == "running" and site.launches == sync.MAX_PILOT_ROUNDS
    # a person takes them home: fetch and import, the unfinished jobs idle again
    lifecycle.fetch(ledger, site, ledger.get("calib"))
    report = lifecycle.import_results(ledger, schedd, ledger.get("calib"))
    assert (report["completed"], report["handed_back_idle"]) == (0, 2)


def test_sync_brings_home_an_export_whose_held_job_can_never_run_again(
    ledger: Ledger, at_site
) -> None:
    _, site, schedd = at_site
    sync_once(ledger, site, schedd)
    site.start()
    site.hold_jobs("7.1")  # held for good (no PeriodicRelease) while 7.0 still runs
    assert sync_once(ledger, site, schedd) == {"name": "calib", "phase": "running", "steps": []}
    site.finish("7.0")
    last = sync_once(ledger, site, schedd)
    assert last == {"name": "calib", "phase": "imported", "steps": ["finished", "fetched"]}
    assert site.pilots == {"1000": "cancelled"}  # fetch ended the pilot that was waiting
    merged = schedd.merged[0]
    assert (merged["7.0"].get("JobStatus"), merged["7.1"].get("JobStatus")) == ("4", "5")


def test_sync_skips_an_export_another_process_holds(ledger: Ledger, at_site) -> None:
    _, site, schedd = at_site
    with ledger.lock("calib"):
        entry = sync_once(ledger, site, schedd)
    assert entry == {"name": "calib", "phase": "exported", "steps": ["busy: skipped"]}
    assert site.connection.commands == [] and site.connection.files == {}


def test_status_reads_the_site_and_records_the_phase_it_means(ledger: Ledger, at_site) -> None:
    record, site, schedd = at_site
    lifecycle.ship(ledger, site, record)
    answer = lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert answer.placed is False and ledger.get("calib").phase == "shipped"
    lifecycle.launch(ledger, site, ledger.get("calib"))
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").phase == "launched"  # the pilot is still queued
    site.start("7.1")
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").phase == "running"
    site.finish()
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").phase == "finished"


def test_sync_asks_the_site_once_for_every_export_waiting_there(
    ledger: Ledger, at_site, tmp_path: Path
) -> None:
    record, site, schedd = at_site
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    # two more launched exports at the same site (the site's jobs and pilots serve all)
    for name in ("calib2", "calib3"):
        ledger.create(
            name, site="testbed", bundle_dir=record.bundle_dir,
            remote_spool=f"/home/hpcuser/lj/{name}/spool", owner=site_bundle.BUNDLE_OWNER,
            clusters=[8], jobs=["8.0"], info={"remote_dir": f"/home/hpcuser/lj/{name}"},
        )  # fmt: skip
        ledger.set_phase(name, "launched")
        files = site.connection.files  # shipped and launched as calib was
        for path, data in list(files.items()):
            if path.startswith("/home/hpcuser/lj/calib/"):
                files[path.replace("/lj/calib/", f"/lj/{name}/", 1)] = data
    site.connection.commands.clear()
    results = sync.sync(ledger, schedd=schedd, open_site=lambda r: site)
    assert [(r["name"], r["phase"], r["steps"]) for r in results] == [
        (name, "launched", []) for name in ("calib", "calib2", "calib3")
    ]
    agent_calls = [c for c in site.connection.commands if c.startswith("python3 ")]
    assert len(agent_calls) == 1, agent_calls
    assert shlex.split(agent_calls[0])[6:] == [
        "status", "/home/hpcuser/lj/calib", "/home/hpcuser/lj/calib2", "/home/hpcuser/lj/calib3"
    ]  # fmt: skip
    # an answer left unused (the export was busy) is not kept for the next round
    with ledger.lock("calib2"):
        busy = sync.sync(ledger, schedd=schedd, sites={"testbed": site})
    assert busy[1]["steps"] == ["busy: skipped"] and site.statuses
    sync.sync(ledger, schedd=schedd, sites={"testbed": site}, names=("calib",))
    assert site.statuses == {}
    # a status the one call did not answer is asked for on its own
    site.agent_error["status"] = "the queue cannot be read"
    site.connection.commands.clear()
    results = sync.sync(ledger, schedd=schedd, open_site=lambda r: site)
    assert [r.get("error") for r in results] == ["site agent status: the queue cannot be read"] * 3
    assert len([c for c in site.connection.commands if c.startswith("python3 ")]) == 4


def test_moves_outside_the_table_are_refused(ledger: Ledger, at_site) -> None:
    record, site, schedd = at_site
    with pytest.raises(BadInput, match="'calib' is exported; fetch needs phase launched"):
        ledger.move("calib", "fetch")
    with pytest.raises(BadInput, match="import needs phase fetched or imported"):
        lifecycle.import_results(ledger, schedd, record)
    with pytest.raises(ValueError, match="needs the local schedd"):
        lifecycle.import_results(ledger, None, replace(record, phase=phases.Phase.FETCHED))
    assert ledger.get("calib").phase == "exported"


def test_ship_sends_the_condor_tarball_once_per_site(
    ledger: Ledger, at_site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, site, _ = at_site
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
    (tmp_path / "htcondor-release.tar.gz").write_bytes(b"a release" * 1000)
    site.profile = find_profile("testbed-nocontainer")
    digest = hashlib.sha256(b"a release" * 1000).hexdigest()
    remote = f"/home/hpcuser/lj/htcondor/{digest[:16]}.tar.gz"
    first = lifecycle.ship(ledger, site, record)
    assert first["condor_release"] == {"tarball": remote, "sent_bytes": 9000}
    assert site.connection.files[remote] == b"a release" * 1000
    second = lifecycle.ship(ledger, site, ledger.get("calib"))
    assert second["condor_release"] == {"tarball": remote, "sent_bytes": 0}
    site.profile = find_profile("testbed")  # a container site ships no tarball
    assert "condor_release" not in lifecycle.ship(ledger, site, ledger.get("calib"))
