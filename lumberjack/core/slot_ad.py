"""The machine ad a pilot's startd advertises: one home for what the pilots offer.

The access point matches jobs against it before they leave (ap/matchmaking.py) and
the pilot config (site/remote_pool.py) advertises the attributes named here, so the two
cannot drift. Values are ClassAd expression texts, in the order a startd would list them.

Stdlib only: this module ships to the site with the agent.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumberjack.core.gpu_devices import GpuDevice, slot_attributes

#: lumberjack's own startd attributes (see remote_pool.pilot_config).
PILOT_ATTR = "LUMBERJACK_PILOT"
RETIRE_ATTR = "LUMBERJACK_RETIRE_TIME"
#: HTCondor's `Arch` spellings of the machines profiles describe (`condor_config_val ARCH`):
#: a queue's nodes are one of these (profiles/queue_tables.py).
ARCHES = ("X86_64", "aarch64")
#: The pilot startd's own START: no new job once the allocation is about to end.
RETIRE_START = f"time() < {RETIRE_ATTR}"


@dataclass(frozen=True)
class Platform:
    """What the site image's startd says about its OS; None: not known here."""

    opsys: str | None = "LINUX"
    opsys_and_ver: str | None = None
    opsys_major_ver: int | None = None
    opsys_name: str | None = None
    arch: str | None = None
    #: `condor_version`'s first line: condor_submit's Requirements compare its version
    condor_version: str | None = None

    def describe(self) -> str:
        known = [
            f"{name} {value}"
            for name, value in (
                ("OpSys", self.opsys),
                ("OpSysAndVer", self.opsys_and_ver),
                ("Arch", self.arch),
            )
            if value is not None
        ]
        return ", ".join(known) or "unknown"


#: The project's site image (containers/site-image: Debian sid, HTCondor 25.14): what its
#: startd advertises, measured with `condor_config_val OPSYS OPSYSANDVER OPSYSNAME ARCH`
#: and `condor_version` in the image (sid's /etc/debian_version says "forky/sid": major
#: version 0). A test of the testbed compares these with the image it runs.
SITE_IMAGE = Platform(
    opsys="LINUX", opsys_and_ver="Debian0", opsys_major_ver=0, opsys_name="Debian",
    arch="X86_64",
    condor_version="$CondorVersion: 25.14.1 2026-10-16 PackageID: 25.14.1+dfsg-1 $",
)  # fmt: skip
#: The OS attributes a job may name to ask for an OS version; the site image's are not a
#: released version (HTCondor 25 is packaged only in sid; see docs/jobs.md).
OS_VERSION_ATTRS = ("OpSysAndVer", "OpSysMajorVer", "OpSysVer", "OpSysName", "OpSysLongName")
#: A site-provided HTCondor (runtime "none"): only that it is Linux is known beforehand.
UNKNOWN_LINUX = Platform()


@dataclass(frozen=True)
class SlotResources:
    """One node's partitionable slot: what a pilot's startd is given."""

    cpus: int
    memory_mb: int
    gpus: int = 0
    disk_kb: int | None = None  # None: the profile does not know the node's disk
    #: The node's devices with what is known of them (the profile's gpu_capability,
    #: gpu_memory_mb, gpu_device_name): advertised as the startd does (gpu_devices.py).
    gpu_devices: tuple[GpuDevice, ...] = ()


def quote(text: str) -> str:
    """A ClassAd string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def within_limits(resources: SlotResources) -> str:
    """The partitionable slot's check of a job's requests against what it has (HTCondor
    adds the same to a partitionable slot's Requirements)."""
    terms = [
        "TARGET.RequestCpus <= MY.Cpus",
        "TARGET.RequestMemory <= MY.Memory",
        "(TARGET.RequestGPUs ?: 0) <= MY.GPUs",
    ]
    if resources.disk_kb is not None:
        terms.insert(2, "TARGET.RequestDisk <= MY.Disk")
    return " && ".join(f"({term})" for term in terms)


def slot_ad(
    resources: SlotResources,
    platform: Platform,
    *,
    start: str,
    container: bool,
    pilot: str = "preflight",
    retire_time: int = 2**31 - 1,
) -> dict[str, str]:
    """The slot ad as {attribute: expression text}. `start`: the startd's START
    (including RETIRE_START); `container`: jobs run in a container of the site image."""
    ad = {
        "MyType": quote("Machine"),
        "TargetType": quote("Job"),
        "SlotType": quote("Partitionable"),
        "PartitionableSlot": "true",
        "Cpus": str(resources.cpus),
        "TotalSlotCpus": str(resources.cpus),
        "Memory": str(resources.memory_mb),
        "TotalSlotMemory": str(resources.memory_mb),
        "GPUs": str(resources.gpus),
        "TotalSlotGPUs": str(resources.gpus),
    }
    if resources.disk_kb is not None:
        ad["Disk"] = ad["TotalSlotDisk"] = str(resources.disk_kb)
    ad.update(slot_attributes(resources.gpu_devices))
    for name, value in (
        ("OpSys", platform.opsys),
        ("OpSysAndVer", platform.opsys_and_ver),
        ("OpSysName", platform.opsys_name),
        ("Arch", platform.arch),
        ("CondorVersion", platform.condor_version),
    ):
        if value is not None:
            ad[name] = quote(value)
    if platform.opsys_major_ver is not None:
        ad["OpSysMajorVer"] = str(platform.opsys_major_ver)
    ad["HasFileTransfer"] = "true"
    ad["HasSingularity"] = "true" if container else "false"
    # condor_submit asks for these of container_image and self-checkpointing jobs; the
    # pilots' startds advertise them (HasSIF: site/job_container.py; HTCondor 25 the rest).
    ad["HasContainer"] = ad["HasSIF"] = "true" if container else "false"
    ad["HasSelfCheckpointTransfers"] = "true"
    ad[PILOT_ATTR] = quote(pilot)
    ad[RETIRE_ATTR] = str(retire_time)
    ad["START"] = start
    ad["WithinResourceLimits"] = within_limits(resources)
    ad["Requirements"] = "(START) && (WithinResourceLimits)"
    return ad


def ad_text(ad: dict[str, str]) -> str:
    """The ad in the new ClassAd syntax, `[ A = 1; B = "x" ]`, for a ClassAd parser."""
    return "[ " + "; ".join(f"{name} = {value}" for name, value in ad.items()) + " ]"
