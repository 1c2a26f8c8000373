"""The bad-state sweep's driver: every command of the click group, run as a real
`python -m lumberjack` process against one bad state directory, before and after a
snapshot of every byte and mtime under it.

    python state_sweep.py CASE BASE     # prints one JSON object: {"results": [...]}

A case that needs a file system of its own (read-only, full) runs this driver inside a
private mount namespace (`unshare -m`): its mounts vanish with the namespace, so nothing
is left mounted even when a test fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import click

#: Each case: (how to make the bad state under BASE -> the state dir, the exit code every
#: command that uses the state must give, whether it needs mounts when run as root).
ROOT = os.geteuid() == 0
MOUNT_CASES_AS_ROOT = {"unwritable", "ledger_readonly"}
MOUNT_CASES = {"full"}
CASE_CODES = {
    "missing": 6,
    "file": 6,
    "unwritable": 6,
    "ledger_garbage": 6,
    "ledger_damaged": 6,
    "ledger_dir": 6,
    "ledger_readonly": 6,
    "locked": 4,
    "full": 6,
}
TIMEOUT_S = 120


#: Beyond each command with placeholders: good input for the commands whose placeholders
#: stop at their input checks, so these reach the state (and would go on to the schedd).
GOOD_INPUT = [
    ("export", "--ids", "1", "--site", "testbed"),
    ("run", "--ids", "1", "--site", "testbed", "--no-wait"),
    ("lease", "create", "pool", "--site", "testbed"),
]


def needs_mounts(case: str) -> bool:
    return case in MOUNT_CASES or (ROOT and case in MOUNT_CASES_AS_ROOT)


def commands() -> list[tuple[str, ...]]:
    """Every leaf command as its words, with a placeholder for each required argument
    and option (so the command gets past click to its own checks)."""
    from lumberjack.cli import cli

    found: list[tuple[str, ...]] = []

    def walk(group: click.Group, words: tuple[str, ...]) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                walk(command, (*words, name))
                continue
            args = [*words, name]
            for param in command.params:
                if param.required and isinstance(param, click.Argument):
                    args.append("nosuch")
                elif param.required and isinstance(param, click.Option):
                    args += [param.opts[0], "nosuch"]
            found.append(tuple(args))

    walk(cli, ())
    return found


def environment(base: Path, state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUMBERJACK_", "_CONDOR"))}
    (base / "home").mkdir(exist_ok=True)
    empty = base / "condor_config"
    empty.write_text("")
    env.update(
        LUMBERJACK_STATE_DIR=str(state),
        LUMBERJACK_LEDGER_WAIT="0.2",
        HOME=str(base / "home"),
        CONDOR_CONFIG=str(empty),  # no schedd: input and state are checked first
    )
    if os.environ.get("LUMBERJACK_TESTBED_DIR"):  # the testbed's profiles stay known
        env["LUMBERJACK_TESTBED_DIR"] = os.environ["LUMBERJACK_TESTBED_DIR"]
    return env


def snapshot(top: Path) -> dict[str, Any]:
    """Every entry under `top`: mode, size, mtime and the content's digest."""
    seen: dict[str, Any] = {}
    if not os.path.lexists(top):
        return seen
    for path in [top, *sorted(top.rglob("*"))] if top.is_dir() else [top]:
        info = os.lstat(path)
        digest = None
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        seen[str(path)] = [info.st_mode, info.st_size, info.st_mtime_ns, digest]
    return seen


def run(words: tuple[str, ...], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "lumberjack", *words],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    return {"args": list(words), "code": proc.returncode, "stdout": proc.stdout,
            "stderr": proc.stderr}  # fmt: skip


# ---- the bad states ------------------------------------------------------------------


def _seed(state: Path) -> None:
    """A ledger with an export and a lease in it."""
    from lumberjack.state.ledger import Ledger

    ledger = Ledger(state)
    ledger.create("calib", site="testbed", bundle_dir=state / "bundles" / "calib",
                  remote_spool="/s", owner="alice", clusters=[7], jobs=["7.0"])  # fmt: skip
    ledger.create_lease("pool", site="testbed", info={})
    ledger.close()


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def make(case: str, base: Path) -> tuple[Path, subprocess.Popen[str] | None]:
    """Make the bad state; the state dir and a process to stop afterwards (or None)."""
    state = base / "state"
    if case == "missing":
        (base / "blocker").write_text("a file where the state dir's parent should be\n")
        return base / "blocker" / "state", None
    if case == "file":
        state.write_text("not a directory\n")
        return state, None
    if case == "full":
        (base / "small").mkdir()
        _mount("-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(base / "small"))
        state = base / "small" / "state"
    _seed(state)
    ledger = state / "ledger.sqlite"
    if case == "unwritable":
        if ROOT:
            _mount("--bind", str(state), str(state))
            _mount("-o", "remount,bind,ro", str(state))
        else:
            state.chmod(0o500)
    elif case == "ledger_garbage":
        ledger.write_bytes(os.urandom(8192))
    elif case == "ledger_damaged":
        data = bytearray(ledger.read_bytes())
        data[4096:] = os.urandom(len(data) - 4096)  # every page but the header's
        ledger.write_bytes(bytes(data))
    elif case == "ledger_dir":
        ledger.unlink()
        ledger.mkdir()
    elif case == "ledger_readonly":
        if ROOT:
            _mount("--bind", str(ledger), str(ledger))
            _mount("-o", "remount,bind,ro", str(ledger))
        else:
            ledger.chmod(0o400)
    elif case == "locked":
        return state, _hold_lock(ledger)
    elif case == "full":
        with open(base / "small" / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
    return state, None


def _hold_lock(ledger: Path) -> subprocess.Popen[str]:
    """Another process with the ledger locked for writing (exclusive, readers too)."""
    code = (
        "import sqlite3, sys\n"
        f"db = sqlite3.connect({str(ledger)!r}, isolation_level=None)\n"
        "db.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "db.execute(\"UPDATE exports SET updated = updated WHERE name = 'calib'\")\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


# ---- the sweep -----------------------------------------------------------------------


def uses_state(words: tuple[str, ...], base: Path) -> tuple[bool, int]:
    """Whether the command opens the ledger in a good, empty state dir; its exit code."""
    state = base / "fresh" / "-".join(words)
    env = environment(base, state)
    result = run(words, env, base)
    return (state / "ledger.sqlite").exists(), result["code"]


def baselines(base: Path) -> dict[tuple[str, ...], tuple[bool, int]]:
    """Per command (GOOD_INPUT too): whether it uses the state, its exit code there."""
    each = commands() + GOOD_INPUT
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(each, pool.map(lambda words: uses_state(words, base), each)))


def sweep(case: str, base: Path, baseline: dict[tuple[str, ...], tuple[bool, int]]) -> dict:
    cwd = base / "cwd"
    cwd.mkdir()
    each = list(baseline)
    state, holder = make(case, base)
    env = environment(base, state)
    watched = state if os.path.lexists(state) else state.parent
    results = []
    try:
        before = snapshot(watched)
        tries = [(*words, *flag) for words in each for flag in ((), ("--json",))]
        for result in _map(lambda words: run(words, env, cwd), tries):
            words = tuple(w for w in result["args"] if w != "--json")
            state_used, good_code = baseline[words]
            result.update(json="--json" in result["args"], uses_state=state_used,
                          expected=CASE_CODES[case] if state_used else good_code)  # fmt: skip
            results.append(result)
        after = snapshot(watched)
    finally:
        if holder is not None:
            holder.communicate("")
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return {"case": case, "state": str(state), "results": results, "changed": changed}


def _map(call: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(call, items))


def run_case(case: str, base: Path, baseline: dict[tuple[str, ...], tuple[bool, int]]) -> dict:
    """The sweep of one case, in a mount namespace of its own when it needs mounts."""
    if not needs_mounts(case):
        return sweep(case, base, baseline)
    if not ROOT or shutil.which("unshare") is None:
        raise RuntimeError("needs root and unshare")
    known = base / "baseline.json"
    known.write_text(json.dumps([[list(k), v] for k, v in baseline.items()]))
    started = time.monotonic()
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, __file__, case,
         str(base), str(known)],
        capture_output=True, text=True, timeout=TIMEOUT_S * 10,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"sweep of {case} failed after {time.monotonic() - started:.0f}s: "
                           f"{proc.stderr[-2000:]}")  # fmt: skip
    return json.loads(proc.stdout)


if __name__ == "__main__":
    given = json.loads(Path(sys.argv[3]).read_text())
    print(json.dumps(sweep(sys.argv[1], Path(sys.argv[2]), {tuple(k): tuple(v) for k, v in given})))
