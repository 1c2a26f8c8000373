"""The local queue's commands for exported jobs, as HTCondor-C forwards them: what a
person did at home (condor_rm, condor_hold, condor_release, condor_qedit) becomes a
JobAction for the job's copy at the site, and what the site reports becomes the
attributes condor_q shows at home (docs/condor-q.md). Only edits of
core/job_channels.EDITABLE_ATTRS travel; any other holds the job at home, with why.

Pure decisions on the jobs' ads (their attributes' texts as job_queue.log holds them)
and on what was forwarded before (`Forwarded`, kept by the caller between syncs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lumberjack.ap import result_attrs
from lumberjack.core.classad_text import is_undefined, quote_string, site_string, unquote_string
from lumberjack.core.contract import JobAction
from lumberjack.core.job_channels import ACTING_ATTRS, acting_attr, editable
from lumberjack.core.jobstatus import JobStatus, status_of
from lumberjack.core.message_text import one_line
from lumberjack.core.records import JsonRecord

#: The attributes sync keeps current at home (all start with PREFIX: never forwarded).
PREFIX = "Lumberjack"
SITE, EXPORT = "LumberjackSite", "LumberjackExport"
REMOTE_STATUS, REMOTE_HOLD_REASON = "LumberjackRemoteStatus", "LumberjackRemoteHoldReason"
REMOTE_HOST, LAST_SEEN = "LumberjackRemoteHost", "LumberjackLastSeen"
SHOWN_ATTRS = (SITE, EXPORT, REMOTE_STATUS, REMOTE_HOLD_REASON, REMOTE_HOST, LAST_SEEN)

#: What the local schedd writes itself when a job is held, released, removed or (by
#: sync) shown running: no edit of the person's.
SCHEDD_KEEPS = frozenset({
    "JobStatus", "LastJobStatus", "EnteredCurrentStatus", "HoldReason", "HoldReasonCode",
    "HoldReasonSubCode", "LastHoldReason", "LastHoldReasonCode", "LastHoldReasonSubCode",
    "NumHolds", "NumHoldsByReason", "ReleaseReason", "LastReleaseReason", "RemoveReason",
    "Managed", "ManagedManager", "ServerTime", "LeaveJobInQueue", "JobStatusOnRelease",
    "LastSuspensionTime", "CumulativeSuspensionTime", "LastVacateTime", "ShadowBday",
    "LastRejMatchTime", "LastRejMatchReason", "LastMatchTime", "NumJobMatches",
    "AutoClusterId", "AutoClusterAttrs",
})  # fmt: skip

#: The reason condor_rm -transfer gives when it is given none: the only trace the
#: local schedd keeps of the -transfer (with -reason, the job reads as condor_rm's).
TRANSFER_REMOVE = "via condor_rm -transfer"

#: A job's status at the site -> its status in the local queue while it is away: idle
#: or running, as HTCondor-C shows a forwarded job (a job done there shows running
#: until its results are home). Held and removed jobs keep their local status.
MIRRORED = {
    JobStatus.IDLE: JobStatus.IDLE,
    JobStatus.RUNNING: JobStatus.RUNNING,
    JobStatus.TRANSFERRING_OUTPUT: JobStatus.RUNNING,
    JobStatus.COMPLETED: JobStatus.RUNNING,
    JobStatus.SUSPENDED: JobStatus.RUNNING,
}


@dataclass
class Forwarded(JsonRecord):
    """What sync forwarded to the site so far (kept in the export's work dir)."""

    #: The jobs' attribute texts as last seen (an edit is a change from them), kept
    #: small: per cluster the texts of its first job seen ("common"), per job only
    #: those that differ ("own"; "" for one the job does not have). The jobs of a
    #: cluster share nearly every attribute.
    common: dict[str, dict[str, str]] = field(default_factory=dict)
    own: dict[str, dict[str, str]] = field(default_factory=dict)
    held: list[str] = field(default_factory=list)  # home holds the site has
    removed: list[str] = field(default_factory=list)  # home removals the site has

    def baseline(self, job: str) -> dict[str, str] | None:
        """The job's texts as last seen (None: never seen)."""
        own = self.own.get(job)
        if own is None:
            return None
        merged = {**self.common.get(job.split(".")[0], {}), **own}
        return {name: text for name, text in merged.items() if text}

    def remember(self, job: str, texts: dict[str, str]) -> None:
        common = self.common.setdefault(job.split(".")[0], dict(texts))
        own = {name: text for name, text in texts.items() if common.get(name) != text}
        own.update((name, "") for name in common if name not in texts)
        self.own[job] = own


@dataclass
class Plan:
    """One round: the actions for the site, and the jobs to hold at home (with the
    reason) for an edit the site must not take."""

    actions: list[JobAction] = field(default_factory=list)
    hold_at_home: dict[str, str] = field(default_factory=dict)


def refused_reason(names: list[str], site: str) -> str:
    """One line: the edits the site's copy does not take, and why each."""
    why: list[str] = []
    other: list[str] = []
    for name in names:
        attr = acting_attr(name)
        if attr is None:
            other.append(name)
        else:
            why.append(f"{name}: {ACTING_ATTRS[attr]}, outside the job's container")
    if other:
        why.append(
            f"{', '.join(other)}: not an edit lumberjack forwards (only priorities, "
            "requirements, rank, resource requests, policy expressions and arguments; "
            "paths and identity are fixed at export)"
        )
    return (
        f"condor_qedit of {', '.join(names)} cannot reach the job's copy at site {site} "
        f"({'; '.join(why)}); the copy keeps its value: condor_release to let it run on "
        "there as it was"
    )


def plan_round(jobs: dict[str, dict[str, str]], memory: Forwarded, site: str) -> Plan:
    """The actions for the local `jobs` (job -> attribute texts) given what was already
    forwarded; `memory` is updated as if they all reached the site."""
    plan = Plan()
    for job, texts in sorted(jobs.items()):
        status = status_of(texts.get("JobStatus"))
        if status is JobStatus.REMOVED:
            if job not in memory.removed:
                reason = _text(texts.get("RemoveReason")) or "removed at the access point"
                action = "remove-transfer" if reason.startswith(TRANSFER_REMOVE) else "remove"
                plan.actions.append(JobAction(job, action, one_line(reason, most=1024)))
                memory.removed.append(job)
            continue
        kept = {name: text for name, text in texts.items() if not _ignored(name)}
        before = memory.baseline(job)
        edits, refused = _edits(kept, kept if before is None else before)
        memory.remember(job, kept)
        if edits:
            plan.actions.append(JobAction(job, "edit", edits=edits))
        if refused and status is not JobStatus.HELD:
            reason = refused_reason(refused, site)
            plan.hold_at_home[job] = reason
            status = JobStatus.HELD
            texts = {**texts, "HoldReason": quote_string(reason)}
        if status is JobStatus.HELD and job not in memory.held:
            reason = _text(texts.get("HoldReason")) or "held at the access point"
            plan.actions.append(JobAction(job, "hold", one_line(reason, most=1024)))
            memory.held.append(job)
        elif status is not JobStatus.HELD and job in memory.held:
            plan.actions.append(JobAction(job, "release"))
            memory.held.remove(job)
    return plan


def _edits(texts: dict[str, str], before: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(edits the site takes, names it must not take): attributes whose text changed."""
    edits: dict[str, str] = {}
    refused: list[str] = []
    for name, text in sorted(texts.items()):
        if before.get(name) == text:
            continue
        if not editable(name) or "\n" in text:
            refused.append(name)
        else:
            edits[name] = text
    return edits, refused


def _ignored(name: str) -> bool:
    return name in SCHEDD_KEEPS or name.startswith(PREFIX)


def _text(text: str | None) -> str:
    """A string attribute's value ("" when absent or not a string literal)."""
    if text is None:
        return ""
    value = unquote_string(text)
    return value if value is not None else ""


def shown_at_home(
    jobs: dict[str, dict[str, str]],
    remote: dict[str, dict[str, Any]],
    site: str,
    export: str,
    now: int,
) -> dict[str, dict[str, str]]:
    """The attribute texts condor_q should show for each local job: where it is, its
    status and hold reason there, and (idle or running only) the local JobStatus that
    mirrors it. `remote`: the site's status answer's "remote_jobs" (idle jobs absent)."""
    wanted: dict[str, dict[str, str]] = {}
    for job, texts in jobs.items():
        there = remote.get(job, {})
        remote_status = status_of(there.get("JobStatus", int(JobStatus.IDLE)))
        attrs = {SITE: quote_string(site), EXPORT: quote_string(export),
                 LAST_SEEN: str(now)}  # fmt: skip
        if remote_status is not None:  # one of HTCondor's codes: never the site's text
            attrs[REMOTE_STATUS] = str(int(remote_status))
        hold = there.get("HoldReason") if remote_status is JobStatus.HELD else None
        attrs[REMOTE_HOLD_REASON] = _site_literal(hold, result_attrs.TEXT)
        host = there.get("RemoteHost") or there.get("LastRemoteHost")
        attrs[REMOTE_HOST] = _site_literal(host, result_attrs.HOST)
        local = status_of(texts.get("JobStatus"))
        if local in (JobStatus.IDLE, JobStatus.RUNNING) and remote_status in MIRRORED:
            attrs["JobStatus"] = str(int(MIRRORED[remote_status]))
        wanted[job] = attrs
    return wanted


def _site_literal(text: Any, most: int) -> str:
    """What the site reported of an attribute (its expression text in the site's log), as
    the string literal condor_q shows here: a literal's value, anything else its text as
    it is; shown, never evaluated in the local schedd. "undefined" when there is none."""
    if not isinstance(text, str) or is_undefined(text):
        return "undefined"
    value = unquote_string(text)
    return site_string(text if value is None else value, most)


#: LumberjackLastSeen is written again once it is this old (or anything else changed):
#: not every job's ad at every sync.
SEEN_EVERY_S = 300


def changed(
    wanted: dict[str, dict[str, str]], jobs: dict[str, dict[str, str]]
) -> dict[tuple[str, str], list[str]]:
    """(attribute, text) -> the jobs whose attribute must be set to it: only what
    differs from the job's ad now (LumberjackLastSeen: with any other change, or once
    SEEN_EVERY_S old)."""
    edits: dict[tuple[str, str], list[str]] = {}
    for job, attrs in sorted(wanted.items()):
        now = jobs[job]
        for name, text in attrs.items():
            if name == LAST_SEEN or now.get(name) == text:
                continue
            if text == "undefined" and name not in now:
                continue
            edits.setdefault((name, text), []).append(job)
        seen = attrs.get(LAST_SEEN)
        if seen is not None and (
            any(job in ids for ids in edits.values()) or _age(now.get(LAST_SEEN), seen)
        ):
            edits.setdefault((LAST_SEEN, seen), []).append(job)
    return edits


def _age(before: str | None, now: str) -> bool:
    """Whether a LumberjackLastSeen of `before` is due again at `now`."""
    try:
        return int(now) - int(before or 0) >= SEEN_EVERY_S
    except ValueError:
        return True
