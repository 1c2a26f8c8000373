"""The starter's job wrapper at the site (site/job_wrapper.py): a job killed by a signal
inside its container ends the wrapper by that signal, as the starter sees a job at home;
an exit with 128+N stays an exit; signals the starter sends reach the job; the job's
environment reaches the job byte for byte and the launcher not at all. Run here with a
stand-in launcher that, like `apptainer exec IMAGE COMMAND...`, runs the command (the
static front script that saves the environment runs in the site image: the testbed's
isolation tests drive it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testbed import default_signals

from lumberjack.site import job_wrapper
from lumberjack.site.job_container import WRAPPER_NAME, WRAPPER_PY_NAME, job_container_lines

IMAGE = "/scratch/lumberjack/image/lumberjack-site.sif"
#: The launcher command HTCondor's starter builds (options before the image, as 25.x).
STARTER_ARGS = ["-s", "exec", "-S", "/tmp", "-S", "/var/tmp", "--pwd", "/srv",
                "-B", "/n/execute/dir_7:/srv", "--home", "/n/execute/dir_7", "-C",
                "--no-eval", "-W", "/n/execute/dir_7"]  # fmt: skip
LAUNCHER = """#!/bin/sh
# apptainer exec [options] IMAGE COMMAND...: runs COMMAND (options carry no value here),
# after writing its own environment beside itself.
env > "$(dirname "$0")/launcher.env"
while [ "$1" != exec ]; do shift; done
shift
while [ "${1#-}" != "$1" ]; do shift; done
shift
exec "$@"
"""


@pytest.fixture
def wrapper(tmp_path: Path) -> tuple[str, str]:
    """(the wrapper as the pilots write it, the stand-in launcher)."""
    script = tmp_path / WRAPPER_PY_NAME
    script.write_text(job_wrapper.script(IMAGE))
    launcher = tmp_path / "apptainer"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    return str(script), str(launcher)


#: An environment as the starter hands it over: the job's variables, and its copies of
#: them for Apptainer, pointed at the container's paths.
STARTER_ENV = [
    (b"_CONDOR_SCRATCH_DIR", b"/n/execute/dir_7"),
    (b"APPTAINERENV__CONDOR_SCRATCH_DIR", b"/srv"),
    (b"LD_PRELOAD", b"./hook.so"),
    (b"APPTAINERENV_LD_PRELOAD", b"./hook.so"),
    (b"PYTHONPATH", b"."),
    (b"HOME", b"/home/alice"),
    (b"A.B", b"dotted name"),
    (b"MULTI", b"line one\nline 'two' $x `id` \\"),
    (b"EMPTY", b""),
    (b"LANG", b"C.UTF-8"),  # else the python that stands in for the job adds LC_CTYPE
]


def _saved(directory: Path, env: list[tuple[bytes, bytes]]) -> str:
    """The file the static front script leaves: `env -0` of the starter's environment."""
    path = directory / "job-env.saved"
    path.write_bytes(b"".join(name + b"=" + value + b"\0" for name, value in env))
    return str(path)


def _run(
    wrapper: tuple[str, str], *job: str, image: str = IMAGE,
    env: list[tuple[bytes, bytes]] = STARTER_ENV[:1], ignored: str = "0",
) -> subprocess.Popen:  # fmt: skip
    script, launcher = wrapper
    saved = _saved(Path(script).parent, env)
    command = [sys.executable, "-I", "-S", script, saved, ignored, launcher, "-s", "exec", "-C",
               image, *job]  # fmt: skip
    return subprocess.Popen(command, preexec_fn=default_signals, env={})


#: Every signal a job can die of (1 to 31 less those whose default is to stop, continue or
#: be ignored): HTCondor's signal test kills one job with each.
DEADLY = sorted(
    set(signal.Signals) - {signal.SIGCHLD, signal.SIGCONT, signal.SIGSTOP, signal.SIGTSTP,
                           signal.SIGTTIN, signal.SIGTTOU, signal.SIGURG, signal.SIGWINCH}
    - {s for s in signal.Signals if s >= signal.SIGRTMIN}
)  # fmt: skip


@pytest.mark.skipif(not os.access(job_wrapper.INNER_PYTHON, os.X_OK), reason="no python3 there")
@pytest.mark.parametrize("sig", DEADLY, ids=[s.name for s in DEADLY])
def test_a_job_killed_by_a_signal_ends_the_wrapper_by_it(wrapper, sig: signal.Signals) -> None:
    """All but SIGTRAP, which the starter would never reap: that one is exit 133."""
    ended = _run(wrapper, "/bin/sh", "-c", f"kill -{int(sig)} $$").wait()
    assert ended == (133 if sig == signal.SIGTRAP else -sig)


@pytest.mark.skipif(not os.access(job_wrapper.INNER_PYTHON, os.X_OK), reason="no python3 there")
def test_exit_codes_pass_unchanged_even_128_and_more(wrapper) -> None:
    for code in (0, 1, 143, 255):
        assert _run(wrapper, "/bin/sh", "-c", f"exit {code}").wait() == code


@pytest.mark.skipif(not os.access(job_wrapper.INNER_PYTHON, os.X_OK), reason="no python3 there")
def test_the_starters_signals_reach_the_job(wrapper, tmp_path: Path) -> None:
    """condor_rm and vacate: the starter signals the wrapper, the job dies of it."""
    ready = tmp_path / "ready"
    job = _run(wrapper, "/bin/sh", "-c", f"touch {ready}; exec sleep 60")
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline and job.poll() is None
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=20) == -signal.SIGTERM


def test_only_the_site_images_jobs_get_the_inner_parent() -> None:
    """The parent is the site image's python: a job's own image may have none, so its
    command runs as given (and a command the wrapper cannot read runs as given too)."""
    job = ["/srv/condor_exec.exe", "1", "two words"]
    launcher = ["/usr/bin/apptainer", *STARTER_ARGS]
    job_wrapper.SITE_IMAGE = IMAGE
    try:
        inner = job_wrapper.with_inner_parent([*launcher, IMAGE, *job], 5, 6, "1000")
        assert inner == [*launcher, IMAGE, job_wrapper.INNER_PYTHON, "-I", "-S", "-c",
                         job_wrapper.INNER, "5", "6", "1000", *job]  # fmt: skip
        other = "/scratch/x/spool/lumberjack-images/" + "a" * 64 + ".sif"
        assert job_wrapper.with_inner_parent([*launcher, other, *job], 5, 6) is None
        assert job_wrapper.with_inner_parent(["/usr/bin/apptainer", "version"], 5, 6) is None
    finally:
        job_wrapper.SITE_IMAGE = ""


def test_pilots_name_the_wrapper_only_where_jobs_run_in_containers() -> None:
    lines = job_container_lines("apptainer", IMAGE, pilots_dir="/scratch/e/pilots")
    assert f"USER_JOB_WRAPPER = /scratch/e/pilots/{WRAPPER_NAME}" in lines.splitlines()
    assert "USER_JOB_WRAPPER" not in job_container_lines("none", IMAGE, pilots_dir="/p")


def _environ(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.partition("=")[::2] for line in lines if "=" in line)


@pytest.mark.skipif(not os.access(job_wrapper.INNER_PYTHON, os.X_OK), reason="no python3 there")
def test_the_jobs_environment_reaches_the_job_and_never_the_launcher(wrapper, tmp_path) -> None:
    """Byte for byte, including what Apptainer cannot carry (HOME, a dotted name, a
    value with a newline) and what would steer a program outside the container
    (LD_PRELOAD, PYTHONPATH): the job gets it, the launcher gets lumberjack's PATH only,
    and the saved file is gone once read."""
    dump = tmp_path / "job.env"
    program = (
        f"import os; open({str(dump)!r}, 'wb')"
        ".write(b''.join(k + b'=' + v + b'\\0' for k, v in os.environb.items()))"
    )
    assert _run(wrapper, sys.executable, "-I", "-c", program, env=STARTER_ENV).wait() == 0
    got = [tuple(entry.split(b"=", 1)) for entry in dump.read_bytes().split(b"\0") if entry]
    want = [(n, v) for n, v in STARTER_ENV if not n.startswith(b"APPTAINERENV_")]
    want[0] = (b"_CONDOR_SCRATCH_DIR", b"/srv")  # the starter's copy for inside
    assert got == want
    assert _environ(tmp_path / "launcher.env").keys() <= {"PATH", "PWD", "SHLVL", "_"}
    assert _environ(tmp_path / "launcher.env")["PATH"] == job_wrapper.LAUNCHER_PATH
    assert not (tmp_path / "job-env.saved").exists()


def test_a_job_in_its_own_image_gets_only_the_container_copies() -> None:
    """No python in a job's own image: Apptainer sets the starter's copies inside; the
    launcher still sees none of the job's own names."""
    env = job_wrapper.launcher_environment(STARTER_ENV, with_copies=True)
    assert env == {b"PATH": job_wrapper.LAUNCHER_PATH.encode(),
                   b"APPTAINERENV__CONDOR_SCRATCH_DIR": b"/srv",
                   b"APPTAINERENV_LD_PRELOAD": b"./hook.so"}  # fmt: skip
    assert job_wrapper.launcher_environment(STARTER_ENV, with_copies=False) == {
        b"PATH": job_wrapper.LAUNCHER_PATH.encode()
    }


def test_the_front_script_takes_nothing_from_the_job(tmp_path) -> None:
    """The script the starter runs: a static shell, absolute paths, `env -i` before python,
    python isolated; every placeholder filled."""
    from lumberjack.site.job_container import write_wrapper

    write_wrapper(str(tmp_path), "apptainer", IMAGE)
    text = (tmp_path / WRAPPER_NAME).read_text()
    assert text.startswith("#!/usr/bin/busybox sh\n")
    assert "/usr/bin/busybox env -i PATH=" in text and "/usr/bin/python3 -I -S " in text
    assert "@{" not in text
    for name in (WRAPPER_NAME, WRAPPER_PY_NAME, "job-env"):
        assert (tmp_path / name).stat().st_mode & 0o077 == 0


@pytest.mark.skipif(not os.access(job_wrapper.INNER_PYTHON, os.X_OK), reason="no python3 there")
def test_the_job_ignores_what_the_starter_has_it_ignore(wrapper) -> None:
    """The starter starts a job with SIGPIPE ignored (HTCondor's plain pool: a job that
    sends itself SIGPIPE goes on); the mask the front script read is the job's."""
    pipe = 1 << (signal.SIGPIPE - 1)
    assert _run(wrapper, "/bin/sh", "-c", "kill -13 $$; exit 3", ignored=f"{pipe:x}").wait() == 3
    assert _run(wrapper, "/bin/sh", "-c", "kill -13 $$; exit 3").wait() == -signal.SIGPIPE
