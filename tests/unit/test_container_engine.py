"""CSCS's Container Engine (runtime "container-engine", Alps): the EDF the agent writes
for an export, parsed as TOML; the commands a node runs (a step of the pilot's job on that
node with `--environment=EDF`); nothing on the login node; and the profile rule that
follows (the schedd in the allocation)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from lumberjack.errors import BadInput
from lumberjack.profiles.sites import find_profile, load_profile, shipped_profile_dir
from lumberjack.site.runtime import ContainerEngine, RuntimeFailure, get_runtime

ROOT = "/capstor/scratch/cscs/jdoe/lumberjack/calib"
IMAGE = "/capstor/scratch/cscs/jdoe/lumberjack/image/site.sqsh"


def engine(root: str = ROOT, image: str = IMAGE) -> ContainerEngine:
    runtime = get_runtime("container-engine", root, image=image, binds=("/data", "/a:/b:ro"))
    assert isinstance(runtime, ContainerEngine)
    return runtime


def test_the_edf_names_the_image_and_mounts_the_export() -> None:
    edf = tomllib.loads(engine().edf_text())
    assert edf == {
        "image": IMAGE,
        "workdir": ROOT,
        "writable": True,
        "mounts": [f"{ROOT}:{ROOT}", "/data:/data", "/a:/b:ro"],
    }
    odd = tomllib.loads(engine(root='/s/a "quoted" \\dir').edf_text())
    assert odd["workdir"] == '/s/a "quoted" \\dir'


def test_the_agent_writes_the_edf_into_the_export(tmp_path: Path) -> None:
    runtime = engine(root=str(tmp_path))
    runtime.write_files()
    written = tmp_path / "lumberjack-site.edf.toml"
    assert runtime.edf_path == str(written)
    assert tomllib.loads(written.read_text())["mounts"][0] == f"{tmp_path}:{tmp_path}"


def test_a_node_command_is_a_step_of_the_pilots_job_in_the_environment() -> None:
    words = shlex.split(engine().wrap("/c/pilot.config", "condor_master", "-f"))
    assert words == [
        "srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=$SLURMD_NODENAME",
        "--jobid=$SLURM_JOB_ID", f"--environment={ROOT}/lumberjack-site.edf.toml",
        "env", "CONDOR_CONFIG=/c/pilot.config", "condor_master", "-f",
    ]  # fmt: skip


def test_nothing_runs_on_the_login_node() -> None:
    runtime = engine()
    for call in (lambda: runtime.argv("/c", "condor_q"), lambda: runtime.run_fresh("/c", "x")):
        with pytest.raises(RuntimeFailure, match="only inside Slurm jobs") as failed:
            call()
        assert "\n" not in str(failed.value)
    assert runtime.start_argv() is None and runtime.check_argv() is None


def test_a_missing_squashfs_is_one_line(tmp_path: Path) -> None:
    assert engine(image=str(tmp_path / "none.sqsh")).missing_image() == (
        f"no site image at {tmp_path}/none.sqsh (a SquashFS file: see docs/site-profiles.md)"
    )
    (tmp_path / "site.sqsh").write_bytes(b"hsqs")
    assert engine(image=str(tmp_path / "site.sqsh")).missing_image() is None


def test_the_profile_puts_the_schedd_in_the_allocation(tmp_path: Path) -> None:
    alps = find_profile("alps")
    assert (alps.container.runtime, alps.schedd.placement) == ("container-engine", "allocation")
    text = (shipped_profile_dir() / "alps.toml").read_text()
    path = tmp_path / "alps.toml"
    path.write_text(text.replace('placement = "allocation"', 'placement = "login"'))
    with pytest.raises(BadInput) as refused:
        load_profile(path)
    message = str(refused.value)
    assert "\n" not in message and "[schedd].placement" in message
    assert message.endswith('runs nothing on the login node; write placement = "allocation"')
