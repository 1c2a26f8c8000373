"""The one table of job attributes a site may send back, each with its type and range.

Import copies an attribute from the site's ad only when it is named here and its value
is a literal of the named type within the range (`checked`): never an expression, never
a string with control characters, never a negative count or a date a thousand years
ahead. What is not here is either site-internal bookkeeping (`SITE_INTERNAL`: dropped
without a word) or reported as a change the site made, never merged. Nothing that says
what the job does (Cmd, Arguments, Environment, Requirements, Iwd, transfer lists,
policy expressions) is ever in the table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lumberjack.core.classad_text import site_string, unquote_string


@dataclass(frozen=True)
class Kind:
    """What a result may hold: `type` int, float, bool, string or record (of numbers);
    numbers within [low, high], strings at most `high` characters. `idle`: kept by a
    job that comes back idle (it runs again: only its history and usage stay)."""

    type: str
    low: float = 0
    high: float = 0
    idle: bool = False


COUNT = 2**31 - 1  # how many times something happened
BIG = 2**53  # bytes, KiB, blocks: still exact as a float
SECONDS = 2**40  # durations and CPU seconds (tens of thousands of years)
EPOCH = 2**34  # dates: seconds since 1970, up to the year 2514 (-1: not yet)
#: The longest reason text taken from the site (HoldReason, ...). HTCondor has no cap, but
#: each value is one line of the schedd's log and of condor_q: room for two long paths.
TEXT = 2048
HOST = 256  # the longest slot@host taken (a DNS name alone is at most 253 characters)


def _group(names: str, kind: Kind) -> dict[str, Kind]:
    return {name: kind for name in names.split()}


#: name -> Kind of every result. Grouped by what they say about the job.
RESULTS: dict[str, Kind] = {
    # Status and its history: what state the job reached.
    **_group("JobStatus LastJobStatus", Kind("int", 0, 7)),
    **_group("EnteredCurrentStatus", Kind("int", -1, EPOCH)),
    **_group("HoldReason", Kind("string", 0, TEXT)),
    # Why the site's schedd removed the job (periodic_remove, on_exit_remove): the local
    # schedd writes it into the job's aborted event, as HTCondor does at home.
    **_group("RemoveReason", Kind("string", 0, TEXT)),
    **_group("HoldReasonCode", Kind("int", 0, 1000)),
    **_group("HoldReasonSubCode", Kind("int", -(2**31), 2**31 - 1)),
    **_group("NumSystemHolds NumHolds", Kind("int", 0, COUNT, idle=True)),
    **_group("NumHoldsByReason", Kind("record", 0, COUNT, idle=True)),
    # How the job ended, as the starter reported it.
    **_group("ExitCode", Kind("int", 0, 255)),
    **_group("ExitSignal", Kind("int", 0, 128)),
    **_group("ExitStatus", Kind("int", 0, 65535)),
    **_group("ExitBySignal", Kind("bool")),
    **_group("CompletionDate LastVacateTime", Kind("int", -1, EPOCH)),
    **_group("VacateReason", Kind("string", 0, TEXT)),
    **_group("VacateReasonCode", Kind("int", 0, 1000)),
    **_group("VacateReasonSubCode", Kind("int", -(2**31), 2**31 - 1)),
    # When things happened: dates only.
    **_group(
        "JobStartDate JobCurrentStartDate JobCurrentStartExecutingDate JobLastStartDate "
        "ShadowBday LastMatchTime LastSuspensionTime JobCurrentStartTransferInputDate "
        "JobCurrentFinishTransferInputDate JobCurrentStartTransferOutputDate "
        "JobCurrentFinishTransferOutputDate",
        Kind("int", -1, EPOCH),
    ),
    # Counters: how often; a job handed back idle keeps them.
    **_group(
        "NumJobStarts NumShadowStarts JobRunCount NumJobMatches NumJobReconnects NumRestarts "
        "NumJobCompletions TotalSuspensions NumInputTransferStarts NumOutputTransferStarts",
        Kind("int", 0, COUNT, idle=True),
    ),
    # Time used: what users and facilities account with.
    **_group(
        "RemoteWallClockTime LastRemoteWallClockTime CumulativeSlotTime CommittedTime "
        "CommittedSlotTime CommittedSuspensionTime CumulativeSuspensionTime "
        "ActivationDuration ActivationExecutionDuration ActivationSetupDuration "
        "ActivationTeardownDuration InitialWaitDuration StatsLifetimeStarter "
        "RemoteUserCpu RemoteSysCpu CumulativeRemoteUserCpu CumulativeRemoteSysCpu CpusUsage",
        Kind("float", 0, SECONDS, idle=True),
    ),
    # Memory, disk and I/O as the starter measured them (KiB, MB, blocks, bytes).
    **_group(
        "ImageSize ImageSize_RAW MemoryUsage ResidentSetSize ResidentSetSize_RAW "
        "ProportionalSetSizeKb DiskUsage DiskUsage_RAW ScratchDirFileCount CpusProvisioned "
        "MemoryProvisioned DiskProvisioned GPUsProvisioned BlockReads BlockWrites "
        "BlockReadKbytes BlockWriteKbytes BlockReadBytes BlockWriteBytes",
        Kind("int", 0, BIG, idle=True),
    ),
    # Where it ran last (HTCondor's "slot@host"; the host is the site's pilot node).
    **_group("LastRemoteHost", Kind("string", 0, HOST, idle=True)),
    # Sandbox transfers: sizes, byte counts, dates and per-protocol statistics.
    **_group("TransferInputSizeMB", Kind("int", 0, BIG)),
    **_group("BytesSent BytesRecvd", Kind("float", 0, BIG)),
    **_group(
        "TransferInQueued TransferInStarted TransferInFinished TransferOutQueued "
        "TransferOutStarted TransferOutFinished",
        Kind("int", -1, EPOCH),
    ),
    **_group(
        "TransferInputStats TransferOutputStats TransferInputFileCounts", Kind("record", 0, BIG)
    ),  # fmt: skip
}

#: Changed at every site by lumberjack's agent or the remote schedd's and starter's own
#: bookkeeping; never merged, and not worth a line in the report (lower-case).
SITE_INTERNAL = frozenset(
    a.lower()
    for a in (
        "Owner",  # the agent runs every job as the site account
        "User",
        "JobLeaseDuration",  # the agent's short lease (site/agent.py short_lease)
        "MyType",
        "TargetType",
        "AutoClusterId",
        "AutoClusterAttrs",
        "LastJobLeaseRenewal",
        "StartdPrincipal",
        "StartdIpAddr",
        "PublicClaimId",
        "LastPublicClaimId",
        "ClaimId",
        "OrigMaxHosts",
        "CurrentHosts",
        "StarterIpAddr",
        "LastRejMatchReason",
        "LastRejMatchTime",
        "LastRejMatchNegotiator",
        "RemoteHostName",
        # A job at home runs nowhere: the slot it had at the site means nothing here
        # (LastRemoteHost keeps where it ran).
        "RemoteHost",
        "RemoteSlotID",
        "JobFinishedHookDone",
        "TerminationPending",
        "JobCurrentReconnectAttempt",
        "ExecuteDirWasEncrypted",
        # Files the site's schedd spooled: the outputs are placed at home instead.
        "SpooledOutputFiles",
        "StdoutMtime",
        "StderrMtime",
        "TransferQueued",
        "TransferringInput",
        "TransferringOutput",
        "FirstJobMatchDate",  # the cluster's first match at the site
    )
)
#: Families of site-internal names: the site slot's own attributes copied into the job
#: (MachineAttrCpus0...), and the starter's short-window statistics (RecentBlockReads...).
SITE_INTERNAL_PREFIXES = ("machineattr", "recent")

#: HTCondor's own MemoryUsage expression (the schedd's default): import stores its
#: value, computed from the checked ResidentSetSize, instead of the expression.
DEFAULT_MEMORY_USAGE = "((ResidentSetSize+1023)/1024)"

_LOWER = {name.lower(): kind for name, kind in RESULTS.items()}
_INT = re.compile(r"[-+]?[0-9]{1,20}")
_FLOAT = re.compile(r"[-+]?(?:[0-9]{1,20}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?")
_FIELD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]{0,63})\s*=\s*([^;\]]*?)\s*")
MAX_RECORD_FIELDS = 64


def kind_of(name: str) -> Kind | None:
    """The Kind of result `name` (any case), None when it is not a result."""
    return _LOWER.get(name.lower())


def is_site_internal(name: str) -> bool:
    low = name.lower()
    return low in SITE_INTERNAL or low.startswith(SITE_INTERNAL_PREFIXES)


def checked(name: str, text: str) -> str | None:
    """The value to store for result `name` given the site's `text`, or None when it is
    refused (not a result, an expression, the wrong type, out of range)."""
    kind = kind_of(name)
    if kind is None or len(text) > 2 * TEXT + 16:
        return None
    text = text.strip()
    if kind.type == "int":
        return _number(text, kind, integer=True)
    if kind.type == "float":
        return _number(text, kind, integer=False)
    if kind.type == "bool":
        word = text.lower()
        return word if word in ("true", "false") else None
    if kind.type == "string":
        value = unquote_string(text)
        if value is None or len(value) > kind.high or not value.isprintable():
            return None
        return site_string(value, int(kind.high))
    return _record(text, kind)


def _number(text: str, kind: Kind, *, integer: bool) -> str | None:
    if _INT.fullmatch(text):
        value: float = int(text)
    elif not integer and _FLOAT.fullmatch(text):
        value = float(text)
        if not math.isfinite(value):
            return None
    else:
        return None
    if not kind.low <= value <= kind.high:
        return None
    return str(int(value)) if integer else text


def _record(text: str, kind: Kind) -> str | None:
    """A record of numbers ([ CedarFilesCount = 3; CedarSizeBytes = 2352 ]), rewritten
    in one canonical form."""
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1].strip().rstrip(";")
    fields = [part for part in body.split(";")] if body else []
    if len(fields) > MAX_RECORD_FIELDS:
        return None
    out = []
    number = Kind("float", kind.low, kind.high)
    for part in fields:
        match = _FIELD.fullmatch(part)
        value = _number(match.group(2), number, integer=False) if match else None
        if match is None or value is None:
            return None
        out.append(f"{match.group(1)} = {value}")
    return "[ " + "; ".join(out) + " ]" if out else "[ ]"


def memory_usage(resident_set_size: str | None) -> str | None:
    """MemoryUsage (MB) as HTCondor's default expression computes it from a checked
    ResidentSetSize (KiB), as a literal."""
    if resident_set_size is None or not _INT.fullmatch(resident_set_size.strip()):
        return None
    return str((int(resident_set_size) + 1023) // 1024)
