"""Slurm pilot scripts (rendered, syntax-checked, run for real with a stand-in srun) and
the parsers of sbatch / squeue / scontrol output."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core.contract import PilotRequest
from lumberjack.site.batch import SYSTEMS, BatchError, PilotSpec, PilotState, get_batch_system
from lumberjack.site.batch.slurm import Slurm

FIXTURES = Path(__file__).parent / "fixtures" / "batch"


def load_harness():
    """The script runner in fixtures/batch (not a package: load it by path, once)."""
    return load_fixture_module("batch/pilot_harness")


harness = load_harness()
slurm = Slurm()
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


AGENT_NAMES = ("name", "node_command", "retire_command", "output_dir")


def make_spec(**overrides) -> PilotSpec:
    values = dict(
        name="lj-calib-p0",
        nodes=3,
        cores_per_node=2,
        memory_per_node_mb=2048,
        gpus_per_node=0,
        walltime_s=3600,
        node_command="condor_master -f -t",
        retire_command="condor_off -peaceful -startd",
        retire_s=600,
        output_dir="/home/hpcuser/lumberjack/calib/logs",
        queue="debug",
    )
    values.update(overrides)
    # As the agent makes it: the access point's request, then the names the agent gives.
    names = {key: values.pop(key) for key in AGENT_NAMES}
    return PilotSpec.of(PilotRequest(**values), **names)


def bash_syntax_ok(script: str, tmp_path: Path) -> None:
    path = tmp_path / "check.sh"
    path.write_text(script)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# ---- rendering ------------------------------------------------------------------------


def test_get_batch_system_returns_the_slurm_system():
    assert isinstance(get_batch_system("slurm"), Slurm)
    assert SYSTEMS["slurm"] is Slurm
    with pytest.raises(ValueError, match="unknown batch system"):
        get_batch_system("lsf")


def test_header_directives():
    script = slurm.render_pilot_script(make_spec(allocation="m1234"))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    header = [line for line in lines if line.startswith("#SBATCH")]
    assert header == [
        "#SBATCH --job-name=lj-calib-p0",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem=2048M",
        "#SBATCH --time=01:00:00",
        "#SBATCH --partition=debug",
        "#SBATCH --account=m1234",
        "#SBATCH --output=/home/hpcuser/lumberjack/calib/logs/%x-%j.out",
        "#SBATCH --error=/home/hpcuser/lumberjack/calib/logs/%x-%j.err",
    ]
    # sbatch reads directives only up to the first command: all of them come first
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(lines) if line.startswith("#SBATCH"))


def test_whole_node_gpus_extra_directives_and_no_queue():
    spec = make_spec(
        whole_node=True,
        gpus_per_node=4,
        queue="",
        walltime_s=48 * 3600,
        extra_directives=["#SBATCH --qos=regular", "#SBATCH --constraint=gpu"],
    )
    script = slurm.render_pilot_script(spec)
    assert "#SBATCH --exclusive\n#SBATCH --mem=0\n" in script
    assert "#SBATCH --gpus-per-node=4" in script
    assert "#SBATCH --time=48:00:00" in script
    assert "--partition" not in script
    assert "--account" not in script
    assert "#SBATCH --qos=regular\n#SBATCH --constraint=gpu\n" in script


def test_launcher_is_one_function_with_one_srun_line():
    spec = make_spec(node_command="run-startd --name 'node x'")
    script = slurm.render_pilot_script(spec)
    body = script.split("launch_on_all_nodes() {\n", 1)[1].split("\n}\n", 1)[0]
    assert body.splitlines() == [
        "    srun --nodes=3 --ntasks=3 --ntasks-per-node=1 "
        '--cpus-per-task="${SLURM_CPUS_ON_NODE:-2}" --mem=0 --kill-on-bad-exit=0 '
        "bash -c 'run-startd --name '\"'\"'node x'\"'\"'' &",
        "    lj_launcher_pid=$!",
    ]
    assert slurm.launch_line(make_spec(gpus_per_node=2)).count("--gpus-per-node=2") == 1


def test_env_setup_and_timer_values():
    spec = make_spec(
        env={"LJ_POOL": "a b'c", "CONDOR_HOST": "login01:9618"},
        setup_lines=["module load apptainer"],
        retire_s=900,
    )
    script = slurm.render_pilot_script(spec)
    assert "set -u\n" in script
    assert "export CONDOR_HOST=login01:9618\nexport LJ_POOL='a b'\"'\"'c'\n" in script
    assert "set +u\nmodule load apptainer\nset -u\n" in script
    assert "lj_retire_after_s=2700\n" in script
    assert "retire_startds() {\n    condor_off -peaceful -startd\n}" in script
    assert script.index("export LJ_POOL") < script.index("module load") < script.index("srun")


@needs_bash
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"whole_node": True, "gpus_per_node": 4, "allocation": "m1234", "queue": ""},
        {"env": {"X": "$(rm -rf /)"}, "node_command": "echo 'it''s' \"$HOME\" | cat"},
        {"setup_lines": ["if true; then", "  module load apptainer", "fi"]},
    ],
)
def test_rendered_scripts_pass_bash_n(overrides, tmp_path):
    bash_syntax_ok(slurm.render_pilot_script(make_spec(**overrides)), tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "1bad", "must start with a letter"),
        ("name", "has space", "must start with a letter"),
        ("nodes", 0, "nodes must be an integer >= 1"),
        ("walltime_s", 0, "walltime_s must be"),
        ("output_dir", "relative/logs", "absolute path"),
        ("output_dir", "/with space", "absolute path"),
        ("queue", "de bug", "queue"),
        ("env", {"1X": "y"}, "not a shell variable name"),
        ("extra_directives", ["--qos=x"], "starting with '#'"),
        ("node_command", "  ", "node_command is empty"),
        ("launcher", "mpiexec", "launch with srun"),
    ],
)
def test_unsafe_specs_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        slurm.render_pilot_script(make_spec(**{field: value}))


def test_allocation_nodes_env():
    assert slurm.NODE_LIST_ENV == "SLURM_JOB_NODELIST"
    assert "(listed in $SLURM_JOB_NODELIST)" in slurm.render_pilot_script(make_spec())


# ---- the script's timer and traps, for real --------------------------------------------


def _events(workdir: Path) -> list[str]:
    path = workdir / "events"
    return path.read_text().split() if path.exists() else []


@needs_bash
def test_timer_retires_then_waits_for_the_startds(tmp_path):
    # walltime 3 s, retire 2 s before the end: the timer fires 1 s after the start. The
    # node commands end by themselves once the pilot has retired them (like startds
    # finishing their running jobs); if the timer never fired they end on their own
    # after a while and the order below shows it.
    node_command = (
        f"cd {tmp_path}; echo $$ >> node-pids; i=0; "
        "while [ ! -e retired ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done; "
        "sleep 0.3; echo node-ended >> events"
    )
    spec = make_spec(
        nodes=2,
        walltime_s=3,
        retire_s=2,
        node_command=node_command,
        retire_command=harness.retire_command(tmp_path) + f"; echo retired >> {tmp_path}/events",
        output_dir=str(tmp_path),
    )
    pilot = harness.start(slurm.render_pilot_script(spec), tmp_path)
    try:
        assert pilot.proc.wait(timeout=60) == 0
        assert pilot.retired_file.read_text() == "retired\n"
        # retired first, then both node commands ended, and only then the pilot exited
        assert _events(tmp_path) == ["retired", "node-ended", "node-ended"]
        output = pilot.proc.stdout.read()
        assert "retiring after 1 s" in output
        assert output.index("retiring the startds") < output.index("every startd has exited")
        assert "launcher exit code 0" in output
        assert len(pilot.node_pids()) == 2
        assert pilot.wait_session_empty() == []
    finally:
        pilot.cleanup()


@needs_bash
def test_startds_ending_early_end_the_pilot_without_retiring(tmp_path):
    spec = make_spec(
        nodes=2,
        walltime_s=36000,
        retire_s=60,
        node_command=harness.node_command(tmp_path, 0.2),
        retire_command=harness.retire_command(tmp_path),
        output_dir=str(tmp_path),
    )
    pilot = harness.start(slurm.render_pilot_script(spec), tmp_path)
    try:
        # ends long before its timer (35940 s): it did not wait for it
        assert pilot.proc.wait(timeout=60) == 0
        assert not pilot.retired_file.exists()
        assert "every startd has exited (launcher exit code 0)" in pilot.proc.stdout.read()
        assert pilot.wait_session_empty() == []  # the timer's sleep is gone too
    finally:
        pilot.cleanup()


@needs_bash
def test_sigterm_retires_stops_the_startds_and_exits_143(tmp_path):
    spec = make_spec(
        nodes=3,
        walltime_s=600,
        retire_s=60,
        node_command=harness.node_command(tmp_path, 30),
        retire_command=harness.retire_command(tmp_path),
        output_dir=str(tmp_path),
    )
    pilot = harness.start(slurm.render_pilot_script(spec), tmp_path)
    try:
        node_pids = pilot.wait_for_nodes(3)
        pilot.proc.send_signal(signal.SIGTERM)
        assert pilot.proc.wait(timeout=60) == 143
        assert pilot.retired_file.read_text() == "retired\n"  # exactly once
        assert pilot.wait_session_empty() == []
        for pid in node_pids:
            assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
        output = pilot.proc.stdout.read()
        assert "caught TERM" in output
    finally:
        pilot.cleanup()


@needs_bash
def test_sigterm_after_the_timer_does_not_retire_twice(tmp_path):
    spec = make_spec(
        nodes=1,
        walltime_s=2,
        retire_s=1,
        node_command=harness.node_command(tmp_path, 30),
        retire_command=harness.retire_command(tmp_path),
        output_dir=str(tmp_path),
    )
    pilot = harness.start(slurm.render_pilot_script(spec), tmp_path)
    try:
        pilot.wait_for_nodes(1)
        deadline = time.monotonic() + 30
        while not pilot.retired_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pilot.retired_file.exists()
        pilot.proc.send_signal(signal.SIGTERM)
        assert pilot.proc.wait(timeout=60) == 143
        assert pilot.retired_file.read_text() == "retired\n"
        assert pilot.wait_session_empty() == []
    finally:
        pilot.cleanup()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---- submit ---------------------------------------------------------------------------


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_submit_command():
    assert slurm.submit_command("/site/pilot.sh") == ["sbatch", "--parsable", "/site/pilot.sh"]


def test_parse_submit_output():
    assert slurm.parse_submit_output(fixture("slurm_sbatch_parsable.txt")) == "1234"
    assert slurm.parse_submit_output(fixture("slurm_sbatch_parsable_cluster.txt")) == "5678"


def test_parse_submit_error_quotes_slurm():
    with pytest.raises(BatchError) as error:
        slurm.parse_submit_output("", fixture("slurm_sbatch_error.stderr"), 1)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("sbatch failed (exit code 1): sbatch: error: Batch job submission")
    assert "Invalid account" in message


def test_parse_submit_without_a_job_id():
    with pytest.raises(BatchError, match="sbatch printed no job id: Submitted batch job"):
        slurm.parse_submit_output("Submitted batch job\n")
    with pytest.raises(BatchError, match="nothing"):
        slurm.parse_submit_output("")


# ---- query ----------------------------------------------------------------------------


def test_query_command():
    assert slurm.query_command(["1", "2"]) == [
        "squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", "1,2",
    ]  # fmt: skip
    assert slurm.scontrol_query_command("7") == ["scontrol", "-o", "show", "job", "7"]


def test_parse_squeue_states():
    ids = [str(n) for n in range(1001, 1014)]
    states = slurm.parse_query_output(fixture("slurm_squeue.txt"), ids)
    assert states == {
        "1001": PilotState.QUEUED,
        "1002": PilotState.RUNNING,
        "1003": PilotState.FINISHING,
        "1004": PilotState.DONE,
        "1005": PilotState.DONE,
        "1006": PilotState.DONE,
        "1007": PilotState.FAILED,
        "1008": PilotState.FAILED,
        "1009": PilotState.FAILED,
        "1010": PilotState.FAILED,
        "1011": PilotState.QUEUED,
        "1012": PilotState.UNKNOWN,
        "1013": PilotState.DONE,  # not listed: Slurm has forgotten it, so it ended
    }
    details = slurm.parse_query_details(fixture("slurm_squeue.txt"), ["1001", "1013"])
    assert details["1001"].raw == "PENDING"
    assert details["1001"].reason == "Priority"
    assert details["1013"].raw == ""


def test_states_compare_as_plain_words():
    assert PilotState.QUEUED == "queued"
    assert str(PilotState.FAILED) == "failed"


def test_an_invalid_job_id_answer_means_done():
    stderr = fixture("slurm_squeue_invalid_id.stderr")
    assert slurm.parse_query_output("", ["77"], stderr, 1) == {"77": PilotState.DONE}


def test_other_squeue_failures_raise():
    with pytest.raises(BatchError, match="squeue failed .*Unable to contact slurm controller"):
        slurm.parse_query_output(
            "", ["1"], "squeue: error: Unable to contact slurm controller (connect failure)\n", 1
        )
    with pytest.raises(BatchError, match="cannot read"):
        slurm.parse_query_output("garbage\n", ["1"])


def test_parse_scontrol_one_liners():
    details = slurm.parse_query_details(
        fixture("slurm_scontrol_show_job.txt"), ["2001", "2002", "2003", "2004"]
    )
    assert details["2001"].state is PilotState.RUNNING
    assert details["2002"].state is PilotState.FAILED
    assert details["2002"].reason == "NonZeroExitCode exit code 1:0"
    assert details["2003"].state is PilotState.QUEUED
    assert details["2003"].reason.startswith("Resources")
    assert details["2004"].state is PilotState.DONE


def test_cancel_command():
    assert slurm.cancel_command(["1", "2"]) == ["scancel", "1", "2"]
