"""Ctrl-C at any moment of the command, from the entry point's first line on (while the
modules still load, too): `error: interrupted`, exit 130, never a Python traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import state_sweep
from testbed import default_signals

#: What the installed console script runs, with a marker just before `main()`: a Ctrl-C
#: earlier (the interpreter importing `site`, then the package's __init__ and errors
#: modules, a millisecond or two) meets Python's own handler, which no line of the project
#: can replace; the last test keeps that window small.
ENTRY = "from lumberjack.__main__ import main; import os; os.write(2, b'>'); main()"


def _interrupted_after(env: dict[str, str], delay: float) -> subprocess.CompletedProcess[str]:
    # As a person's terminal starts it: SIGINT at its default (a test run in the
    # background of a shell, as CI may be, hands it down ignored).
    child = subprocess.Popen([sys.executable, "-c", ENTRY, "sites", "list"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=default_signals)  # fmt: skip
    assert child.stderr is not None and child.stderr.read(1) == b">"
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, out.decode(), err.decode())


def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(tmp_path: Path) -> None:
    env = state_sweep.environment(tmp_path, tmp_path / "state")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")])
    outcomes = set()
    for delay in (0, 0.01, 0.03, 0.05, 0.1, 0.3):
        for _ in range(3):
            done = _interrupted_after(env, delay)
            assert "Traceback" not in done.stderr, (delay, done.stderr)
            if done.returncode == 0:  # the command was done before the signal came
                continue
            # Interpreter shutdown puts the default handler back: a signal after the
            # command is done ends it (by the signal), with nothing to say.
            if done.returncode == -signal.SIGINT and done.stderr == "":
                continue
            assert (done.returncode, done.stderr) == (130, "error: interrupted\n"), delay
            outcomes.add(delay)
    assert {0, 0.01} <= outcomes  # the early moments were interrupted, not missed


def test_the_entry_module_loads_only_what_the_handler_needs() -> None:
    script = (
        "import sys; before = set(sys.modules); import lumberjack.__main__; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    loaded = set(done.stdout.split()) - {"lumberjack", "lumberjack._version"}
    assert loaded <= {"lumberjack.__main__", "lumberjack.errors"}, loaded
