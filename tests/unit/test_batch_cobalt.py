"""Cobalt (ALCF Theta, retired) pilot scripts and the parsers of qsub / qstat output.

No Cobalt can run here: the outputs in fixtures/batch follow Cobalt's documented
formats (see fixtures/batch/README.md)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core.contract import PilotRequest
from lumberjack.site.batch import SYSTEMS, BatchError, PilotSpec, PilotState, get_batch_system
from lumberjack.site.batch.cobalt import Cobalt

FIXTURES = Path(__file__).parent / "fixtures" / "batch"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def load_harness():
    """The script runner in fixtures/batch (not a package: load it by path, once)."""
    return load_fixture_module("batch/pilot_harness")


harness = load_harness()
cobalt = Cobalt()


AGENT_NAMES = ("name", "node_command", "retire_command", "output_dir")


def make_spec(**overrides) -> PilotSpec:
    values = dict(
        name="lj-calib-p0",
        nodes=8,
        cores_per_node=64,
        memory_per_node_mb=0,
        gpus_per_node=0,
        walltime_s=3600,
        node_command="condor_master -f",
        retire_command="condor_off -peaceful -startd",
        retire_s=600,
        output_dir="/home/jdoe/lumberjack/calib/logs",
        queue="debug-cache-quad",
        allocation="myproject",
        extra_directives=["#COBALT --attrs mcdram=cache:numa=quad"],
    )
    values.update(overrides)
    # As the agent makes it: the access point's request, then the names the agent gives.
    names = {key: values.pop(key) for key in AGENT_NAMES}
    return PilotSpec.of(PilotRequest(**values), **names)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_header_directives():
    script = cobalt.render_pilot_script(make_spec())
    header = [line for line in script.splitlines() if line.startswith("#COBALT")]
    assert header == [
        "#COBALT --jobname lj-calib-p0",
        "#COBALT -n 8",
        "#COBALT -t 01:00:00",
        "#COBALT -q debug-cache-quad",
        "#COBALT -A myproject",
        "#COBALT -O /home/jdoe/lumberjack/calib/logs/lj-calib-p0",
        "#COBALT --attrs mcdram=cache:numa=quad",
    ]


def test_launcher_is_aprun_one_process_per_node():
    script = cobalt.render_pilot_script(make_spec())
    body = script.split("launch_on_all_nodes() {\n", 1)[1].split("\n}\n", 1)[0]
    assert body.splitlines() == [
        "    aprun -n 8 -N 1 -d 64 -cc none bash -c 'condor_master -f' &",
        "    lj_launcher_pid=$!",
    ]
    assert cobalt.NODE_LIST_ENV == "COBALT_PARTNAME"
    assert isinstance(get_batch_system("cobalt"), Cobalt)
    assert SYSTEMS["cobalt"] is Cobalt


@needs_bash
def test_rendered_script_passes_bash_n(tmp_path):
    path = tmp_path / "pilot.sh"
    path.write_text(cobalt.render_pilot_script(make_spec(env={"A": "b c"}, setup_lines=["true"])))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@needs_bash
def test_sigterm_with_the_aprun_launcher(tmp_path):
    spec = make_spec(
        nodes=2,
        walltime_s=600,
        node_command=harness.node_command(tmp_path, 30),
        retire_command=harness.retire_command(tmp_path),
        output_dir=str(tmp_path),
    )
    pilot = harness.start(cobalt.render_pilot_script(spec), tmp_path)
    try:
        pilot.wait_for_nodes(2)
        pilot.proc.send_signal(signal.SIGTERM)
        assert pilot.proc.wait(timeout=60) == 143
        assert pilot.retired_file.read_text() == "retired\n"
        assert pilot.wait_session_empty() == []
    finally:
        pilot.cleanup()


def test_submit():
    assert cobalt.submit_command("/x/pilot.sh") == ["qsub", "/x/pilot.sh"]
    assert cobalt.parse_submit_output(fixture("cobalt_qsub.txt")) == "345678"
    # warnings before the id do not confuse it
    assert cobalt.parse_submit_output("WARNING: filesystems not given\n345679\n") == "345679"


def test_submit_errors():
    with pytest.raises(BatchError, match=r"qsub failed \(exit code 1\): .*project"):
        cobalt.parse_submit_output("", "Usage error: project 'x' not found\n", 1)
    with pytest.raises(BatchError, match="qsub printed no job id"):
        cobalt.parse_submit_output("queued\n")


def test_query_command():
    assert cobalt.query_command(["1", "2"]) == ["qstat", "-l", "--header", "JobID:State", "1", "2"]


def test_parse_long_format():
    ids = ["345678", "345679", "345680", "345681", "345699"]
    assert cobalt.parse_query_output(fixture("cobalt_qstat_long.txt"), ids) == {
        "345678": PilotState.QUEUED,
        "345679": PilotState.RUNNING,
        "345680": PilotState.FINISHING,
        "345681": PilotState.QUEUED,
        "345699": PilotState.DONE,  # Cobalt drops ended jobs at once
    }


def test_parse_table_format():
    ids = ["345678", "345679", "345681"]
    details = cobalt.parse_query_details(fixture("cobalt_qstat_table.txt"), ids)
    assert {k: v.state for k, v in details.items()} == {
        "345678": PilotState.QUEUED,
        "345679": PilotState.RUNNING,
        "345681": PilotState.FAILED,
    }
    assert details["345681"].raw == "dep_fail"


def test_only_unknown_ids_exit_1_silently_meaning_done():
    assert cobalt.parse_query_output("", ["1"], "", 1) == {"1": PilotState.DONE}
    with pytest.raises(BatchError, match="component error"):
        cobalt.parse_query_output(
            "", ["1"], "component error: Failed to connect to queue-manager\n", 1
        )


def test_cancel_command():
    assert cobalt.cancel_command(["345678"]) == ["qdel", "345678"]
