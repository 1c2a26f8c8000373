"""The emulated HPC site of the testbed: a login node with sshd and a 3-node Slurm cluster.

Everything runs in one network namespace (`lj-site`, reached from the host through a
veth pair: host 10.251.0.1, site 10.251.0.2) and one mount namespace over the testbed
rootfs, kept alive by one anchor process (a bash script that starts the daemons in the
background and then becomes `sleep infinity`):

- munged (as the rootfs's `munge` account; its socket under the site's state dir so
  that short `run_in_rootfs` commands reach it too);
- slurmctld and three slurmd (`slurmd -N c1..c3`: three nodes on one host, each with
  its own port), partition `debug`; a fourth, `g1`, with 4 cores and 2 GPUs whose
  device files are stand-ins (HTCondor's discovery simulates the GPUs), partition `gpu`;
- sshd on 10.251.0.2:2222, key-only, for the SITE account `hpcuser` (uid 4343), whose
  home is the bind-mounted `site/home/hpcuser`;
- two more sshd that model MFA sites: the key AND a one-time code (TOTP through PAM's
  pam_oath, keyboard-interactive) on port 2223, the same with no connection sharing
  (`MaxSessions 1`) on port 2224; each logs its authentications to its own file
  (`auth_log`), so tests count logins at the site. `otp_code()` is the code of now.

Configs, keys, spools and logs live under testbed_dir()/site. The rootfs's
/etc/slurm/slurm.conf (and cgroup.conf) are symlinks to the site's files, written at
`up` time, so that plain `sbatch` works in an ssh session and in `run_in_rootfs`.

Host-side client material: site/id_ed25519 (hpcuser's key) and site/known_hosts (the
pinned host key, as `[10.251.0.2]:2222 ssh-ed25519 ...`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import testbed
from testbed import log, rootfs_ids, run_in_rootfs, spawn_in_rootfs, stop_pid, testbed_dir

NETNS = "lj-site"
VETH_HOST = "lj-site-h"
VETH_SITE = "lj-site-s"
HOST_ADDR = "10.251.0.1"
SITE_ADDR = "10.251.0.2"
SSH_PORT = 2222
MFA_PORT = 2223  # key + one-time code
MFA_SINGLE_PORT = 2224  # key + one-time code, one session at a time (no sharing)
PAM_SERVICE = "lumberjack-mfa"
HOSTNAME = "hpc-login"
SITE_USER = "hpcuser"
#: PERIODIC_EXPR_INTERVAL of the pools lumberjack starts at the testbed site, set in the
#: site account's SSH sessions as _CONDOR_PERIODIC_EXPR_INTERVAL: HTCondor reads
#: _CONDOR_<KNOB> from its environment, which the agent, Apptainer and sbatch pass on.
#: The testbed's own setting, never part of what lumberjack renders for a site. The
#: schedd evaluates periodic_release/_hold/_remove every 5 s instead of HTCondor's 60:
#: a test's held job is released within seconds, not up to a minute later.
PERIODIC_EXPR_INTERVAL_S = 5
SITE_UID = 4343
NODES = ("c1", "c2", "c3")
PARTITION = "debug"
# The GPU node: more cores than this machine has (slurmd takes the config's word for it)
# and two GPUs whose device files are stand-ins (this machine has no GPU); HTCondor's GPU
# discovery simulates them (the testbed profile's "gpu" queue).
GPU_NODES = ("g1",)
GPU_PARTITION = "gpu"
GPU_NODE_CPUS = 4
GPU_NODE_MEMORY_MB = 4096
GPUS_PER_NODE = 2
ALL_NODES = NODES + GPU_NODES


class Site:
    """The emulated HPC login node + Slurm cluster (one per testbed)."""

    @property
    def root(self) -> Path:
        return testbed_dir() / "site"

    @property
    def home(self) -> Path:
        """Bind-mounted at /home inside the site."""
        return self.root / "home"

    @property
    def user_home(self) -> Path:
        return self.home / SITE_USER

    @property
    def pid_file(self) -> Path:
        return self.root / "anchor.pid"

    @property
    def slurm_dir(self) -> Path:
        return self.root / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_dir / "etc" / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def client_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def otp_secret_file(self) -> Path:
        """hpcuser's TOTP secret (hex), as a person's authenticator app would hold it."""
        return self.ssh_dir / "otp.secret"

    @property
    def otp_users_file(self) -> Path:
        return self.ssh_dir / "users.oath"

    def auth_log(self, port: int) -> Path:
        """The authentication log of the MFA sshd on `port`."""
        return self.ssh_dir / f"sshd-{port}.log"

    def otp_code(self, at: float | None = None) -> str:
        """The TOTP code (RFC 6238: 30 s steps, 6 digits, SHA-1) of `at` (default now)."""
        return totp(bytes.fromhex(self.otp_secret_file.read_text().strip()), at)

    def reset_otp(self) -> None:
        """Forget the last code used: pam_oath refuses a code twice, and tests log in
        more than once within one 30 s step."""
        secret = self.otp_secret_file.read_text().strip()
        fd = os.open(self.otp_users_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"HOTP/T30/6\t{SITE_USER}\t-\t{secret}\n")
        os.chmod(self.otp_users_file, 0o600)

    def mfa_ready(self) -> bool:
        """Whether the running site has the MFA sshds (a site started by an older
        recipe has not)."""
        for port in (MFA_PORT, MFA_SINGLE_PORT):
            try:
                with socket.create_connection((SITE_ADDR, port), timeout=1):
                    pass
            except OSError:
                return False
        return True

    @property
    def host(self) -> str:
        return SITE_ADDR

    @property
    def port(self) -> int:
        return SSH_PORT

    @property
    def user(self) -> str:
        return SITE_USER

    @property
    def image(self) -> Path:
        """Host path of the site image, where the testbed profile's [container] image
        (/home/hpcuser/lumberjack/image/lumberjack-site.sif) points inside the site."""
        return self.user_home / "lumberjack" / "image" / "lumberjack-site.sif"

    @property
    def aarch64_image(self) -> Path:
        """Host path of the aarch64 build (profile testbed-aarch64, run under emulation)."""
        return self.image.with_name("lumberjack-site-aarch64.sif")

    def binds(self) -> list[str]:
        return [str(testbed_dir()), f"{self.home}=/home"]

    def client_env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.slurm_conf)}

    # ---- life cycle ---------------------------------------------------------------

    def is_running(self) -> bool:
        return testbed.recorded_pid(self.pid_file) is not None

    def up(self, rootfs: Path, timeout: float = 60.0) -> None:
        if self.is_running():
            return
        started = time.monotonic()
        self._sweep_netns()  # leftovers of an anchor that died on its own
        ensure_network()
        self.write_configs(rootfs)
        pid = spawn_in_rootfs(
            rootfs,
            ["/bin/bash", str(self.root / "anchor.sh")],
            hostname=HOSTNAME,
            netns=NETNS,
            binds=self.binds(),
            logfile=self.root / "anchor.out",
            env=self.client_env(),
        )
        testbed.record_pid(self.pid_file, pid)
        self._wait_ready(rootfs, started + timeout)
        log(f"site {HOSTNAME} up in {time.monotonic() - started:.1f} s")

    def show_binfmt_misc(self) -> None:
        """Mount binfmt_misc in the running site's namespace unless it is there (a site
        started before enter.sh mounted it): Apptainer looks there for the emulator of an
        image of another architecture."""
        pid = testbed.recorded_pid(self.pid_file)
        assert pid is not None, "the site is not running"
        inside = ["nsenter", "-t", str(pid), "-m", "-r", "-w"]
        where = "/proc/sys/fs/binfmt_misc"
        if subprocess.run([*inside, "test", "-e", f"{where}/register"]).returncode != 0:
            subprocess.run(
                [*inside, "mount", "-t", "binfmt_misc", "binfmt_misc", where], check=True
            )

    def install_image(self, sif: Path, target: Path | None = None) -> None:
        """Put the testbed's site image where the profile expects it (`target`, default
        the testbed profile's image), owned by the site account. A copy (not a hard link,
        which would hand the cache to hpcuser), made only when the installed one differs
        from the cached build."""
        target = target or self.image
        source = sif.stat()
        if target.is_file():
            installed = target.stat()
            if (installed.st_size, installed.st_mtime_ns) == (source.st_size, source.st_mtime_ns):
                return
        for directory in (self.user_home, target.parent.parent, target.parent):
            directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chown(directory, SITE_UID, SITE_UID)
        partial = target.with_name(f".{target.name}.partial")
        shutil.copy2(sif, partial)
        os.chown(partial, SITE_UID, SITE_UID)
        os.chmod(partial, 0o644)
        os.replace(partial, target)

    def down(self) -> None:
        pid = testbed.recorded_pid(self.pid_file)
        if pid is not None:
            log("stopping the site")
            stop_pid(pid, timeout=15)
        self.pid_file.unlink(missing_ok=True)
        self._sweep_netns()
        remove_network()
        remove_cgroups()

    def _sweep_netns(self) -> None:
        # slurmstepd and job processes leave the anchor's process group: stop every
        # process still in the site's network namespace (all of them are the site's).
        for pid in netns_pids():
            stop_pid_only(pid)

    def _wait_ready(self, rootfs: Path, deadline: float) -> None:
        ssh_ok = False
        last = ""
        while time.monotonic() < deadline:
            if not self.is_running():
                raise RuntimeError(f"the site died; see {self.root / 'anchor.out'}")
            if not ssh_ok:
                try:
                    with socket.create_connection((SITE_ADDR, SSH_PORT), timeout=1):
                        ssh_ok = self.mfa_ready()
                except OSError:
                    pass
            if ssh_ok:
                result = run_in_rootfs(
                    rootfs,
                    ["sinfo", "-h", "-N", "-o", "%N %t"],
                    binds=self.binds(),
                    netns=NETNS,
                    env=self.client_env(),
                    check=False,
                )
                last = (result.stdout + result.stderr).strip()
                idle = [
                    line for line in result.stdout.splitlines() if line.split()[-1:] == ["idle"]
                ]
                if len(idle) == len(ALL_NODES):
                    return
            time.sleep(0.3)
        raise RuntimeError(
            f"the site is not ready (sshd {'up' if ssh_ok else 'down'}; sinfo: {last!r}); "
            f"see {self.root}"
        )

    # ---- configuration ------------------------------------------------------------

    def write_configs(self, rootfs: Path) -> None:
        root = self.root
        # Every `up` is a fresh cluster: no jobs or node states from an earlier run.
        for sub in ("state", "run", *(f"spool-{node}" for node in ALL_NODES)):
            shutil.rmtree(self.slurm_dir / sub, ignore_errors=True)
        for sub in (
            root,
            self.slurm_dir / "etc",
            self.slurm_dir / "state",
            self.slurm_dir / "log",
            self.slurm_dir / "run",
            self.ssh_dir,
            self.home,
        ):
            sub.mkdir(parents=True, exist_ok=True)
            os.chmod(sub, 0o755)
        for node in ALL_NODES:
            (self.slurm_dir / f"spool-{node}").mkdir(exist_ok=True)
        self._write_munge(rootfs)
        self._write_keys(rootfs)
        self._write_home()
        self._write_slurm(rootfs)
        self._write_otp(rootfs)
        self._write_sshd()
        (root / "anchor.sh").write_text(self._anchor_script())

    def _write_munge(self, rootfs: Path) -> None:
        uid, gid = rootfs_ids(rootfs, "munge")
        self.munge_dir.mkdir(exist_ok=True)
        os.chown(self.munge_dir, uid, gid)
        os.chmod(self.munge_dir, 0o755)
        key = self.munge_dir / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as out:
                out.write(os.urandom(1024))
        os.chown(key, uid, gid)
        os.chmod(key, 0o400)

    def _write_keys(self, rootfs: Path) -> None:
        host_key = self.ssh_dir / "ssh_host_ed25519_key"
        for path, comment in ((host_key, HOSTNAME), (self.client_key, "lumberjack-testbed")):
            if not path.exists():
                run_in_rootfs(
                    rootfs,
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                    binds=[str(testbed_dir())],
                )
            os.chmod(path, 0o600)
        key_type, key_data = host_key.with_suffix(".pub").read_text().split()[:2]
        self.known_hosts.write_text(
            "".join(
                f"[{SITE_ADDR}]:{port} {key_type} {key_data}\n"
                for port in (SSH_PORT, MFA_PORT, MFA_SINGLE_PORT)
            )
        )
        os.chmod(self.known_hosts, 0o644)

    def _write_home(self) -> None:
        home = self.user_home
        ssh = home / ".ssh"
        ssh.mkdir(parents=True, exist_ok=True)
        os.chown(home, SITE_UID, SITE_UID)
        os.chmod(home, 0o755)
        os.chown(ssh, SITE_UID, SITE_UID)
        os.chmod(ssh, 0o700)
        keys = ssh / "authorized_keys"
        keys.write_text(self.client_key.with_suffix(".pub").read_text())
        os.chown(keys, SITE_UID, SITE_UID)
        os.chmod(keys, 0o600)

    def _write_slurm(self, rootfs: Path) -> None:
        s = self.slurm_dir
        ports = f"{6818}-{6818 + len(NODES) - 1}"
        nodes = f"c[1-{len(NODES)}]"
        gpu_nodes = ",".join(GPU_NODES)
        gpu_ports = f"{6818 + len(NODES)}-{6818 + len(ALL_NODES) - 1}"
        self.slurm_conf.write_text(
            f"""# testbed site: login host "{HOSTNAME}" runs slurmctld and {len(NODES)} slurmd
ClusterName=lj-site
SlurmctldHost={HOSTNAME}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmctldPort=6817
StateSaveLocation={s}/state
SlurmdSpoolDir={s}/spool-%n
SlurmctldPidFile={s}/run/slurmctld.pid
SlurmdPidFile={s}/run/slurmd-%n.pid
SlurmctldLogFile={s}/log/slurmctld.log
SlurmdLogFile={s}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
KillWait=5
MailProg=/bin/true
InactiveLimit=0
SlurmdTimeout=60
GresTypes=gpu
# g1 declares more CPUs than the host has: take the config's word for every node.
SlurmdParameters=config_overrides
NodeName={nodes} NodeHostname={HOSTNAME} NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 \
 Port=[{ports}] State=UNKNOWN
NodeName={gpu_nodes} NodeHostname={HOSTNAME} NodeAddr=127.0.0.1 CPUs={GPU_NODE_CPUS} \
 RealMemory={GPU_NODE_MEMORY_MB} Gres=gpu:{GPUS_PER_NODE} Port=[{gpu_ports}] State=UNKNOWN
PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=01:00:00 State=UP
PartitionName={GPU_PARTITION} Nodes={gpu_nodes} MaxTime=01:00:00 State=UP
"""
        )
        # Slurm ignores a GPU without a device file, and this machine has none: each
        # "GPU" is a character device with /dev/null's numbers (opening it is harmless).
        devices = s / "dev"
        devices.mkdir(exist_ok=True)
        gres = []
        for node in GPU_NODES:
            for index in range(GPUS_PER_NODE):
                device = devices / f"{node}-gpu{index}"
                if not device.exists():
                    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            files = f"{devices}/{node}-gpu[0-{GPUS_PER_NODE - 1}]"
            gres.append(f"NodeName={node} Name=gpu File={files}\n")
        (s / "etc" / "gres.conf").write_text("".join(gres))
        (s / "etc" / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nConstrainCores=no\nConstrainRAMSpace=no\n"
        )
        # Only the site uses Slurm: the rootfs's default paths point at the site's files.
        etc = rootfs / "etc" / "slurm"
        etc.mkdir(exist_ok=True)
        for name in ("slurm.conf", "cgroup.conf", "gres.conf"):
            link = etc / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(s / "etc" / name)

    def _write_otp(self, rootfs: Path) -> None:
        """hpcuser's TOTP secret, pam_oath's users file (root's, writable: pam_oath
        records the last code there) and the PAM service of the MFA sshds."""
        if not self.otp_secret_file.exists():
            fd = os.open(self.otp_secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(os.urandom(20).hex() + "\n")
        self.reset_otp()
        (rootfs / "etc" / "pam.d" / PAM_SERVICE).write_text(
            "# the testbed's MFA logins (containers/testbed/site.py): a one-time code\n"
            f"auth requisite pam_oath.so usersfile={self.otp_users_file} window=2 digits=6\n"
            "account required pam_unix.so\n"
            "session required pam_unix.so\n"
        )

    def _write_sshd(self) -> None:
        common = f"""ListenAddress {SITE_ADDR}
HostKey {self.ssh_dir / "ssh_host_ed25519_key"}
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
PermitRootLogin no
AllowUsers {SITE_USER}
PrintMotd no
Subsystem sftp internal-sftp
SetEnv SLURM_CONF={self.slurm_conf} _CONDOR_PERIODIC_EXPR_INTERVAL={PERIODIC_EXPR_INTERVAL_S}
# sid's OpenSSH throttles a source after connections dropped before authentication
# (the host-key refusal tests make them); every test comes from the same address.
PerSourcePenalties no
"""
        (self.ssh_dir / "sshd_config").write_text(
            f"""# testbed site login node: key-only, hpcuser only
Port {SSH_PORT}
PidFile {self.ssh_dir / "sshd.pid"}
KbdInteractiveAuthentication no
UsePAM no
{common}"""
        )
        for port, extra in ((MFA_PORT, ""), (MFA_SINGLE_PORT, "MaxSessions 1\n")):
            (self.ssh_dir / f"sshd_config_{port}").write_text(
                f"""# testbed site login node as an MFA site: the key AND a one-time code
Port {port}
PidFile {self.ssh_dir / f"sshd-{port}.pid"}
UsePAM yes
PAMServiceName {PAM_SERVICE}
KbdInteractiveAuthentication yes
AuthenticationMethods publickey,keyboard-interactive:pam
{extra}{common}"""
            )

    def _anchor_script(self) -> str:
        q = shlex.quote
        s = self.slurm_dir
        m = self.munge_dir
        node_lines = "\n".join(
            f"/usr/sbin/slurmd -D -N {node} >>{q(str(s / 'log' / f'slurmd-{node}.out'))} 2>&1 &"
            for node in ALL_NODES
        )
        mfa_lines = "\n".join(
            f"/usr/sbin/sshd -D -f {q(str(self.ssh_dir / f'sshd_config_{port}'))} "
            f"-E {q(str(self.auth_log(port)))} &"
            for port in (MFA_PORT, MFA_SINGLE_PORT)
        )
        return f"""#!/bin/bash
# The site's anchor (written by containers/testbed/site.py): start the daemons in the
# background (same process group), then keep the namespaces alive.
set -u
export SLURM_CONF={q(str(self.slurm_conf))}
echo "site anchor $$ on $(hostname) at $(date -u +%FT%TZ)"
rm -f {q(str(self.munge_socket))}*
setpriv --reuid=munge --regid=munge --clear-groups \\
    /usr/sbin/munged -F --key-file={q(str(m / "munge.key"))} \\
    --socket={q(str(self.munge_socket))} --pid-file={q(str(m / "munged.pid"))} \\
    --log-file={q(str(m / "munged.log"))} --seed-file={q(str(m / "munged.seed"))} &
for _ in $(seq 100); do [ -S {q(str(self.munge_socket))} ] && break; sleep 0.1; done
/usr/sbin/slurmctld -D -i >>{q(str(s / "log" / "slurmctld.out"))} 2>&1 &
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
{node_lines}
mkdir -p /run/sshd && chmod 755 /run/sshd
/usr/sbin/sshd -D -e -f {q(str(self.ssh_dir / "sshd_config"))} \\
    >>{q(str(self.ssh_dir / "sshd.log"))} 2>&1 &
{mfa_lines}
exec sleep infinity
"""


# ---- network --------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def ensure_network() -> None:
    """The site's netns and veth pair (idempotent)."""
    if NETNS not in _ip("netns", "list").stdout.split():
        _ip("netns", "add", NETNS)
    if _ip("link", "show", VETH_HOST, check=False).returncode != 0:
        _ip("link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_SITE, "netns", NETNS)
    if f"{HOST_ADDR}/24" not in _ip("-o", "addr", "show", "dev", VETH_HOST).stdout:
        _ip("addr", "add", f"{HOST_ADDR}/24", "dev", VETH_HOST)
    _ip("link", "set", VETH_HOST, "up")
    if f"{SITE_ADDR}/24" not in _ip("-n", NETNS, "-o", "addr", "show", "dev", VETH_SITE).stdout:
        _ip("-n", NETNS, "addr", "add", f"{SITE_ADDR}/24", "dev", VETH_SITE)
    _ip("-n", NETNS, "link", "set", VETH_SITE, "up")
    _ip("-n", NETNS, "link", "set", "lo", "up")


def remove_network() -> None:
    if _ip("link", "show", VETH_HOST, check=False).returncode == 0:
        _ip("link", "del", VETH_HOST, check=False)
    if NETNS in _ip("netns", "list").stdout.split():
        _ip("netns", "del", NETNS, check=False)


def remove_cgroups() -> None:
    """Remove the (empty) cgroup v1 directories proctrack/cgroup made for the nodes."""
    for node in ALL_NODES:
        for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{node}"):
            for path in sorted(top.rglob("*"), key=lambda p: -len(p.parts)) + [top]:
                if path.is_dir():
                    try:
                        path.rmdir()
                    except OSError:
                        pass


def netns_pids() -> list[int]:
    if NETNS not in _ip("netns", "list").stdout.split():
        return []
    out = _ip("netns", "pids", NETNS, check=False).stdout
    return [int(word) for word in out.split() if word.isdigit()]


def stop_pid_only(pid: int, timeout: float = 5.0) -> None:
    """TERM, then KILL, one process of the site by PID (not its group)."""
    import signal

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not testbed._alive(pid):
                return
            time.sleep(0.1)


def totp(secret: bytes, at: float | None = None, step: int = 30, digits: int = 6) -> str:
    """RFC 6238 (HOTP of the 30 s step number, RFC 4226), as pam_oath checks it."""
    import hashlib
    import hmac
    import struct

    counter = int((time.time() if at is None else at) // step)
    digest = hmac.new(secret, struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    number = struct.unpack(">I", digest[offset : offset + 4])[0] & 0x7FFFFFFF
    return str(number % 10**digits).zfill(digits)


SITE = Site()
