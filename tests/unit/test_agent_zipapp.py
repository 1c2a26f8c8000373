"""agent.pyz (agent_zipapp.py): reproducible bytes, and it runs on a bare python3 with no
site-packages, as on a login node where nothing of lumberjack is installed."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lumberjack.ap import agent_zipapp
from lumberjack.core import jobqueuelog_write as jqlw

FIXTURES = Path(__file__).parent / "fixtures"
# -S: no site module (so no site-packages, no venv); -I: no PYTHONPATH, no user site.
BARE = [sys.executable, "-S", "-I"]


def load_site_bundle():
    from conftest import load_fixture_module

    return load_fixture_module("site_bundle")


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agent") / "agent.pyz"
    path.write_bytes(agent_zipapp.build_agent())
    return path


def test_build_is_byte_for_byte_reproducible() -> None:
    first = agent_zipapp.build_agent()
    second = agent_zipapp.build_agent()
    assert first == second
    assert agent_zipapp.agent_digest(first) == agent_zipapp.agent_digest(second)
    assert first.startswith(b"#!/usr/bin/env python3\n")


def test_archive_has_fixed_times_sorted_names_and_the_modules() -> None:
    with zipfile.ZipFile(io.BytesIO(agent_zipapp.build_agent())) as archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        assert names == sorted(names)
        assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert "__main__.py" in names
        package = Path(agent_zipapp.__file__).parents[1]
        for sub in agent_zipapp.SHIPPED_PACKAGES:
            for path in (package / sub).rglob("*.py"):
                assert f"lumberjack/{path.relative_to(package).as_posix()}" in names
        assert "lumberjack/site/agent.py" in names
        assert not [name for name in names if name.startswith("lumberjack/ap/")]
        assert "spython/main/__init__.py" in names
        assert not [name for name in names if "/tests/" in name]


def test_runs_on_a_bare_python_with_help(pyz: Path) -> None:
    result = subprocess.run([*BARE, str(pyz), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage: agent.pyz" in result.stdout
    for command in ("launch", "status", "stop", "remove"):
        assert command in result.stdout


def test_spython_and_the_agent_import_from_inside_the_zip(pyz: Path) -> None:
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "import spython.main, lumberjack.site.agent, lumberjack.site.batch.slurm;"
        "from spython.main import Client;"
        "print(json.dumps([spython.main.__file__, lumberjack.site.agent.__file__,"
        " [m for m in sys.modules if m.split('.')[0] in ('click', 'fabric', 'paramiko')]]))"
    )
    result = subprocess.run([*BARE, "-c", code, str(pyz)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    spython_file, agent_file, heavy = json.loads(result.stdout)
    assert spython_file.startswith(str(pyz) + "/")
    assert agent_file.startswith(str(pyz) + "/")
    assert heavy == []  # nothing of the access point's dependencies


def test_status_of_an_export_prints_the_counts(pyz: Path, tmp_path: Path) -> None:
    site_bundle = load_site_bundle()
    root = tmp_path / "calib"
    site_bundle.build(root)
    spool = root / "spool"
    spool.mkdir()
    jqlw.write_log(spool / "job_queue.log", site_bundle.queue_ads(str(spool), ("4", "2")))
    result = subprocess.run(
        [*BARE, str(pyz), "status", str(root)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    answer = json.loads(lines[0])
    assert answer["jobs"] == {"completed": 1, "running": 1}
    assert answer["total"] == 2
    assert answer["finished"] is False
    assert answer["pool_running"] is False


def test_errors_are_one_json_line(pyz: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [*BARE, str(pyz), "launch", str(tmp_path / "nowhere")], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "launch.json" in json.loads(result.stdout.strip())["error"]
