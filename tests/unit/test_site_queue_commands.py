"""The local queue's commands at the site (site/queue_commands.py): each taken only when
the job's status there still calls for it, one refusal never stopping the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.contract import ContractError, JobAction, QueueActions, decode, encode
from lumberjack.core.jobstatus import JobStatus
from lumberjack.site import queue_commands as qc
from lumberjack.site.files import AgentError


def queue(**statuses: int) -> dict[str, jql.Ad]:
    ads = {}
    for job, status in statuses.items():
        key = job.replace("_", ".")
        ad = jql.Ad(key, "Job", "Machine", {"JobStatus": str(status)})
        if status == JobStatus.HELD:
            ad.set("HoldReason", '"at home"')
        ads[key] = ad
    return ads


def test_each_command_only_where_the_status_calls_for_it() -> None:
    held, running, done = JobStatus.HELD, JobStatus.RUNNING, JobStatus.COMPLETED
    assert qc.command_for(JobAction("1.0", "remove", "r"), running) == [
        "condor_rm", "-reason", "r", "1.0"]  # fmt: skip
    assert qc.command_for(JobAction("1.0", "remove", "r"), JobStatus.REMOVED) is None
    assert qc.command_for(JobAction("1.0", "remove-transfer", "r"), running) == [
        "condor_rm", "-transfer", "-reason", "r", "1.0"]  # fmt: skip
    assert qc.command_for(JobAction("1.0", "remove-transfer", "r"), done) is None
    assert qc.command_for(JobAction("1.0", "hold", "h"), held) is None
    assert qc.command_for(JobAction("1.0", "hold", "h"), done) is None
    assert qc.command_for(JobAction("1.0", "release"), running) is None
    assert qc.command_for(JobAction("1.0", "release"), held) == ["condor_release", "1.0"]
    edit = JobAction("1.0", "edit", edits={"B": "2", "A": '"x y"'})
    assert qc.command_for(edit, running) == ["condor_qedit", "1.0", "A", '"x y"', "B", "2"]
    assert qc.command_for(edit, None) is None  # not in that queue


def test_act_runs_what_is_needed_and_reports_each(tmp_path: Path) -> None:
    path = tmp_path / "queue-actions.json"
    actions = (JobAction("1.0", "remove", "r"), JobAction("1.1", "hold", "h"), JobAction(
        "1.2", "release"), JobAction("1.3", "edit", edits={"JobPrio": "1"}))  # fmt: skip
    path.write_text(encode(QueueActions(actions)))
    ran: list[tuple[str, ...]] = []

    def run(*command: str) -> str:
        ran.append(command)
        if command[0] == "condor_qedit":
            raise AgentError("condor_qedit failed: no such job")
        return ""

    ads = queue(**{"1_0": 2, "1_1": 5, "1_2": 5, "1_3": 1})
    answer = qc.act(str(path), ads, run, schedd_running=True)
    assert [a.result for a in answer.actions] == [
        "done", "nothing to do", "done", "refused: condor_qedit failed: no such job"]  # fmt: skip
    assert [c[0] for c in ran] == ["condor_rm", "condor_release", "condor_qedit"]
    with pytest.raises(AgentError, match="not running"):
        qc.act(str(path), ads, run, schedd_running=False)


def test_an_edit_the_access_point_never_forwards_is_refused_here_too(tmp_path: Path) -> None:
    """Whoever wrote queue-actions.json: no tool daemon or starter log reaches the copy."""
    path = tmp_path / "queue-actions.json"
    edits = {"JobPrio": "1", "ToolDaemonCmd": '"payload.sh"', "starteruserlog": '"/x"'}
    path.write_text(encode(QueueActions((JobAction("1.0", "edit", edits=edits),))))
    ran: list[tuple[str, ...]] = []
    answer = qc.act(str(path), queue(**{"1_0": 1}), lambda *c: ran.append(c) or "", True)
    ((done,),) = [answer.actions]
    assert done.result == (
        "refused: condor_qedit of ToolDaemonCmd, starteruserlog is not an edit the site takes"
    )
    assert ran == []


def test_the_status_answer_carries_jobs_that_left_idle_only() -> None:
    ads = queue(**{"1_0": 1, "1_1": 5, "1_2": 2})
    ads["1.2"].set("RemoteHost", '"slot1@c1"')
    assert {job: entry.texts() for job, entry in qc.remote_jobs(ads).items()} == {
        "1.1": {"JobStatus": 5, "HoldReason": '"at home"'},
        "1.2": {"JobStatus": 2, "RemoteHost": '"slot1@c1"'},
    }


@pytest.mark.parametrize(
    "action",
    [
        {"job": "1", "action": "remove"},
        {"job": "1.0", "action": "vacate"},
        {"job": "1.0", "action": "hold", "edits": {"A": "1"}},
        {"job": "1.0", "action": "edit", "edits": {"A b": "1"}},
        {"job": "1.0", "action": "edit", "edits": {"A": "1\n2"}},
        {"job": "1.0", "action": "hold", "reason": "two\nlines"},
    ],
)
def test_a_hostile_or_broken_actions_file_is_one_line_of_error(action: dict) -> None:
    text = '{"version": 1, "actions": [' + str(action).replace("'", '"') + "]}"
    with pytest.raises(ContractError) as caught:
        decode(QueueActions, text.replace("\n", "\\n"), "queue-actions.json")
    assert "\n" not in str(caught.value)
