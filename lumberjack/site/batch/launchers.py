"""Launchers: how a pilot starts its node command once on every node of its allocation.

Each launcher is a small function (spec -> one shell command line, without the trailing
`&`); any batch system may offer any of them (`BatchSystem.LAUNCHERS` names them, the
first is its default). The command runs under `bash -c`, quoted for the launcher's argv.
"""

from __future__ import annotations

import shlex
from typing import Callable

from lumberjack.site.batch.pilot import PilotSpec


def _bash_c(command: str) -> str:
    return f"bash -c {shlex.quote(command)}"


def slurm_gpu_option(spec: PilotSpec) -> str:
    """The GPU option of a Slurm job and its step in the spelling the site takes
    (PilotSpec.gpu_request); "" for none."""
    if not spec.gpus_per_node or spec.gpu_request == "none":
        return ""
    if spec.gpu_request == "gres":
        return f"--gres=gpu:{spec.gpus_per_node}"
    return f"--gpus-per-node={spec.gpus_per_node}"


def srun(spec: PilotSpec) -> str:
    """One Slurm step, one task per node. `--kill-on-bad-exit=0` keeps the other startds
    running when one exits with an error; the step takes every CPU the job holds on a node
    (`$SLURM_CPUS_ON_NODE`) and all its memory (`--mem=0`), or its jobs would share one."""
    parts = [
        "srun",
        f"--nodes={spec.nodes}",
        f"--ntasks={spec.nodes}",
        "--ntasks-per-node=1",
        f'--cpus-per-task="${{SLURM_CPUS_ON_NODE:-{spec.cores_per_node}}}"',
        "--mem=0",
    ]
    if slurm_gpu_option(spec):
        parts.append(slurm_gpu_option(spec))
    parts += ["--kill-on-bad-exit=0", _bash_c(spec.node_command)]
    return " ".join(parts)


def mpiexec(spec: PilotSpec) -> str:
    """One rank per node, the form of the Cray PALS mpiexec (ALCF Polaris); the
    environment reaches every node; `--cpu-bind none` leaves every core to the startd."""
    return f"mpiexec -n {spec.nodes} --ppn 1 --cpu-bind none {_bash_c(spec.node_command)}"


def pbsdsh(spec: PilotSpec) -> str:
    """PBS's own task spawner, one task per chunk, for PBS sites without PALS. It does not
    carry the environment: the exported variables and PATH go through `/usr/bin/env`."""
    env_args = ['PATH="$PATH"'] + [
        f"{key}={shlex.quote(spec.env[key])}" for key in sorted(spec.env)
    ]
    return (
        f"pbsdsh -- /usr/bin/env {' '.join(env_args)} /bin/bash -c {shlex.quote(spec.node_command)}"
    )


def aprun(spec: PilotSpec) -> str:
    """Cray ALPS: one process per node with all its cores, no CPU binding; aprun passes
    the script's environment to the compute nodes."""
    return (
        f"aprun -n {spec.nodes} -N 1 -d {spec.cores_per_node} -cc none {_bash_c(spec.node_command)}"
    )


#: Every launcher by the name site profiles use (`[batch].launcher`).
LAUNCHERS: dict[str, Callable[[PilotSpec], str]] = {
    "srun": srun,
    "mpiexec": mpiexec,
    "pbsdsh": pbsdsh,
    "aprun": aprun,
}
