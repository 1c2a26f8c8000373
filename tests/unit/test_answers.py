"""The site agent's answers (core/answers.py): each verb's answer goes through the one
codec and back unchanged, and the access point refuses, in one line and with nothing
changed, an answer with a field it does not know, one missing, or one of the wrong type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core.answers import (
    ANSWERS,
    MESSAGES,
    Accounting,
    Acted,
    ActionDone,
    Ad,
    Failed,
    IdleShape,
    Launched,
    LeaseExtended,
    LeaseStarted,
    LeaseStatus,
    LeaseStopped,
    LogsGathered,
    PilotsSubmitted,
    Placed,
    PoolStarted,
    RemoteJob,
    Removed,
    Status,
    Statuses,
    Stopped,
    read_answer,
    read_message,
)
from lumberjack.core.contract import JobAction, QueueActions
from lumberjack.core.records import ContractError, encode
from lumberjack.errors import RemoteError
from lumberjack.state import lifecycle
from lumberjack.state.ledger import Ledger

site_bundle = load_fixture_module("site_bundle")
fake = load_fixture_module("fake_site")

PILOTS = PilotsSubmitted(["1000"], [], reason="")
STATUS = Status(
    jobs={"idle": 1, "running": 1}, total=2, finished=False, final=False, held_final=0,
    releasable=0, wait_until=None, pool_running=True, placed=True,
    pilots={"1000": "running"}, remote_jobs={"7.1": RemoteJob(2, RemoteHost='"slot1@c1"')},
    idle_shapes=[IdleShape({"Requirements": "true"}, 1, "7.0")],
)  # fmt: skip
#: One message of every kind, as each side writes it.
SAMPLES = {
    "launch.json": site_bundle.launch_plan(),
    "queue-actions.json": QueueActions((JobAction("7.0", "hold", reason="why"),)),
    "launch": Launched(Placed(True, files=3, jobs=2, owners=["alice"]),
                       PoolStarted(True, collector="10.0.0.1:9618"), PILOTS),
    "status": STATUS,
    "status-many": Statuses({"/s/a": STATUS}, {"/s/b": "no launch.json"}),
    "stop": Stopped(True, ["1000"], LogsGathered(dir="/s/a/site-logs", jobs=2)),
    "remove": Removed(True),
    "act": Acted([ActionDone("7.0", "hold", "done")]),
    "lease-start": LeaseStarted(PoolStarted(True), PILOTS),
    "lease-extend": LeaseExtended(PILOTS),
    "lease-status": LeaseStatus(
        True, {"2000": "running"}, True, startds=[Ad("slot1@c1", state="Claimed")],
        schedds=[Ad("a@lumberjack-a", idle="1", running="2")],
        accounting={"a": Accounting(idle=1, running=2, usage_s=60.5)},
    ),  # fmt: skip
    "lease-stop": LeaseStopped(["2000"], pool_stopped=True),
}  # fmt: skip


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "state")


def test_every_kind_of_message_has_a_sample() -> None:
    assert set(SAMPLES) == set(MESSAGES)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_message_goes_through_the_codec_and_back(kind: str) -> None:
    text = encode(SAMPLES[kind])
    assert json.loads(text)["version"] >= 1
    assert read_message(kind, text) == SAMPLES[kind]


def _tampered(kind: str, change) -> str:  # type: ignore[no-untyped-def]
    data = json.loads(encode(SAMPLES[kind]))
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        ("status", lambda d: d.update(surprise=1), "unknown field 'surprise'"),
        ("status", lambda d: d["remote_jobs"]["7.1"].update(Cmd="x"), "unknown field 'Cmd'"),
        ("status", lambda d: d.pop("jobs"), "missing field 'jobs'"),
        ("status", lambda d: d.update(total="2"), "total: not an int"),
        ("status", lambda d: d.update(pool_running=1), "pool_running: not a bool"),
        ("status", lambda d: d["jobs"].update(idle=None), "jobs['idle']: not an int"),
        ("status", lambda d: d.update(version=9), "has version 9"),
        ("launch", lambda d: d["pilots"].update(nodes=2), "unknown field 'nodes'"),
        ("stop", lambda d: d.update(logs=[]), "logs: not an object"),
        ("act", lambda d: d["actions"][0].pop("result"), "missing field 'result'"),
        ("lease-status", lambda d: d["accounting"]["a"].update(idle="lots"), "not a number"),
        ("status-many", lambda d: d.update(status={}), "unknown field 'status'"),
    ],
)  # fmt: skip
def test_a_hostile_answer_is_refused_in_one_line(kind: str, change, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ContractError) as refused:
        read_message(kind, _tampered(kind, change))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_error_answers_any_verb() -> None:
    for verb in ANSWERS:
        assert read_answer(verb, '{"error": "no launch.json"}', verb) == Failed("no launch.json")
    with pytest.raises(ContractError, match="unknown field 'trace'"):
        read_answer("status", '{"error": "x", "trace": "..."}', "status")


def test_the_access_point_refuses_a_hostile_status_and_changes_nothing(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real path: the agent answers (in-process), one field more on the way
    back, `Site.agent` refuses it in one line; the ledger keeps its phase and counts."""
    record, site, _ = fake.exported(ledger, tmp_path, site_bundle)
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    before = ledger.get("calib")
    honest = site.agent_answer
    monkeypatch.setattr(
        site, "agent_answer",
        lambda command, root: json.dumps({**json.loads(honest(command, root)), "pwned": 1}),
    )  # fmt: skip
    with pytest.raises(RemoteError, match="unknown field 'pwned'") as refused:
        lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert "\n" not in str(refused.value)
    after = ledger.get("calib")
    assert (after.phase, after.info["last_status"]) == (before.phase, before.info["last_status"])
