"""The project's testbed: real HTCondor pools (and, later, an emulated HPC site) on one machine.

Everything runs from a Debian sid root filesystem (HTCondor 25.x, Apptainer, Slurm need
sid's glibc), built once by build-rootfs.sh and cached outside the checkout under a name
keyed by a hash of its recipe. Each "host" is a private mount namespace entered with
pivot_root (enter.sh). The access-point pool and the second ("remote") pool listen on
loopback only, each with its own shared port.

Used by the tests (tests/conftest.py) and by the Makefile:

    python containers/testbed/testbed.py up | down | status | env
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPE_FILES = ("build-rootfs.sh", "packages.txt")
SITE_IMAGE_DIR = HERE.parent / "site-image"
# The site image's recipe is the package's (lumberjack/ap/site-image/, what `sites image
# build` renders): what the testbed's build reads of it, from the repository's top (a
# change rebuilds the cached image).
SITE_IMAGE_RECIPE = (
    "lumberjack/ap/site-image/packages.txt",
    "lumberjack/ap/site-image/setup.sh",
    "containers/site-image/build-testbed-image.sh",
)
REPO = HERE.parent.parent
#: What lets this x86_64 machine run aarch64 binaries (qemu-user + binfmt_misc): host
#: setup, not part of any image's recipe.
EMULATION = "containers/site-image/emulation.sh"
#: HTCondor's spelling of an architecture (a queue's `arch`) -> uname -m.
HOST_MACHINE = {"X86_64": "x86_64", "aarch64": "aarch64"}
HOST_ARCH = {machine: arch for arch, machine in HOST_MACHINE.items()}.get(
    os.uname().machine, os.uname().machine
)

SUBMITTER = "alice"
SUBMITTER_UID = 4242
#: A second local submitter (the hostile neighbour of the isolation tests). Made at `up`
#: time, on the host and in the rootfs, so that the rootfs recipe stays as it is.
OTHER_SUBMITTER = "bob"
OTHER_SUBMITTER_UID = 4444
SUBMITTERS = {SUBMITTER: SUBMITTER_UID, OTHER_SUBMITTER: OTHER_SUBMITTER_UID}
UID_DOMAIN = "lumberjack.test"
# Versions this testbed was written against; another sid version fails loudly.
TESTED_VERSIONS = {"condor": "25.14.", "apptainer": "1.4.", "slurm-wlm": "26.05."}


def testbed_dir() -> Path:
    """Where running testbed state lives (configs, spools, logs, pids); shared by path
    between the host and every namespace."""
    return Path(os.environ.get("LUMBERJACK_TESTBED_DIR", "/tmp/lumberjack-testbed"))


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("LUMBERJACK_TESTBED_CACHE", Path(base) / "condor-lumberjack"))


def recipe_hash(directory: Path = HERE, files: tuple[str, ...] = RECIPE_FILES) -> str:
    digest = hashlib.sha256()
    for name in files:
        digest.update((directory / name).read_bytes())
    return digest.hexdigest()[:12]


def ensure_rootfs() -> Path:
    """Build the root filesystem unless a build of the same recipe is cached."""
    rootfs = cache_dir() / f"rootfs-{recipe_hash()}"
    if not rootfs.is_dir():
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        log(f"building the testbed root filesystem into {rootfs} (a few minutes, once)")
        subprocess.run([str(HERE / "build-rootfs.sh"), str(rootfs)], check=True)
    check_versions(rootfs)
    return rootfs


def ensure_site_image(rootfs: Path, arch: str = "X86_64") -> Path:
    """The testbed's build of the site image, made once from the package's recipe (what
    `sites image build` renders) but without any registry pull, and cached
    next to the rootfs under a name keyed by a hash of its recipe. Another `arch` than
    this machine's (aarch64) is built under emulation (see ensure_emulation) and named
    with it: site-image-aarch64-<hash>.sif."""
    tag = "" if arch == HOST_ARCH else f"{arch}-"
    sif = cache_dir() / f"site-image-{tag}{recipe_hash(REPO, SITE_IMAGE_RECIPE)}.sif"
    if not sif.is_file():
        sif.parent.mkdir(parents=True, exist_ok=True)
        log(f"building the {arch} site image into {sif} (a few minutes, once)")
        script = SITE_IMAGE_DIR / "build-testbed-image.sh"
        subprocess.run([str(script), str(rootfs), str(sif), HOST_MACHINE.get(arch, arch)],
                       check=True, env=_clean_env())  # fmt: skip
    condor = site_image_versions(sif).get("condor", "missing")
    if not condor.startswith(TESTED_VERSIONS["condor"]) and not os.environ.get(
        "LUMBERJACK_ANY_VERSION"
    ):
        raise SystemExit(
            f"testbed: the site image has condor {condor}, not the tested "
            f"{TESTED_VERSIONS['condor']}x; set LUMBERJACK_ANY_VERSION=1 to try anyway"
        )
    return sif


def ensure_emulation(arch: str) -> str | None:
    """Let this machine run `arch` binaries (emulation.sh: qemu-user-static, binfmt_misc
    with the F flag); None when it can, else why not (a test skips with it)."""
    done = subprocess.run([str(REPO / EMULATION), HOST_MACHINE.get(arch, arch)],
                          capture_output=True, text=True, env=_clean_env())  # fmt: skip
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["emulation.sh failed"])[-1]
    return None


#: Libraries every Linux host has (the C and C++ runtimes): a release tarball, like
#: HTCondor's own, leaves them to the host and carries every other library it needs.
BASE_PACKAGES = ("libc6", "libgcc-s1", "libstdc++6", "zlib1g")
#: Where each part of the Debian package goes in the release's layout.
RELEASE_LAYOUT = (
    ("/usr/bin/", "bin/"), ("/usr/sbin/", "sbin/"), ("/usr/libexec/condor/", "libexec/"),
    ("/usr/lib/condor/", "lib/condor/"), ("/etc/condor/", "etc/"),
)  # fmt: skip
CONDOR_TARBALL_LINK = "htcondor-release.tar.gz"  # in testbed_dir(); see the profile
_CONDOR_FILES = r"""
dpkg -L condor | grep -E '^/(usr/(s?bin|libexec/condor|lib/condor)/|usr/lib/[^/]*\.so|etc/condor/)'
"""
_CONDOR_LIBS = r"""
dpkg -L condor | grep -E '^/usr/(s?bin|libexec/condor|lib/[^/]*\.so)' | while read -r f; do
    [ -f "$f" ] && ldd "$f" 2>/dev/null
done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null)
    echo "$lib ${pkg%%:*}"
done
"""


def ensure_condor_tarball(rootfs: Path) -> Path:
    """An HTCondor release tarball (for site runtime "none") made from the HTCondor the
    rootfs has installed (the Debian `condor` package), laid out as HTCondor's own are
    (one top directory holding bin/, sbin/, lib/, libexec/, etc/), with the shared
    libraries its programs need beyond the base system in lib/. Relocated by the
    configs' RELEASE_DIR and LD_LIBRARY_PATH. Cached next to the rootfs, keyed by its
    recipe hash (the testbed has no network to download one)."""
    tarball = cache_dir() / f"htcondor-release-{recipe_hash()}.tar.gz"
    if tarball.is_file():
        return tarball
    log(f"building the HTCondor release tarball {tarball} (once)")
    files = run_in_rootfs(rootfs, ["/bin/bash", "-c", _CONDOR_FILES], binds=[]).stdout.split()
    libs = run_in_rootfs(rootfs, ["/bin/bash", "-c", _CONDOR_LIBS], binds=[]).stdout
    version = installed_versions(rootfs)["condor"].split("+")[0]
    top = f"condor-{version}-x86_64_testbed"
    partial = tarball.with_suffix(".partial")
    with tarfile.open(partial, "w:gz", compresslevel=6) as archive:
        for path in files:
            relative = next((new + path[len(old):] for old, new in RELEASE_LAYOUT
                             if path.startswith(old)), None)  # fmt: skip
            if relative is None and path.startswith("/usr/lib/"):
                relative = "lib/" + path[len("/usr/lib/") :]
            if relative is not None:
                _add_from_rootfs(archive, rootfs, path, f"{top}/{relative}")
        for line in libs.splitlines():
            lib, _, package = line.partition(" ")
            name = f"{top}/lib/{Path(lib).name}"
            if package not in BASE_PACKAGES and name not in archive.getnames():
                _add_from_rootfs(archive, rootfs, lib, name)
    partial.rename(tarball)
    return tarball


def _in_rootfs(rootfs: Path, path: str) -> Path:
    """The host path of `path` as the rootfs sees it: its links (/lib -> usr/lib, and
    absolute ones) followed inside the rootfs, never out to the host's own files."""
    parts = list(Path(path).parts[1:])
    resolved = Path("/")
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            resolved = resolved.parent
            continue
        candidate = resolved / part
        host = rootfs / candidate.relative_to("/")
        if not host.is_symlink():
            resolved = candidate
            continue
        hops += 1
        if hops > 40:
            raise RuntimeError(f"too many links at {path} in {rootfs}")
        target = Path(os.readlink(host))
        if target.is_absolute():
            resolved, parts = Path("/"), [*target.parts[1:], *parts]
        else:
            parts = [*target.parts, *parts]
    return rootfs / resolved.relative_to("/")


def _add_from_rootfs(archive: tarfile.TarFile, rootfs: Path, path: str, name: str) -> None:
    source = _in_rootfs(rootfs, path)
    if source.is_dir():
        return
    info = archive.gettarinfo(str(source), arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    with open(source, "rb") as data:
        archive.addfile(info, data)


def install_condor_tarball(rootfs: Path) -> Path:
    """The tarball where the testbed-nocontainer profile's condor_tarball points:
    ${LUMBERJACK_TESTBED_DIR}/htcondor-release.tar.gz (a link to the cached build)."""
    tarball = ensure_condor_tarball(rootfs)
    link = testbed_dir() / CONDOR_TARBALL_LINK
    if not (link.is_symlink() and link.resolve() == tarball.resolve()):
        link.unlink(missing_ok=True)
        link.symlink_to(tarball)
    return link


def site_image_versions(sif: Path) -> dict[str, str]:
    """What build-testbed-image.sh recorded next to the SIF: `condor <deb version>` and
    the image's `$CondorVersion: ...` line."""
    lines = sif.with_suffix(".versions").read_text().splitlines()
    return dict(line.split(" ", 1) for line in lines if " " in line)


def installed_versions(rootfs: Path) -> dict[str, str]:
    lines = (rootfs / "etc/lumberjack-testbed-versions").read_text().splitlines()
    return dict(line.split(" ", 1) for line in lines if line.strip())


def check_versions(rootfs: Path) -> None:
    versions = installed_versions(rootfs)
    for package, prefix in TESTED_VERSIONS.items():
        found = versions.get(package, "missing")
        if not found.startswith(prefix) and not os.environ.get("LUMBERJACK_ANY_VERSION"):
            raise SystemExit(
                f"testbed: {package} {found} is not the tested {prefix}x; "
                "set LUMBERJACK_ANY_VERSION=1 to try anyway"
            )


def log(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


def spawn_in_rootfs(
    rootfs: Path,
    argv: list[str],
    *,
    hostname: str,
    binds: list[str],
    logfile: Path,
    netns: str | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Start argv as a new "host" in its own mount namespace; return its PID.

    The process is its own session leader so that stopping it by PID (and its
    process group) never touches anything else.
    """
    cmd = [
        "unshare", "--mount", "--uts", "--propagation", "private",
        str(HERE / "enter.sh"), str(rootfs), hostname, ":".join(binds), "--", *argv,
    ]  # fmt: skip
    if netns:
        cmd = ["nsenter", f"--net=/run/netns/{netns}", *cmd]
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**_clean_env(), **(env or {})},
            preexec_fn=default_signals,
        )
    return proc.pid


def run_in_rootfs(
    rootfs: Path,
    argv: list[str],
    *,
    binds: list[str],
    hostname: str = "",
    netns: str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a short command in a fresh namespace over the rootfs and wait for it."""
    cmd = [
        "unshare", "--mount", "--uts", "--propagation", "private",
        str(HERE / "enter.sh"), str(rootfs), hostname, ":".join(binds), "--", *argv,
    ]  # fmt: skip
    if netns:
        cmd = ["nsenter", f"--net=/run/netns/{netns}", *cmd]
    result = subprocess.run(
        cmd, capture_output=True, text=True, env={**_clean_env(), **(env or {})},
        preexec_fn=default_signals,
    )  # fmt: skip
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
        )
    return result


def default_signals() -> None:
    """Every signal at its default, as init starts a host's daemons: a test run in the
    background of a shell (`make test &`, some CI runners) hands SIGINT and SIGQUIT down
    ignored, a shell cannot undo that, and HTCondor's daemons would pass it to their jobs
    (a job killed by SIGINT would then go on in one pool and die in the other)."""
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def _clean_env() -> dict[str, str]:
    # The host's Python/venv variables mean nothing inside the rootfs.
    keep = ("PATH", "HOME", "LANG", "TERM")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return env


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """Stop a process we started (and its process group) by PID: TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.2)


def record_pid(path: Path, pid: int) -> None:
    """Write `pid` with its start time: a later run must never take (or signal) another
    process that was given the same number after ours died."""
    path.write_text(f"{pid} {_start_time(pid)}\n")


def recorded_pid(path: Path) -> int | None:
    """The PID in `path` if that very process (same start time) is still alive, else None.
    A file without a start time cannot prove the process is ours: None."""
    try:
        pid_text, started = path.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) and _start_time(pid) == started else None


def _start_time(pid: int) -> str | None:
    # Field 22 of /proc/PID/stat, in clock ticks since boot; the fields after the
    # command name, which may itself hold spaces and parentheses.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Pool:
    """One HTCondor pool on loopback, run by condor_master in its own namespace."""

    name: str
    port: int
    execute: bool = False  # the access point has no startd: exported jobs must stay idle
    spool: Path | None = None
    host: str | None = None  # its host name (default: its name), resolved by write_hosts
    extra_config: str = ""  # lines after the pool's own (a later setting wins)

    @property
    def root(self) -> Path:
        return testbed_dir() / self.name

    @property
    def local_dir(self) -> Path:
        return self.root / "local"

    @property
    def spool_dir(self) -> Path:
        return self.spool or self.local_dir / "spool"

    @property
    def config_file(self) -> Path:
        return self.root / "condor_config"

    @property
    def client_config(self) -> Path:
        return self.root / "client_config"

    @property
    def pid_file(self) -> Path:
        return self.root / "master.pid"

    def client_env(self) -> dict[str, str]:
        return {"CONDOR_CONFIG": str(self.client_config)}

    @property
    def fs_auth_dir(self) -> Path:
        return testbed_dir() / "fs-auth"

    def write_configs(self) -> None:
        self.fs_auth_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.fs_auth_dir, 0o1777)
        for sub in ("log", "spool", "execute", "lock", "run", "passwords.d", "tokens.d"):
            (self.local_dir / sub).mkdir(parents=True, exist_ok=True)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.local_dir / "passwords.d", 0o700)
        os.chmod(self.local_dir / "tokens.d", 0o700)
        # The execute dir must be world-traversable for the job's user.
        os.chmod(self.local_dir / "execute", 0o755)
        # The daemons write as the rootfs's `condor` account: chown by number.
        condor_uid, condor_gid = rootfs_ids(rootfs_path(), "condor")
        for sub in ("log", "spool", "execute", "lock", "run"):
            os.chown(self.local_dir / sub, condor_uid, condor_gid)
        os.chown(self.spool_dir, condor_uid, condor_gid)
        daemons = "MASTER, COLLECTOR, NEGOTIATOR, SCHEDD" + (", STARTD" if self.execute else "")
        self.config_file.write_text(
            f"""# testbed pool {self.name}: loopback only, its own port and state
RELEASE_DIR = /usr
LIBEXEC = /usr/libexec/condor
LIB = /usr/lib/condor
SHARE = /usr/share/condor
ETC = {self.root}
LOCAL_DIR = {self.local_dir}
LOG = $(LOCAL_DIR)/log
SPOOL = {self.spool_dir}
EXECUTE = $(LOCAL_DIR)/execute
LOCK = $(LOCAL_DIR)/lock
RUN = $(LOCAL_DIR)/run
DAEMON_SOCKET_DIR = $(RUN)
DAEMON_LIST = {daemons}
MASTER_NAME = {self.name}@{UID_DOMAIN}
SCHEDD_NAME = {self.name}@{UID_DOMAIN}
UID_DOMAIN = {UID_DOMAIN}
TRUST_UID_DOMAIN = TRUE
CONDOR_HOST = 127.0.0.1
NETWORK_INTERFACE = 127.0.0.1
BIND_ALL_INTERFACES = FALSE
ENABLE_IPV6 = FALSE
USE_SHARED_PORT = TRUE
SHARED_PORT_PORT = {self.port}
COLLECTOR_HOST = 127.0.0.1:{self.port}
SEC_PASSWORD_DIRECTORY = $(LOCAL_DIR)/passwords.d
SEC_TOKEN_SYSTEM_DIRECTORY = $(LOCAL_DIR)/tokens.d
SEC_DEFAULT_AUTHENTICATION = REQUIRED
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, IDTOKENS
SEC_CLIENT_AUTHENTICATION_METHODS = FS, IDTOKENS
# FS proves a local account by a directory it makes: a place host clients see too.
FS_LOCAL_DIR = {self.fs_auth_dir}
SEC_DEFAULT_ENCRYPTION = OPTIONAL
SEC_DEFAULT_INTEGRITY = REQUIRED
ALLOW_READ = *
ALLOW_WRITE = *@{UID_DOMAIN} condor_pool@*
ALLOW_DAEMON = condor_pool@* root@{UID_DOMAIN} condor@{UID_DOMAIN}
ALLOW_NEGOTIATOR = condor_pool@* root@{UID_DOMAIN} condor@{UID_DOMAIN}
ALLOW_ADMINISTRATOR = root@{UID_DOMAIN} condor_pool@*
BASE_CGROUP =
CGROUP_MEMORY_LIMIT_POLICY = none
SINGULARITY = /usr/bin/apptainer
SCHEDD_INTERVAL = 5
# The 100,000-job benchmark beside the tests' own jobs: more than HTCondor's default
# 100,000 jobs of one owner in the queue.
MAX_JOBS_PER_OWNER = 200000
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_CYCLE_DELAY = 5
STARTER_UPDATE_INTERVAL = 5
SHADOW_QUEUE_UPDATE_INTERVAL = 10
UPDATE_INTERVAL = 5
RUNBENCHMARKS = 0
NUM_CPUS = 4
START = TRUE
SUSPEND = FALSE
PREEMPT = FALSE
KILL = FALSE
JOB_RENICE_INCREMENT = 0
MAIL = /bin/true
{self.extra_config}"""
        )
        self.client_config.write_text(
            f"""# host-side client of testbed pool {self.name}
COLLECTOR_HOST = 127.0.0.1:{self.port}
SCHEDD_HOST = {self.name}@{UID_DOMAIN}
SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS
SEC_TOKEN_DIRECTORY = {self.root / "client-tokens"}
SEC_CLIENT_INTEGRITY = REQUIRED
ENABLE_IPV6 = FALSE
"""
        )

    def binds(self) -> list[str]:
        return [str(testbed_dir())]

    def is_running(self) -> bool:
        return recorded_pid(self.pid_file) is not None

    def start(self, rootfs: Path) -> None:
        if self.is_running():
            self._make_client_token(rootfs)  # a submitter added since it started
            return
        self.write_configs()
        pid = spawn_in_rootfs(
            rootfs,
            ["/usr/sbin/condor_master", "-f"],
            hostname=f"{self.host or self.name}.{UID_DOMAIN}",
            binds=self.binds(),
            logfile=self.root / "master.out",
            env={"CONDOR_CONFIG": str(self.config_file)},
        )
        record_pid(self.pid_file, pid)
        self._wait_for_schedd(rootfs)
        self._make_client_token(rootfs)
        self._wait_for_schedd_ad(rootfs)

    def condor(self, rootfs: Path, *argv: str, check: bool = True) -> str:
        """Run an HTCondor tool inside the rootfs against this pool (as root)."""
        return run_in_rootfs(
            rootfs, list(argv), binds=self.binds(), env={"CONDOR_CONFIG": str(self.config_file)},
            check=check,
        ).stdout  # fmt: skip

    def _wait_for_schedd(self, rootfs: Path, timeout: float = 60.0) -> None:
        address_file = self.spool_dir / ".schedd_address"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                raise RuntimeError(f"pool {self.name} died; see {self.local_dir / 'log'}")
            if address_file.exists():
                return
            time.sleep(0.2)
        raise RuntimeError(f"pool {self.name}: no schedd after {timeout:.0f} s")

    def _wait_for_schedd_ad(self, rootfs: Path, timeout: float = 60.0) -> None:
        # A client finds the schedd through the collector: its address file alone is not
        # enough (a CI run on a loaded machine submitted before the first advertisement).
        name = f"{self.name}@{UID_DOMAIN}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = self.condor(rootfs, "condor_status", "-schedd", "-af", "Name", check=False)
            if name in listed.split():
                return
            time.sleep(0.5)
        raise RuntimeError(f"pool {self.name}: no ad of {name} after {timeout:.0f} s")

    def token_dir(self, user: str = SUBMITTER) -> Path:
        """The client's token directory for `user`: one user's token each, since a client
        uses any token in its directory (the client config names alice's)."""
        return self.root / ("client-tokens" if user == SUBMITTER else f"client-tokens-{user}")

    def client_env_of(self, user: str) -> dict[str, str]:
        """client_env, authenticated as `user` (a submitter of SUBMITTERS)."""
        return {**self.client_env(), "_CONDOR_SEC_TOKEN_DIRECTORY": str(self.token_dir(user))}

    def _make_client_token(self, rootfs: Path) -> None:
        for user in SUBMITTERS:
            self._make_token_of(rootfs, user)

    def _make_token_of(self, rootfs: Path, user: str) -> None:
        token_dir = self.token_dir(user)
        token_dir.mkdir(mode=0o700, exist_ok=True)
        token_file = token_dir / user
        if token_file.exists():
            return
        # The pool key is created by the collector at start-up; wait for it.
        deadline = time.monotonic() + 30
        while not (self.local_dir / "passwords.d" / "POOL").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"pool {self.name}: no signing key")
            time.sleep(0.2)
        token = self.condor(
            rootfs,
            "condor_token_create",
            "-identity",
            f"{user}@{UID_DOMAIN}",
            "-lifetime",
            str(7 * 24 * 3600),
        )
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token)

    def client_env_as(self, rootfs: Path, user: str) -> dict[str, str]:
        """client_env_of any identity, its token made if missing (e.g. root: an access
        point's cron has root's credentials at the schedd)."""
        self._make_token_of(rootfs, user)
        return self.client_env_of(user)

    def stop(self) -> None:
        pid = recorded_pid(self.pid_file)
        if pid is not None:
            stop_pid(pid)
        self.pid_file.unlink(missing_ok=True)


ACCESS_POINT = Pool("lj-ap", 29618)


def remote_pool(spool: Path, name: str = "lj-remote", port: int = 29619) -> Pool:
    """The second, independent pool of the local round trip: it runs jobs from `spool`."""
    return Pool(name, port, execute=True, spool=spool)


#: Host name of the conformance suite's reference pools (tests/integration/reference_pool.py):
#: a plain pool with a startd that runs the suite's jobs as HTCondor would at home.
REFERENCE_HOST = "lj-reference"


def up() -> dict[str, str]:
    rootfs = ensure_rootfs()
    image = ensure_site_image(rootfs)
    tb = testbed_dir()
    tb.mkdir(parents=True, exist_ok=True)
    os.chmod(tb, 0o755)
    (tb / "rootfs").unlink(missing_ok=True)
    (tb / "rootfs").symlink_to(rootfs)
    write_hosts(rootfs)
    ensure_host_submitter()
    ensure_rootfs_submitters(rootfs)
    started = time.monotonic()
    ACCESS_POINT.start(rootfs)
    log(f"access point pool up in {time.monotonic() - started:.1f} s")
    site().up(rootfs)
    site().install_image(image)
    install_condor_tarball(rootfs)
    return env()


def down() -> None:
    tb = testbed_dir()
    for pid_file in sorted(tb.glob("*/master.pid")):
        pid = recorded_pid(pid_file)
        if pid is not None:
            log(f"stopping {pid_file.parent.name}")
            stop_pid(pid)
        pid_file.unlink()
    site().down()


def env() -> dict[str, str]:
    return {
        "CONDOR_CONFIG": str(ACCESS_POINT.client_config),
        "LUMBERJACK_TESTBED_DIR": str(testbed_dir()),
    }


def root_state_dir(name: str) -> Path:
    """A ledger directory for root: root's at every level (lumberjack refuses root
    state a user could swap), under the testbed's own root-owned directory."""
    base = testbed_dir() / "state"
    base.mkdir(parents=True, exist_ok=True, mode=0o755)
    os.chmod(base, 0o755)
    path = base / name
    path.mkdir(exist_ok=True, mode=0o711)
    return path


def ensure_host_submitter() -> None:
    # The access point knows its submitters: lumberjack chowns bundles and outputs to them.
    import pwd

    for user, uid in SUBMITTERS.items():
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["groupadd", "-g", str(uid), user], check=False)
            subprocess.run(
                ["useradd", "-M", "-u", str(uid), "-g", str(uid), "-s", "/usr/sbin/nologin",
                 user],
                check=True,
            )  # fmt: skip


def ensure_rootfs_submitters(rootfs: Path) -> None:
    """Submitters the rootfs recipe does not make (alice is in it): the schedd runs their
    jobs and starters as them, by name."""
    for user, uid in SUBMITTERS.items():
        try:
            rootfs_ids(rootfs, user)
        except KeyError:
            subprocess.run(["chroot", str(rootfs), "groupadd", "-g", str(uid), user], check=False)
            subprocess.run(
                ["chroot", str(rootfs), "useradd", "-m", "-u", str(uid), "-g", str(uid),
                 "-s", "/bin/bash", user],
                check=True,
            )  # fmt: skip


def write_hosts(rootfs: Path) -> None:
    # Daemons look up their own host name; every testbed "host" on loopback resolves here.
    names = " ".join(
        f"{name} {name}.{UID_DOMAIN}" for name in ("lj-ap", "lj-remote", REFERENCE_HOST)
    )
    (rootfs / "etc/hosts").write_text(
        f"127.0.0.1 localhost {names}\n::1 localhost\n10.251.0.2 hpc-login\n"
    )


def rootfs_ids(rootfs: Path, account: str) -> tuple[int, int]:
    for line in (rootfs / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == account:
            return int(fields[2]), int(fields[3])
    raise KeyError(f"no account {account} in {rootfs}")


def site():  # -> site.Site
    """The emulated HPC site (containers/testbed/site.py; loaded by path, since `site`
    is also the name of a standard-library module)."""
    import importlib.util

    name = "lumberjack_testbed_site"
    if name not in sys.modules:
        sys.modules.setdefault("testbed", sys.modules[__name__])
        spec = importlib.util.spec_from_file_location(name, HERE / "site.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].SITE


def rootfs_path() -> Path:
    return (testbed_dir() / "rootfs").resolve()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "status"
    if command == "up":
        for key, value in up().items():
            print(f"export {key}={value}")
    elif command == "down":
        down()
    elif command == "build":
        rootfs = ensure_rootfs()
        print(rootfs)
        print(ensure_site_image(rootfs))
        print(ensure_condor_tarball(rootfs))
    elif command == "env":
        for key, value in env().items():
            print(f"export {key}={value}")
    elif command == "status":
        status = {
            "access_point": ACCESS_POINT.is_running(),
            "site": site().is_running(),
            "dir": str(testbed_dir()),
        }
        print(json.dumps(status))
    else:
        print("usage: testbed.py up|down|status|env|build", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
