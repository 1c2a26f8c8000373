"""`sync` takes the local queue's commands to the site (state/queue_commands.py), with
the site and the local schedd in memory: a job removed at home is removed there in the
same round, an export whose jobs were all removed comes home and stops its pilots, and
the removed jobs leave the local queue (unexport, then condor_rm -forcex)."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest

from lumberjack.state import handback, sync
from lumberjack.state.ledger import Ledger


def load_fixture(name: str):  # -> module
    from conftest import load_fixture_module

    return load_fixture_module(name)


fake = load_fixture("fake_site")
site_bundle = load_fixture("site_bundle")


@pytest.fixture
def exported(tmp_path: Path):  # -> (Ledger, FakeSite, FakeSchedd)
    ledger = Ledger(tmp_path / "state")
    _, site, schedd = fake.exported(ledger, tmp_path, site_bundle)
    return ledger, site, schedd


def local_job(proc: int, status: int, **attrs: object) -> classad2.ClassAd:
    ad = classad2.ClassAd()
    ad.update({"ClusterId": 7, "ProcId": proc, "JobStatus": status, "Managed": "External",
               "RequestMemory": 64, **attrs})  # fmt: skip
    return ad


def sync_once(ledger: Ledger, site, schedd) -> dict:
    (result,) = sync.sync(ledger, schedd=schedd, open_site=lambda record: site)
    return result


def running(ledger: Ledger, site, schedd) -> dict:
    """Two syncs: shipped and launched, then its jobs run at the site (idle at home)."""
    schedd.local = [local_job(0, 1), local_job(1, 1)]
    sync_once(ledger, site, schedd)
    site.start()
    return sync_once(ledger, site, schedd)


def test_jobs_removed_at_home_end_the_export_and_leave_the_queue(exported) -> None:
    ledger, site, schedd = exported
    assert running(ledger, site, schedd)["phase"] == "running"
    # condor_q at home: where the jobs are, running as they are there
    shown = {(name, text) for _, name, text in schedd.edits}
    assert {("LumberjackSite", '"testbed"'), ("LumberjackExport", '"calib"'),
            ("JobStatus", "2"), ("LumberjackRemoteStatus", "2")} <= shown  # fmt: skip

    schedd.local = [local_job(0, 3, RemoveReason="not needed"), local_job(1, 3)]
    last = sync_once(ledger, site, schedd)
    assert site.jobs == {"7.0": "3", "7.1": "3"}
    assert last["phase"] == "imported", last
    assert last["steps"][0] == (
        "queue commands: remove 7.0 (done), remove 7.1 (done)"
    )  # fmt: skip
    assert not [p for p, state in site.pilots.items() if state in fake.ALIVE]
    assert schedd.unexported == [[7]] and schedd.removed_x == [["7.0", "7.1"]]
    # the second sync has nothing more to send
    assert sync.sync(ledger, schedd=schedd, open_site=lambda record: site) == []


def test_hold_release_and_edits_reach_the_site_at_the_next_sync(exported) -> None:
    ledger, site, schedd = exported
    running(ledger, site, schedd)
    schedd.local = [local_job(0, 5, HoldReason="wrong input"), local_job(1, 2, RequestMemory=128)]
    sync_once(ledger, site, schedd)
    assert site.jobs == {"7.0": "5", "7.1": "2"}
    assert site.edits == {"7.1": {"RequestMemory": "128"}}
    schedd.local = [local_job(0, 1), local_job(1, 2, RequestMemory=128)]
    sync_once(ledger, site, schedd)
    assert site.jobs == {"7.0": "1", "7.1": "2"}
    # An edit the site must not take: held at home with the reason, and there too.
    site.finish("7.0")
    schedd.local = [local_job(0, 2), local_job(1, 2, RequestMemory=128, Iwd="/elsewhere")]
    entry = sync_once(ledger, site, schedd)
    ((held, reason),) = schedd.held
    assert held == ["7.1"] and reason.startswith("condor_qedit of Iwd cannot reach")
    assert site.edits == {"7.1": {"RequestMemory": "128"}}
    # Held by a person: a condor_release from home may still come, so the export waits
    # for it (as for a policy's release: within the pilots' walltime) ...
    assert site.jobs == {"7.0": "4", "7.1": "5"} and entry["phase"] == "running", entry
    # ... until it is released, or removed, at home: then it comes home.
    schedd.local = [local_job(0, 2), local_job(1, 3, Iwd="/elsewhere")]
    last = sync_once(ledger, site, schedd)
    assert site.jobs == {"7.0": "4", "7.1": "3"} and last["phase"] == "imported", last
    assert schedd.removed_x == [["7.1"]]


def test_a_tool_daemon_edit_stays_home_and_holds_the_job(exported) -> None:
    """Issue 42 through sync: condor_qedit of ToolDaemonCmd or StarterUserLog never
    reaches the site's copy; the job is held at home (and there) with the reason, and a
    condor_prio in the same round still goes."""
    ledger, site, schedd = exported
    running(ledger, site, schedd)
    schedd.local = [local_job(0, 1, ToolDaemonCmd="payload.sh", JobPrio=5),
                    local_job(1, 1, StarterUserLog="/home/site/pool/x")]  # fmt: skip
    sync_once(ledger, site, schedd)
    assert site.edits == {"7.0": {"JobPrio": "5"}}
    held = dict((tuple(jobs), reason) for jobs, reason in schedd.held)
    assert held[("7.0",)].startswith("condor_qedit of ToolDaemonCmd cannot reach")
    assert "the starter would run that program beside the job" in held[("7.0",)]
    assert held[("7.1",)].startswith("condor_qedit of StarterUserLog cannot reach")
    assert site.jobs == {"7.0": "5", "7.1": "5"}


def test_jobs_shown_running_are_idle_again_when_handed_back_unrun(exported) -> None:
    ledger, site, schedd = exported
    running(ledger, site, schedd)
    assert (["7.0", "7.1"], "JobStatus", "2") in schedd.edits
    schedd.local = [local_job(0, 2), local_job(1, 2)]  # as the schedd now holds them
    handback.discard_and_hand_back(ledger, schedd, ledger.get("calib"), site)
    assert schedd.edits[-1] == (["7.0", "7.1"], "JobStatus", "1")
    assert schedd.unexported == [[7]]


def test_the_local_queue_is_read_a_chunk_at_a_time(exported, monkeypatch) -> None:
    # One job a question: sync still forwards each job's command once, and shows each.
    from lumberjack.state import queue_commands

    monkeypatch.setattr(queue_commands, "CHUNK", 1)
    ledger, site, schedd = exported
    asked: list[str] = []
    query = schedd.query_ads
    schedd.query_ads = lambda constraint, names: (
        asked.append(constraint) or query(constraint, names)
    )
    running(ledger, site, schedd)
    asked.clear()
    schedd.local = [local_job(0, 5, HoldReason="wrong input"), local_job(1, 2, RequestMemory=128)]
    sync_once(ledger, site, schedd)
    assert site.jobs == {"7.0": "5", "7.1": "2"}
    assert site.edits == {"7.1": {"RequestMemory": "128"}}
    assert "(ClusterId == 7 && ProcId >= 0 && ProcId <= 0)" in asked, asked
    assert "(ClusterId == 7 && ProcId >= 1 && ProcId <= 1)" in asked, asked


def test_job_ranges_cover_each_job_once() -> None:
    from lumberjack.state.queue_commands import job_ranges

    jobs = ["9.2", "7.10", "7.2", "9.0", "7.3"]
    assert list(job_ranges(jobs, 3)) == [
        "(ClusterId == 7 && ProcId >= 2 && ProcId <= 10)",
        "(ClusterId == 9 && ProcId >= 0 && ProcId <= 2)",
    ]
    assert list(job_ranges(jobs, 10)) == [
        "(ClusterId == 7 && ProcId >= 2 && ProcId <= 10) || "
        "(ClusterId == 9 && ProcId >= 0 && ProcId <= 2)"
    ]
    assert list(job_ranges([], 10)) == []


#: What a hostile site may answer for what condor_q shows at home (a held job's reason,
#: a running job's host), and the string literal each must become there: shown, cut to
#: its bound (result_attrs.TEXT, result_attrs.HOST), never evaluated by the local schedd.
EXPRESSION = 'ifThenElse(Owner == "alice", "x", "y")'  # unquoted, it would run at home
HOSTILE_SHOWN = [
    (EXPRESSION, '"ifThenElse(Owner == \\"alice\\", \\"x\\", \\"y\\")"', None),
    ('"' + "r" * 5000 + '"', '"' + "r" * 2048 + '"', '"' + "r" * 256 + '"'),
    # Quotes, backslashes, a newline, a NUL, an escape sequence and a lone surrogate.
    ('"say \\"hi\\" C:\\dir\nnext\x00end\x1b[31m\ud800"',
     '"say \\"hi\\" C:\\dir next?end?[31m?"', None),
    ("undefined", None, None),  # nothing to show: nothing set
]  # fmt: skip


@pytest.mark.parametrize(("said", "reason", "host"), HOSTILE_SHOWN)
def test_a_hostile_status_answer_reaches_condor_q_as_a_bounded_string(
    exported, said: str, reason: str | None, host: str | None
) -> None:
    import json

    from lumberjack.core.classad_text import unquote_string

    classad2 = pytest.importorskip("classad2")
    ledger, site, schedd = exported
    running(ledger, site, schedd)
    site.hold_jobs("7.0")
    honest = site.agent_answer

    def hostile(command: str, root: str) -> str:  # the agent's answer line, rewritten
        data = json.loads(honest(command, root))
        if command == "status":
            data["remote_jobs"]["7.0"]["HoldReason"] = said
            data["remote_jobs"]["7.1"]["RemoteHost"] = said
        return json.dumps(data)

    site.agent_answer = hostile
    schedd.edits.clear()
    sync_once(ledger, site, schedd)
    set_home = {(name, tuple(jobs)): text for jobs, name, text in schedd.edits}
    assert set_home.get(("LumberjackRemoteHoldReason", ("7.0",))) == reason
    assert set_home.get(("LumberjackRemoteHost", ("7.1",))) == (host or reason)
    for text in {reason, host} - {None}:
        # The local schedd reads it as one string literal of exactly that text.
        value = classad2.parseOne(f"A = {text}\n", parser=classad2.ParserType.Old)["A"]
        assert isinstance(value, str) and value == unquote_string(text)
