"""Matchmaking before anything changes: which selected jobs could ever run in the slots
the pilots will advertise, and, for those that never could, why and what to change.

HTCondor evaluates: each job ad is matched against the slot ad of lumberjack/core/
slot_ad.py with classad2's symmetricMatch (the job's Requirements and the slot's START
and partitionable-slot limits). A job that does not match is analysed as
`condor_q -better-analyze` does: the Requirements are split into their `&&` clauses and
each is evaluated against the slot ad; a clause that is false names the reason. A clause
that only fails because the slot's value is not known here (a site-provided HTCondor's
OS, a node's disk the profile does not state) refuses nothing.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from lumberjack.ap import gpu_match
from lumberjack.ap.clauses import evaluate, parse_ad, split_and, unwrap
from lumberjack.ap.platform_match import platform_of, platform_reason
from lumberjack.core.answers import IdleShape
from lumberjack.core.classad_text import unquote_string
from lumberjack.core.slot_ad import (
    RETIRE_START,
    SlotResources,
    ad_text,
    slot_ad,
)
from lumberjack.core.units import format_memory
from lumberjack.errors import BadInput
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.request import (
    JobNeeds,
    Need,
    ResourceRequest,
    flags_of,
    other_queues,
)
from lumberjack.site.job_container import JOB_GUARD, isolates

#: Container images a compute node would have to download.
NETWORK_SCHEMES = ("docker://", "oras://", "library://", "http://", "https://")
IMAGE_ATTRS = ("ContainerImage", "SingularityImage", "DockerImage")
#: (job attribute, slot attribute, request flag, unit) of the partitionable slot's limits.
RESOURCES = (
    ("RequestCpus", "Cpus", "--cores", "cores"),
    ("RequestMemory", "Memory", "--memory", "MB"),
    ("RequestDisk", "Disk", "", "KB"),
    ("RequestGPUs", "GPUs", "--gpus", "GPUs"),
)
#: What a job's match depends on (the START guard reads the image and environment ones).
MATCH_ATTRS = (
    "ClusterId", "ProcId", "Requirements", *(r[0] for r in RESOURCES), *IMAGE_ATTRS,
    "WantDocker", "JobUniverse", "Environment", "Env", *gpu_match.JOB_GPU_ATTRS,
)  # fmt: skip


@dataclass
class Refusal:
    """A cluster no slot could ever take: one line naming the reason and the fix."""

    cluster: int
    jobs: list[str]
    reasons: list[str]

    @property
    def line(self) -> str:
        return f"cluster {self.cluster}: " + "; ".join(self.reasons)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "line": self.line}


class Unmatched(BadInput):
    """Clusters no slot could ever take: one line each; nothing was changed."""

    def __init__(self, analysis: Analysis, site: str) -> None:
        refused = analysis.refused
        total = len(refused) + len({job.split(".")[0] for job in analysis.matched})
        head = (
            f"{len(refused)} of {total} clusters can never run at site {site}; nothing was changed"
        )
        if analysis.matched:
            can = len(analysis.matched)
            head += f" (--skip-unmatched exports the {can} job{'s' if can != 1 else ''} that can)"
        super().__init__("\n".join([head, *analysis.lines()]))
        self.details = {"error": head, "unmatched": [r.to_json() for r in refused]}


@dataclass
class Analysis:
    """The slot the pilots advertise and what of the selection it takes."""

    slot: dict[str, str]
    matched: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    #: clauses that could not be judged here (the slot's value is not known)
    unknown: list[str] = field(default_factory=list)

    @property
    def refused_clusters(self) -> list[int]:
        return [r.cluster for r in self.refused]

    def lines(self) -> list[str]:
        return [r.line for r in self.refused]

    def to_json(self) -> dict[str, Any]:
        return {
            "slot_ad": self.slot,
            "matched": len(self.matched),
            "unmatched": [r.to_json() for r in self.refused],
            "unknown": self.unknown,
        }


# ---- the slot ---------------------------------------------------------------------------


def site_slot(profile: SiteProfile, request: ResourceRequest) -> dict[str, str]:
    """The slot ad each pilot node advertises for `request` at `profile`'s site."""
    queue = profile.queue(request.queue)
    disk = queue.disk_per_node_mb
    resources = SlotResources(
        cpus=request.cores_per_node,
        memory_mb=request.memory_per_node_mb,
        gpus=request.gpus_per_node,
        disk_kb=disk * 1024 if disk is not None else None,
        gpu_devices=gpu_match.queue_devices(queue, request.gpus_per_node),
    )
    container = isolates(profile.container.runtime)
    start = f"({RETIRE_START}) && {JOB_GUARD}" if container else RETIRE_START
    return slot_ad(
        resources, platform_of(profile, queue), start=start, container=container,
        retire_time=int(time.time()) + request.walltime_s,
    )  # fmt: skip


# ---- the jobs ---------------------------------------------------------------------------


def job_ads(schedd: Any, clusters: list[int], queried: list[Any] | None = None) -> list[Any]:
    """The selected clusters' ads with what their match depends on: MATCH_ATTRS, and
    any other job attribute their Requirements name (asked for in a second query).
    `queried`: those clusters' ads as a query with MATCH_ATTRS among others gave them
    (export.select_jobs_with_ads), used cut down to MATCH_ATTRS instead of a query."""
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
    if queried is not None:
        ads = [_only(ad, MATCH_ATTRS) for ad in queried]
    else:
        ads = schedd.query_ads(constraint, MATCH_ATTRS)
    seen, extra = set(), set()
    for ad in ads:
        for attr in ("Requirements", *(r[0] for r in RESOURCES)):
            expr = ad.lookup(attr) if attr in ad else None
            if expr is None or str(expr) in seen:
                continue
            seen.add(str(expr))
            extra |= {r.split(".")[-1] for r in ad.externalRefs(expr)
                      if not r.upper().startswith("TARGET.")}  # fmt: skip
    extra -= {a.lower() for a in MATCH_ATTRS} | set(MATCH_ATTRS)
    if extra:
        ads = schedd.query_ads(constraint, [*MATCH_ATTRS, *sorted(extra)])
    return ads


def _only(ad: Any, attrs: Iterable[str]) -> Any:
    """A copy of a classad2.ClassAd with only `attrs` (any case), as a query projected
    on them gives it: the match sees the attributes it saw before, and no others."""
    import classad2

    wanted = {a.lower() for a in attrs}
    copy = classad2.ClassAd()
    for name in ad.keys():
        if name.lower() in wanted:
            copy[name] = ad.lookup(name)
    return copy


def needs_of(ads: Iterable[Any]) -> JobNeeds:
    """The largest cores, memory and GPUs the jobs ask for (evaluated as HTCondor does)."""
    largest: dict[str, Need] = {}
    for ad in ads:
        job = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
        for attr in ("RequestCpus", "RequestMemory", "RequestGPUs"):
            amount = _number(ad, attr)
            if amount is not None and (attr not in largest or amount > largest[attr].amount):
                largest[attr] = Need(amount, job, attr)
    return JobNeeds(
        cores=largest.get("RequestCpus"),
        memory=largest.get("RequestMemory"),
        gpus=largest.get("RequestGPUs"),  # 0 raises nothing
    )


def network_image(ad: Any) -> str | None:
    """The job's container image when a node would have to download it."""
    for attr in IMAGE_ATTRS:
        value = ad.get(attr)
        if isinstance(value, str) and value.lower().startswith(NETWORK_SCHEMES):
            return value
    return None


def sif_command(image: str) -> str:
    """The command that turns a network image into a local .sif on the access point."""
    base = posixpath.basename(image.split("://", 1)[1].rstrip("/")) or "image"
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", base.split("@")[0]).strip("_") or "image"
    return f"apptainer build {name}.sif {image}"


# ---- the analysis -----------------------------------------------------------------------


def analyze(ads: list[Any], profile: SiteProfile, request: ResourceRequest) -> Analysis:
    """Match every job ad (classad2.ClassAd, parsed once HTCondor's functions were
    registered: see parse_ad) against the site's slot ad."""
    slot_attrs = site_slot(profile, request)
    slot = parse_ad(ad_text(slot_attrs))
    analysis = Analysis(slot=slot_attrs)
    by_cluster: dict[int, list[Any]] = {}
    for ad in ads:
        by_cluster.setdefault(int(ad["ClusterId"]), []).append(ad)
    for cluster, members in sorted(by_cluster.items()):
        reasons: list[str] = []
        for ad in members:
            found = _reasons(ad, slot, profile, request, analysis.unknown)
            reasons += [r for r in found if r not in reasons]
        if reasons:
            jobs = [f"{cluster}.{ad['ProcId']}" for ad in members]
            analysis.refused.append(Refusal(cluster, jobs, reasons))
        else:
            analysis.matched += [f"{cluster}.{ad['ProcId']}" for ad in members]
    return analysis


def _reasons(
    ad: Any, slot: Any, profile: SiteProfile, request: ResourceRequest, unknown: list[str]
) -> list[str]:
    image = network_image(ad)
    if image is not None:
        # The pilots run only images shipped with the export (site/job_container.py):
        # a download at the site is never attempted, with or without a network.
        why = (
            "the compute nodes of site {site} have no outbound network"
            if not profile.outbound_network
            else "the pilots at site {site} run only images shipped with the export"
        )
        return [
            f"container image {image} must be downloaded, and {why.format(site=profile.name)}:"
            f" build it here with `{sif_command(image)}` and submit with container_image ="
            " the .sif"
        ]
    if ad.symmetricMatch(slot):
        return []
    reasons: list[str] = []
    short = set()
    for job_attr, slot_attr, flag, unit in RESOURCES:
        wanted, has = _number(ad, job_attr), _number(slot, slot_attr)
        if wanted is not None and has is not None and wanted > has:
            short |= {slot_attr.lower(), job_attr.lower()}
            reasons.append(_resource_reason(profile, request, job_attr, wanted, has, flag, unit))
    undecided = False
    for clause, scope, target in _clauses(ad, slot):
        refs = scope.externalRefs(clause) + scope.internalRefs(clause)
        if {r.split(".")[-1].lower() for r in refs} & short:
            continue  # already named as a resource the slot lacks
        if scope is not slot and gpu_match.reads_devices(refs):
            verdict = gpu_match.judge(ad, slot, profile, profile.queue(request.queue))
            unknown += [note for note in verdict.unknown if note not in unknown]
            if verdict.reason is not None:
                reasons.append(verdict.reason)
                continue
            if verdict.unknown:
                undecided = True
                continue
        value = evaluate(clause, scope, target)
        if value is True:
            continue
        if scope is not slot and value is None and _unknown_here(clause, scope, target):
            undecided = True
            if str(clause) not in unknown:
                unknown.append(str(clause))
            continue
        platform = None if scope is slot else platform_reason(clause, scope, slot, profile, request)
        reasons.append(
            platform or _clause_reason(unwrap(str(clause)), scope is slot, profile, request)
        )
    if reasons or undecided:
        return reasons
    return ["does not match the slot ad (see `sites check --json`)"]


def _clauses(ad: Any, slot: Any) -> list[tuple[Any, Any, Any]]:
    """The job's Requirements clauses (job scope) and the slot's (slot scope)."""
    import classad2

    found = []
    for scope, target in ((ad, slot), (slot, ad)):
        if "Requirements" not in scope:
            continue
        text = str(scope.lookup("Requirements"))
        if scope is slot:
            text = f"{scope.lookup('START')} && {scope.lookup('WithinResourceLimits')}"
        found += [(classad2.ExprTree(part), scope, target) for part in split_and(text)]
    return found


def _unknown_here(clause: Any, scope: Any, target: Any) -> bool:
    """Undefined only because the clause reads a slot attribute not known here."""
    missing = [r for r in scope.externalRefs(clause) if not r.upper().startswith("MY.")]
    return any(target.get(r.split(".")[-1]) is None for r in missing)


# ---- idle at the site -------------------------------------------------------------------

_JOB_ID = re.compile(r"^\d{1,9}\.\d{1,9}$")
_ATTR_NAMES = {"Requirements", "RequestCpus", "RequestMemory", "RequestDisk", "RequestGPUs",
               "MemoryUsage", "DiskUsage"}  # fmt: skip


def never_match(
    shapes: list[IdleShape], profile: SiteProfile, request: ResourceRequest
) -> list[str]:
    """The idle jobs at the site that no slot of `request` could ever take, one line per
    shape (site/idle_jobs.py). The site's word, its types checked by the contract: a
    shape of unknown attribute names, or texts that do not parse, is skipped, never
    evaluated."""
    import classad2

    lines: list[str] = []
    for shape in shapes[:20]:
        attrs, jobs, example = shape.attrs, shape.jobs, shape.example
        if not (
            _JOB_ID.match(example)
            and "Requirements" in attrs
            and set(attrs) <= _ATTR_NAMES
            and all(len(v) <= 4000 for v in attrs.values())
        ):
            continue  # fmt: skip
        cluster, proc = example.split(".")
        body = "\n".join(f"{name} = {text}" for name, text in attrs.items())
        try:
            parse_ad("[]")  # HTCondor's functions, before the texts are parsed
            ad = classad2.parseOne(
                f"ClusterId = {cluster}\nProcId = {proc}\nJobUniverse = 5\n{body}",
                classad2.ParserType.Old,
            )
        except Exception:  # a text that is no ClassAd expression
            continue
        for refusal in analyze([ad], profile, request).refused:
            lines.append(f"{jobs} idle (e.g. {example}): " + "; ".join(refusal.reasons))
    return lines


# ---- the messages -----------------------------------------------------------------------


def slot_summary(slot: dict[str, str]) -> str:
    """The slot ad in one line: what each pilot node offers."""
    disk = slot.get("Disk")
    parts = [
        f"Cpus {slot['Cpus']}",
        f"Memory {slot['Memory']} MB",
        f"Disk {format_memory(int(disk) // 1024)}" if disk else "Disk unknown",
        f"GPUs {slot['GPUs']}",
        f"OpSysAndVer {_unquoted(slot, 'OpSysAndVer')}",
        f"Arch {_unquoted(slot, 'Arch')}",
        f"HasSingularity {slot['HasSingularity']}",
    ]
    return ", ".join(parts)


def _unquoted(slot: dict[str, str], name: str) -> str:
    """A string attribute of the slot ad as its value (the expression text otherwise)."""
    text = slot.get(name)
    if text is None:
        return "unknown"
    value = unquote_string(text)
    return text if value is None else value


def report_lines(analysis: Analysis) -> list[str]:
    """The analysis for the export report (the refused clusters left in the queue)."""
    lines = [f"{'slot':<12} {slot_summary(analysis.slot)}   (one per pilot node)"]
    count = len(analysis.matched)
    jobs = f"{count} job matches" if count == 1 else f"{count} jobs match"
    lines.append(f"{'matchmaking':<12} {jobs} the slot")
    lines += [f"{'left':<12} {line}" for line in analysis.lines()]
    if analysis.unknown:
        lines.append(f"{'not judged':<12} {'; '.join(analysis.unknown)} (unknown at the site)")
    return lines


def _shown(value: int, unit: str, with_unit: bool = True) -> str:
    if unit == "MB":
        return f"{value} MB"
    if unit == "KB":
        return format_memory(-(-value // 1024))
    return f"{value} {unit}" if with_unit else str(value)


def _resource_reason(
    profile: SiteProfile,
    request: ResourceRequest,
    attr: str,
    wanted: int,
    has: int,
    flag: str,
    unit: str,
) -> str:
    queue = profile.queue(request.queue)
    head = f"{attr} {_shown(wanted, unit, False)} > {_shown(has, unit)} per slot"
    if not flag:  # disk: what the node has, no flag changes it
        return f"{head} (queue {queue.name}'s disk_per_node): lower request_disk"
    limit = {"--cores": queue.cores_per_node, "--memory": queue.memory_per_node_mb,
             "--gpus": queue.gpus_per_node}[flag]  # fmt: skip
    value = format_memory(wanted) if flag == "--memory" else str(wanted)
    if wanted <= limit:
        verb = "use" if request.origin(flag.lstrip("-")) == flag else "add"
        return f"{head}: {verb} {flag} {value}"
    # Another queue only if it takes the whole request with this much (request.py).
    flags = {**flags_of(request), flag.lstrip("-"): wanted}
    others = other_queues(profile, queue.name, flags, bool(flags.get("gpus")))
    if others:
        other, cost = others[0]
        return (
            f"{head}, more than a node of queue {queue.name} has: "
            f"use --queue {other} {flag} {value} ({cost})"
        )
    per_node = {"--cores": "cores_per_node", "--memory": "memory_per_node_mb"}.get(
        flag, "gpus_per_node"
    )
    large = [q.name for q in profile.queues if getattr(q, per_node) >= wanted]
    if large:  # its nodes are large enough, but the rest of the request does not fit it
        return (
            f"{head}, more than a node of queue {queue.name} has: queue {large[0]} has it "
            f"but refuses the rest of the request; see `condor_lumberjack sites check "
            f"{profile.name} --queue {large[0]} {flag} {value}` with your other flags"
        )
    if flag == "--gpus" and not _any_gpus(profile):
        what = "no GPUs"
    else:
        most = format_memory(limit) if flag == "--memory" else f"{limit} {unit}"
        what = f"no node that large (queue {queue.name}: {most} per node)"
    return f"{head}: site {profile.name} has {what}; lower request_{attr[7:].lower()}"


def _any_gpus(profile: SiteProfile) -> bool:
    return any(queue.gpus_per_node for queue in profile.queues)


#: A clause that reads the clock: `time()` or the CurrentTime attribute.
_CLOCK = re.compile(r"\btime\s*\(|\bCurrentTime\b", re.IGNORECASE)


def _clause_reason(
    clause: str, of_slot: bool, profile: SiteProfile, request: ResourceRequest
) -> str:
    if of_slot:
        return f"the pilots' START refuses it ({clause}); no flag changes that"
    if _CLOCK.search(clause):
        # A deadline (time() < N) is false because of when, not where: say so.
        return (
            f"Requirements ({clause}) is false at this time (it reads the clock): "
            "no flag helps; change it in the submit file"
        )
    platform = platform_of(profile, profile.queue(request.queue)).describe()
    return (
        f"Requirements ({clause}) is false for the site image ({platform}): no flag helps; "
        "change it in the submit file"
    )


def _number(ad: Any, attr: str) -> int | None:
    try:
        value = ad.eval(attr)
    except Exception:  # absent or an expression that does not evaluate
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)
