"""A Docker engine for the MiniCondor tier: install it, start it only if none runs, stop
only what we started.

Installs from the host's Debian packages (`docker.io`) with a policy-rc.d that keeps
the package from starting a default engine, and the Compose v2 CLI plugin taken from
Debian sid's `docker-compose` package (bookworm has only Compose v1, pytest-docker needs
`docker compose ... up --wait`). The engine we start has no bridge, no iptables rules
and no forwarding: every compose service of this tier uses the host's network (on
loopback) or none.

Used by the Makefile and by tests/docker/conftest.py:

    python containers/minicondor/engine.py install | status
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "testbed"))

import testbed  # noqa: E402
from image import log  # noqa: E402

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
COMPOSE_PLUGIN = Path("/usr/local/lib/docker/cli-plugins/docker-compose")
# Short, on tmpfs: dockerd's sockets live under the exec root and their paths are limited.
EXEC_ROOT = Path("/run/lumberjack-docker")
LOCK_FILE = Path(tempfile.gettempdir()) / "lumberjack-docker.lock"
DOCKERD_FLAGS = [
    "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false",
    "--ip-masq=false", "--storage-driver=overlay2",
]  # fmt: skip


def data_root() -> Path:
    """Images and containers of an engine we start; kept between runs (the image cache)."""
    return testbed.cache_dir() / "docker-data"


# ---- installing -----------------------------------------------------------------------


def install() -> None:
    """The engine and the Compose v2 plugin, each only if missing."""
    if os.geteuid() != 0 and (shutil.which("dockerd") is None or not compose_works()):
        raise SystemExit("docker tier: installing the engine and the Compose plugin needs root")
    if shutil.which("dockerd") is None:
        started = time.monotonic()
        with _no_service_start():
            _apt_install(["docker.io"])
        log(f"installed docker.io in {time.monotonic() - started:.1f} s")
    if not compose_works():
        started = time.monotonic()
        install_compose_plugin()
        log(f"installed the Compose v2 plugin in {time.monotonic() - started:.1f} s")


def _apt_install(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    logfile = testbed.cache_dir() / "docker-install.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:
        for argv in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        ):
            if subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode:
                raise RuntimeError(f"{' '.join(argv)} failed; see {logfile}")


@contextmanager
def _no_service_start() -> Iterator[None]:
    """A policy-rc.d that denies every service start (exit 101) for the duration of an
    install; whatever was there before is put back."""
    saved = POLICY_RC_D.read_bytes() if POLICY_RC_D.exists() else None
    POLICY_RC_D.write_text("#!/bin/sh\n# installing the docker tier: start nothing\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        if saved is None:
            POLICY_RC_D.unlink()
        else:
            POLICY_RC_D.write_bytes(saved)


def compose_works() -> bool:
    if shutil.which("docker") is None:
        return False
    result = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    return result.returncode == 0


def install_compose_plugin() -> None:
    """sid's `docker-compose` (2.x) carries the v2 CLI plugin, a static Go binary: fetch
    the .deb with apt inside the tier's own sid rootfs and unpack the plugin from it."""
    from image import ensure_rootfs  # the image's rootfs: a copy, never the testbed's

    rootfs = ensure_rootfs()
    with tempfile.TemporaryDirectory(dir=rootfs / "tmp") as tmp:
        os.chmod(tmp, 0o755)  # apt downloads as its own account
        inside = "/" + str(Path(tmp).relative_to(rootfs))
        script = f"cd {inside} && apt-get download -qq docker-compose"
        result = _chroot(rootfs, ["sh", "-c", script], check=False)
        if result.returncode != 0:  # a day-old package list names a .deb the mirror dropped
            _chroot(rootfs, ["apt-get", "update", "-qq"])
            _chroot(rootfs, ["sh", "-c", script])
        (deb,) = Path(tmp).glob("docker-compose_*.deb")
        unpacked = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        (plugin,) = unpacked.glob("usr/lib*/docker/cli-plugins/docker-compose")
        COMPOSE_PLUGIN.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(plugin, COMPOSE_PLUGIN)
        COMPOSE_PLUGIN.chmod(0o755)
    if not compose_works():
        raise RuntimeError(f"{COMPOSE_PLUGIN} does not run here")


def _chroot(rootfs: Path, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["chroot", str(rootfs), *argv], check=check, env=env)


# ---- running --------------------------------------------------------------------------


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    result = subprocess.run(["docker", "info"], capture_output=True, text=True)
    return result.returncode == 0


def why_no_engine() -> str | None:
    """None when an engine runs or can be started here; else the reason."""
    if engine_answers():
        return None
    if shutil.which("dockerd") is None:
        return "no Docker engine runs and dockerd is not installed (make docker-test installs it)"
    if not compose_works():
        return "the Compose v2 plugin is missing (make docker-test installs it)"
    if os.geteuid() != 0:
        return "no Docker engine runs and starting one needs root"
    return None


class Engine:
    """The Docker engine of this tier: the one already running, or one we start (and
    then stop, by the PID we kept)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def started_here(self) -> bool:
        return self.process is not None

    def start(self, timeout: float = 60.0) -> None:
        if engine_answers():
            log("using the Docker engine already running")
            return
        reason = why_no_engine()
        if reason:
            raise RuntimeError(reason)
        EXEC_ROOT.mkdir(parents=True, exist_ok=True)
        data_root().mkdir(parents=True, exist_ok=True)
        logfile = testbed.cache_dir() / "dockerd.log"
        started = time.monotonic()
        with open(logfile, "ab") as out:
            self.process = subprocess.Popen(
                ["dockerd", *DOCKERD_FLAGS, "--data-root", str(data_root()),
                 "--exec-root", str(EXEC_ROOT), "--pidfile", str(EXEC_ROOT / "dockerd.pid")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.pid = self.process.pid
        deadline = time.monotonic() + timeout
        while not engine_answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd exited ({self.process.returncode}); see {logfile}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dockerd did not answer in {timeout:.0f} s; see {logfile}")
            time.sleep(0.1)
        log(f"started dockerd (pid {self.pid}) in {time.monotonic() - started:.1f} s")

    def stop(self) -> None:
        """Stop the engine we started: TERM to its PID (dockerd stops its containers and
        its containerd), wait on that PID (dockerd removes its pidfile itself)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # its own process group: dockerd and containerd
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        log(f"stopped dockerd (pid {self.pid})")
        netns = EXEC_ROOT / "netns" / "default"
        if os.path.ismount(netns):
            subprocess.run(["umount", str(netns)], check=False)
        self.process = None


@contextmanager
def running_engine() -> Iterator[Engine]:
    """An engine for the duration of the block, one tier at a time on this machine."""
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        engine = Engine()
        try:
            engine.start()
            yield engine
        finally:
            engine.stop()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "status"
    if command == "install":
        install()
    elif command == "status":
        reason = why_no_engine()
        print("engine: " + ("running" if engine_answers() else "can be started")
              if reason is None else f"engine: unavailable: {reason}")  # fmt: skip
    else:
        print("usage: engine.py install|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
