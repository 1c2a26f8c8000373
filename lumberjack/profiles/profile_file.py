"""A whole profile file (pydantic, strict: an unknown key is an error), and the checks
that span its tables: queue names unique, one default queue, defaults within it.

Every key is explained in site-profiles/README.md. `ProfileFile.model_validate(data,
context={"path": ..., "batch_system": ...})`: see site_tables.py and queue_tables.py.
"""

from __future__ import annotations

import json

from pydantic import Field, field_validator, model_validator

from lumberjack.core.units import format_memory, format_walltime
from lumberjack.profiles.queue_tables import BatchSettings, Queue, RequestDefaults
from lumberjack.profiles.site_tables import ContainerSpec, ScheddSpec, SiteTable
from lumberjack.profiles.value_types import Table, problem


class ProfileFile(Table):
    """A whole profile file. After validation `defaults.queue` names the default queue."""

    site: SiteTable
    container: ContainerSpec
    schedd: ScheddSpec = ScheddSpec()
    queues: tuple[Queue, ...] = Field(min_length=1)
    batch: BatchSettings = BatchSettings()
    defaults: RequestDefaults = RequestDefaults()

    @field_validator("queues")
    @classmethod
    def _unique_names(cls, queues: tuple[Queue, ...]) -> tuple[Queue, ...]:
        for number, queue in enumerate(queues):
            if any(earlier.name == queue.name for earlier in queues[:number]):
                raise problem(
                    "is used by an earlier queue; give each queue its own name",
                    key=(number, "name"),
                )
        return queues

    @model_validator(mode="after")
    def _login_node_runs_no_container(self) -> ProfileFile:
        # CSCS's Container Engine starts containers only in Slurm jobs (site/runtime.py).
        if self.container.runtime == "container-engine" and self.schedd.placement != "allocation":
            raise problem(
                'runtime "container-engine" runs nothing on the login node; write '
                'placement = "allocation"',
                key=("schedd", "placement"),
                show=False,
            )
        return self

    @model_validator(mode="after")
    def _default_queue_fits(self) -> ProfileFile:
        named = self.defaults.queue
        if named is not None and not any(q.name == named for q in self.queues):
            names = ", ".join(json.dumps(q.name) for q in self.queues)
            raise problem(
                f"names no [[queues]] entry; use one of {names}", key=("defaults", "queue")
            )
        queue = self._pick_default(named)
        _check_defaults(self.defaults, queue)
        return self.model_copy(
            update={"defaults": self.defaults.model_copy(update={"queue": queue.name})}
        )

    def _pick_default(self, named: str | None) -> Queue:
        marked = [queue for queue in self.queues if queue.default]
        if len(marked) > 1:
            names = ", ".join(json.dumps(queue.name) for queue in marked)
            raise problem(
                f"marks {names} as default; keep default = true on one only",
                key=("queues",),
                show=False,
            )
        if named is not None:
            if marked and marked[0].name != named:
                raise problem(
                    f'disagrees with [[queues]] "{marked[0].name}" marked default = true; '
                    "keep one of the two",
                    key=("defaults", "queue"),
                )
            return next(queue for queue in self.queues if queue.name == named)
        if marked:
            return marked[0]
        if len(self.queues) == 1:
            return self.queues[0]
        raise problem(
            "has no default queue; add default = true to the queue pilots use "
            "when --queue is not given",
            key=("queues",),
            show=False,
        )


def _check_defaults(defaults: RequestDefaults, queue: Queue) -> None:
    where = f'of the default queue "{queue.name}"'
    checks = (
        ("nodes", defaults.nodes, queue.max_nodes, f"max_nodes ({queue.max_nodes})"),
        ("cores", defaults.cores, queue.cores_per_node,
         f"cores_per_node ({queue.cores_per_node})"),
        ("memory", defaults.memory_mb, queue.memory_per_node_mb,
         f"memory_per_node ({format_memory(queue.memory_per_node_mb)})"),
        ("gpus", defaults.gpus, queue.gpus_per_node, f"gpus_per_node ({queue.gpus_per_node})"),
        ("walltime", defaults.walltime_s, queue.max_walltime_s,
         f"max_walltime ({format_walltime(queue.max_walltime_s)})"),
    )  # fmt: skip
    for key, value, limit, label in checks:
        if value is not None and value > limit:
            raise problem(f"exceeds the {label} {where}; lower it", key=("defaults", key))
    if defaults.nodes is not None and defaults.nodes < queue.min_nodes:
        raise problem(
            f"is below the min_nodes ({queue.min_nodes}) {where}; raise it",
            key=("defaults", "nodes"),
        )
