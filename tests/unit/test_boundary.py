"""The SSH link in the package layout: what is shipped to the site (`lumberjack.core`,
`lumberjack.site`) imports nothing outside the standard library and nothing of the
access point's side of the package."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import lumberjack
from lumberjack.ap import agent_zipapp

PACKAGE = Path(lumberjack.__file__).parent
SHIPPED = [
    path for sub in agent_zipapp.SHIPPED_PACKAGES for path in sorted((PACKAGE / sub).rglob("*.py"))
]
#: What the site side may import besides the standard library: itself, and spython
#: (vendored into agent.pyz; imported lazily where Apptainer is driven).
ALLOWED = {"lumberjack.core", "lumberjack.site", "spython"}


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.append("lumberjack.<relative>")
            elif node.module:
                names.append(node.module)
    return names


def allowed(name: str) -> bool:
    top = name.split(".")[0]
    if top == "lumberjack":
        return name == "lumberjack" or any(
            name == a or name.startswith(a + ".") for a in ALLOWED if a.startswith("lumberjack")
        )
    return top in sys.stdlib_module_names or top in ALLOWED or top == "__future__"


def test_the_site_side_has_modules() -> None:
    assert any(path.name == "agent.py" for path in SHIPPED)
    assert any(path.parent.name == "core" for path in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_site_side_imports_only_the_standard_library(path: Path) -> None:
    bad = [name for name in imported_modules(path) if not allowed(name)]
    assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}: the site side is stdlib only"


def test_the_check_catches_a_third_party_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import click\nfrom lumberjack.ap import bundle\nimport json\n")
    assert [name for name in imported_modules(module) if not allowed(name)] == [
        "click",
        "lumberjack.ap",
    ]
