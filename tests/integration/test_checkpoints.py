"""A self-checkpointing job across two pilots: it counts to N, one step per execution,
checkpointing after each (checkpoint_exit_code); its pilot is killed mid-run; the next
pilot continues from the checkpoint the remote schedd kept, never from 0."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from journey import (
    alive_pilots,
    chown_tree,
    history,
    last_json,
    lumberjack,
    poll_status,
    site_path,
    site_run,
    submit,
    sync_one,
)

from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

STEPS = 8
COUNTER = """#!/bin/sh
# One step per execution: resume from count.txt, work, checkpoint, exit 85 (checkpoint
# taken, run me again) until the count is reached. steps.txt names the pilot of each step.
n=$(cat count.txt 2>/dev/null || echo 0)
n=$((n + 1))
sleep 3
pilot=$(sed -n 's/^LUMBERJACK_PILOT = "\\(.*\\)"$/\\1/p' "$_CONDOR_MACHINE_AD")
echo "step $n pilot $pilot" >> steps.txt
echo "$n" > count.txt
if [ "$n" -ge "$1" ]; then exit 0; fi
exit 85
"""


def test_a_counter_resumes_from_its_checkpoint_on_the_next_pilot(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    job_dir = workspace / "counter"
    job_dir.mkdir()
    (job_dir / "count.sh").write_text(COUNTER)
    (job_dir / "count.sh").chmod(0o755)
    chown_tree(job_dir)
    cluster = submit(
        job_dir, 1, executable=str(job_dir / "count.sh"), arguments=str(STEPS),
        transfer_input_files="", transfer_output_files="count.txt, steps.txt",
        checkpoint_exit_code="85", transfer_checkpoint_files="count.txt, steps.txt",
    )  # fmt: skip
    name = f"ckpt-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    exported = last_json(lumberjack(
        "export", "--ids", str(cluster), "--site", "testbed", "--name", name, "--nodes", "1",
        "--cores", "1", "--walltime", "20m", "--json",
    ))  # fmt: skip
    assert sync_one(name)["phase"] == "launched"
    remote_dir = exported["remote_dir"]
    # The remote schedd keeps the checkpoint in the job's spool directory.
    checkpoint = site_path(remote_dir) / "spool" / str(cluster) / "0"
    checkpoint = checkpoint / f"cluster{cluster}.proc0.subproc0" / "count.txt"

    def counted() -> int:
        try:
            return int(checkpoint.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    deadline = time.monotonic() + 300
    while counted() < 3:
        assert time.monotonic() < deadline, f"no third checkpoint: {counted()}"
        time.sleep(1)
    running = poll_status(name, lambda a: a["jobs"].get("running") == 1, "running")
    (pilot,) = alive_pilots(running)
    site_run(f"scancel {pilot}")
    at_kill = counted()
    assert 3 <= at_kill < STEPS
    poll_status(name, lambda a: not alive_pilots(a), "without a pilot", timeout=120)
    poll_status(name, lambda a: not a["jobs"].get("running"), "back to idle", timeout=600)
    assert counted() >= at_kill  # the checkpoint stays in the remote SPOOL

    deadline = time.monotonic() + 600
    while Ledger().get(name).phase != "imported":  # a new pilot, the rest, fetch, import
        assert time.monotonic() < deadline, Ledger().get(name).phase
        sync_one(name)
        time.sleep(3)

    lines = (job_dir / "steps.txt").read_text().splitlines()
    steps = [int(line.split()[1]) for line in lines]
    pilots = [line.split()[3] for line in lines]
    assert steps == list(range(1, STEPS + 1)), lines  # each step once, never from 0 again
    assert (job_dir / "count.txt").read_text().strip() == str(STEPS)
    first, second = pilots[0], pilots[-1]
    assert first == pilot.split(".")[0] and second != first, lines
    switch = pilots.index(second)
    assert pilots == [first] * switch + [second] * (STEPS - switch), lines
    assert switch >= 3  # the second pilot began where the first one's checkpoint ended
    (ad,) = history(cluster, ["ProcId", "JobStatus", "ExitCode"], expect=1)
    assert (ad["JobStatus"], ad["ExitCode"]) == (4, 0)
