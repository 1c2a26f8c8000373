"""Results: the job attributes a site may report back, and how import takes them.

Import builds every job from the access point's own copy of the ad as it left (the
native export log, paths restored by the path map) and copies over, from the site's
returned ad, only the attributes named here, only when their value is a plain literal.
Everything else the site changed is reported (``site_changes``), never merged: the
schedd's import merges every changed attribute, so the queue handed to it must already
hold nothing but the original ad plus these results.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.jobstatus import FINAL, JobStatus, status_of
from lumberjack.core.records import JsonRecord

# Status and its history: what state the job reached. Read by people and by the user's
# own policy expressions; they say nothing about what runs or where.
STATUS = (
    "JobStatus",
    "LastJobStatus",
    "EnteredCurrentStatus",
    "HoldReason",
    "HoldReasonCode",
    "HoldReasonSubCode",
    "NumSystemHolds",
)
# How the job ended: numbers and a reason text, as the starter reported them.
EXIT = (
    "ExitCode",
    "ExitBySignal",
    "ExitSignal",
    "ExitStatus",
    "CompletionDate",
    "LastVacateTime",
    "VacateReason",
    "VacateReasonCode",
    "VacateReasonSubCode",
)
# When things happened: timestamps only.
TIMES = (
    "JobStartDate",
    "JobCurrentStartDate",
    "JobCurrentStartExecutingDate",
    "JobLastStartDate",
    "ShadowBday",
    "LastMatchTime",
    "JobCurrentStartTransferInputDate",
    "JobCurrentFinishTransferInputDate",
    "JobCurrentStartTransferOutputDate",
    "JobCurrentFinishTransferOutputDate",
)
# Counters: how often and how long; a job handed back idle keeps these.
COUNTERS = (
    "NumJobStarts",
    "NumShadowStarts",
    "JobRunCount",
    "NumJobMatches",
    "NumJobReconnects",
    "NumRestarts",
    "NumJobCompletions",
    "TotalSuspensions",
    "RemoteWallClockTime",
    "CumulativeSlotTime",
    "CommittedTime",
    "CommittedSlotTime",
    "CommittedSuspensionTime",
    "CumulativeSuspensionTime",
)
# Resource usage as measured by the starter: numbers the user reads to size requests.
USAGE = (
    "RemoteUserCpu",
    "RemoteSysCpu",
    "CumulativeRemoteUserCpu",
    "CumulativeRemoteSysCpu",
    "ImageSize",
    "ImageSize_RAW",
    "MemoryUsage",
    "ResidentSetSize",
    "ResidentSetSize_RAW",
    "ProportionalSetSizeKb",
    "DiskUsage",
    "DiskUsage_RAW",
    "CpusUsage",
    "CpusProvisioned",
    "MemoryProvisioned",
    "DiskProvisioned",
    "GPUsProvisioned",
)
# Where it ran: host and slot names, informational strings.
HOSTS = ("LastRemoteHost", "RemoteHost", "RemoteSlotID")
# Transfer statistics: byte counts and times of the sandbox transfers.
TRANSFER = (
    "BytesSent",
    "BytesRecvd",
    "TransferInQueued",
    "TransferInStarted",
    "TransferInFinished",
    "TransferOutQueued",
    "TransferOutStarted",
    "TransferOutFinished",
    "TransferInputStats",
    "TransferOutputStats",
)

#: Every attribute a site may report for a job that reached a final status.
RESULT_ATTRS: tuple[str, ...] = STATUS + EXIT + TIMES + COUNTERS + USAGE + HOSTS + TRANSFER
#: What a job handed back idle keeps: it runs again as it left, plus its history.
IDLE_RESULT_ATTRS: tuple[str, ...] = COUNTERS + USAGE + ("LastRemoteHost",)
#: Changed at every site by lumberjack's agent or the remote schedd's own bookkeeping:
#: never merged, and not worth a line in the report.
EXPECTED_AT_SITE = frozenset(
    a.lower()
    for a in (
        "Owner",  # the agent runs every job as the site account
        "User",
        "AutoClusterId",
        "AutoClusterAttrs",
        "LastJobLeaseRenewal",
        "StartdPrincipal",
        "PublicClaimId",
        "LastPublicClaimId",
        "ClaimId",
        "OrigMaxHosts",
        "StarterIpAddr",
        "LastRejMatchReason",
        "LastRejMatchTime",
        "RemoteHostName",
        "JobFinishedHookDone",
        "TerminationPending",
    )
)

_RESULT = frozenset(a.lower() for a in RESULT_ATTRS)
_IDLE = frozenset(a.lower() for a in IDLE_RESULT_ATTRS)

# A scalar ClassAd literal: number, boolean, undefined, or a string without a quote
# inside (old ClassAd syntax; an escaped quote is not needed by any result).
_SCALAR = re.compile(
    r'-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|true|false|undefined|"[^"\n\x00]*"',
    re.IGNORECASE,
)
# A record of scalars (TransferInputStats = [ CedarFilesCount = 1; ... ]).
_FIELD = r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=\s*(?:" + _SCALAR.pattern + r")\s*"
_RECORD = re.compile(r"\[(?:" + _FIELD + r";)*(?:" + _FIELD + r")?;?\s*\]", re.IGNORECASE)
#: Longer values are not results anyone needs: refused.
MAX_VALUE_CHARS = 4096


def is_literal(text: str) -> bool:
    """True for a value import may copy: a scalar literal or a record of them."""
    text = text.strip()
    if len(text) > MAX_VALUE_CHARS:
        return False
    return bool(_SCALAR.fullmatch(text) or _RECORD.fullmatch(text))


@dataclass
class SiteChanges(JsonRecord):
    """What the site changed in one ad outside the results: reported, never merged."""

    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # result attributes whose value was not a plain literal
    refused: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.removed or self.refused)


def diff_names(before: jql.Ad, after: jql.Ad, skip: Iterable[str] = ()) -> SiteChanges:
    """Attribute names changed, added and removed from ``before`` to ``after``
    (case-insensitive), except those in ``skip`` (lower-case)."""
    skipped = set(skip)
    old = {a.lower(): (a, v) for a, v in before.attrs.items()}
    new = {a.lower(): (a, v) for a, v in after.attrs.items()}
    out = SiteChanges()
    for low, (name, value) in new.items():
        if low in skipped:
            continue
        if low not in old:
            out.added.append(name)
        elif old[low][1] != value:
            out.changed.append(name)
    out.removed = [name for low, (name, _) in old.items() if low not in new and low not in skipped]
    return out


def take_results(original: jql.Ad, sent: jql.Ad, returned: jql.Ad) -> tuple[jql.Ad, SiteChanges]:
    """The ad to hand back: ``original`` plus the site's results from ``returned``.

    ``sent`` is the ad as shipped (paths rewritten): the base of the report. A job the
    site did not finish goes back idle with only its counters and usage.
    """
    ad = jql.Ad(original.key, original.my_type, original.target_type, dict(original.attrs))
    status = status_of(returned.get("JobStatus"))
    final = status in FINAL
    allowed = _RESULT if final else _IDLE
    changes = diff_names(sent, returned, _RESULT | EXPECTED_AT_SITE)
    for name, value in returned.attrs.items():
        low = name.lower()
        if low not in allowed or sent.get(name) == value:
            continue
        if is_literal(value):
            ad.set(name, value)
        else:
            changes.refused.append(name)
    if not final:
        ad.set("JobStatus", str(int(JobStatus.IDLE)))
    return ad, changes


def is_result(name: str) -> bool:
    return name.lower() in _RESULT
