"""crashpoints: the names are one list, each is in the code once, and a named point kills."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lumberjack.core import crashpoints
from lumberjack.core.crashpoints import ENV, POINTS, UnknownCrashPoint, armed, crash_point

PACKAGE = Path(crashpoints.__file__).resolve().parents[1]


def test_at_least_twenty_points_covering_every_step() -> None:
    assert len(POINTS) >= 20
    steps = {name.split(".")[0] for name in POINTS}
    assert steps == {
        "export",
        "ship",
        "launch",
        "stop",
        "fetch",
        "import",
        "cleanup",
        "lease",
        "joined",
    }


def test_every_point_is_reached_from_the_code_exactly_once() -> None:
    uses: dict[str, int] = dict.fromkeys(POINTS, 0)
    for path in PACKAGE.rglob("*.py"):
        if path.name == "crashpoints.py":
            continue
        for name in re.findall(r'crash_point\("([^"]+)"\)', path.read_text()):
            assert name in POINTS, f"{path}: {name} is not in POINTS"
            uses[name] += 1
    assert {name: n for name, n in uses.items() if n != 1} == {}


def test_nothing_armed_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert armed() is None
    crash_point("import.before-merge")  # still alive


def test_another_point_armed_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "ship.before-upload")
    assert armed() == "ship.before-upload"
    crash_point("import.before-merge")


def test_a_misspelt_point_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "import.after-marge")
    with pytest.raises(UnknownCrashPoint, match="import.after-marge"):
        crash_point("import.before-merge")
    monkeypatch.delenv(ENV)
    with pytest.raises(UnknownCrashPoint):
        crash_point("no.such-point")


def test_the_named_point_kills_the_process_with_sigkill() -> None:
    code = (
        "from lumberjack.core.crashpoints import crash_point\n"
        "crash_point('fetch.after-stop')\n"
        "print('survived')\n"
    )
    env = {**os.environ, ENV: "fetch.after-stop"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == -signal.SIGKILL
    assert "survived" not in result.stdout
    assert "crash point fetch.after-stop reached" in result.stderr


def test_the_command_line_refuses_a_misspelt_point() -> None:
    env = {**os.environ, ENV: "export.mid-cpy"}
    result = subprocess.run(
        [sys.executable, "-m", "lumberjack", "exports"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 1
    assert "export.mid-cpy" in result.stderr and "names no crash point" in result.stderr
