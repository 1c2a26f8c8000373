"""How the site runs HTCondor: in a container (Apptainer, Singularity, podman-hpc, CSCS's
Container Engine) or straight from a release that lumberjack ships (runtime "none").

One small class per runtime, as the profile's `[container] runtime` names it; the base
class holds what they share. Each knows how to

- wrap an HTCondor command so that it runs with the site image (or the shipped release)
  and the binds the pool needs (`wrap`, a shell fragment for node.sh; `argv`, for the
  agent on the login node, in the long-running pool);
- start and stop the long-running pool on the login node and run commands in it
  (`start_container`, `stop_container`, `pool_exists`, `run_in_pool`, `master_command`):
  Apptainer and Singularity through spython (vendored in the agent's zipapp), the others
  from the command lines their classes give (`start_argv`, `stop_argv`, `check_argv`,
  `argv`);
- say where HTCondor's own files are (`release_lines`, for the configs).

Also here: unpacking the shipped HTCondor tarball, once and atomically, refusing any
member that could land outside its directory (`unpack_release`).

Stdlib only (and spython, vendored): this module runs on the login node, inside the
agent's zipapp.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shlex
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import ClassVar

from lumberjack.core.safepath import why_unsafe

#: Where HTCondor's Debian and upstream packages put their helper programs.
SYSTEM_RELEASE_LINES = """RELEASE_DIR = /usr
LIBEXEC = /usr/libexec/condor
LIB = /usr/lib/condor
SHARE = /usr/share/condor"""


#: How often the site looks whether a daemon or container it waits for is up or gone: a
#: look is a stat or a walk of /proc (milliseconds), and every launch and fetch waits on
#: a few of them.
POLL_S = 0.1
#: How long stop_container waits for an instance it signalled.
INSTANCE_STOP_S = 10


def _terminated(pid: int) -> bool:
    """SIGTERM to `pid` (an instance's init, this account's), then whether it exited
    within INSTANCE_STOP_S."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + INSTANCE_STOP_S
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _running(pid: int) -> bool:
    """Whether `pid` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


class RuntimeFailure(Exception):
    """The runtime could not do what was asked; the message is one line."""


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output"


@dataclass(frozen=True)
class ContainerRuntime:
    """One way of running HTCondor at a site, for one export directory (`root`, always
    bound into the container)."""

    NAME: ClassVar[str] = ""

    root: str  # the export's directory at the site
    image: str = ""  # the site image (a SIF path, or an OCI image name for podman-hpc)
    binds: tuple[str, ...] = ()  # extra binds from the profile, "SRC[:DST[:OPTS]]"
    release: str = ""  # the unpacked HTCondor release (runtime "none")
    devices: tuple[str, ...] = ()  # arguments that pass the node's GPUs through (gpus.py)

    @property
    def pool_name(self) -> str:
        """Name of the long-running pool (instance, container) on the login node."""
        return f"lumberjack-{PurePosixPath(self.root).name}"

    # -- commands -----------------------------------------------------------------------

    def prefix(self, config: str) -> list[str]:
        """The words before an HTCondor command in a fresh container (quoted for a shell)."""
        raise NotImplementedError

    def node_local_binds(self, node_local: str) -> list[str]:
        """The words that put the node-local directory `node_local` (a shell word, which
        may hold an expansion) into a fresh container at its own path; none where the
        command sees the node's directories anyway."""
        return []

    def wrap(self, config: str, *command: str, node_local: str = "") -> str:
        """A shell fragment that runs `command` (words passed as they are: they may hold
        shell expansions) with CONDOR_CONFIG=config, in a fresh container; `node_local`:
        a directory of the node (sockets, locks) the container shares with others."""
        words = self.prefix(config)
        if node_local:
            # After the binary and its subcommand, before anything else.
            words = [*words[:3], *self.node_local_binds(node_local), *words[3:]]
        return " ".join(words) + " " + " ".join(command)

    def argv(self, config: str, *command: str) -> list[str]:
        """`command` with CONDOR_CONFIG=config, inside the running pool (login node)."""
        raise NotImplementedError

    def master_command(self, pid_file: str) -> tuple[str, ...]:
        """How the pool's condor_master starts (in the background, on its own)."""
        return ("condor_master",)

    # -- the long-running pool on the login node ----------------------------------------

    def start_argv(self) -> list[str] | None:
        """Starts the pool's container; None: nothing to start."""
        return None

    def stop_argv(self) -> list[str] | None:
        """Stops the pool's container (and every daemon in it); None: none exists."""
        return None

    def check_argv(self) -> list[str] | None:
        """Asks whether the pool's container exists; None: only its daemons tell."""
        return None

    def running(self, result: subprocess.CompletedProcess[str]) -> bool:
        """What check_argv's answer says."""
        return result.returncode == 0

    def missing_image(self) -> str | None:
        """Why the pool cannot start with this image (one line), or None."""
        return None

    def write_files(self) -> None:
        """Files the runtime needs in the export's directory before a launch (none)."""

    # -- what the agent calls on the login node ----------------------------------------

    def pool_exists(self) -> bool | None:
        """Whether the pool's container exists; None: there is no container (runtime
        "none"), only the pool's daemons tell."""
        argv = self.check_argv()
        if argv is None:
            return None
        try:
            result = subprocess.run(argv, capture_output=True, text=True)
        except OSError:  # no such runtime on this node: nothing of it runs
            return False
        return self.running(result)

    def start_container(self) -> None:
        """Start the pool's container (RuntimeFailure, one line, when it cannot)."""
        argv = self.start_argv()
        if argv is None:
            return
        try:
            result = subprocess.run(argv, capture_output=True, text=True)
        except OSError as exc:
            raise RuntimeFailure(f"{self.NAME}: {exc}") from None
        if result.returncode != 0 or not self.pool_exists():
            raise RuntimeFailure(last_line(result.stderr or result.stdout))

    def stop_container(self) -> None:
        """Stop the pool's container and every daemon in it."""
        argv = self.stop_argv()
        if argv is not None and self.pool_exists():
            subprocess.run(argv, capture_output=True, text=True)

    def run_in_pool(self, config: str, *command: str) -> tuple[int, str]:
        """`command` with CONDOR_CONFIG=config in the running pool: its exit code, and
        its output (stdout; stderr and stdout when it failed)."""
        return _answer(self.argv(config, *command))

    def run_fresh(self, config: str, *command: str) -> tuple[int, str]:
        """run_in_pool's answer for `command` run in a fresh container: where no pool
        runs on the login node (placement "allocation": it runs on a compute node)."""
        script = self.wrap(config, *(shlex.quote(word) for word in command))
        return _answer(["/bin/sh", "-c", script])

    # -- configs ------------------------------------------------------------------------

    def release_lines(self) -> str:
        """Config lines that say where HTCondor's programs and libraries are."""
        return SYSTEM_RELEASE_LINES


def _binds_of(runtime: ContainerRuntime) -> list[str]:
    return [runtime.root, *runtime.binds]


#: Where the FUSE device is: the job containers nested in a pilot's mount the site image
#: with it (squashfuse); without it Apptainer unpacks the whole image for every job.
FUSE_DEVICE = "/dev/fuse"


def confinement_args(instance: bool = False) -> list[str]:
    """What an Apptainer container of an export's daemons sees of the host: its own PID
    namespace (no other export's processes, nor their /proc/PID/root), a minimal /dev and
    fresh /tmp and home (`--contain`), neither the current directory nor the site's
    system-wide binds (`--no-mount cwd,bind-paths`: centres bind their shared file
    systems there, where other exports live). So the schedd, shadow, startd and starter
    that act for a job reach only their own export's directory, whatever a job makes
    them do. The host's name table is bound back (`--no-mount bind-paths` drops it too).
    An instance takes its PID namespace from `--containall` (`instance start` has no
    `--pid`); its commands still come with their own environment (`exec instance://`)."""
    isolation = ["--containall"] if instance else ["--contain", "--pid"]
    args = [*isolation, "--no-mount", "cwd,bind-paths", "--bind", "/etc/hosts:/etc/hosts:ro"]
    if os.path.exists(FUSE_DEVICE):
        args += ["--bind", FUSE_DEVICE]
    return args


@dataclass(frozen=True)
class Apptainer(ContainerRuntime):
    """`apptainer exec` for every command; the pool in an Apptainer instance."""

    NAME: ClassVar[str] = "apptainer"
    BINARY: ClassVar[str] = "apptainer"

    def prefix(self, config: str) -> list[str]:
        # The image too, read-only: the startd runs each job in a nested container of it.
        binds = [*_binds_of(self), f"{self.image}:{self.image}:ro"]
        bind_args = [f"--bind {shlex.quote(b)}" for b in binds]
        devices = [shlex.quote(arg) for arg in self.devices]
        confined = [shlex.quote(arg) for arg in confinement_args()]
        return [
            self.BINARY, "-s", "exec", *confined, *bind_args, *devices, shlex.quote(self.image),
            "env", f"CONDOR_CONFIG={shlex.quote(config)}",
        ]  # fmt: skip

    def node_local_binds(self, node_local: str) -> list[str]:
        # Its own /tmp hides the node's (confinement_args).
        return ["--bind", node_local]

    # The pool is an Apptainer instance, driven through spython. spython runs the
    # `singularity` command, which Apptainer installs as its other name.

    @staticmethod
    def _client():  # -> spython's Client
        from spython.main import Client

        Client.quiet = True  # Apptainer's INFO lines would be mixed into results
        return Client

    def pool_exists(self) -> bool:
        return bool(self._listing())

    def start_container(self) -> None:
        binds = [arg for bind in _binds_of(self) for arg in ("--bind", bind)]
        options = confinement_args(instance=True) + binds
        self._client().instance(self.image, name=self.pool_name, options=options, quiet=True)
        if not self.pool_exists():
            raise RuntimeFailure(f"could not start an instance of {self.image}")

    def _listing(self) -> list[dict]:
        """The pool's instance as `instance list --json` has it ([] or one record)."""
        found = self._client().instances(name=self.pool_name, return_json=True, quiet=True)
        return [found] if isinstance(found, dict) else list(found or [])

    def stop_container(self) -> None:
        # `instance stop` took 1.6 s even for an idle instance (it looks whether the
        # instance is gone in coarse steps). The same SIGTERM to the instance's init,
        # watched every tenth of a second, ends it in tens of milliseconds; Apptainer's
        # own stop (which kills after its timeout) only when that did not.
        listing = self._listing()
        if not listing:
            return
        pid = listing[0].get("pid")
        if isinstance(pid, int) and pid > 1 and _terminated(pid) and self._unlisted():
            return
        name = self.pool_name
        if self._listing():
            self._client().instance(f"instance://{name}", name=name, start=False).stop(quiet=True)

    def _unlisted(self) -> bool:
        """Whether the instance's record went too (Apptainer removes it a few
        milliseconds after the instance's init is gone)."""
        deadline = time.monotonic() + INSTANCE_STOP_S
        while self._listing():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def run_in_pool(self, config: str, *command: str) -> tuple[int, str]:
        result = self._client().execute(
            f"instance://{self.pool_name}", ["env", f"CONDOR_CONFIG={config}", *command],
            return_result=True, quiet=True,
        )  # fmt: skip
        message = result["message"]
        return result["return_code"], message if isinstance(message, str) else "".join(message)

    def missing_image(self) -> str | None:
        if not Path(self.image).is_file():
            return f"site image {self.image} not found; see the site profile's image"
        return None


@dataclass(frozen=True)
class Singularity(Apptainer):
    """Apptainer's command line under its older name (SingularityCE and older sites)."""

    NAME: ClassVar[str] = "singularity"
    BINARY: ClassVar[str] = "singularity"


@dataclass(frozen=True)
class EmulatedApptainer(Apptainer):
    """TEST SITES ONLY: Apptainer running another architecture's image under qemu-user,
    whose clone() refuses the nested per-job container's namespace flags: jobs run
    beside the startd, with no container of their own (job_container.py, isolation.py)."""

    NAME: ClassVar[str] = "apptainer-emulated"


@dataclass(frozen=True)
class PodmanHPC(ContainerRuntime):
    """NERSC's podman-hpc (Perlmutter): `podman-hpc run --rm` for every command on a
    node, a detached container (`run -d`) plus `exec` for the pool on the login node.

    Rendered from documentation only; no podman-hpc was at hand to run it. Checked
    against NERSC's podman-hpc repository (https://github.com/NERSC/podman-hpc: its
    README and podman_hpc/podman_hpc.py, as of 2026-04): `pull` and `migrate` are
    podman-hpc's own subcommands (an image pulled with `podman-hpc pull`, or built and
    then `podman-hpc migrate`d, is squashed where compute nodes see it), and every other
    subcommand (run, exec, stop, container exists) passes through to podman, whose
    options are podman's: `run --rm -d --name NAME --net host --userns keep-id
    -v SRC:DST IMAGE CMD`. `--userns keep-id` runs the daemons as the site account (not
    as a container root that HTCondor would try to switch users from); `--net host` puts
    them on the node's own addresses. The image is an OCI image name (e.g.
    "lumberjack-site:25.14"), made available beforehand with pull or migrate.
    """

    NAME: ClassVar[str] = "podman-hpc"
    BINARY: ClassVar[str] = "podman-hpc"

    def _volumes(self) -> list[str]:
        volumes = []
        for bind in _binds_of(self):
            # Apptainer's "SRC" binds SRC at the same path; podman wants both.
            spec = bind if ":" in bind else f"{bind}:{bind}"
            volumes += ["-v", spec]
        return volumes

    def _run_options(self) -> list[str]:
        # podman-hpc's own --gpu (NERSC's GPU module) stands for any vendor's flag.
        gpu = ["--gpu"] if self.devices else []
        return ["--net", "host", "--userns", "keep-id", *gpu, *self._volumes()]

    def prefix(self, config: str) -> list[str]:
        words = [self.BINARY, "run", "--rm", *self._run_options(), self.image,
                 "env", f"CONDOR_CONFIG={config}"]  # fmt: skip
        return [shlex.quote(word) for word in words]

    def node_local_binds(self, node_local: str) -> list[str]:
        # A container's /tmp is its own.
        return ["-v", f"{node_local}:{node_local}"]

    def argv(self, config: str, *command: str) -> list[str]:
        return [self.BINARY, "exec", self.pool_name, "env", f"CONDOR_CONFIG={config}", *command]

    def start_argv(self) -> list[str]:
        # The container only holds the pool's namespace; the daemons come with `exec`.
        return [self.BINARY, "run", "-d", "--rm", "--name", self.pool_name,
                *self._run_options(), self.image, "sleep", "infinity"]  # fmt: skip

    def stop_argv(self) -> list[str]:
        return [self.BINARY, "stop", self.pool_name]

    def check_argv(self) -> list[str]:
        return [self.BINARY, "container", "exists", self.pool_name]


@dataclass(frozen=True)
class ContainerEngine(ContainerRuntime):
    """CSCS's Container Engine (Alps): a container exists only inside a Slurm job, entered
    with `srun --environment=EDF`, where EDF is a TOML file naming the image and mounts.

    Rendered from documentation only; no Alps was at hand to run it. Checked against
    CSCS's documentation repository (https://github.com/eth-cscs/cscs-docs at 80abed13,
    2026-08-20): docs/software/container-engine/run.md (`--environment` takes an
    absolute EDF path, for `srun` and `salloc`; every task of a node shares one
    container) and edf.md (`image`: a registry reference or a local SquashFS file;
    `mounts`: "SOURCE:DESTINATION[:FLAGS]"; `workdir`; `writable`, default true).
    CSCS's login nodes run no containers ("Use Slurm on the login node to launch a
    program inside the environment", index.md), so the pool runs inside the allocation
    (profiles with this runtime need [schedd] placement = "allocation"), and a command
    on a node is a step of the pilot's own job on that node (`srun --overlap`). GPUs
    come through the Engine's own hooks, not flags of ours.
    """

    NAME: ClassVar[str] = "container-engine"
    EDF_NAME: ClassVar[str] = "lumberjack-site.edf.toml"

    @property
    def edf_path(self) -> str:
        """Where the agent writes the EDF: in the export's own directory."""
        return posixpath.join(self.root, self.EDF_NAME)

    def edf_text(self) -> str:
        """The EDF: the site image, the export's directory and the profile's binds at
        their own paths (a bind without a destination keeps its path)."""
        from lumberjack.site.templating import render

        mounts = [bind if ":" in bind else f"{bind}:{bind}" for bind in _binds_of(self)]
        quoted = ", ".join(_toml_string(mount) for mount in mounts)
        return render(
            __package__, "templates/edf.toml.tmpl", image=_toml_string(self.image),
            workdir=_toml_string(self.root), mounts=quoted,
        )  # fmt: skip

    def write_files(self) -> None:
        Path(self.edf_path).write_text(self.edf_text())

    def prefix(self, config: str) -> list[str]:
        # A step of the pilot's job on this node only, sharing its resources (--overlap).
        words = ["srun", "--overlap", "--nodes=1", "--ntasks=1"]
        node = ['--nodelist="$SLURMD_NODENAME"', '--jobid="$SLURM_JOB_ID"']
        tail = [f"--environment={self.edf_path}", "env", f"CONDOR_CONFIG={config}"]
        return [*words, *node, *(shlex.quote(word) for word in tail)]

    def argv(self, config: str, *command: str) -> list[str]:
        raise RuntimeFailure(_NO_LOGIN_CONTAINER)

    def run_fresh(self, config: str, *command: str) -> tuple[int, str]:
        raise RuntimeFailure(_NO_LOGIN_CONTAINER)

    def missing_image(self) -> str | None:
        image = self.image
        if image.startswith("/") and not os.path.isfile(image):
            return f"no site image at {image} (a SquashFS file: see docs/site-profiles.md)"
        return None


#: Why no HTCondor command runs on a CSCS login node.
_NO_LOGIN_CONTAINER = (
    "the Container Engine runs containers only inside Slurm jobs: nothing of the pool "
    'runs on the login node; use [schedd] placement = "allocation"'
)


def _toml_string(text: str) -> str:
    """A TOML basic string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class NoContainer(ContainerRuntime):
    """HTCondor straight from the release lumberjack shipped and unpacked under the
    site's base directory (shared with the compute nodes): PATH, LD_LIBRARY_PATH (when
    the release has lib/) and CONDOR_CONFIG set, the configs' RELEASE_DIR and friends
    pointing into the release. The pool is a plain background condor_master whose pid
    is recorded (`master_command`)."""

    NAME: ClassVar[str] = "none"

    def _lib(self) -> str | None:
        lib = posixpath.join(self.release, "lib")
        return lib if os.path.isdir(lib) else None

    def prefix(self, config: str) -> list[str]:
        release = shlex.quote(self.release)
        words = ["env", f"CONDOR_CONFIG={shlex.quote(config)}",
                 f'PATH={release}/bin:{release}/sbin:"$PATH"']  # fmt: skip
        lib = self._lib()
        if lib:
            keep = "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # the site's own, after ours
            words.append(f"LD_LIBRARY_PATH={shlex.quote(lib)}{keep}")
        return words

    def argv(self, config: str, *command: str) -> list[str]:
        path = f"{self.release}/bin:{self.release}/sbin:{os.environ.get('PATH', '/usr/bin:/bin')}"
        words = ["env", f"CONDOR_CONFIG={config}", f"PATH={path}"]
        lib = self._lib()
        if lib:
            old = os.environ.get("LD_LIBRARY_PATH")
            words.append(f"LD_LIBRARY_PATH={lib}" + (f":{old}" if old else ""))
        return [*words, *command]

    def master_command(self, pid_file: str) -> tuple[str, ...]:
        # condor_master puts itself in the background and writes its pid.
        return ("condor_master", "-pidfile", pid_file)

    def missing_image(self) -> str | None:
        if not os.path.isfile(posixpath.join(self.release, "sbin", "condor_master")):
            return f"no HTCondor release at {self.release} (sbin/condor_master is missing)"
        return None

    def release_lines(self) -> str:
        release = self.release
        return f"""RELEASE_DIR = {release}
BIN = {release}/bin
SBIN = {release}/sbin
LIBEXEC = {release}/libexec
LIB = {release}/lib
SHARE = {release}/share"""


RUNTIMES: dict[str, type[ContainerRuntime]] = {
    cls.NAME: cls
    for cls in (Apptainer, Singularity, EmulatedApptainer, PodmanHPC, ContainerEngine, NoContainer)
}


def get_runtime(
    name: str,
    root: str,
    *,
    image: str = "",
    binds: tuple[str, ...] = (),
    release: str = "",
    devices: tuple[str, ...] = (),
) -> ContainerRuntime:
    """The runtime called `name` for the export directory `root`; `devices`: arguments
    that pass GPUs through to the startd's container (Apptainer, Singularity)."""
    try:
        cls = RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown container runtime {name!r}") from None
    return cls(root=root, image=image, binds=tuple(binds), release=release, devices=tuple(devices))


# ---- the shipped HTCondor release (runtime "none") --------------------------------------


class ReleaseError(Exception):
    """A one-line reason the shipped HTCondor tarball cannot be used."""


def _member_problem(member: tarfile.TarInfo) -> str | None:
    name = member.name[2:] if member.name.startswith("./") else member.name
    name = name.rstrip("/") if member.isdir() else name
    if name in ("", "."):
        return None
    why = why_unsafe(name)
    if why:
        return f"member {member.name!r} {why}"
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        return f"member {member.name!r} is a device or fifo"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return f"member {member.name!r} is of an unknown kind"
    if member.issym() or member.islnk():
        link = member.linkname
        if link.startswith("/"):
            return f"link {member.name!r} points to an absolute path"
        base = posixpath.dirname(name) if member.issym() else ""
        target = posixpath.normpath(posixpath.join(base, link))
        if target == ".." or target.startswith("../") or target.startswith("/"):
            return f"link {member.name!r} points outside the release"
    return None


def check_members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, or ReleaseError naming the first that could escape its directory
    (absolute, `..`, a link out, a device): nothing is unpacked from such a tarball."""
    members = archive.getmembers()
    for member in members:
        problem = _member_problem(member)
        if problem:
            raise ReleaseError(f"refusing the HTCondor tarball: {problem}")
        member.mode &= 0o755  # no setuid, setgid, sticky, or group/other write
    return members


def _release_root(unpacked: Path) -> Path:
    """The directory holding sbin/condor_master: the top of the tarball, or its one
    top-level directory (as HTCondor's own tarballs are laid out)."""
    if (unpacked / "sbin" / "condor_master").is_file():
        return unpacked
    entries = [entry for entry in unpacked.iterdir() if entry.is_dir()]
    if len(entries) == 1 and (entries[0] / "sbin" / "condor_master").is_file():
        return entries[0]
    raise ReleaseError("the HTCondor tarball holds no sbin/condor_master")


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack_release(tarball: str, target: str, sha256: str = "") -> bool:
    """Unpack `tarball` into `target` once: into a temporary directory next to it, then
    one rename. False if `target` was already there. ReleaseError (one line) if the
    tarball is not the one shipped or holds a hostile member; then nothing is left."""
    if os.path.isdir(target):
        return False
    if sha256 and sha256_of(tarball) != sha256:
        raise ReleaseError(f"{tarball} is not the HTCondor tarball that was shipped; ship again")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", dir=parent)
    try:
        with tarfile.open(tarball, "r:*") as archive:
            members = check_members(archive)
            extra = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
            archive.extractall(scratch, members=members, **extra)  # noqa: S202 (checked)
        root = _release_root(Path(scratch))
        try:
            os.rename(root, target)
        except OSError:
            if not os.path.isdir(target):  # another agent won the race: theirs is as good
                raise
        return True
    except (tarfile.TarError, EOFError) as exc:
        raise ReleaseError(f"cannot unpack the HTCondor tarball {tarball}: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _answer(argv: list[str]) -> tuple[int, str]:
    """`argv`'s exit code and output (stdout; stderr and stdout when it failed)."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return 127, str(exc)
    if result.returncode != 0:
        return result.returncode, result.stderr + result.stdout
    return 0, result.stdout
