"""GPU devices as HTCondor describes them: one reader of `condor_gpu_discovery -properties`
output (real devices and `-simulate:D,N` print the same shape) and the slot ad attributes a
startd with `use feature : GPUs` advertises for them (`AvailableGPUs = { GPUs_GPU_x }` and
one nested ad per device), which a job's `countMatches(MY.RequireGPUs,
TARGET.AvailableGPUs)` reads.

Stdlib only: this module ships to the site with the agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The properties a job's gpus_minimum_capability, gpus_maximum_capability and
#: gpus_minimum_memory compare (condor_submit's RequireGPUs), and the device's name.
CAPABILITY = "Capability"
MEMORY = "GlobalMemoryMb"
NAME = "DeviceName"

#: `Name=[ a=1; b="x; y"; ]` (one line of the nested output) and its `a=1;` pairs.
_NESTED = re.compile(r"^(\w+)=\[(.*)\]\s*$")
_PAIR = re.compile(r'\s*(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*?)\s*;')


@dataclass(frozen=True)
class GpuDevice:
    """One device: its id (e.g. "GPU-79bb1e07") and its properties as ClassAd expression
    texts (`Capability` "9.0", `DeviceName` '"NVIDIA H100 80GB HBM3"', ...)."""

    id: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def capability(self) -> float | None:
        text = self.properties.get(CAPABILITY)
        return float(text) if text is not None else None

    @property
    def memory_mb(self) -> int | None:
        text = self.properties.get(MEMORY)
        return int(text) if text is not None else None

    @property
    def name(self) -> str | None:
        text = self.properties.get(NAME)
        return _unquote(text) if text is not None else None

    @property
    def ad_name(self) -> str:
        """The slot ad attribute holding the device's ad, as the startd names it."""
        return "GPUs_" + re.sub(r"\W", "_", self.id)


def read_discovery(text: str) -> list[GpuDevice]:
    """The devices in `condor_gpu_discovery -properties [-extra]` output (nested form):
    each device's ad is the `Common` properties with its own (`GPU_<id>=[ id=...; ]`)
    over them. Lines of another kind (comments, DetectedGPUs, diagnostics) are skipped."""
    common: dict[str, str] = {}
    own: list[dict[str, str]] = []
    for line in text.splitlines():
        match = _NESTED.match(line.strip())
        if not match:
            continue
        pairs = {name: value for name, value in _PAIR.findall(match.group(2) + ";")}
        if match.group(1) == "Common":
            common = pairs
        elif "id" in pairs:
            own.append(pairs)
    devices = []
    for pairs in own:
        device_id = _unquote(pairs.pop("id")) or ""
        devices.append(GpuDevice(device_id, {**common, **pairs}))
    return devices


def slot_attributes(devices: list[GpuDevice] | tuple[GpuDevice, ...]) -> dict[str, str]:
    """What a startd advertises for `devices`: `AvailableGPUs`, one nested ad per device
    (`Id` first, then its properties) and, for the properties all devices share, the
    `GPUs_<property>` attributes."""
    if not devices:
        return {}
    attrs = {"AvailableGPUs": "{ " + ", ".join(d.ad_name for d in devices) + " }"}
    for device in devices:
        body = [f'Id = "{device.id}"', *(f"{k} = {v}" for k, v in device.properties.items())]
        attrs[device.ad_name] = "[ " + "; ".join(body) + " ]"
    first = devices[0].properties
    for name, value in first.items():
        if all(d.properties.get(name) == value for d in devices):
            attrs[f"GPUs_{name}"] = value
    return attrs


def _unquote(text: str) -> str | None:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return None
