"""A job's Requirements clause about the machine's platform (its `Arch`, its OS version)
that the site's slot ad makes false: why, in one line, and what fits instead.

The architecture is the queue's (its profile's `arch`); the OS is the site image's. Two
cases matter to users moving jobs:
- condor_submit adds `(TARGET.Arch == "X86_64")` to every job submitted on an x86_64
  machine unless the submit file's own requirements name `Arch`, so such a job never
  matches an aarch64 (Grace-Hopper) queue: the refusal names the queue or site that fits
  and the submit-file line that lets the job run on aarch64.
- the site image is Debian sid (HTCondor 25 is packaged for no released Debian), so it
  advertises `OpSysAndVer "Debian0"`, `OpSysMajorVer 0`: a clause naming an OS version
  is refused with what the image advertises and how to bring the OS with the job.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lumberjack.ap.clauses import evaluate, split_and, unwrap
from lumberjack.core.slot_ad import ARCHES, OS_VERSION_ATTRS, SITE_IMAGE, UNKNOWN_LINUX, Platform
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.queue_tables import Queue
from lumberjack.profiles.request import ResourceRequest, flags_of, other_queues
from lumberjack.profiles.sites import load_profiles


def platform_of(profile: SiteProfile, queue: Queue) -> Platform:
    """What the startds of `queue` advertise about their platform: the project's site
    image's OS (runtime "none", a site's own HTCondor: only that it is Linux) on the
    queue's architecture."""
    base = UNKNOWN_LINUX if profile.container.runtime == "none" else SITE_IMAGE
    return replace(base, arch=queue.arch)


def _reads(clause: Any, scope: Any, names: tuple[str, ...]) -> bool:
    refs = scope.externalRefs(clause) + scope.internalRefs(clause)
    wanted = {name.lower() for name in names}
    return any(ref.split(".")[-1].lower() in wanted for ref in refs)


def _arches_taken(clause: Any, scope: Any, slot: Any) -> list[str]:
    """The architectures for which the clause is true (the rest of the slot unchanged)."""
    had = slot.lookup("Arch") if "Arch" in slot else None
    taken = []
    try:
        for arch in ARCHES:
            slot["Arch"] = arch
            if evaluate(clause, scope, slot) is True:
                taken.append(arch)
    finally:
        if had is None:
            del slot["Arch"]
        else:
            slot["Arch"] = had
    return taken


def arch_takes(ad: Any, arch: str) -> bool:
    """Whether the job's Requirements clauses about `Arch` are true on `arch` nodes (a
    hint must not name a queue whose architecture the job refuses)."""
    import classad2

    if "Requirements" not in ad:
        return True
    slot = classad2.ClassAd({"Arch": arch})
    for part in split_and(str(ad.lookup("Requirements"))):
        clause = classad2.ExprTree(part)
        if _reads(clause, ad, ("Arch",)) and evaluate(clause, ad, slot) is not True:
            return False
    return True


def platform_reason(
    clause: Any, scope: Any, slot: Any, profile: SiteProfile, request: ResourceRequest
) -> str | None:
    """The one-line reason for a false job clause that reads `Arch` or an OS version;
    None for any other clause (matchmaking.py words those)."""
    shown = unwrap(str(clause))
    if _reads(clause, scope, ("Arch",)):
        taken = _arches_taken(clause, scope, slot)
        if taken:
            return _arch_reason(shown, taken, profile, request)
    if _reads(clause, scope, OS_VERSION_ATTRS) and profile.container.runtime != "none":
        image = SITE_IMAGE
        return (
            f"Requirements ({shown}) names an OS version, and the site image is Debian sid "
            f'(OpSysAndVer "{image.opsys_and_ver}", OpSysMajorVer {image.opsys_major_ver}, '
            f'OpSysName "{image.opsys_name}"): drop that clause and bring the OS the job needs '
            "as its own image (container_image = a .sif); see docs/jobs.md"
        )
    return None


def _arch_reason(
    shown: str, taken: list[str], profile: SiteProfile, request: ResourceRequest
) -> str:
    queue = profile.queue(request.queue)
    needs = " or ".join(taken)
    head = f"Requirements ({shown}) needs Arch {needs}; queue {queue.name}'s nodes are {queue.arch}"
    hint = _arch_elsewhere(taken, profile, request)
    if "X86_64" in taken and "aarch64" not in taken:
        # Almost always condor_submit's own default, not the user's choice.
        how = (
            '; to run it on aarch64, write requirements = (Arch == "aarch64") in the submit '
            'file (condor_submit then leaves out its default (TARGET.Arch == "X86_64")) and '
            "give it aarch64 executables"
        )
    else:
        how = ""
    return f"{head}{hint}{how}"


def _arch_elsewhere(taken: list[str], profile: SiteProfile, request: ResourceRequest) -> str:
    """`: use --queue Q (cost)` for a queue of this site with such nodes that takes the
    whole request, else a known site's queue with them, else that none has them."""
    fits = {q.name for q in profile.queues if q.arch in taken}
    if fits:
        flags = flags_of(request)
        for name, cost in other_queues(profile, request.queue, flags, bool(flags.get("gpus"))):
            if name in fits:
                return f": use --queue {name} ({cost})"
    for other in load_profiles()[0]:
        if other.name == profile.name or other.retired:
            continue
        for queue in other.queues:
            if queue.arch in taken:
                return f"; site {other.name}'s queue {queue.name} has {queue.arch} nodes"
    return f"; no known site has {' or '.join(taken)} nodes"
