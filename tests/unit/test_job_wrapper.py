"""The starter's job wrapper at the site (site/job_wrapper.py): a job killed by a signal
inside its container ends the wrapper by that signal, as the starter sees a job at home;
an exit with 128+N stays an exit; signals the starter sends reach the job. Run here with
a stand-in launcher that, like `apptainer exec IMAGE COMMAND...`, runs the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lumberjack.site import job_wrapper
from lumberjack.site.job_container import WRAPPER_NAME, job_container_lines

IMAGE = "/scratch/lumberjack/image/lumberjack-site.sif"
#: The launcher command HTCondor's starter builds (options before the image, as 25.x).
STARTER_ARGS = ["-s", "exec", "-S", "/tmp", "-S", "/var/tmp", "--pwd", "/srv",
                "-B", "/n/execute/dir_7:/srv", "--home", "/n/execute/dir_7", "-C",
                "--no-eval", "-W", "/n/execute/dir_7"]  # fmt: skip
LAUNCHER = """#!/bin/sh
# apptainer exec [options] IMAGE COMMAND...: runs COMMAND (options carry no value here).
while [ "$1" != exec ]; do shift; done
shift
while [ "${1#-}" != "$1" ]; do shift; done
shift
exec "$@"
"""


@pytest.fixture
def wrapper(tmp_path: Path) -> tuple[str, str]:
    """(the wrapper as the pilots write it, the stand-in launcher)."""
    script = tmp_path / WRAPPER_NAME
    script.write_text(job_wrapper.script(IMAGE))
    launcher = tmp_path / "apptainer"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    return str(script), str(launcher)


def _default_signals() -> None:
    """Every signal at its default, as the starter starts a job: a test run in the
    background of a shell would otherwise hand down SIGINT and SIGQUIT ignored."""
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def _run(wrapper: tuple[str, str], *job: str, image: str = IMAGE) -> subprocess.Popen:
    script, launcher = wrapper
    command = [sys.executable, script, launcher, "-s", "exec", "-C", image, *job]
    return subprocess.Popen(command, preexec_fn=_default_signals)


@pytest.mark.skipif(not os.access(job_wrapper.INNER_PYTHON, os.X_OK), reason="no python3 there")
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGILL, signal.SIGTERM])
def test_a_job_killed_by_a_signal_ends_the_wrapper_by_it(wrapper, sig: signal.Signals) -> None:
    assert _run(wrapper, "/bin/sh", "-c", f"kill -{sig.name.removeprefix('SIG')} $$").wait() == -sig


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
        inner = job_wrapper.with_inner_parent([*launcher, IMAGE, *job], 5)
        assert inner == [*launcher, IMAGE, job_wrapper.INNER_PYTHON, "-c", job_wrapper.INNER,
                         "5", *job]  # fmt: skip
        other = "/scratch/x/spool/lumberjack-images/" + "a" * 64 + ".sif"
        assert job_wrapper.with_inner_parent([*launcher, other, *job], 5) is None
        assert job_wrapper.with_inner_parent(["/usr/bin/apptainer", "version"], 5) is None
    finally:
        job_wrapper.SITE_IMAGE = ""


def test_pilots_name_the_wrapper_only_where_jobs_run_in_containers() -> None:
    lines = job_container_lines("apptainer", IMAGE, pilots_dir="/scratch/e/pilots")
    assert f"USER_JOB_WRAPPER = /scratch/e/pilots/{WRAPPER_NAME}" in lines.splitlines()
    assert "USER_JOB_WRAPPER" not in job_container_lines("none", IMAGE, pilots_dir="/p")
