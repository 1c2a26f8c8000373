"""The floors of the package, and the two rules of the house: an import only goes down a
floor (or stays in its own room), and no modules import each other round a circle.

Every import counts, at the top of a module, inside a function or under TYPE_CHECKING:
an import deferred into a function is still a module that must know another (deferring
is how a cycle hides), and a type named under TYPE_CHECKING is still a thing from that
module the reader must understand.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lumberjack

PACKAGE = Path(lumberjack.__file__).parent

#: The floors, top first: a room (a subpackage, or a module directly in lumberjack/) may
#: import from the rooms of the floors below its own, and from itself; never sideways or up.
#: ap and transport are one floor (neither knows the other: state joins them); both stand
#: on profiles (a site as its profile says), profiles on site (batch systems, the job
#: container); host is the access point's own ground (its accounts, state directory,
#: safe reads), site what is shipped; the package itself (`__version__`) and errors are
#: the ground everything stands on; the version file setuptools-scm writes at install
#: lies under them.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("state",),
    ("ap", "transport"),
    ("profiles",),
    ("host", "site"),
    ("core",),
    ("__init__", "errors"),
    ("_version",),
)
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
#: Rooms written at install time, absent from a fresh clone (the floors hold before install too).
WRITTEN_AT_INSTALL = frozenset({"_version"})


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports, wherever in the module the import is.
    Importing one's own enclosing package (its __init__) is no arrow between rooms."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package[: len(package) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name and not name.startswith(t + "."))
    return out


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_edges(edges: dict[str, set[str]]) -> list[str]:
    """Imports that go up a floor or sideways into another room of the same floor."""
    bad = []
    for source, targets in edges.items():
        for target in targets:
            a, b = room_of(source), room_of(target)
            if a != b and FLOOR_OF[a] >= FLOOR_OF[b]:
                bad.append(f"{source} -> {target} ({a} may not import {b})")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def cycle_edges(edges: dict[str, set[str]], group: list[str]) -> list[str]:
    members = set(group)
    return sorted(f"{a} -> {b}" for a in group for b in edges[a] if b in members)


def test_every_room_has_a_floor() -> None:
    rooms = {room_of(name) for name in modules()}
    assert rooms - set(FLOOR_OF) == set(), "give each new room a floor in FLOORS"
    assert set(FLOOR_OF) - rooms - WRITTEN_AT_INSTALL == set(), "FLOORS names a room that is gone"


def test_no_import_goes_up_a_floor() -> None:
    bad = upward_edges(graph())
    assert bad == [], "imports against the floors:\n  " + "\n  ".join(bad)


def test_no_import_cycles() -> None:
    edges = graph()
    found = cycles(edges)
    lines = [f"{' <-> '.join(group)}: {', '.join(cycle_edges(edges, group))}" for group in found]
    assert found == [], "import cycles:\n  " + "\n  ".join(lines)


def test_the_checks_catch_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    package = tmp_path / "lumberjack"
    for room in ("core", "state", "ap"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "a.py").write_text("from lumberjack.state.b import x\n")
    (package / "state" / "b.py").write_text("def f():\n    from lumberjack.core import a\n")
    (package / "ap" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n"
    )
    (package / "ap" / "d.py").write_text("from lumberjack.ap import c\n")
    edges = graph(package)
    assert upward_edges(edges) == [
        "lumberjack.core.a -> lumberjack.state.b (core may not import state)"
    ]
    assert cycles(edges) == [
        ["lumberjack.ap.c", "lumberjack.ap.d"],
        ["lumberjack.core.a", "lumberjack.state.b"],
    ]


def test_transport_and_ap_know_nothing_of_each_other() -> None:
    """One floor (DESIGN.md): what both need (message text, the state directory, safe
    reads, acting as an owner) is below them, in core/ or host/."""
    edges = graph()
    across = sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        for target in targets
        if {room_of(source), room_of(target)} == {"ap", "transport"}
    )
    assert across == []
