"""How many files a new batch system, container runtime or pool placement takes, counted
from the ones there: docs/ARCHITECTURE.md ("Where to add") gives these numbers."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import lumberjack
from lumberjack.core import contract
from lumberjack.profiles import value_types
from lumberjack.site import pools

PACKAGE = Path(lumberjack.__file__).parent


@cache
def trees() -> tuple[tuple[str, tuple[ast.AST, ...]], ...]:
    """Every module of the package (its path, relative to it) and its nodes, read once."""
    return tuple(
        (path.relative_to(PACKAGE).as_posix(), tuple(ast.walk(ast.parse(path.read_text()))))
        for path in sorted(PACKAGE.rglob("*.py"))
    )


def files_of(word: str = "", module: str = "") -> set[str]:
    """The package's files (relative to it) that spell `word` as a whole string, or
    import `module` (or a name from it)."""
    found = set()
    parent, _, leaf = module.rpartition(".")
    for name, nodes in trees():
        for node in nodes:
            spelled = word and isinstance(node, ast.Constant) and node.value == word
            imported = module and (
                (isinstance(node, ast.ImportFrom) and node.module == module)
                or (
                    isinstance(node, ast.ImportFrom)
                    and node.module == parent
                    and any(alias.name == leaf for alias in node.names)
                )
                or (isinstance(node, ast.Import) and any(a.name == module for a in node.names))
            )
            if spelled or imported:
                found.add(name)
                break
    return found


def test_a_batch_system_is_its_module_and_one_line_in_systems() -> None:
    files = files_of("cobalt", "lumberjack.site.batch.cobalt")
    assert files == {"site/batch/cobalt.py", "site/batch/__init__.py"}


def test_a_runtime_is_its_class_and_its_name_in_the_contract() -> None:
    # container-engine brings one rule of its own (a profile must place the schedd in
    # the allocation); the two files every runtime takes are the others.
    files = files_of("container-engine")
    assert files == {"site/runtime.py", "core/contract.py", "profiles/profile_file.py"}
    assert value_types.RUNTIMES == contract.RUNTIME_NAMES  # profiles keep no list of their own


def test_a_placement_is_its_module_a_line_in_placements_and_its_word_in_the_contract() -> None:
    assert files_of(module="lumberjack.site.pools.allocation") == {"site/pools/__init__.py"}
    assert tuple(pools.PLACEMENTS) == contract.PLACEMENTS
    assert value_types.PLACEMENTS is contract.PLACEMENTS
    for kind in pools.PLACEMENTS.values():  # one module each
        assert sum(kind.__module__ == other.__module__ for other in pools.PLACEMENTS.values()) == 1
