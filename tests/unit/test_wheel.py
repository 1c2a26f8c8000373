"""The wheel, built as a release is (sdist, then the wheel from the sdist), holds the whole
package: every module, the site profiles, and every file the site side ships in agent.pyz
(templates included), so a non-editable install knows every site and builds the agent."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import lumberjack
from lumberjack.ap.agent_zipapp import SHIPPED_PACKAGES

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(lumberjack.__file__).parent


def package_files(under: Path = PACKAGE) -> list[str]:
    """Every file of the package in the source tree, named as in a wheel."""
    return sorted(
        path.relative_to(PACKAGE.parent).as_posix()
        for path in under.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    # A fresh copy of what the build reads: a checkout's *.egg-info would add its old
    # file list to the sdist and hide a missing package-data pattern.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(PACKAGE, source / "lumberjack", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (sdist,) = out.glob("*.tar.gz")  # the wheel is built from it
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_wheel_holds_every_site_profile(wheel_names: set[str]) -> None:
    profiles = sorted((REPO / "site-profiles").glob("*.toml"))
    assert "perlmutter.toml" in [path.name for path in profiles]
    for path in [*profiles, REPO / "site-profiles" / "README.md"]:
        assert f"lumberjack/profiles/site-profiles/{path.name}" in wheel_names


def test_the_wheel_holds_every_file_of_the_site_side(wheel_names: set[str]) -> None:
    shipped = [name for sub in SHIPPED_PACKAGES for name in package_files(PACKAGE / sub)]
    assert "lumberjack/site/agent.py" in shipped
    assert [name for name in shipped if name not in wheel_names] == []


def test_the_wheel_holds_every_file_of_the_package(wheel_names: set[str]) -> None:
    assert [name for name in package_files() if name not in wheel_names] == []
