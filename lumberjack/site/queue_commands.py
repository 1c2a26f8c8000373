"""The local queue's commands at the site: condor_rm, condor_hold, condor_release and
condor_qedit of a job's copy in the export's remote schedd, as the access point asked
for them (core/contract.QueueActions, written before each `act`).

Each command is taken only when the job's status there still calls for it (a removed
job is not removed again, a held one not held again), so `act` can be repeated: sync
sends the same file again when an answer was lost.
An edit of an attribute outside core/job_channels.EDITABLE_ATTRS is refused here too.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from typing import Callable

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.answers import Acted, ActionDone, RemoteJob
from lumberjack.core.contract import JobAction, QueueActions
from lumberjack.core.job_channels import editable
from lumberjack.core.jobstatus import FINISHED, JobStatus, status_of
from lumberjack.site.files import AgentError, read_contract


def statuses(ads: dict[str, jql.Ad]) -> dict[str, JobStatus | None]:
    """Each job's status in the remote schedd's own log, by "C.P"."""
    found = {}
    for key, ad in ads.items():
        if jql.key_kind(key) == "proc":
            number = jql.parse_key(key)
            found[f"{number.cluster}.{number.proc}"] = status_of(
                ad.get("JobStatus") or JobStatus.IDLE
            )
    return found


def command_for(action: JobAction, status: JobStatus | None) -> list[str] | None:
    """The HTCondor command that does `action` to a job now in `status`; None when the
    job is already where the action would take it (or can no longer go there)."""
    if status is None:
        return None  # not in this schedd's queue: gone already
    job, reason = action.job, action.reason
    if action.action in ("remove", "remove-transfer"):
        if status in FINISHED:
            return None
        transfer = ["-transfer"] if action.action == "remove-transfer" else []
        return ["condor_rm", *transfer, "-reason", reason, job]
    if action.action == "hold":
        if status is JobStatus.HELD or status in FINISHED:
            return None
        return ["condor_hold", "-reason", reason, job]
    if action.action == "release":
        return ["condor_release", job] if status is JobStatus.HELD else None
    if status in FINISHED:
        return None
    command = ["condor_qedit", job]
    for name, value in sorted(action.edits.items()):
        command += [name, value]
    return command


def act(path: str, ads: dict[str, jql.Ad], run: Callable[..., str], schedd_running: bool) -> Acted:
    """The commands of the QueueActions at `path` on the jobs of `ads` (the remote
    queue), each by `run` (an HTCondor command in the pool); what each came to."""
    wanted = read_contract(QueueActions, path, QueueActions())
    now = statuses(ads)
    done: list[ActionDone] = []
    for action in wanted.actions:
        command = command_for(action, now.get(action.job))
        unsafe = sorted(name for name in action.edits if not editable(name))
        if unsafe:  # the access point forwards none: whoever wrote this file, no site edit
            result = f"refused: condor_qedit of {', '.join(unsafe)} is not an edit the site takes"
        elif command is None:
            result = "nothing to do"
        elif not schedd_running:
            raise AgentError("the export's schedd is not running at the site; nothing done")
        else:
            try:
                run(*command)
                result = "done"
            except AgentError as exc:  # one job's refusal does not stop the others
                result = f"refused: {exc}"
        done.append(ActionDone(action.job, action.action, result))
    return Acted(done)


#: The remote ad's attributes a status answer carries for each job that left idle
#: (the access point shows them in condor_q at home).
SHOWN = ("HoldReason", "RemoteHost", "LastRemoteHost")


def remote_jobs(ads: dict[str, jql.Ad]) -> dict[str, RemoteJob]:
    """Where each job that is not idle stands at the site: its JobStatus and the texts
    of SHOWN it has (idle jobs are left out: a queue of 100,000 waiting jobs answers
    nothing here)."""
    found: dict[str, RemoteJob] = {}
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc":
            continue
        status = status_of(ad.get("JobStatus") or JobStatus.IDLE)
        if status is JobStatus.IDLE:
            continue
        number = jql.parse_key(key)
        texts = {name: ad.get(name) for name in SHOWN}
        found[f"{number.cluster}.{number.proc}"] = RemoteJob(
            int(status) if status is not None else 0,
            **{name: text[:512] for name, text in texts.items() if text is not None},
        )
    return found
