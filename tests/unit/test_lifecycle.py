"""The lifecycle's decisions that need no site: phases, the launch plan, pilot rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from lumberjack.errors import BadInput, LumberjackError
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile
from lumberjack.state import lifecycle
from lumberjack.state.ledger import Ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "state")


def make_record(ledger: Ledger, **info):
    profile = find_profile("testbed")
    request = build_request(profile, nodes=3, cores=2, walltime="30m")
    ledger.create(
        "calib", site="testbed", bundle_dir=Path("/nonexistent/bundle"),
        remote_spool="/home/hpcuser/lumberjack/calib/spool", owner="alice",
        clusters=[7], jobs=["7.0", "7.1"],
        info={"remote_dir": "/home/hpcuser/lumberjack/calib",
              "request": lifecycle.request_info(request), **info},
    )  # fmt: skip
    ledger.set_phase("calib", "exported")
    return ledger.get("calib")


def test_steps_refuse_the_wrong_phase(ledger: Ledger) -> None:
    record = make_record(ledger)
    with pytest.raises(BadInput, match="'calib' is exported; fetch needs phase launched"):
        lifecycle.check_phase(record, "fetch")
    lifecycle.check_phase(record, "ship")  # no error


def test_launch_plan_comes_from_the_recorded_request(ledger: Ledger) -> None:
    record = make_record(ledger)
    profile = find_profile("testbed")
    plan = lifecycle.launch_plan(record, profile, lifecycle.layout_of(record))
    assert plan["image"] == profile.container.image
    assert plan["batch_system"] == "slurm"
    assert plan["pilots"] == 1
    assert plan["spec"]["nodes"] == 3 and plan["spec"]["cores_per_node"] == 2
    assert plan["spec"]["walltime_s"] == 1800
    assert plan["token_lifetime_s"] == 1800 + lifecycle.TOKEN_QUEUE_ALLOWANCE_S
    assert plan["spec"]["node_command"] == "/home/hpcuser/lumberjack/calib/pilots/node.sh"


def test_an_offline_export_has_no_site(ledger: Ledger) -> None:
    ledger.create("offline", site=None, bundle_dir=Path("/b"), remote_spool="/s",
                  owner="alice", clusters=[1], jobs=["1.0"])  # fmt: skip
    with pytest.raises(BadInput, match="offline bundle"):
        lifecycle.site_for(ledger.get("offline"))


def test_pilot_rounds_are_bounded(ledger: Ledger) -> None:
    record = make_record(ledger, pilot_rounds=lifecycle.MAX_PILOT_ROUNDS)
    # No site is touched: the limit is checked first (site=None would fail otherwise).
    with pytest.raises(LumberjackError, match="rounds of pilots ended with jobs still idle"):
        lifecycle.relaunch(ledger, None, record)  # type: ignore[arg-type]
    assert ledger.get("calib").info["pilot_rounds"] == lifecycle.MAX_PILOT_ROUNDS


def test_sync_dry_run_changes_nothing(ledger: Ledger, monkeypatch) -> None:
    make_record(ledger)
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(ledger.directory))
    results = lifecycle.sync(ledger, dry_run=True)
    assert results == [{"name": "calib", "phase": "exported", "would": "advance"}]
    assert ledger.get("calib").phase == "exported"
