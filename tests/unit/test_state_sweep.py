"""Every command x every bad state directory or ledger, as real processes: one line that
names the path, the documented exit code, a JSON object with "error" under --json, no
traceback, and not one byte or mtime changed under the state directory."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import state_sweep  # noqa: E402


def _skip_reason(case: str) -> str | None:
    if not state_sweep.needs_mounts(case):
        return None
    if not state_sweep.ROOT or shutil.which("unshare") is None:
        return "a file system of its own needs root and unshare (a private mount namespace)"
    return None


def test_the_sweep_finds_every_command() -> None:
    found = {
        " ".join(words[:2]) if words[0] in ("sites", "lease") else words[0]
        for words in state_sweep.commands()
    }
    assert {"export", "sync", "run", "inspect", "sites list", "sites check", "lease create",
            "leases"} <= found  # fmt: skip
    assert len(found) >= 20


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each command once in a good, fresh state dir: whether it opens the ledger."""
    return state_sweep.baselines(tmp_path_factory.mktemp("baseline"))


@pytest.mark.parametrize("case", sorted(state_sweep.CASE_CODES))
def test_every_command_in_a_bad_state(case: str, tmp_path: Path, baseline: dict) -> None:
    reason = _skip_reason(case)
    if reason:
        pytest.skip(reason)
    tmp_path.chmod(0o755)  # root's state: no level another user can write
    outcome = state_sweep.run_case(case, tmp_path, baseline)
    results = outcome["results"]
    assert len(results) == 2 * (len(state_sweep.commands()) + len(state_sweep.GOOD_INPUT))
    assert outcome["changed"] == [], f"{case}: the state changed"
    reached = [r for r in results if r["uses_state"]]
    assert len(reached) >= 30, "most commands keep their state in the ledger"
    good = [r for r in results if tuple(a for a in r["args"] if a != "--json") in _GOOD]
    assert len(good) == 2 * len(_GOOD) and all(r["uses_state"] for r in good)
    problems = []
    for r in results:
        said = (f"{' '.join(r['args'])}: exit {r['code']}, stdout {r['stdout']!r}, "
                f"stderr {r['stderr']!r}")  # fmt: skip
        if "Traceback" in r["stdout"] + r["stderr"]:
            problems.append(f"traceback: {said}")
        elif r["code"] != r["expected"]:
            problems.append(f"expected exit {r['expected']}: {said}")
        elif r["json"]:
            answer = json.loads(r["stdout"])
            if not isinstance(answer, dict) or (r["code"] and "error" not in answer):
                problems.append(f"not a JSON object with error: {said}")
            elif r["uses_state"] and _names_state(answer["error"], outcome["state"]) is False:
                problems.append(f"does not name the state: {said}")
        elif r["code"]:
            lines = r["stderr"].splitlines()
            if len(lines) != 1 or not lines[0].startswith("error: "):
                problems.append(f"not one line: {said}")
            elif r["uses_state"] and not _names_state(lines[0], outcome["state"]):
                problems.append(f"does not name the state: {said}")
    assert not problems, f"{len(problems)} of {len(results)} tries:\n" + "\n".join(problems)
    _record(case, results)


_GOOD = set(state_sweep.GOOD_INPUT)


def _names_state(message: str, state: str) -> bool:
    return state in message or str(Path(state).parent) in message


def _record(case: str, results: list[dict]) -> None:
    """Counts for the record (seen with pytest -s): tries, those that reached the state."""
    reached = sum(r["uses_state"] for r in results)
    tracebacks = sum("Traceback" in r["stderr"] for r in results)
    print(f"\nsweep {case}: {len(results)} tries, {reached} reached the state, "
          f"{tracebacks} tracebacks")  # fmt: skip
