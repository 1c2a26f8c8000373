"""The testbed takes a running daemon as its own only when the PID file names that very
process: a run killed without tearing down leaves PID files behind, and their numbers
are given to other processes later (a CI run once took a Docker process for its pool)."""

import subprocess
from pathlib import Path

import testbed


def test_a_recorded_process_is_found_while_it_lives(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "master.pid"
        testbed.record_pid(pid_file, proc.pid)
        assert testbed.recorded_pid(pid_file) == proc.pid
    finally:
        proc.kill()
        proc.wait()
    assert testbed.recorded_pid(pid_file) is None


def test_a_reused_pid_is_not_ours(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "master.pid"
        testbed.record_pid(pid_file, proc.pid)
        pid, started = pid_file.read_text().split()
        pid_file.write_text(f"{pid} {int(started) - 1}\n")  # the same number, an older process
        assert testbed.recorded_pid(pid_file) is None
        pid_file.write_text(f"{pid}\n")  # no start time: nothing proves it is ours
        assert testbed.recorded_pid(pid_file) is None
    finally:
        proc.kill()
        proc.wait()


def test_stopping_a_pool_with_a_stale_pid_file_signals_nobody(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
        pool = testbed.Pool("lj-stale", 1)
        pool.root.mkdir(parents=True)
        pool.pid_file.write_text(f"{bystander.pid}\n")  # a file of an older run, number reused
        assert not pool.is_running()
        pool.stop()
        assert bystander.poll() is None
        assert not pool.pid_file.exists()
    finally:
        bystander.kill()
        bystander.wait()
