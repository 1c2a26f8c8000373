"""[[queues]], [batch] and [defaults] of a profile file: the batch queues pilots may use
with their per-job limits, what every pilot script gets, and the default request.

Validation context: `batch_system`, the [site] batch system's name when it is a known
one (its directive prefix and launchers are checked).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional, Union

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lumberjack.core.contract import GPU_REQUESTS
from lumberjack.core.shell_safe import CHUNK_RESOURCE
from lumberjack.profiles.value_types import (
    QUEUE_NAME,
    Allocation,
    ChunkResources,
    Directives,
    GpuModel,
    GpuVendor,
    Memory,
    QueueName,
    SetupLines,
    Table,
    Text,
    Walltime,
    batch_system,
    problem,
)
from lumberjack.site.gpus import SIMULATED_MODELS

#: What a profile writes for a device property its centre does not document.
NOT_DOCUMENTED = "not documented"
#: A GPU queue's device properties (each a value or NOT_DOCUMENTED).
GPU_PROPERTY_KEYS = ("gpu_device_name", "gpu_capability", "gpu_memory_mb")


class Queue(Table):
    """[[queues]]: one queue (Slurm partition or QOS, PBS/Cobalt queue), its per-job limits."""

    name: QueueName
    batch_queue: Annotated[StrictStr, Field(examples=['"regular"'])] = ""  # "": no directive
    description: Text = ""
    min_nodes: Annotated[StrictInt, Field(ge=1)] = 1
    max_nodes: Annotated[StrictInt, Field(ge=1)]
    cores_per_node: Annotated[StrictInt, Field(ge=1)]
    memory_per_node_mb: Memory = Field(alias="memory_per_node")
    gpus_per_node: Annotated[StrictInt, Field(ge=0)] = 0
    gpu_vendor: Optional[GpuVendor] = None  # picks the runtime's device passthrough
    gpu_model: Optional[GpuModel] = None
    # What HTCondor's discovery reports of each device (the preflight's AvailableGPUs):
    # compute capability, GlobalMemoryMb (what the driver reports) and DeviceName. None
    # where the centre documents nothing ("not documented" in the file): not judged.
    gpu_capability: Optional[Annotated[StrictFloat, Field(ge=1.0, le=20.0)]] = None
    gpu_memory_mb: Optional[Annotated[StrictInt, Field(ge=256)]] = None
    gpu_device_name: Optional[Annotated[StrictStr, Field(min_length=1, max_length=100)]] = None
    # Test sites only: HTCondor's GPU discovery simulates this queue's GPUs (gpus.py).
    simulate_gpus: StrictBool = False
    # A node's local disk for job sandboxes, where known: jobs asking for more are
    # refused before export (unset: RequestDisk is not checked).
    disk_per_node_mb: Optional[Memory] = Field(None, alias="disk_per_node")
    max_walltime_s: Walltime = Field(alias="max_walltime")
    whole_node: StrictBool = False
    default: StrictBool = False
    directives: Directives = ()
    # What the centre charges per node-hour on this queue (TACC's SUs, NERSC's QOS
    # factor), where it documents one; None: the node-hours themselves (see cost.py).
    charge_factor: Optional[Annotated[Union[StrictInt, StrictFloat], Field(gt=0)]] = None

    @model_validator(mode="before")
    @classmethod
    def _batch_queue_defaults_to_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "batch_queue" not in data and "name" in data:
            return {**data, "batch_queue": data["name"]}
        return data

    @field_validator("gpu_capability", "gpu_memory_mb", "gpu_device_name", mode="before")
    @classmethod
    def _not_documented(cls, value: Any) -> Any:
        return None if value == NOT_DOCUMENTED else value

    @field_validator("batch_queue")
    @classmethod
    def _batch_queue_name(cls, value: str) -> str:
        if value and not QUEUE_NAME.match(value):
            raise problem('is not a queue name; write e.g. "regular" or ""')
        return value

    @model_validator(mode="after")
    def _nodes_in_order(self) -> Queue:
        if self.min_nodes > self.max_nodes:
            raise problem(f"is above max_nodes ({self.max_nodes}); lower it", key=("min_nodes",))
        return self

    @model_validator(mode="after")
    def _gpus_described(self) -> Queue:
        has = self.gpus_per_node > 0
        for key, example in (("gpu_vendor", '"nvidia"'), ("gpu_model", '"A100-SXM4-40GB"')):
            if has and getattr(self, key) is None:
                raise problem(f"a queue with GPUs needs {key}; add e.g. {key} = {example}",
                              show=False)  # fmt: skip
            if not has and getattr(self, key) is not None:
                raise problem("is only for queues with gpus_per_node > 0; remove it", key=(key,))
        for key in GPU_PROPERTY_KEYS:
            if not has and getattr(self, key) is not None:
                raise problem("is only for queues with gpus_per_node > 0; remove it", key=(key,))
        simulable = self.gpu_vendor == "nvidia" and self.gpu_model in SIMULATED_MODELS
        if self.simulate_gpus and not (has and simulable):
            models = ", ".join(json.dumps(model) for model in SIMULATED_MODELS)
            why = f"a gpu_model HTCondor simulates: {models}" if has else "gpus_per_node > 0"
            raise problem(f'needs gpu_vendor = "nvidia" and {why}', key=("simulate_gpus",),
                          show=False)  # fmt: skip
        return self


class BatchSettings(Table):
    """[batch]: what every pilot script of the site gets besides its queue's directives."""

    extra_directives: Directives = ()
    setup: SetupLines = ()
    launcher: StrictStr = ""  # "": the batch system's default
    chunk_resources: ChunkResources = ()
    memory_request: StrictBool = True  # false: the site refuses any (TACC's Slurm: --mem)
    # How a Slurm pilot asks for GPUs: "gpus-per-node" (--gpus-per-node=N), "gres"
    # (--gres=gpu:N) or "none" (no line: the queue hands out whole GPU nodes; TACC
    # refuses --gres and --gpus-per-task). PBS asks with ngpus in its select line.
    gpu_request: Annotated[StrictStr, Field(examples=['"none"'])] = GPU_REQUESTS[0]

    @field_validator("launcher", mode="before")
    @classmethod
    def _known_launcher(cls, launcher: Any, info: ValidationInfo) -> Any:
        name = (info.context or {}).get("batch_system")
        if name:
            choices = batch_system(name).LAUNCHERS
            if not isinstance(launcher, str):
                raise problem(f"is not a string; write e.g. launcher = {json.dumps(choices[0])}")
            if launcher.strip() not in choices:
                options = " or ".join(json.dumps(choice) for choice in choices)
                raise problem(f"is not one of the choices; write {options}")
        return launcher

    @field_validator("gpu_request")
    @classmethod
    def _slurm_gpus(cls, value: str, info: ValidationInfo) -> str:
        if value not in GPU_REQUESTS:
            choices = " or ".join(json.dumps(choice) for choice in GPU_REQUESTS)
            raise problem(f"is not one of the choices; write {choices}")
        name = (info.context or {}).get("batch_system")
        if value != GPU_REQUESTS[0] and name and name != "slurm":
            raise problem("is for Slurm sites only; remove it")
        return value

    @field_validator("chunk_resources")
    @classmethod
    def _pbs_chunks(cls, chunk: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        name = (info.context or {}).get("batch_system")
        if chunk and name and name != "pbs":
            raise problem("is for PBS sites only; remove it")
        for item in chunk:
            if not CHUNK_RESOURCE.match(item):
                raise problem('is not name=value; write e.g. "system=polaris"', value=item)
        return chunk


class RequestDefaults(Table):
    """[defaults]: the resource request when no flag says otherwise."""

    nodes: Optional[Annotated[StrictInt, Field(ge=1)]] = None
    cores: Optional[Annotated[StrictInt, Field(ge=1)]] = None
    memory_mb: Optional[Memory] = Field(None, alias="memory")
    gpus: Optional[Annotated[StrictInt, Field(ge=0)]] = None
    walltime_s: Optional[Walltime] = Field(None, alias="walltime")
    queue: Optional[Annotated[StrictStr, Field(examples=['"regular"'])]] = None
    allocation: Optional[Allocation] = None
