"""The wheel, built as a release is (sdist, then the wheel from the sdist), holds the whole
package: every module, the site profiles, and every file the site side ships in agent.pyz
(templates included), so a non-editable install knows every site and builds the agent.
Its metadata declares every third-party module the package imports, the licence and
py.typed, and a copy with no git history gets the fallback version."""

from __future__ import annotations

import ast
import email.message
import email.parser
import importlib.metadata
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from conftest import load_fixture_module

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
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return load_fixture_module("wheel_build").build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


@pytest.fixture(scope="module")
def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def third_party_imports() -> set[str]:
    """Top-level modules that lumberjack/ imports from outside itself and the stdlib."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names} - {"lumberjack"}


def _distribution(requirement: str) -> str:
    name = requirement.split(";")[0]
    for stop in "<>=!~[ ":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-")


def test_every_imported_module_is_a_declared_dependency(metadata) -> None:
    declared = {_distribution(r) for r in metadata.get_all("Requires-Dist") or []
                if "extra ==" not in r}  # fmt: skip
    modules = third_party_imports()
    assert {"paramiko", "htcondor2", "pydantic"} <= modules  # the scan sees real imports
    owners = importlib.metadata.packages_distributions()
    undeclared = {
        module: owners.get(module)
        for module in modules
        # a module not installed here (tomli on Python >= 3.11) is its distribution's name
        if not {_distribution(d) for d in owners.get(module, [module])} & declared
    }
    assert undeclared == {}


def test_the_wheel_has_the_licence_py_typed_and_python_range(wheel_names, metadata) -> None:
    assert "lumberjack/py.typed" in wheel_names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel_names)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "Version 2.0, January 2004" in (REPO / "LICENSE").read_text()
    assert metadata["Requires-Python"] == ">=3.9"
    minors = sorted(
        int(c.rsplit(".", 1)[1]) for c in metadata.get_all("Classifier")
        if c.startswith("Programming Language :: Python :: 3.")
    )  # fmt: skip
    assert minors == [9, 10, 11, 12, 13]


def test_a_copy_with_no_git_history_builds_with_the_fallback_version(metadata) -> None:
    with open(REPO / "pyproject.toml", "rb") as fh:
        fallback = tomllib.load(fh)["tool"]["setuptools_scm"]["fallback_version"]
    assert metadata["Version"] == fallback


def test_the_installed_version_comes_from_the_build() -> None:
    from packaging.version import Version

    assert lumberjack.__version__ != "0+unknown"  # the build wrote lumberjack/_version.py
    assert str(Version(lumberjack.__version__)) == lumberjack.__version__


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


def test_the_wheel_holds_the_docs_and_the_site_image_recipe(wheel_names: set[str]) -> None:
    # --help and the docs name docs/ files (exit codes, cron units): an installed copy
    # has them under lumberjack/docs/, and the recipe `sites image build` renders.
    docs = sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "docs" / "cron").iterdir())
    assert "exit-codes.md" in [path.name for path in docs]
    names = [f"lumberjack/docs/{path.relative_to(REPO / 'docs').as_posix()}" for path in docs]
    assert [name for name in names if name not in wheel_names] == []
    recipe = {"packages.txt", "setup.sh", "lumberjack-site.def.in", "Containerfile.in"}
    assert {f"lumberjack/ap/site-image/{name}" for name in recipe} <= wheel_names
