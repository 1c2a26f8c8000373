"""The remote pool at a site: the HTCondor configs and node scripts it runs with.

One export = one directory at the site (`<base_dir>/<export name>/`, its paths are
core/contract.ExportLayout) that holds everything, so that `cleanup` is one `rm -r` and
two exports never share state:

    bundle/      the shipped bundle (manifest.json, spool/ as it left the access point)
    spool/       the remote schedd's SPOOL (= the manifest's remote_spool)
    pool/        condor_config, local/ (logs, locks, signing key), state files
    pilots/      the pilots' config, token, scripts, batch output and per-node dirs
    agent.pyz    the site agent that acts on all of the above

The schedd, collector and negotiator run as the site account on the login node, in the
container runtime the profile names (an Apptainer instance, a podman-hpc container, or
straight from a shipped HTCondor release: see runtime.py); the startds run the same way
on the compute nodes (one per node, started by a pilot) and reach the collector with an
IDTOKEN that allows nothing but advertising a startd and reading. Nothing here needs
root. With placement "allocation" the pool runs on the first node of the pilot instead,
and a lease's or a joined export's pool adds to these configs: each kind's own lines
and scripts are beside it in pools/.

Stdlib only: this module runs on the login node, inside the agent's zipapp.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from lumberjack.core.contract import ExportLayout, PilotRequest, PilotSpec
from lumberjack.core.slot_ad import PILOT_ATTR, RETIRE_ATTR, RETIRE_START
from lumberjack.site.batch import BatchSystem
from lumberjack.site.gpus import passthrough_args, startd_gpu_lines
from lumberjack.site.job_container import job_container_lines
from lumberjack.site.runtime import SYSTEM_RELEASE_LINES, ContainerRuntime, get_runtime
from lumberjack.site.templating import render

#: The directory of this module's template files (package data, shipped in the zipapp).
TEMPLATES = "templates"
#: An export's (or lease's) own trust domain: this and its name.
DOMAIN_PREFIX = "lumberjack-"
#: Identity the pilots' token carries (`pilot@<trust domain>`).
PILOT_IDENTITY = "pilot"
#: Authorizations the pilots' token is limited to: what a startd and its master send
#: with it, to the collector. Not DAEMON: it implies WRITE (submit, edit, hold, remove).
#: Everything else a pilot does runs in sessions HTCondor keys without the token: the
#: schedd and shadow reach the startd and starter through the claim's own session, and
#: a node's master and startd talk through their parent-child session.
PILOT_AUTHZ = ("READ", "ADVERTISE_STARTD", "ADVERTISE_MASTER")
#: Where HTCondor's Debian and upstream packages put their helper programs (in the site
#: image; runtime "none" points into its shipped release instead).
RELEASE_LINES = SYSTEM_RELEASE_LINES


@dataclass(frozen=True)
class PoolSettings:
    """What the configs of one remote pool depend on."""

    layout: ExportLayout
    site_user: str  # the account everything runs as
    address: str  # the login node's address the compute nodes reach
    port: int  # the collector's (shared) port
    image: str  # the site image (SIF, or OCI name for podman-hpc) the pilots run
    binds: tuple[str, ...] = ()  # extra container binds from the profile
    idle_shutdown_s: int = 300  # a startd with no job for this long exits
    max_running_jobs: int | None = None  # the site's policy cap (None: HTCondor's default)
    runtime_name: str = "apptainer"  # [container] runtime (see runtime.py)
    release: str = ""  # runtime "none": the unpacked HTCondor release at the site
    domain: str = ""  # the trust domain, when not the export's own (DOMAIN_PREFIX + name)
    gpus: int = 0  # GPUs per node the pilots ask for (see gpus.py)
    gpu_vendor: str = ""  # the queue's gpu_vendor: nvidia, amd or intel
    gpu_model: str = ""  # the queue's gpu_model
    simulate_gpus: bool = False  # test sites only: HTCondor's discovery simulates them

    @property
    def runtime(self) -> ContainerRuntime:
        return get_runtime(
            self.runtime_name, self.layout.root, image=self.image, binds=self.binds,
            release=self.release, devices=passthrough_args(self.gpu_vendor, self.gpus),
        )  # fmt: skip

    @property
    def trust_domain(self) -> str:
        # One trust domain per export (or lease): a token of one means nothing to another.
        return self.domain or f"{DOMAIN_PREFIX}{self.layout.name}"

    @property
    def collector(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def pilot_identity(self) -> str:
        return f"{PILOT_IDENTITY}@{self.trust_domain}"

    @property
    def owner_identity(self) -> str:
        return f"{self.site_user}@{self.trust_domain}"


def _security(settings: PoolSettings, client_methods: str) -> str:
    owner = settings.owner_identity
    return render(
        __package__, f"{TEMPLATES}/security.config.tmpl", domain=settings.trust_domain,
        client_methods=client_methods, pilot=settings.pilot_identity,
        daemons=f"{owner} condor@{settings.trust_domain}",
    )  # fmt: skip


def pool_config(settings: PoolSettings, title: str = "") -> str:
    """condor_config of the schedd + collector + negotiator on the login node
    (templates/pool.config.tmpl); `title`: its first line's."""
    layout = settings.layout
    name = f"{layout.name}@{settings.trust_domain}"
    return render(
        __package__, f"{TEMPLATES}/pool.config.tmpl",
        title=title or f"condor_lumberjack remote pool for export {layout.name}",
        release_lines=settings.runtime.release_lines(), pool=layout.pool,
        pool_local=layout.pool_local, spool=layout.spool, name=name, export=layout.name,
        address=settings.address, port=settings.port, collector=settings.collector,
        security=_security(settings, "FS, IDTOKENS"), policy_caps=policy_caps(settings),
    )  # fmt: skip


def policy_caps(settings: PoolSettings) -> str:
    """Config lines for the site's policy caps: one condor_shadow per running job, so a
    cap on the user's processes (Polaris: 128 per user on the login nodes) caps the jobs
    the schedd may run at once."""
    if settings.max_running_jobs is None:
        return ""
    return (
        "# The site's policy cap (profile [schedd] max_running_jobs).\n"
        f"MAX_JOBS_RUNNING = {settings.max_running_jobs}\n"
    )


def pilot_config(settings: PoolSettings) -> str:
    """condor_config of the startds the pilots start, one per node
    (templates/pilot.config.tmpl).

    Per-node values come from the environment node.sh sets: LJ_NODE_ID (unique name),
    LJ_NODE_DIR, LJ_CPUS, LJ_MEMORY_MB, LJ_PILOT_ID and LJ_RETIRE_TIME (epoch seconds
    after which the startd accepts no new job).
    """
    containers = job_container_lines(
        settings.runtime_name,
        settings.image,
        _job_images_spool(settings),
        settings.gpu_vendor,
        pilots_dir=settings.layout.pilots,
    )
    gpu_lines = startd_gpu_lines(
        settings.gpus, settings.gpu_vendor, settings.gpu_model, settings.simulate_gpus
    )
    return render(
        __package__, f"{TEMPLATES}/pilot.config.tmpl", export=settings.layout.name,
        release_lines=settings.runtime.release_lines(), pilots=settings.layout.pilots,
        collector=settings.collector, tokens=settings.layout.pilot_tokens,
        security=_security(settings, "FS, IDTOKENS"), pilot_attr=PILOT_ATTR,
        retire_attr=RETIRE_ATTR, retire_start=RETIRE_START, gpu_lines=gpu_lines,
        containers=containers, idle_shutdown_s=settings.idle_shutdown_s,
    )  # fmt: skip


def _job_images_spool(settings: PoolSettings) -> str | None:
    """The spool whose shipped images the pilots' jobs may run in: their export's. A
    lease's pilots serve several exports (owners) and see none of their directories."""
    if settings.layout.is_lease:
        return None
    return settings.layout.spool


def _in_image(settings: PoolSettings, *command: str) -> str:
    """`command` run the runtime's way, with the pilots' config."""
    return settings.runtime.wrap(settings.layout.pilot_config, *command)


_NODE_MEMORY = "$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))"

#: How often node.sh looks for its pilot's retire mark.
RETIRE_POLL_S = 5


def retire_dir(layout: ExportLayout) -> str:
    """Where a pilot leaves its retire mark (one file, named by its batch job id), on
    the shared filesystem every node of the pilot sees."""
    return f"{layout.pilots}/retire"


def retire_command(layout: ExportLayout, batch: BatchSystem) -> str:
    """The pilot script's retire command: leave the mark that node.sh on every node
    looks for. Not a signal through the launcher: srun (and mpiexec, aprun) signal every
    process of the step, the running jobs included, which would cut them off."""
    mark_dir = shlex.quote(retire_dir(layout))
    return (
        f'lj_id="${{{batch.JOB_ID_ENV}:-}}"; mkdir -p {mark_dir} && '
        f'touch {mark_dir}/"${{lj_id%%.*}}"'
    )


def pilot_script(
    request: PilotRequest, layout: ExportLayout, batch: BatchSystem, number: int
) -> tuple[str, str]:
    """(job name, script) of pilot `number` (from 1) of an export or lease: the one
    renderer, used by the agent before it submits and by `--show-script` at home."""
    spec = PilotSpec.of(
        request,
        name=f"lj-{layout.name}-{number}"[:63],
        node_command=shlex.quote(layout.node_script),  # a command for `bash -c`
        retire_command=retire_command(layout, batch),
        output_dir=layout.pilot_output,
    )
    return spec.name, batch.render_pilot_script(spec)


def node_script(
    settings: PoolSettings,
    *,
    batch: BatchSystem,
    cores: int,
    memory_mb: int,
    walltime_s: int,
    retire_s: int,
    head: str = "",
    head_end: str = "",
    tick: str = "",
) -> str:
    """node.sh (templates/node.sh.tmpl): started once per node by a pilot of `batch`;
    runs one startd until it exits. `head` and `head_end`: what the head node of an
    allocation runs before its startd and after it, `tick`: at each poll meanwhile (see
    allocation_node_script).

    The startd's name holds the pilot's job id and the node's name, from the variables
    `batch` sets on every node (the shell's PID and `hostname -s` where it sets none).

    Retirement needs no network: from `retire_s` before the walltime ends (counted from
    this script's start, close to the batch job's) the startd's START expression is
    false; and when the pilot leaves its retire mark (or on USR1 to node.sh itself)
    node.sh turns its own startd off peacefully, through the node-local FS
    authentication. TERM stops it at once.
    """
    # The node's own master: it stops the startd peacefully (running jobs finish),
    # then exits itself, which ends node.sh.
    local_off = _in_image(
        settings, "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=FS", "condor_off", "-peaceful",
        "-master", "-addr", '"$(head -n 1 "$LJ_NODE_DIR/log/.master_address")"',
    )  # fmt: skip
    node = "$(hostname -s)"
    if batch.NODE_NAME_ENV:
        node = f"${{{batch.NODE_NAME_ENV}:-{node}}}"
    return render(
        __package__, f"{TEMPLATES}/node.sh.tmpl",
        runtime=settings.runtime.NAME, job_id_env=batch.JOB_ID_ENV, node=node,
        pilots_dir=shlex.quote(settings.layout.pilots), cores=cores,
        memory=str(memory_mb) if memory_mb > 0 else _NODE_MEMORY,
        walltime_s=walltime_s, retire_s=retire_s, local_off=local_off,
        startd=_in_image(settings, "condor_master", "-f"),
        retire_dir=shlex.quote(retire_dir(settings.layout)), retire_poll_s=RETIRE_POLL_S,
        head=head, head_end=head_end, tick=tick,
    )  # fmt: skip
