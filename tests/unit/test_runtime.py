"""Container runtimes (site/runtime.py): the commands each renders, the pool's start and
stop driven for real through stand-in programs, and the shipped HTCondor tarball's
unpacking, which refuses hostile members and leaves nothing behind."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core.answers import PoolStarted
from lumberjack.core.contract import ExportLayout, ReleasePlan
from lumberjack.site import remote_pool
from lumberjack.site import runtime as runtime_module
from lumberjack.site.batch import get_batch_system
from lumberjack.site.files import AgentError
from lumberjack.site.pools import LoginNode, Own, Pool
from lumberjack.site.pools.pool import ensure_release
from lumberjack.site.processes import pool_processes
from lumberjack.site.remote_pool import PoolSettings
from lumberjack.site.runtime import (
    RUNTIMES,
    Apptainer,
    NoContainer,
    PodmanHPC,
    ReleaseError,
    Singularity,
    get_runtime,
    sha256_of,
    unpack_release,
)

site_bundle = load_fixture_module("site_bundle")

ROOT = "/scratch/lj/calib"
CONFIG = f"{ROOT}/pilots/condor_config"


def settings(runtime: str = "apptainer", root: str = ROOT, **overrides) -> PoolSettings:
    values = dict(
        layout=ExportLayout(root),
        site_user="hpcuser",
        address="10.0.0.5",
        port=40123,
        image="/images/lumberjack-site.sif",
        binds=("/scratch/data",),
        runtime_name=runtime,
    )
    values.update(overrides)
    return PoolSettings(**values)


# ---- the rendered commands ----------------------------------------------------------------


def test_every_profile_runtime_has_a_class() -> None:
    from lumberjack.profiles.value_types import RUNTIMES as PROFILE_RUNTIMES

    assert set(RUNTIMES) == set(PROFILE_RUNTIMES)
    assert get_runtime("singularity", ROOT).pool_name == "lumberjack-calib"
    with pytest.raises(ValueError, match="unknown container runtime 'shifter'"):
        get_runtime("shifter", ROOT)


def test_apptainer_wraps_a_command_as_before() -> None:
    runtime = Apptainer(root=ROOT, image="/images/site image.sif", binds=("/data",))
    wrapped = runtime.wrap(CONFIG, "condor_master", "-f")
    confined = " ".join(shlex.quote(a) for a in runtime_module.confinement_args())
    assert confined.startswith("--contain --pid --no-mount cwd,bind-paths ")
    assert wrapped == (
        f"apptainer -s exec {confined} --bind {ROOT} --bind /data "
        "--bind '/images/site image.sif:/images/site image.sif:ro' '/images/site image.sif' "
        f"env CONDOR_CONFIG={CONFIG} condor_master -f"
    )
    singularity = Singularity(root=ROOT, image="/images/site image.sif", binds=("/data",))
    assert singularity.wrap(CONFIG, "condor_master", "-f") == "singularity" + wrapped[9:]


def test_emulated_apptainer_runs_the_pilot_but_gives_jobs_no_container() -> None:
    """Test sites only (testbed-aarch64): qemu-user cannot make the nested container."""
    from lumberjack.profiles.isolation import CONTAINED_RUNTIMES

    emulated = get_runtime("apptainer-emulated", ROOT, image="/images/site image.sif")
    plain = Apptainer(root=ROOT, image="/images/site image.sif")
    assert emulated.wrap(CONFIG, "condor_master", "-f") == plain.wrap(CONFIG, "condor_master", "-f")
    config = remote_pool.pilot_config(settings("apptainer-emulated"))
    assert "SINGULARITY_JOB" not in config
    assert "# Runtime apptainer-emulated: jobs run beside the startd" in config
    assert "SINGULARITY_JOB = TRUE" in remote_pool.pilot_config(settings())
    # So other owners' exports are kept off the account unless it is declared shared.
    assert "apptainer-emulated" not in CONTAINED_RUNTIMES


# A stand-in for the `singularity` command spython runs (Apptainer installs it as its
# other name): it records each call and keeps one instance, a real process of its own
# (the instance's init; LJ_INIT_IGNORES_TERM: one that ignores SIGTERM), whose PID it
# keeps in a file and lists while the process runs.
STAND_IN = """#!/usr/bin/env python3
import json, os, signal, subprocess, sys
args = sys.argv[1:]
with open(os.environ["LJ_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
state = os.environ["LJ_INSTANCE"]
words = [a for a in args if not a.startswith("-")]

def running():
    try:
        pid = int(open(state).read())
        stat = open(f"/proc/{pid}/stat").read()
    except (OSError, ValueError):
        return None
    return pid if stat.rsplit(")", 1)[1].split()[0] != "Z" else None

if words[:2] == ["instance", "list"]:
    pid = running()
    found = [{"instance": words[2], "pid": pid, "img": "/i/site.sif"}] if pid else []
    print(json.dumps({"instances": found}))
elif words[:2] == ["instance", "start"]:
    trap = "trap '' TERM; " if os.environ.get("LJ_INIT_IGNORES_TERM") else ""
    init = subprocess.Popen(["sh", "-c", trap + "exec sleep 60"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open(state, "w").write(str(init.pid))
elif words[:2] == ["instance", "stop"]:
    os.kill(running(), signal.SIGKILL)
    os.unlink(state)
elif words[:1] == ["exec"]:
    command = args[args.index(words[1]) + 1:]
    os.execvp(command[0], command)
"""


def stand_in_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put STAND_IN on PATH; the file its calls go to, one JSON list a line."""
    stand_in = tmp_path / "bin" / "singularity"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("LJ_CALLS", str(calls))
    monkeypatch.setenv("LJ_INSTANCE", str(tmp_path / "instance"))
    return calls


def test_apptainer_pool_is_an_instance_driven_through_spython(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_apptainer(tmp_path, monkeypatch)
    runtime = Apptainer(root=ROOT, image="/i/site.sif", binds=("/data",))

    assert runtime.pool_exists() is False
    runtime.start_container()
    assert runtime.pool_exists() is True
    init = int((tmp_path / "instance").read_text())
    assert runtime.run_in_pool("/c", "printenv", "CONDOR_CONFIG") == (0, "/c\n")
    assert runtime.run_in_pool("/c", "false")[0] != 0
    runtime.stop_container()
    assert runtime.pool_exists() is False
    assert not runtime_module._running(init)

    made = [json.loads(line) for line in calls.read_text().splitlines()]
    (start,) = [c for c in made if "start" in c]
    assert start[start.index("start") + 1:] == [
        *runtime_module.confinement_args(instance=True),
        "--bind", ROOT, "--bind", "/data", "/i/site.sif", "lumberjack-calib",
    ]  # fmt: skip
    # Its own PID namespace, no home, no current directory, none of the site's binds.
    assert {"--containall", "cwd,bind-paths"} <= set(start)
    # Stopped by its init's SIGTERM, without Apptainer's slower `instance stop`.
    assert not [c for c in made if "stop" in c]
    assert any("instance://lumberjack-calib" in c for c in made)
    assert runtime.master_command("/p") == ("condor_master",)


def test_an_instance_that_ignores_sigterm_is_stopped_by_apptainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_apptainer(tmp_path, monkeypatch)
    monkeypatch.setenv("LJ_INIT_IGNORES_TERM", "1")
    monkeypatch.setattr(runtime_module, "INSTANCE_STOP_S", 0.5)
    runtime = Apptainer(root=ROOT, image="/i/site.sif")
    runtime.start_container()
    init = int((tmp_path / "instance").read_text())
    runtime.stop_container()
    assert runtime.pool_exists() is False
    assert not runtime_module._running(init)
    (stop,) = [c for c in map(json.loads, calls.read_text().splitlines()) if "stop" in c]
    assert stop[-1] == "lumberjack-calib"
    assert runtime.release_lines() == remote_pool.RELEASE_LINES


def test_podman_hpc_renders_nerscs_documented_form() -> None:
    """`podman-hpc run --rm [--net host] -v SRC:DST ... IMAGE CMD` (NERSC's podman-hpc
    documentation and repository; see the class docstring)."""
    runtime = PodmanHPC(root=ROOT, image="lumberjack-site:25.14", binds=("/data", "/a:/b:ro"))
    words = shlex.split(runtime.wrap(CONFIG, "condor_master", "-f"))
    assert words == [
        "podman-hpc", "run", "--rm", "--net", "host", "--userns", "keep-id",
        "-v", f"{ROOT}:{ROOT}", "-v", "/data:/data", "-v", "/a:/b:ro",
        "lumberjack-site:25.14", "env", f"CONDOR_CONFIG={CONFIG}",
        "condor_master", "-f",
    ]  # fmt: skip
    start = runtime.start_argv()
    assert start[:6] == ["podman-hpc", "run", "-d", "--rm", "--name", "lumberjack-calib"]
    assert start[-3:] == ["lumberjack-site:25.14", "sleep", "infinity"]
    assert ["--net", "host"] == start[6:8] and f"{ROOT}:{ROOT}" in start
    assert runtime.argv("/c", "condor_q") == [
        "podman-hpc", "exec", "lumberjack-calib", "env", "CONDOR_CONFIG=/c", "condor_q",
    ]  # fmt: skip
    assert runtime.stop_argv() == ["podman-hpc", "stop", "lumberjack-calib"]
    assert runtime.check_argv() == ["podman-hpc", "container", "exists", "lumberjack-calib"]
    assert runtime.running(subprocess.CompletedProcess([], 0, "", ""))
    assert not runtime.running(subprocess.CompletedProcess([], 1, "", ""))
    assert runtime.missing_image() is None  # an image name: podman-hpc pulls or migrates it


def test_no_container_runs_the_shipped_release(tmp_path: Path) -> None:
    release = tmp_path / "htcondor" / "abc"
    (release / "sbin").mkdir(parents=True)
    runtime = NoContainer(root=ROOT, release=str(release))
    assert runtime.missing_image() == (
        f"no HTCondor release at {release} (sbin/condor_master is missing)"
    )
    (release / "sbin" / "condor_master").write_text("")
    assert runtime.missing_image() is None
    assert shlex.split(runtime.wrap(CONFIG, "condor_master", "-f"), posix=True) == [
        "env", f"CONDOR_CONFIG={CONFIG}", f"PATH={release}/bin:{release}/sbin:$PATH",
        "condor_master", "-f",
    ]  # fmt: skip
    (release / "lib").mkdir()
    wrapped = runtime.wrap(CONFIG, "condor_master", "-f")
    assert f"LD_LIBRARY_PATH={release}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" in wrapped
    argv = runtime.argv("/c", "condor_q")
    assert argv[:2] == ["env", "CONDOR_CONFIG=/c"] and argv[-1] == "condor_q"
    assert argv[2].startswith(f"PATH={release}/bin:{release}/sbin:")
    assert argv[3].startswith(f"LD_LIBRARY_PATH={release}/lib")
    assert runtime.start_argv() is None and runtime.stop_argv() is None
    assert runtime.check_argv() is None
    assert runtime.master_command("/x/master.pid") == ("condor_master", "-pidfile", "/x/master.pid")
    lines = remote_pool.pool_config(settings("none", release=str(release)))
    for name, value in (("RELEASE_DIR", ""), ("SBIN", "/sbin"), ("BIN", "/bin"),
                        ("LIBEXEC", "/libexec"), ("LIB", "/lib")):  # fmt: skip
        assert f"\n{name} = {release}{value}\n" in lines
    assert "/usr" not in remote_pool.pilot_config(settings("none", release=str(release)))


# ---- node.sh for every runtime, run for real ---------------------------------------------

# Stands in for every runtime's program: whatever wraps condor_master, the command ends
# in "condor_master -f", which runs until TERM and writes the master's address.
STUB = """#!/bin/bash
printf '%s\\n' "$0" "$@" "env:${CONDOR_CONFIG:-}" > "$STUB_DIR/call-$(date +%s%N)-$$"
for arg in "$(basename "$0")" "$@"; do
    if [ "$arg" = condor_master ]; then
        echo "<10.0.0.9:9618>" > "$LJ_NODE_DIR/log/.master_address"
        trap 'exit 0' TERM
        while :; do sleep 0.05; done
    fi
done
"""


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_node_script_runs_each_runtimes_master(tmp_path: Path, name: str) -> None:
    root = tmp_path / "my exports" / "calib"
    release = tmp_path / "release"
    stub = tmp_path / "bin"
    for directory in (stub, release / "sbin"):
        directory.mkdir(parents=True)
    for path in (stub / "apptainer", stub / "singularity", stub / "podman-hpc",
                 stub / "srun", release / "sbin" / "condor_master"):  # fmt: skip
        path.write_text(STUB)
        path.chmod(0o755)
    calls = tmp_path / "calls"
    calls.mkdir()
    pool = settings(name, str(root), image="site:1" if name == "podman-hpc" else "/i.sif",
                    release=str(release))  # fmt: skip
    script = Path(pool.layout.node_script)
    script.parent.mkdir(parents=True)
    script.write_text(
        remote_pool.node_script(
            pool, batch=get_batch_system("slurm"), cores=1, memory_mb=0, walltime_s=600,
            retire_s=60,
        )
    )  # fmt: skip
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "STUB_DIR": str(calls),
           "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "c1"}  # fmt: skip
    env.pop("CONDOR_CONFIG", None)  # only the runtime sets it
    proc = subprocess.Popen([str(script)], env=env, stdout=subprocess.PIPE, text=True)
    node_log = Path(pool.layout.pilots, "nodes", "pilot-77-c1", "log", ".master_address")
    try:
        deadline = time.monotonic() + 60  # a bound, not a measure: a loaded machine is slow
        while not node_log.exists():
            assert time.monotonic() < deadline, "the master never started"
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(10)
    (first,) = [call.read_text().splitlines() for call in calls.iterdir()]
    if name == "none":  # the release's own program, its config in the environment
        assert first == [str(release / "sbin" / "condor_master"), "-f",
                         f"env:{pool.layout.pilot_config}"]  # fmt: skip
    else:  # the runtime's program, which runs `env CONDOR_CONFIG=... condor_master -f`
        # CSCS's Container Engine is an option of Slurm's srun.
        program = {"container-engine": "srun", "apptainer-emulated": "apptainer"}.get(name, name)
        assert first[0] == str(stub / program)
        assert first[-3:] == ["condor_master", "-f", "env:"]
        assert f"CONDOR_CONFIG={pool.layout.pilot_config}" in first


# ---- the pool on the login node, runtime "none", driven for real ---------------------------

# A stand-in release's condor_master: without -f it puts itself in the background and
# writes its pid (as the real one does with -pidfile); with -f it "is" the schedd too.
STUB_MASTER = """#!/bin/bash
if [ "$1" = -pidfile ]; then
    "$0" -f < /dev/null > /dev/null 2>&1 &
    echo $! > "$2"
    exit 0
fi
spool=$(sed -n 's/^SPOOL = //p' "$CONDOR_CONFIG")
echo "<10.0.0.5:9618>" > "$spool/.schedd_address"
trap 'exit 0' TERM
while :; do sleep 0.05; done
"""


def test_no_container_pool_starts_and_stops_by_its_pid(tmp_path: Path) -> None:
    release = tmp_path / "release"
    (release / "sbin").mkdir(parents=True)
    (release / "sbin" / "condor_master").write_text(STUB_MASTER)
    (release / "sbin" / "condor_master").chmod(0o755)
    pool = settings("none", str(tmp_path / "calib"), image="", release=str(release))
    Path(pool.layout.spool).mkdir(parents=True)
    shipped = ReleasePlan("0" * 64, str(tmp_path / "r.tar.gz"), str(release))
    plan = site_bundle.launch_plan(runtime="none", image="", condor_release=shipped)
    login = Pool(pool.layout, plan, LoginNode, Own)
    answer = login.start_pool(pool)
    assert answer == PoolStarted(True, collector="10.0.0.5:40123")
    pid = int(Path(pool.layout.master_pid).read_text())
    assert pool_processes(pool.layout, "condor_master") == [pid]
    assert login.instance_running()
    assert login.start_pool(pool).reason == "already running"
    login.stop_pool()
    login.wait_gone(None)
    assert not login.instance_running()


# ---- the shipped tarball -------------------------------------------------------------------


def make_tarball(path: Path, extra: list[tarfile.TarInfo] = ()) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in (("condor-1/sbin/condor_master", b"#!/bin/sh\n"),
                           ("condor-1/lib/libcondor.so", b"lib")):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o4755
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("condor-1/lib/libcondor.so.1")
        link.type, link.linkname = tarfile.SYMTYPE, "libcondor.so"
        archive.addfile(link)
        for info in extra:
            archive.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def test_unpack_release_once_atomically(tmp_path: Path) -> None:
    tarball = make_tarball(tmp_path / "abc.tar.gz")
    target = tmp_path / "htcondor" / "abc"
    from lumberjack.site.runtime import sha256_of

    assert unpack_release(str(tarball), str(target), sha256_of(str(tarball))) is True
    master = target / "sbin" / "condor_master"
    assert master.read_bytes() == b"#!/bin/sh\n"
    assert master.stat().st_mode & 0o7777 == 0o755  # no setuid from a tarball
    assert os.readlink(target / "lib" / "libcondor.so.1") == "libcondor.so"
    assert unpack_release(str(tarball), str(target)) is False  # once
    assert sorted(p.name for p in target.parent.iterdir()) == ["abc"]  # no temp dir left
    with pytest.raises(ReleaseError, match="is not the HTCondor tarball that was shipped"):
        unpack_release(str(tarball), str(tmp_path / "other"), "0" * 64)


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (_member("/etc/cron.d/evil"), "member '/etc/cron.d/evil' is absolute"),
        (_member("condor-1/../../evil"), "member 'condor-1/../../evil' contains '..'"),
        (_member("condor-1/lib/out", tarfile.SYMTYPE, "../../../etc/passwd"),
         "link 'condor-1/lib/out' points outside the release"),
        (_member("condor-1/lib/abs", tarfile.SYMTYPE, "/etc/passwd"),
         "link 'condor-1/lib/abs' points to an absolute path"),
        (_member("condor-1/lib/hard", tarfile.LNKTYPE, "../x"),
         "link 'condor-1/lib/hard' points outside the release"),
        (_member("condor-1/dev/sda", tarfile.BLKTYPE), "member 'condor-1/dev/sda' is a device"),
        (_member("condor-1/dev/tty", tarfile.CHRTYPE), "member 'condor-1/dev/tty' is a device"),
    ],
)  # fmt: skip
def test_unpack_refuses_hostile_members_and_leaves_nothing(
    tmp_path: Path, member: tarfile.TarInfo, reason: str
) -> None:
    tarball = make_tarball(tmp_path / "bad.tar.gz", [member])
    target = tmp_path / "htcondor" / "bad"
    with pytest.raises(ReleaseError) as caught:
        unpack_release(str(tarball), str(target))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"refusing the HTCondor tarball: {reason}")
    assert list(target.parent.iterdir()) == []
    assert not (tmp_path / "etc").exists() and not (tmp_path / "evil").exists()


def test_agent_launch_refuses_a_hostile_tarball_in_one_line(tmp_path: Path) -> None:
    tarball = make_tarball(tmp_path / "bad.tar.gz", [_member("/abs")])
    release = ReleasePlan(sha256_of(str(tarball)), str(tarball), str(tmp_path / "rel"))
    plan = site_bundle.launch_plan(runtime="none", image="", condor_release=release)
    with pytest.raises(AgentError, match="^refusing the HTCondor tarball: member '/abs'"):
        ensure_release(plan)
    assert not (tmp_path / "rel").exists()
