"""GPUs on a pilot's node: what the startd's container needs to see them, and the startd
config that finds them with HTCondor's own discovery (condor_gpu_discovery, shipped with
HTCondor in the site image).

- The vendor (the queue's `gpu_vendor` in the site profile) picks how the container
  runtime passes the devices through to the startd's container: Apptainer's `--nv`
  (NVIDIA: devices and driver libraries), `--rocm` (AMD), or a bind of /dev/dri (Intel,
  e.g. Aurora; Apptainer has no flag for it).
- The startd discovers the GPUs itself (`use feature : GPUs`) and advertises them in its
  partitionable slot (`GPUs`, `DetectedGPUs`, `GPUs_DeviceName`, `GPUs_Capability`,
  `GPUs_GlobalMemoryMb`, ...); a job that asks for `request_gpus` gets its own devices
  (`AssignedGPUs`, and CUDA_VISIBLE_DEVICES and friends in its environment).
- Test sites only: the queue's `simulate_gpus` makes the discovery simulate the queue's
  GPUs (`condor_gpu_discovery -simulate:D,N`) on a machine that has none. Real profiles
  never set it (a unit test holds them to that).

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

from typing import Any

from lumberjack.core.contract import LaunchPlan

#: The vendors a profile may name, and the container runtime's arguments that pass their
#: devices through (Apptainer and Singularity alike).
PASSTHROUGH: dict[str, tuple[str, ...]] = {
    "nvidia": ("--nv",),
    "amd": ("--rocm",),
    "intel": ("--bind", "/dev/dri"),
}
GPU_VENDORS = tuple(PASSTHROUGH)

#: The devices `condor_gpu_discovery -simulate:D,N` knows (D is the position here), as
#: its -help lists them in HTCondor 25; all NVIDIA.
SIMULATED_MODELS = (
    "GeForce GT 330",
    "GeForce GTX 480",
    "Tesla V100-PCIE-16GB",
    "TITAN RTX",
    "A100-SXM4-40GB",
)


def passthrough_args(vendor: str, gpus: int) -> tuple[str, ...]:
    """The runtime's arguments that let the startd's container see the node's GPUs
    (none when the pilot asked for none)."""
    if gpus <= 0 or not vendor:
        return ()
    try:
        return PASSTHROUGH[vendor]
    except KeyError:
        raise ValueError(
            f"unknown GPU vendor {vendor!r}; one of {', '.join(GPU_VENDORS)}"
        ) from None


def simulation_option(model: str, gpus: int) -> str:
    """condor_gpu_discovery's option that simulates `gpus` devices of `model`."""
    if model not in SIMULATED_MODELS:
        raise ValueError(
            f"HTCondor cannot simulate GPU model {model!r}; one of {', '.join(SIMULATED_MODELS)}"
        )
    return f"-simulate:{SIMULATED_MODELS.index(model)},{gpus}"


def startd_gpu_lines(gpus: int, vendor: str, model: str = "", simulate: bool = False) -> str:
    """Config lines of a pilot's startd for `gpus` GPUs per node (nothing for none)."""
    if gpus <= 0:
        # HTCondor discovers GPUs by default: a node's GPUs the pilot did not ask the
        # batch system for are not the pilot's to offer.
        return "# No GPUs asked for: no GPU discovery, the slot offers none.\nSTARTD_DETECT_GPUS ="
    lines = [
        f"# {gpus} {vendor} GPU(s) per node, found by HTCondor's own discovery in the site",
        "# image (the runtime passes the devices through); the slot advertises them with",
        "# their properties (GPUs_DeviceName, GPUs_Capability, GPUs_GlobalMemoryMb, ...).",
        "use feature : GPUs",
    ]
    if simulate:
        lines += [
            "# TEST SITE ONLY (the profile's simulate_gpus): this machine has no GPU; the",
            "# discovery simulates the queue's devices instead. The utilisation monitor",
            "# needs real devices: off.",
            f"GPU_DISCOVERY_EXTRA = {simulation_option(model, gpus)}",
            "STARTD_CRON_GPUs_MONITOR_CONDITION = false",
        ]
    return "\n".join(lines)


def pool_settings(plan: LaunchPlan) -> dict[str, Any]:
    """PoolSettings' GPU fields from the launch plan."""
    return {
        "gpus": plan.spec.gpus_per_node,
        "gpu_vendor": plan.gpus.vendor,
        "gpu_model": plan.gpus.model,
        "simulate_gpus": plan.gpus.simulate,
    }
