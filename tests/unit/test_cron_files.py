"""The systemd units shipped in docs/cron are valid for systemd and their ExecStart runs
as written (with %h, the unit's home, replaced as systemd does)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CRON = Path(__file__).resolve().parents[2] / "docs" / "cron"
UNITS = [CRON / "condor-lumberjack-sync.service", CRON / "condor-lumberjack-sync.timer"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_takes_the_units_without_a_warning(tmp_path):
    for unit in UNITS:
        shutil.copy(unit, tmp_path / unit.name)
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / unit.name) for unit in UNITS)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    (tmp_path / UNITS[0].name).write_text(UNITS[0].read_text().replace("Nice=", "Nicee="))
    worse = subprocess.run(["systemd-analyze", "verify", str(tmp_path / UNITS[0].name)],
                           capture_output=True, text=True)  # fmt: skip
    assert "Unknown key 'Nicee'" in worse.stderr  # the check above can fail


def test_the_service_runs_sync_as_written(tmp_path):
    service = UNITS[0].read_text()
    (line,) = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    home = tmp_path / "home"
    home.mkdir()
    argv = shlex.split(line.removeprefix("ExecStart=").replace("%h", str(home)))
    assert argv[:3] == ["/usr/bin/env", "condor_lumberjack", "sync"]
    env = {**os.environ, "HOME": str(home), "LUMBERJACK_STATE_DIR": str(tmp_path / "state")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (home / ".local" / "state" / "condor-lumberjack" / "sync.log").is_file()
