"""The conformance suite's cases and how one job's two runs are compared.

A case is a directory of tests/integration/conformance/: a `job.sub` (a condor_submit
description with relative paths) and the job's scripts and inputs. The first comment
lines of `job.sub` may carry directives for the runner:

    # compare: Attr1 Attr2 ...   job-ad attributes compared besides the defaults
    # files: name1 name2 ...     output files (relative to the submit directory) whose
                                 content must be the same in both runs
    # why: one line              the semantic the case checks (shown in failures)
    # differ: Attr reason...     an attribute allowed to differ, and why (on purpose)

Every job is compared on DEFAULT_ATTRS, on whether `NumJobStarts` is above 0, on where
the job is (still in the queue, or in the history), on the sequence of its user-log
event types (ULOG_ names) and on the content of its stdout and stderr. Two things of
the sequence depend on timing, not on the job's semantics, and are not compared:
ULOG_IMAGE_SIZE events (the starter reports a running job's memory on its update
timer) are left out, and a run of ULOG_FILE_TRANSFER events counts as one (a failed
output transfer writes one or two, in either pool, from one run to the next).
Pure logic here (the unit tier tests it); test_conformance.py runs the jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CASES_DIR = Path(__file__).resolve().parent / "conformance"
#: What HTCondor users read of a finished job, compared for every case.
DEFAULT_ATTRS = (
    "JobStatus", "ExitCode", "ExitBySignal", "ExitSignal", "HoldReasonCode",
    "HoldReasonSubCode", "NumJobCompletions",
)  # fmt: skip
#: Compared values that are not job-ad attributes (named so in failures).
STARTED, WHERE, EVENTS = "NumJobStarts>0", "(queue or history)", "(user-log events)"
STDOUT, STDERR = "(stdout)", "(stderr)"
DIRECTIVES = ("compare", "files", "why", "differ")
#: Events whose number depends on timing (see above): left out, or a run of them as one.
TIMING_EVENTS = frozenset({"ULOG_IMAGE_SIZE"})
RUN_AS_ONE = frozenset({"ULOG_FILE_TRANSFER"})


class BadCase(ValueError):
    """A case directory the runner cannot use (one line naming it)."""


@dataclass
class Case:
    name: str
    directory: Path
    why: str = ""
    compare: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: attribute -> why it is allowed to differ
    differ: dict[str, str] = field(default_factory=dict)

    @property
    def attrs(self) -> list[str]:
        """The job-ad attributes to read: the defaults, the case's own, and what finding
        the job's files needs."""
        extra = ["Iwd", "Out", "Err", "NumJobStarts", "ProcId", "ClusterId", "UserLog"]
        return list(dict.fromkeys([*DEFAULT_ATTRS, *self.compare, *extra]))


def read_case(directory: Path) -> Case:
    """The case in `directory`, its directives read from job.sub's leading comments."""
    sub = directory / "job.sub"
    if not sub.is_file():
        raise BadCase(f"case {directory.name}: no job.sub")
    case = Case(directory.name, directory)
    for line in sub.read_text().splitlines():
        text = line.strip()
        if not text:
            continue
        if not text.startswith("#"):
            break  # directives are the first lines only
        key, _, value = text[1:].strip().partition(":")
        key, value = key.strip(), value.strip()
        if key not in DIRECTIVES:
            continue  # an ordinary comment
        if key == "why":
            case.why = value
        elif key == "differ":
            attr, _, reason = value.partition(" ")
            if not attr or not reason.strip():
                raise BadCase(f"case {case.name}: '# differ:' needs an attribute and a reason")
            case.differ[attr] = reason.strip()
        else:
            getattr(case, key).extend(value.split())
    return case


def all_cases(root: Path = CASES_DIR) -> list[Case]:
    """Every case below `root`, by name."""
    return [read_case(d) for d in sorted(root.iterdir()) if d.is_dir()]


def settled(ad: Mapping[str, Any], in_queue: bool) -> bool:
    """Whether a job's state is the one it keeps: out of the queue, or in it completed
    and left there (LeaveJobInQueue true), or held with no periodic_release that could
    lift it. (A completed or removed job otherwise leaves at the schedd's next sweep.)"""
    from lumberjack.core.jobstatus import JobStatus, may_be_released

    if not in_queue:
        return True
    status = ad.get("JobStatus")
    if status == JobStatus.COMPLETED:
        return ad.get("LeaveJobInQueue") is True
    release = ad.get("PeriodicRelease")
    return status == JobStatus.HELD and not may_be_released(
        None if release is None else str(release)
    )


def observed(ad: Mapping[str, Any], case: Case, in_queue: bool, events: list[str],
             stdout: bytes | None, stderr: bytes | None,
             files: Mapping[str, bytes | None]) -> dict[str, Any]:  # fmt: skip
    """What is compared of one job: name -> value (None for what it does not have)."""
    values: dict[str, Any] = {attr: _plain(ad.get(attr)) for attr in DEFAULT_ATTRS}
    values.update({attr: _plain(ad.get(attr)) for attr in case.compare})
    values[STARTED] = (ad.get("NumJobStarts") or 0) > 0
    values[WHERE] = "queue" if in_queue else "history"
    values[EVENTS] = event_sequence(events)
    values[STDOUT], values[STDERR] = stdout, stderr
    values.update({f"(file {name})": content for name, content in files.items()})
    return values


def event_sequence(events: list[str]) -> list[str]:
    """The events as compared: timing's own left out, a run of RUN_AS_ONE as one."""
    kept: list[str] = []
    for name in events:
        if name in TIMING_EVENTS or (name in RUN_AS_ONE and kept and kept[-1] == name):
            continue
        kept.append(name)
    return kept


def differences(case: Case, job: str, reference: dict[str, Any], lumberjack: dict[str, Any]
                ) -> list[str]:  # fmt: skip
    """One line per value that differs and may not: the case, the job, the attribute
    and both values."""
    lines = []
    for name in dict.fromkeys([*reference, *lumberjack]):
        if name in case.differ:
            continue
        ref, got = reference.get(name), lumberjack.get(name)
        if ref != got:
            lines.append(f"{case.name} (job {job}): {name}: reference pool {ref!r}, "
                         f"through lumberjack {got!r}")  # fmt: skip
    return lines


def _plain(value: Any) -> Any:
    """A ClassAd value as a plain Python value (expressions by their text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
