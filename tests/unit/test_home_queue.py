"""What sync forwards from the local queue to the site (ap/home_queue.py), and what it
shows at home: decisions on the jobs' attribute texts, no schedd."""

from __future__ import annotations

import pytest

from lumberjack.ap import home_queue as hq
from lumberjack.core.contract import JobAction
from lumberjack.core.job_channels import ACTING_ATTRS, EDITABLE_ATTRS


def job(status: int = 1, **attrs: str) -> dict[str, str]:
    return {"JobStatus": str(status), "Managed": '"External"', "RequestMemory": "64",
            "Out": '"out.0"', **attrs}  # fmt: skip


def test_a_job_removed_at_home_is_removed_at_the_site_once() -> None:
    memory = hq.Forwarded()
    jobs = {"7.0": job(3, RemoveReason='"not needed"')}
    plan = hq.plan_round(jobs, memory, "perlmutter")
    assert plan.actions == [JobAction("7.0", "remove", "not needed")]
    assert hq.plan_round(jobs, memory, "perlmutter").actions == []


def test_condor_rm_transfer_reaches_the_site_as_itself() -> None:
    # condor_rm -transfer with no -reason leaves its own reason: the only trace of it.
    memory = hq.Forwarded()
    reason = "via condor_rm -transfer (by user alice)"
    plan = hq.plan_round({"7.0": job(3, RemoveReason=f'"{reason}"')}, memory, "s")
    assert plan.actions == [JobAction("7.0", "remove-transfer", reason)]
    plain = hq.plan_round({"7.1": job(3, RemoveReason='"via condor_rm (by user alice)"')},
                          memory, "s")  # fmt: skip
    assert [a.action for a in plain.actions] == ["remove"]


def test_condor_prio_is_an_edit_the_site_takes() -> None:
    memory = hq.Forwarded()
    hq.plan_round({"7.4": job(JobPrio="0")}, memory, "s")
    plan = hq.plan_round({"7.4": job(JobPrio="7")}, memory, "s")
    assert plan.actions == [JobAction("7.4", "edit", edits={"JobPrio": "7"})]
    assert plan.hold_at_home == {}


def test_hold_then_release_reach_the_site_in_order() -> None:
    memory = hq.Forwarded()
    hq.plan_round({"7.1": job()}, memory, "s")  # the first sight: the baseline
    held = hq.plan_round({"7.1": job(5, HoldReason='"fixing input"')}, memory, "s")
    assert held.actions == [JobAction("7.1", "hold", "fixing input")]
    assert hq.plan_round({"7.1": job(5, HoldReason='"fixing input"')}, memory, "s").actions == []
    released = hq.plan_round({"7.1": job(1)}, memory, "s")
    assert released.actions == [JobAction("7.1", "release")]
    # A hold with no reason (the bindings leave it empty) still names where it came from.
    assert hq.plan_round({"7.1": job(5)}, memory, "s").actions[0].reason == (
        "held at the access point"
    )


def test_an_edit_reaches_the_site_and_what_the_schedd_writes_does_not() -> None:
    memory = hq.Forwarded()
    hq.plan_round({"7.2": job()}, memory, "s")
    edited = job(2, RequestMemory="128", EnteredCurrentStatus="99", LumberjackSite='"s"')
    plan = hq.plan_round({"7.2": edited}, memory, "s")
    assert plan.actions == [JobAction("7.2", "edit", edits={"RequestMemory": "128"})]
    assert plan.hold_at_home == {}
    assert hq.plan_round({"7.2": edited}, memory, "s").actions == []


def test_an_edit_the_site_must_not_take_holds_the_job_at_home_once() -> None:
    memory = hq.Forwarded()
    hq.plan_round({"7.3": job()}, memory, "s")
    edited = job(Out='"elsewhere"', iwd='"/tmp"', WantIOProxy="true", PreCmd='"x"')
    plan = hq.plan_round({"7.3": edited}, memory, "s")
    reason = plan.hold_at_home["7.3"]
    assert reason.startswith(
        "condor_qedit of Out, PreCmd, WantIOProxy, iwd cannot reach the job's copy at site s"
    )
    assert plan.actions == [JobAction("7.3", "hold", reason)]  # the site's copy waits too
    # Released at home as it is: the copy runs on with its own value; no second hold.
    again = hq.plan_round({"7.3": {**edited, "JobStatus": "1"}}, memory, "s")
    assert again.actions == [JobAction("7.3", "release")] and again.hold_at_home == {}


def test_an_edit_the_daemons_would_act_on_holds_the_job_with_why() -> None:
    """Issue 42: a condor_qedit of ToolDaemonCmd after export would have the starter at
    the site run a sandbox file beside the container; StarterUserLog, write a path."""
    memory = hq.Forwarded()
    hq.plan_round({"7.5": job()}, memory, "s")
    edited = job(ToolDaemonCmd='"payload.sh"', StarterUserLog='"/home/site/x"', JobPrio="5")
    plan = hq.plan_round({"7.5": edited}, memory, "s")
    reason = plan.hold_at_home["7.5"]
    assert plan.actions == [
        JobAction("7.5", "edit", edits={"JobPrio": "5"}),  # what is safe still goes
        JobAction("7.5", "hold", reason),
    ]
    assert "\n" not in reason and reason.startswith(
        "condor_qedit of StarterUserLog, ToolDaemonCmd cannot reach the job's copy at site s "
        f"(StarterUserLog: {ACTING_ATTRS['StarterUserLog']}, outside the job's container; "
        f"ToolDaemonCmd: {ACTING_ATTRS['ToolDaemonCmd']}, outside the job's container)"
    )


def test_only_edits_known_to_be_safe_are_forwarded() -> None:
    """An allow-list: an attribute HTCondor's daemons act on and lumberjack does not list
    as safe (a path, a command) holds the job instead of reaching the site; a name of the
    user's own, which no daemon knows, goes as in a plain pool."""
    memory = hq.Forwarded()
    hq.plan_round({"7.6": job()}, memory, "s")
    plan = hq.plan_round({"7.6": job(MyTag='"x"', Out='"o"', tooldaemoncmd='"p"')}, memory, "s")
    assert [a.action for a in plan.actions] == ["edit", "hold"]
    assert plan.actions[0].edits == {"MyTag": '"x"'}
    assert "tooldaemoncmd: the starter would run" in plan.hold_at_home["7.6"]
    assert "Out: not an edit lumberjack forwards" in plan.hold_at_home["7.6"]
    assert "MyTag" not in plan.hold_at_home["7.6"]
    memory = hq.Forwarded()
    hq.plan_round({"7.6": job()}, memory, "s")
    plan = hq.plan_round({"7.6": job(MyTag='"x"')}, memory, "s")
    ((action,),) = [plan.actions]
    assert action.action == "edit" and action.edits == {"MyTag": '"x"'}


@pytest.mark.parametrize("attr", sorted(EDITABLE_ATTRS))
def test_each_allowed_edit_reaches_the_site(attr: str) -> None:
    memory = hq.Forwarded()
    hq.plan_round({"7.7": job()}, memory, "s")
    for name in (attr, attr.lower()):
        plan = hq.plan_round({"7.7": job(**{name: f"{len(name)} + 1"})}, memory, "s")
        ((action,),) = [plan.actions]
        assert action.action == "edit" and action.edits[name] == f"{len(name)} + 1"
        assert plan.hold_at_home == {}


def test_condor_q_shows_where_each_job_is_and_mirrors_idle_and_running() -> None:
    jobs = {"7.0": job(1), "7.1": job(1), "7.2": job(5), "7.3": job(1)}
    remote = {
        "7.1": {"JobStatus": 2, "RemoteHost": '"slot1@c1"'},
        "7.2": {"JobStatus": 5, "HoldReason": '"at site s: exit 4"'},
        "7.3": {"JobStatus": 4, "LastRemoteHost": '"slot1@c2"'},
    }
    wanted = hq.shown_at_home(jobs, remote, "s", "calib", 1000)
    assert wanted["7.0"][hq.REMOTE_STATUS] == "1" and "JobStatus" in wanted["7.0"]
    assert wanted["7.1"]["JobStatus"] == "2" and wanted["7.1"][hq.REMOTE_HOST] == '"slot1@c1"'
    assert "JobStatus" not in wanted["7.2"]  # held at home: the person's word stays
    assert wanted["7.2"][hq.REMOTE_HOLD_REASON] == '"at site s: exit 4"'
    assert wanted["7.3"]["JobStatus"] == "2"  # done there, its results not yet home
    edits = hq.changed(wanted, jobs)
    assert edits[(hq.SITE, '"s"')] == ["7.0", "7.1", "7.2", "7.3"]
    assert edits[(hq.LAST_SEEN, "1000")] == ["7.0", "7.1", "7.2", "7.3"]
    assert ("JobStatus", "1") not in edits  # already idle: nothing written
    shown = {j: {**jobs[j], **wanted[j]} for j in jobs}
    assert hq.changed(wanted, shown) == {}  # nothing new, and seen a moment ago
    later = hq.shown_at_home(jobs, remote, "s", "calib", 1000 + hq.SEEN_EVERY_S)
    assert list(hq.changed(later, shown)) == [(hq.LAST_SEEN, str(1000 + hq.SEEN_EVERY_S))]


def test_the_baseline_keeps_what_a_cluster_shares_once() -> None:
    memory = hq.Forwarded()
    jobs = {f"7.{p}": job(ProcId=str(p), Args=f'"{p}"') for p in range(100)}
    hq.plan_round(jobs, memory, "s")
    assert memory.own["7.5"] == {"ProcId": "5", "Args": '"5"'}
    assert len(memory.common) == 1 and "Out" in memory.common["7"]
    del jobs["7.5"]["Out"]  # an attribute the job lost is no edit the site can take
    jobs["7.6"]["Args"] = '"six"'
    plan = hq.plan_round(jobs, memory, "s")
    assert plan.actions == [JobAction("7.6", "edit", edits={"Args": '"six"'})]
    kept = {k: v for k, v in jobs["7.5"].items() if k not in hq.SCHEDD_KEEPS}
    assert memory.baseline("7.5") == kept
    assert memory.baseline("8.0") is None


def test_a_hold_at_home_sets_one_bounded_string_literal() -> None:
    """Whatever a reason quotes (a job's attribute, a site's answer), the local schedd's
    hold and HoldReason get it on one line, cut to result_attrs.TEXT, as a literal."""
    from lumberjack.ap import result_attrs
    from lumberjack.ap.schedd import LocalSchedd

    class Bindings:  # the bindings' Schedd: what LocalSchedd asked of it
        def __init__(self) -> None:
            self.calls: list[tuple[str, list[str], str]] = []

        def act(self, action: object, job_ids: list[str], reason: str) -> None:
            self.calls.append(("act", job_ids, reason))

        def edit(self, job_ids: list[str], name: str, text: str) -> None:
            self.calls.append((name, job_ids, text))

    schedd = object.__new__(LocalSchedd)  # no schedd to reach: the bindings'
    schedd._schedd = bindings = Bindings()
    said = 'x") || ("\\\nnext\x00' + "r" * 5000
    schedd.hold(["7.0"], said)
    text = ('x") || ("\\ next?' + "r" * 5000)[: result_attrs.TEXT]
    assert bindings.calls == [
        ("act", ["7.0"], text),
        ("HoldReason", ["7.0"], '"' + text.replace('"', '\\"') + '"'),
    ]
