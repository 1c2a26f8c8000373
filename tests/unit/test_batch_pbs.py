"""PBS Professional pilot scripts and the parsers of qsub / qstat -F json output.

No PBS server can run here: the outputs in fixtures/batch follow PBS's documented
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
from lumberjack.site.batch.pbs import Pbs

FIXTURES = Path(__file__).parent / "fixtures" / "batch"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def load_harness():
    """The script runner in fixtures/batch (not a package: load it by path, once)."""
    return load_fixture_module("batch/pilot_harness")


harness = load_harness()
pbs = Pbs()


AGENT_NAMES = ("name", "node_command", "retire_command", "output_dir")


def make_spec(**overrides) -> PilotSpec:
    values = dict(
        name="lj-calib-p0",
        nodes=2,
        cores_per_node=32,
        memory_per_node_mb=4096,
        gpus_per_node=0,
        walltime_s=3600,
        node_command="condor_master -f",
        retire_command="condor_off -peaceful -startd",
        retire_s=600,
        output_dir="/home/jdoe/lumberjack/calib/logs",
        queue="debug",
        allocation="myproject",
    )
    values.update(overrides)
    # As the agent makes it: the access point's request, then the names the agent gives.
    names = {key: values.pop(key) for key in AGENT_NAMES}
    return PilotSpec.of(PilotRequest(**values), **names)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---- rendering ------------------------------------------------------------------------


def test_header_directives():
    script = pbs.render_pilot_script(make_spec())
    header = [line for line in script.splitlines() if line.startswith("#PBS")]
    assert header == [
        "#PBS -N lj-calib-p0",
        "#PBS -l select=2:ncpus=32:mem=4096mb",
        "#PBS -l place=scatter",
        "#PBS -l walltime=01:00:00",
        "#PBS -q debug",
        "#PBS -A myproject",
        "#PBS -o /home/jdoe/lumberjack/calib/logs/lj-calib-p0.out",
        "#PBS -e /home/jdoe/lumberjack/calib/logs/lj-calib-p0.err",
    ]


def test_whole_nodes_gpus_chunk_resources_and_extra_directives():
    spec = make_spec(
        whole_node=True,
        gpus_per_node=4,
        chunk_resources=["system=polaris"],
        extra_directives=["#PBS -l filesystems=home:eagle"],
    )
    script = pbs.render_pilot_script(spec)
    assert "#PBS -l select=2:ngpus=4:system=polaris\n" in script
    assert "#PBS -l place=scatter:excl\n" in script
    assert "ncpus" not in script and "mem=" not in script
    assert "#PBS -l filesystems=home:eagle\n" in script


def test_default_launcher_is_mpiexec_one_rank_per_node():
    script = pbs.render_pilot_script(make_spec(node_command="run-startd 'a b'"))
    body = script.split("launch_on_all_nodes() {\n", 1)[1].split("\n}\n", 1)[0]
    assert body.splitlines() == [
        "    mpiexec -n 2 --ppn 1 --cpu-bind none bash -c 'run-startd '\"'\"'a b'\"'\"'' &",
        "    lj_launcher_pid=$!",
    ]


def test_pbsdsh_launcher_hands_over_the_environment():
    spec = make_spec(launcher="pbsdsh", env={"LJ_POOL": "x y", "A": "1"})
    line = pbs.launch_line(spec)
    assert line == (
        "pbsdsh -- /usr/bin/env PATH=\"$PATH\" A=1 LJ_POOL='x y' /bin/bash -c 'condor_master -f' &"
    )


def test_unknown_launcher_and_bad_chunk_resource_are_refused():
    with pytest.raises(ValueError, match="mpiexec or pbsdsh"):
        pbs.render_pilot_script(make_spec(launcher="srun"))
    with pytest.raises(ValueError, match="name=value"):
        pbs.render_pilot_script(make_spec(chunk_resources=["system polaris"]))


@needs_bash
@pytest.mark.parametrize(
    "overrides",
    [{}, {"launcher": "pbsdsh", "env": {"X": "'; rm -rf / #"}}, {"whole_node": True}],
)
def test_rendered_scripts_pass_bash_n(overrides, tmp_path):
    path = tmp_path / "pilot.sh"
    path.write_text(pbs.render_pilot_script(make_spec(**overrides)))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_allocation_nodes_env_and_lookup():
    assert pbs.NODE_LIST_ENV == "PBS_NODEFILE"
    assert isinstance(get_batch_system("pbs"), Pbs)
    assert SYSTEMS["pbs"] is Pbs


@needs_bash
def test_sigterm_with_the_mpiexec_launcher(tmp_path):
    spec = make_spec(
        walltime_s=600,
        node_command=harness.node_command(tmp_path, 30),
        retire_command=harness.retire_command(tmp_path),
        output_dir=str(tmp_path),
    )
    pilot = harness.start(pbs.render_pilot_script(spec), tmp_path)
    try:
        pilot.wait_for_nodes(2)
        pilot.proc.send_signal(signal.SIGTERM)
        assert pilot.proc.wait(timeout=60) == 143
        assert pilot.retired_file.read_text() == "retired\n"
        assert pilot.wait_session_empty() == []
    finally:
        pilot.cleanup()


# ---- submit ---------------------------------------------------------------------------


def test_submit():
    assert pbs.submit_command("/x/pilot.sh") == ["qsub", "/x/pilot.sh"]
    assert (
        pbs.parse_submit_output(fixture("pbs_qsub.txt"))
        == "8571234.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"
    )
    assert pbs.parse_submit_output("4411.pbs01\n") == "4411.pbs01"


def test_submit_errors():
    with pytest.raises(BatchError, match=r"qsub failed \(exit code 188\): qsub: Job violates"):
        pbs.parse_submit_output("", fixture("pbs_qsub_error.stderr"), 188)
    with pytest.raises(BatchError, match="qsub printed no job id"):
        pbs.parse_submit_output("something odd\n")


# ---- query ----------------------------------------------------------------------------


def test_query_command():
    assert pbs.query_command(["1.s", "2.s"]) == ["qstat", "-f", "-F", "json", "-x", "1.s", "2.s"]


def test_parse_qstat_json_states_and_exit_statuses():
    server = ".polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"
    ids = [f"85712{n}{server}" for n in range(31, 39)] + ["8571299" + server]
    details = pbs.parse_query_details(fixture("pbs_qstat.json"), ids)
    states = {job_id.split(".")[0]: status.state for job_id, status in details.items()}
    assert states == {
        "8571231": PilotState.QUEUED,
        "8571232": PilotState.RUNNING,
        "8571233": PilotState.DONE,  # F, Exit_status 0
        "8571234": PilotState.FAILED,  # F, Exit_status 1
        "8571235": PilotState.DONE,  # F, 271 = killed by SIGTERM (qdel or walltime)
        "8571236": PilotState.FINISHING,  # E
        "8571237": PilotState.QUEUED,  # H
        "8571238": PilotState.DONE,  # F, -29 = JOB_EXEC_KILL_WALLTIME
        "8571299": PilotState.DONE,  # absent: the server no longer knows it
    }
    assert details[ids[0]].reason.startswith("Not Running: Insufficient amount")
    assert details[ids[3]].reason.startswith("Exit_status 1")


def test_ids_match_without_the_server_suffix():
    states = pbs.parse_query_output(fixture("pbs_qstat.json"), ["8571232", "8571231.polaris"])
    assert states == {"8571232": PilotState.RUNNING, "8571231.polaris": PilotState.QUEUED}


def test_parse_broken_json_falls_back_to_the_fields_we_need():
    states = pbs.parse_query_output(fixture("pbs_qstat_broken.json"), ["4411.pbs01", "4412.pbs01"])
    assert states == {"4411.pbs01": PilotState.RUNNING, "4412.pbs01": PilotState.FAILED}


def test_unknown_job_id_means_done_other_errors_raise():
    stderr = fixture("pbs_qstat_unknown.stderr")
    assert pbs.parse_query_output("", ["999.pbs01"], stderr, 153) == {"999.pbs01": PilotState.DONE}
    with pytest.raises(BatchError, match="qstat failed .*cannot connect to server"):
        pbs.parse_query_output("", ["1"], "qstat: cannot connect to server pbs01 (errno=111)\n", 2)
    with pytest.raises(BatchError, match="neither JSON"):
        pbs.parse_query_output("not json at all", ["1"])
    with pytest.raises(BatchError, match='no "Jobs"'):
        pbs.parse_query_output('{"Jobs": 3}', ["1"])


def test_empty_answer_means_every_job_ended():
    assert pbs.parse_query_output("", ["1.s"]) == {"1.s": PilotState.DONE}
    assert pbs.parse_query_output('{"timestamp": 1}', ["1.s"]) == {"1.s": PilotState.DONE}


def test_cancel_command():
    assert pbs.cancel_command(["1.s"]) == ["qdel", "1.s"]
