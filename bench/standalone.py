"""Running one benchmark section on its own (`python bench/bench_<name>.py`): the
testbed's client environment, a state directory of the section's own, the results as
JSON and as the BENCHMARKS.md text. `bench/run.py` runs the sections together."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import testbed

ROOT = Path(__file__).resolve().parent.parent


def main(
    name: str,
    run: Callable[[Path], dict[str, Any]],
    markdown: Callable[[dict[str, Any]], str],
    *,
    client: bool = True,
) -> int:
    """Run section `name` in <testbed>/work/bench-<name>; `client`: as the access point's
    client (testbed environment, lumberjack importable, its own ledger)."""
    work = testbed.testbed_dir() / "work" / f"bench-{name}"
    if client:
        os.environ.update(testbed.env())
        os.environ["PYTHONPATH"] = str(ROOT)
        if "LUMBERJACK_STATE_DIR" not in os.environ:
            os.environ["LUMBERJACK_STATE_DIR"] = str(testbed.root_state_dir(f"bench-{name}"))
    results = run(work)
    print(json.dumps(results, indent=1))
    print(markdown(results))
    return 0
