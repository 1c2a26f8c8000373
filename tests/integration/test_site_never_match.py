"""Jobs that became unmatchable at the site: `status` (and so `sync` from cron) says which
idle jobs no slot of the export could ever take, and why, instead of letting the pilots
burn the allocation in silence. The case is a deadline job (`time() < DEADLINE` in its
Requirements, as users write for results that are useless late) stuck behind a long job
on the one slot: it matched when it was exported, and after its deadline no slot ever
will."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from journey import lumberjack, make_job_dir, poll_status, submit, sync_one

pytestmark = pytest.mark.integration


def test_status_names_idle_jobs_no_slot_can_take(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    job_dir = make_job_dir(workspace)
    blocker = submit(job_dir, 1, arguments="$(Process) 0 120")
    deadline = int(time.time()) + 45
    late = submit(job_dir, 1, requirements=f"time() < {deadline}")
    name = f"never-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    lumberjack("export", "--ids", str(blocker), str(late), "--site", "testbed", "--name", name,
               "--nodes", "1", "--cores", "1", "--walltime", "20m")  # fmt: skip
    assert sync_one(name)["phase"] == "launched"

    first = poll_status(name, lambda a: a["jobs"].get("running") == 1, "running the long job")
    assert time.time() < deadline, "the testbed was too slow to see the job matchable first"
    assert first["jobs"] == {"running": 1, "idle": 1} and first["never_match"] == []

    stuck = poll_status(name, lambda a: a["never_match"], "naming the stuck job", timeout=120)
    assert time.time() >= deadline
    (line,) = stuck["never_match"]
    assert line.startswith(f"1 idle (e.g. {late}.0): "), line
    assert f"time() < {deadline}" in line, line
    text = lumberjack("status", name).stdout
    assert f"never:  {line}" in text, text

    print(f"[never] status said: {line}")
    # The jobs back home as they left (the long one still running there is dropped).
    lumberjack("unexport", "--discard", name)
