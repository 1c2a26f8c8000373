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
root. With schedd placement "allocation" the pool runs on the first node of the pilot
instead (see the section at the end).

Stdlib only: this module runs on the login node, inside the agent's zipapp.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

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


# ---- schedd placement "allocation": the pool on the pilot's first node ----------------
#
# Nothing of lumberjack outlives a command on the login node: the first node of a pilot
# (the head, chosen by an atomic mkdir) runs the schedd, collector and negotiator inside
# the site image with SPOOL on the shared filesystem, mints the pilots' token and writes
# the collector's address to `collector_file`; every node (the head too) waits for that
# address and runs a startd. When the allocation ends the queue stays in SPOOL and the
# next pilot's head resumes it (jobs that were running come back idle).

#: Environment node.sh sets on the head for head_config, and on every node for the startd.
HEAD_ADDRESS_ENV = "LJ_HEAD_ADDRESS"
HEAD_PORT_ENV = "LJ_HEAD_PORT"
HEAD_RUN_ENV = "LJ_HEAD_RUN"
COLLECTOR_ENV = "LJ_COLLECTOR"
#: How long the head waits for its schedd, and the other nodes for the head's address.
HEAD_START_TIMEOUT_S = 180


def collector_file(layout: ExportLayout) -> str:
    """`<pilot id> <address>:<port>` of the running head, on the shared filesystem."""
    return f"{layout.pool}/collector-address"


def heads_dir(layout: ExportLayout) -> str:
    """One directory per pilot, made by the node that became its head."""
    return f"{layout.pilots}/heads"


def head_config(settings: PoolSettings) -> str:
    """pool_config for the head node: its address and port come from the environment
    node.sh sets there (known only on that node), sockets and locks stay node-local."""
    base = pool_config(replace(settings, address=f"$ENV({HEAD_ADDRESS_ENV})", port=0))
    return base + (
        '# Schedd placement "allocation": the head node\'s address and port, from node.sh;\n'
        "# sockets and locks on the node (a shared filesystem may hold no sockets).\n"
        f"SHARED_PORT_PORT = $ENV({HEAD_PORT_ENV})\n"
        f"COLLECTOR_HOST = $(CONDOR_HOST):$ENV({HEAD_PORT_ENV})\n"
        f"RUN = $ENV({HEAD_RUN_ENV})/run\n"
        f"LOCK = $ENV({HEAD_RUN_ENV})/lock\n"
        "DAEMON_SOCKET_DIR = $(RUN)\n"
    )


def allocation_pilot_config(settings: PoolSettings) -> str:
    """pilot_config whose collector is the one the head of this pilot announced."""
    return pilot_config(settings) + (
        f"# The head of this pilot announced its collector (see collector_file).\n"
        f"COLLECTOR_HOST = $ENV({COLLECTOR_ENV})\n"
    )


def _in_image_pool(settings: PoolSettings, *command: str) -> str:
    """`command` run the runtime's way, with the pool's config, on the head node: its
    sockets and locks in the head's node-local directory (node-head.sh.tmpl)."""
    run = f'"${HEAD_RUN_ENV}"'
    return settings.runtime.wrap(settings.layout.pool_config, *command, node_local=run)


# The address of this node on the route to the login node (which every node reaches),
# and a free port on it.
_ROUTE_ADDRESS = (
    "python3 -c 'import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    "s.connect((sys.argv[1], 9)); print(s.getsockname()[0])'"
)
_FREE_PORT = (
    "python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); "
    "print(s.getsockname()[1])'"
)


def allocation_node_script(
    settings: PoolSettings,
    *,
    batch: BatchSystem,
    cores: int,
    memory_mb: int,
    walltime_s: int,
    retire_s: int,
    login_address: str,
    token_lifetime_s: int,
    ready: str = "",
    joined_dir: str = "",
) -> str:
    """node.sh for placement "allocation": node_script, plus on the head the pool before
    the startd (templates/node-head.sh.tmpl) and its orderly end after the last startd
    of the pilot is gone (templates/node-head-end.sh.tmpl). `ready`: the file that says
    the pool is up (default: the schedd's address); `joined_dir`: a lease's, whose
    exports' schedds the head runs (templates/node-head-joined.sh.tmpl)."""
    layout = settings.layout
    q = shlex.quote
    authz = " ".join(f"-authz {a}" for a in PILOT_AUTHZ)
    mint = _in_image_pool(
        settings, "condor_token_create", "-identity", q(settings.pilot_identity),
        "-lifetime", str(int(token_lifetime_s)), authz,
    )  # fmt: skip
    names = dict(address_env=HEAD_ADDRESS_ENV, port_env=HEAD_PORT_ENV, run_env=HEAD_RUN_ENV)
    head = render(
        __package__, f"{TEMPLATES}/node-head.sh.tmpl", **names,
        heads_dir=q(heads_dir(layout)), route_address=_ROUTE_ADDRESS,
        login_address=q(login_address), free_port=_FREE_PORT,
        ready=q(ready or layout.schedd_address),
        pool=_in_image_pool(settings, "condor_master", "-f"), timeout_s=HEAD_START_TIMEOUT_S,
        pool_local=layout.pool_local, tokens=q(layout.pilot_tokens), mint=mint,
        address_file=q(collector_file(layout)), collector_env=COLLECTOR_ENV,
    )  # fmt: skip
    tick = ""
    if joined_dir:
        head += render(
            __package__, f"{TEMPLATES}/node-head-joined.sh.tmpl", run_env=HEAD_RUN_ENV,
            joined_dir=q(joined_dir), timeout_s=HEAD_START_TIMEOUT_S,
        )  # fmt: skip
        tick = "    joined_tick\n"
    head_end = render(
        __package__, f"{TEMPLATES}/node-head-end.sh.tmpl", run_env=HEAD_RUN_ENV,
        startds=_in_image_pool(settings, "condor_status", "-startd", "-af", "Name"),
        retire_poll_s=RETIRE_POLL_S, tick=tick and "    " + tick,
        before_stop="    joined_stop_all\n" if joined_dir else "",
    )  # fmt: skip
    return node_script(
        settings, batch=batch, cores=cores, memory_mb=memory_mb, walltime_s=walltime_s,
        retire_s=retire_s, head=head, head_end=head_end, tick=tick,
    )  # fmt: skip


# ---- leases: one central manager and its pilots, shared by the exports that join -------
#
# A lease's directory (`<base_dir>/lease-<NAME>/`, an ExportLayout without bundle or
# spool) holds a pool of collector + negotiator and the pilots' files; an export that
# joins it runs only its own schedd, which reports to the lease's collector.


def lease_config(settings: PoolSettings) -> str:
    """condor_config of a lease's central manager on the login node: pool_config without
    a schedd, with lease_collector_rules."""
    title = f"condor_lumberjack lease pool {settings.layout.name}"
    return (
        pool_config(settings, title=title)
        + (
            "# A lease: collector and negotiator only; each joined export runs its own schedd.\n"
            "DAEMON_LIST = MASTER, SHARED_PORT, COLLECTOR, NEGOTIATOR\n"
        )
        + lease_collector_rules(settings)
    )


def lease_collector_rules(settings: PoolSettings) -> str:
    """What a lease's central manager adds wherever it runs (login node or head node):
    its collector takes the ads of joined exports' schedds (and masters) only with a
    token of this lease's key, each for the export its identity names
    (COLLECTOR_REQUIREMENTS: one export cannot overwrite another's ad)."""
    joined = f"{JOINED_PREFIX}*@{settings.trust_domain}"
    return (
        "# The negotiator's ad within CLASSAD_LIFETIME: joined schedds and condor_userprio\n"
        "# (lease status's accounting) find the negotiator through it.\n"
        "NEGOTIATOR_UPDATE_INTERVAL = 20\n"
        "# Joined exports keep their own trust domains; their schedds advertise here with a\n"
        f"# token of this lease's key ({JOINED_PREFIX}<export>@<this domain>), never by FS.\n"
        "SEC_ADVERTISE_SCHEDD_AUTHENTICATION_METHODS = IDTOKENS\n"
        "SEC_ADVERTISE_MASTER_AUTHENTICATION_METHODS = IDTOKENS\n"
        f"ALLOW_READ = $(ALLOW_READ) {joined}\n"
        f"ALLOW_ADVERTISE_SCHEDD = $(ALLOW_ADVERTISE_SCHEDD) {joined}\n"
        f"ALLOW_ADVERTISE_MASTER = $(ALLOW_ADVERTISE_MASTER) {joined}\n"
        f"COLLECTOR_REQUIREMENTS = {joined_ads_requirement(settings.trust_domain)}\n"
    )


#: A joined schedd's identity at its lease's collector: `schedd-<export>@<lease domain>`.
JOINED_PREFIX = "schedd-"
#: What the token of a joined schedd (from the lease's key) allows: its schedd's and
#: master's ads (submitter ads are schedd ads), and reading the collector.
JOINED_SCHEDD_AUTHZ = ("ADVERTISE_SCHEDD", "ADVERTISE_MASTER", "READ")
#: The lease negotiator's identity at a joined schedd (`negotiator@<export domain>`, a
#: token of the export's key) and what it allows: negotiating, nothing else.
NEGOTIATOR_IDENTITY = "negotiator"
NEGOTIATOR_AUTHZ = ("NEGOTIATOR",)
#: The file names of those tokens: in the export's pool (for its schedd) and in the
#: lease's (for its negotiator, one per joined export).
JOINED_TOKEN = "lease"
NEGOTIATOR_TOKEN_PREFIX = "joined-"


def joined_identity(export: str, lease_domain: str) -> str:
    return f"{JOINED_PREFIX}{export}@{lease_domain}"


def negotiator_token_name(export: str) -> str:
    return f"{NEGOTIATOR_TOKEN_PREFIX}{export}"


def joined_ads_requirement(lease_domain: str) -> str:
    """A ClassAd expression: an ad sent as `schedd-X@<lease domain>` is a schedd,
    submitter or master ad of export X's schedd (named `X@lumberjack-X`, see
    PoolSettings); ads of any other identity (the lease's own daemons, its pilots) pass
    as before. The collector evaluates it against the update (TARGET). No backslash:
    the config file's reading would change it."""
    who = 'ifThenElse(isString(TARGET.AuthenticatedIdentity), TARGET.AuthenticatedIdentity, "")'
    start, end = len(JOINED_PREFIX), len(f"@{lease_domain}")
    export = f"substr({who}, {start}, size({who}) - {start + end})"
    own = f'strcat({export}, "@{DOMAIN_PREFIX}", {export})'
    kind = "TARGET.MyType"
    return (
        f'(!regexp("^{JOINED_PREFIX}", {who})) || '
        f'(({kind} == "Scheduler" || {kind} == "DaemonMaster") && TARGET.Name == {own}) || '
        f'({kind} == "Submitter" && TARGET.ScheddName == {own})'
    )


def joined_schedd_config(settings: PoolSettings, lease_domain: str) -> str:
    """condor_config of a joined export's schedd: it reports to the lease's collector.

    Trust: like a flocking schedd, it stays in its own trust domain with its own
    signing key (as a plain export's pool), so nothing of one joined export is good at
    another's schedd. It advertises to the lease's collector with a token of the
    lease's key (tokens.d/lease, JOINED_SCHEDD_AUTHZ); the lease's negotiator reaches it
    with a token of this export's key (NEGOTIATOR_AUTHZ) and only that identity may
    negotiate. Claims on the lease's startds go through the match's claim session
    (SEC_ENABLE_MATCH_PASSWORD_AUTHENTICATION, on by default): the startds trust
    nothing of this domain. `settings` carry the lease's address and port."""
    if settings.domain:
        raise ValueError("a joined export keeps its own trust domain")
    negotiator = f"{NEGOTIATOR_IDENTITY}@{settings.trust_domain}"
    return pool_config(settings) + (
        "# Joined to a lease: only a schedd here; collector and negotiator are the lease's\n"
        f"# (trust domain {lease_domain}). Only the lease's negotiator, with a token of this\n"
        "# export's key, may negotiate: never by FS, which any process of the site account\n"
        "# passes.\n"
        "DAEMON_LIST = MASTER, SCHEDD\n"
        "USE_SHARED_PORT = FALSE\n"
        "SEC_NEGOTIATOR_AUTHENTICATION_METHODS = IDTOKENS\n"
        f"ALLOW_NEGOTIATOR = {negotiator}\n"
        "# The schedd and its master reach the lease's collector with their token only\n"
        "# (tokens.d/lease): the collector always knows them by that identity.\n"
        "SCHEDD.SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
        "MASTER.SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
    )


# ---- a lease in the allocation: its head node runs the central manager and the schedds
#
# The lease's directory holds the head's config (lease_head_config), its pilots' files
# and joined/ (ExportLayout.joined): an export joins by a request there, the head of the
# running round starts its schedd (joined_alloc_schedd_config, started by schedd_script)
# and stops it on a release request. Nothing runs on the login node.


def lease_head_config(settings: PoolSettings) -> str:
    """head_config of a lease's central manager: collector and negotiator only."""
    return (
        head_config(settings)
        + (
            "# A lease: collector and negotiator only; the head runs each joined schedd.\n"
            "DAEMON_LIST = MASTER, SHARED_PORT, COLLECTOR, NEGOTIATOR\n"
        )
        + lease_collector_rules(settings)
    )


def joined_alloc_schedd_config(settings: PoolSettings, lease_domain: str) -> str:
    """joined_schedd_config for a schedd the lease's head node runs: the head's address
    and collector from the environment node.sh sets there, sockets and locks on the node."""
    name = settings.layout.name
    head = replace(settings, address=f"$ENV({HEAD_ADDRESS_ENV})")
    base = joined_schedd_config(head, lease_domain)
    return base + (
        '# On the lease\'s head node (placement "allocation"): its address and collector.\n'
        f"COLLECTOR_HOST = $ENV({COLLECTOR_ENV})\n"
        f"RUN = $ENV({HEAD_RUN_ENV})/{name}/run\n"
        f"LOCK = $ENV({HEAD_RUN_ENV})/{name}/lock\n"
        "DAEMON_SOCKET_DIR = $(RUN)\n"
    )


def schedd_script(settings: PoolSettings) -> str:
    """pool/schedd.sh: how the lease's head node starts a joined export's schedd."""
    name = settings.layout.name
    run = f'"${HEAD_RUN_ENV}"/{shlex.quote(name)}'
    return (
        "#!/bin/bash\n"
        f"# condor_lumberjack: the schedd of export {name}, on the head node of its lease.\n"
        "set -u\n"
        f"mkdir -p {run}/run {run}/lock\n"
        f"exec {_in_image_pool(settings, 'condor_master', '-f')}\n"
    )
