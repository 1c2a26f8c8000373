"""GPU requests judged on the devices' properties: the devices a queue's pilots will offer
(from the profile's gpu_capability, gpu_memory_mb, gpu_device_name) and, for a job whose
`countMatches(MY.RequireGPUs, TARGET.AvailableGPUs)` clause is false, which property it
needs, what the queue has, and which queue has it.

condor_submit writes gpus_minimum_capability, gpus_maximum_capability,
gpus_minimum_memory and require_gpus into one RequireGPUs expression; each of its `&&`
parts is counted over the devices by HTCondor's own countMatches. A part that reads a
property the centre does not document is undefined on the devices: not judged, never a
refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lumberjack.ap.clauses import evaluate, parse_ad, split_and, unwrap
from lumberjack.ap.platform_match import arch_takes
from lumberjack.core.gpu_devices import CAPABILITY, MEMORY, NAME, GpuDevice, slot_attributes
from lumberjack.core.slot_ad import ad_text, quote
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.queue_tables import Queue
from lumberjack.profiles.sites import load_profiles

#: What condor_submit writes for a job's GPU properties (the preflight queries them).
JOB_GPU_ATTRS = ("RequireGPUs", "GPUsMinCapability", "GPUsMaxCapability", "GPUsMinMemory")
#: The slot ad attribute the job's GPU clause counts over.
AVAILABLE = "AvailableGPUs"
#: A job attribute set only while one part of RequireGPUs is counted.
_PROBE = "LumberjackRequireGPUsPart"
#: The profile keys that give each device property (for "not documented" notes).
_KEYS = {CAPABILITY: "gpu_capability", MEMORY: "gpu_memory_mb", NAME: "gpu_device_name"}


def queue_devices(queue: Queue, count: int) -> tuple[GpuDevice, ...]:
    """`count` devices of `queue` with what its profile says of them."""
    properties = {}
    if queue.gpu_capability is not None:
        properties[CAPABILITY] = str(queue.gpu_capability)
    if queue.gpu_device_name is not None:
        properties[NAME] = quote(queue.gpu_device_name)
    if queue.gpu_memory_mb is not None:
        properties[MEMORY] = str(queue.gpu_memory_mb)
    return tuple(GpuDevice(f"GPU-{index}", dict(properties)) for index in range(count))


def reads_devices(refs: list[str]) -> bool:
    """Whether a clause with these attribute references counts the slot's devices."""
    return any(ref.split(".")[-1].lower() == AVAILABLE.lower() for ref in refs)


@dataclass
class GpuVerdict:
    """Why the devices refuse a job (None: they do not, as far as is known) and what of
    its GPU requirement could not be judged."""

    reason: str | None = None
    unknown: list[str] = field(default_factory=list)


def judge(ad: Any, slot: Any, profile: SiteProfile, queue: Queue) -> GpuVerdict:
    """The job's RequireGPUs part by part against the devices of `slot` (`queue`'s)."""
    if "RequireGPUs" not in ad:
        return GpuVerdict()
    failing, verdict = [], GpuVerdict()
    for part in split_and(str(ad.lookup("RequireGPUs"))):
        if _count_at_least(ad, slot, f"({part}) =?= true"):
            continue
        if _count_at_least(ad, slot, f"({part}) =?= undefined"):
            missing = ", ".join(_undocumented(ad, part, queue))
            verdict.unknown.append(
                f"GPUs with {_shown(ad, part)} (queue {queue.name}'s {missing} not documented)"
            )
        else:
            failing.append(part)
    if failing:
        needs = " && ".join(_shown(ad, part) for part in failing)
        reads = " ".join(failing)
        verdict.reason = (
            f"needs GPUs with {needs}; queue {queue.name} has {_has(queue, reads)}"
            + _elsewhere(ad, profile, queue, reads)
        )
    return verdict


def _count_at_least(ad: Any, slot: Any, probe: str) -> bool:
    """Whether at least RequestGPUs devices make `probe` true, counted by HTCondor."""
    import classad2

    ad[_PROBE] = classad2.ExprTree(probe)
    try:
        clause = f"countMatches(MY.{_PROBE}, TARGET.{AVAILABLE}) >= (RequestGPUs ?: 1)"
        return evaluate(clause, ad, slot) is True
    finally:
        del ad[_PROBE]


def _undocumented(ad: Any, part: str, queue: Queue) -> list[str]:
    """The device properties a part reads that the queue's profile does not give."""
    import classad2

    given = {prop.lower() for prop, key in _KEYS.items() if getattr(queue, key) is not None}
    refs = [ref.split(".")[-1] for ref in ad.externalRefs(classad2.ExprTree(part))]
    return [ref for ref in refs if ref.lower() not in given] or ["devices"]


def _shown(ad: Any, part: str) -> str:
    """A part of RequireGPUs with the job's own attributes replaced by their values."""
    import classad2

    text = unwrap(part)
    for name in ad.internalRefs(classad2.ExprTree(part)):
        if not name or name not in ad:
            continue
        value = ad.eval(name)
        shown = quote(value) if isinstance(value, str) else str(value)
        text = re.sub(rf"\b(?:MY\.)?{re.escape(name)}\b", lambda _, shown=shown: shown, text)
    return text


def _has(queue: Queue, text: str) -> str:
    """What `queue` has of the device properties `text` reads."""
    lowered = text.lower()
    values = [(prop, getattr(queue, key)) for prop, key in _KEYS.items()
              if prop.lower() in lowered and prop != NAME]  # fmt: skip
    shown = ", ".join(f"{prop} {value}" for prop, value in values if value is not None)
    model = queue.gpu_device_name or queue.gpu_model
    return f"{shown} ({model})" if shown else f"{model}"


def _meets(ad: Any, queue: Queue) -> bool:
    """Whether `queue`'s devices take the job's GPU requirement (RequestGPUs of them),
    on nodes of an architecture the job takes."""
    if queue.gpus_per_node <= 0 or not arch_takes(ad, queue.arch):
        return False
    slot = parse_ad(ad_text(slot_attributes(queue_devices(queue, queue.gpus_per_node))))
    return _count_at_least(ad, slot, f"({ad.lookup('RequireGPUs')}) =?= true")


def _elsewhere(ad: Any, profile: SiteProfile, current: Queue, reads: str) -> str:
    """`: use --queue Q` for a queue of this site that meets the requirement, else a
    known site's queue that does, else nothing to suggest."""
    for queue in profile.queues:
        if queue.name != current.name and _meets(ad, queue):
            return f": use --queue {queue.name}"
    for other in load_profiles()[0]:
        if other.name == profile.name or other.retired:
            continue
        for queue in other.queues:
            if _meets(ad, queue):
                has = _has(queue, reads)
                return f"; site {other.name}'s queue {queue.name} has such GPUs ({has})"
    return "; no known site has such GPUs"
