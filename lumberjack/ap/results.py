"""Results: the job attributes a site may report back, and how import takes them.

Import builds every job from the access point's own copy of the ad as it left (the
native export log, paths restored by the path map) and copies over, from the site's
returned ad, only the attributes named in result_attrs' table, only when their value is
a literal of the type and range the table names; site-internal bookkeeping is dropped.
Everything else the site changed is reported (``site_changes``), never merged: the
schedd's import merges every changed attribute, so the queue handed to it must already
hold nothing but the original ad plus these results.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

from lumberjack.ap import result_attrs
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.classad_text import is_undefined, site_string, unquote_string
from lumberjack.core.jobstatus import FINAL, JobStatus, status_of
from lumberjack.core.records import JsonRecord

#: Every attribute a site may report for a job that reached a final status.
RESULT_ATTRS: tuple[str, ...] = tuple(result_attrs.RESULTS)
#: What a job handed back idle keeps: it runs again as it left, plus its history.
IDLE_RESULT_ATTRS: tuple[str, ...] = tuple(
    name for name, kind in result_attrs.RESULTS.items() if kind.idle
)
#: Never merged, and not worth a line in the report (see result_attrs.SITE_INTERNAL).
EXPECTED_AT_SITE = result_attrs.SITE_INTERNAL

_RESULT = frozenset(a.lower() for a in RESULT_ATTRS)
_IDLE = frozenset(a.lower() for a in IDLE_RESULT_ATTRS)
#: What diff_names leaves out of a job's report: results (taken or refused) and bookkeeping.
_NOT_A_CHANGE = _RESULT | EXPECTED_AT_SITE


@dataclass
class SiteChanges(JsonRecord):
    """What the site changed in one ad outside the results: reported, never merged."""

    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # result attributes whose value was not a literal of their type and range
    refused: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.removed or self.refused)


def diff_names(before: jql.Ad, after: jql.Ad, skip: Iterable[str] = ()) -> SiteChanges:
    """Attribute names changed, added and removed from ``before`` to ``after``
    (case-insensitive), except those in ``skip`` (lower-case) and site-internal ones."""
    skipped = skip if isinstance(skip, frozenset) else frozenset(skip)
    return _diff(before.attrs, after.attrs, tuple(after.attrs), skipped)


def _diff(
    old: dict[str, str], new: dict[str, str], new_names: tuple[str, ...], skipped: frozenset[str]
) -> SiteChanges:
    """diff_names of two ads' attributes; the names' part of the work (the same in every
    job of an export) done once per pair of name lists (_diff_shape)."""
    pairs, removed = _diff_shape(tuple(old), new_names, skipped)
    out = SiteChanges(removed=list(removed))
    for name, was in pairs:
        if was is None:
            out.added.append(name)
        elif old[was] != new[name]:
            out.changed.append(name)
    return out


@functools.lru_cache(maxsize=1024)
def _diff_shape(
    old_names: tuple[str, ...], new_names: tuple[str, ...], skipped: frozenset[str]
) -> tuple[tuple[tuple[str, str | None], ...], tuple[str, ...]]:
    """(each name of ``new_names`` to report with its spelling in ``old_names`` or None,
    the names of ``old_names`` removed), names compared in lower case: where two
    spellings lower alike, the last of each list stands for both."""
    old = {a.lower(): a for a in old_names}
    new = {a.lower(): a for a in new_names}
    internal, prefixes = result_attrs.SITE_INTERNAL, result_attrs.SITE_INTERNAL_PREFIXES

    def reported(low: str) -> bool:  # result_attrs.is_site_internal, without lowering again
        return not (low in skipped or low in internal or low.startswith(prefixes))

    pairs = tuple((name, old.get(low)) for low, name in new.items() if reported(low))
    removed = tuple(name for low, name in old.items() if low not in new and reported(low))
    return pairs, removed


def take_results(
    original: jql.Ad, sent: jql.Ad, returned: jql.Ad, site: str | None = None
) -> tuple[jql.Ad, SiteChanges]:
    """The ad to hand back: ``original`` plus the site's results from ``returned``,
    each checked against its type and range (result_attrs.checked).

    ``sent`` is the ad as shipped (paths rewritten): the base of the report. A job the
    site did not finish goes back idle with only its counters and usage. A job held at
    the site comes back held, its HoldReason prefixed with the ``site``.
    """
    ad = jql.Ad(original.key, original.my_type, original.target_type, dict(original.attrs))
    status = status_of(returned.get("JobStatus"))
    final = status in FINAL
    allowed = _RESULT if final else _IDLE
    back = returned.attrs
    names = tuple(back)
    changes = _diff(sent.attrs, back, names, _NOT_A_CHANGE)
    memory = None
    sent_attrs = _Spellings(sent.attrs)
    new_attrs = _Spellings(ad.attrs)
    for name, low in _results_in(names, allowed):
        value = back[name]
        if sent_attrs.get(name) == value or is_undefined(value):
            continue  # undefined: "no value", the job keeps its own
        good = _checked(name, value)
        if good is None and low == "memoryusage":
            memory = (name, value)  # once ResidentSetSize is in
        elif good is None:
            changes.refused.append(name)
        else:
            new_attrs.set(name, good)
    if memory is not None:
        good = _memory_usage(memory[1], ad)
        if good is None:
            changes.refused.append(memory[0])
        elif good:
            ad.set(memory[0], good)
    if status is JobStatus.HELD:
        _held_at(ad, original, site)
    if not final:
        ad.set("JobStatus", str(int(JobStatus.IDLE)))
    return ad, changes


#: jql.fold_name of the attribute names met (the same few hundred in every job's ad).
_fold = functools.lru_cache(maxsize=4096)(jql.fold_name)


@functools.lru_cache(maxsize=1024)
def _results_in(names: tuple[str, ...], allowed: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(name, its lower case) of each of an ad's attribute names that is in ``allowed``."""
    return tuple((name, name.lower()) for name in names if name.lower() in allowed)


#: result_attrs.checked of the (name, value) pairs met: most results read the same in
#: every job of an export (its status, exit code, counters), a check is a pure function.
_checked = functools.lru_cache(maxsize=1 << 16)(result_attrs.checked)


@functools.lru_cache(maxsize=1024)
def _first_spellings(names: tuple[str, ...]) -> dict[str, str]:
    """Case-folded name -> its first spelling among ``names`` (as Ad.get finds it): the
    same for every ad of one shape, so worked out once per shape. Never written to."""
    index: dict[str, str] = {}
    for name in names:
        index.setdefault(_fold(name), name)
    return index


class _Spellings:
    """Ad.get and Ad.set on an ad's attributes, each case-folded name looked up once per
    shape of ad instead of once per call (a job's results are mostly attributes it lacks)."""

    def __init__(self, attrs: dict[str, str]) -> None:
        self.attrs = attrs
        self.index = _first_spellings(tuple(attrs))  # shared by every ad of this shape
        self.added: dict[str, str] = {}  # names set here that the ad lacked

    def get(self, name: str) -> str | None:
        value = self.attrs.get(name)
        if value is not None:
            return value
        folded = _fold(name)
        spelled = self.index.get(folded) or self.added.get(folded)
        return None if spelled is None else self.attrs[spelled]

    def set(self, name: str, value: str) -> None:
        if name not in self.attrs:
            folded = _fold(name)
            name = self.index.get(folded) or self.added.setdefault(folded, name)
        self.attrs[name] = value


def _memory_usage(value: str, ad: jql.Ad) -> str | None:
    """MemoryUsage as a literal when the site kept HTCondor's default expression (its
    value from the ResidentSetSize already checked into `ad`; "" when there is none);
    None (refused) for any other expression."""
    if "".join(value.split()) != result_attrs.DEFAULT_MEMORY_USAGE:
        return None
    return result_attrs.memory_usage(ad.get("ResidentSetSize")) or ""


#: Counted again by the local schedd as it takes a job held (seen on 25.14): a job that
#: comes home held keeps its own, or its hold would count twice.
HOLD_COUNTERS = ("NumHolds", "NumHoldsByReason")


def _held_at(ad: jql.Ad, original: jql.Ad, site: str | None) -> None:
    """A job held at the site says so: "at site S: <the site's reason>"."""
    for name in HOLD_COUNTERS:
        if original.get(name) is None:
            ad.delete(name)
        else:
            ad.set(name, original.get(name))
    reason = unquote_string(ad.get("HoldReason") or "")
    where = f"at site {site}" if site else "at the site"
    text = f"{where}: {reason}" if reason else f"{where}: held (no reason returned)"
    ad.set("HoldReason", site_string(text, result_attrs.TEXT))


def is_result(name: str) -> bool:
    return name.lower() in _RESULT
