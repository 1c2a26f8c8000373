"""The package runs on every Python pyproject names (3.9, EL9's, to 3.13), checked here on
whichever Python runs the tests: no syntax newer than 3.9, and no `X | Y` where Python
evaluates an annotation at run time (pydantic models, and the dataclasses that
`lumberjack.core.records` rebuilds from JSON through `typing.get_type_hints`), which
3.9 cannot evaluate even with `from __future__ import annotations`."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import typing
from pathlib import Path

import pydantic

import lumberjack
from lumberjack.core.records import JsonRecord

PACKAGE = Path(lumberjack.__file__).parent
OLDEST = (3, 9)


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__main__.py", "_version.py"):  # runs the CLI / generated
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_parses_as_the_oldest_python() -> None:
    failed = []
    for path in sorted(PACKAGE.rglob("*.py")):
        try:
            ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=OLDEST)
        except SyntaxError as exc:
            failed.append(f"{path.relative_to(PACKAGE)}:{exc.lineno}: {exc.msg}")
    assert failed == []


def _evaluated_classes() -> list[type]:
    found = []
    for name in modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if not inspect.isclass(value) or value.__module__ != module.__name__:
                continue
            is_model = issubclass(value, pydantic.BaseModel)
            is_record = dataclasses.is_dataclass(value) and issubclass(value, JsonRecord)
            if is_model or is_record:
                found.append(value)
    return found


def test_no_union_operator_in_annotations_evaluated_at_run_time() -> None:
    classes = _evaluated_classes()
    names = {cls.__name__ for cls in classes}
    assert {"Manifest", "ProfileFile", "SiteTable"} <= names  # the scan finds both kinds
    bad = [
        f"{cls.__module__}.{cls.__name__}.{field}: {hint}"
        for cls in classes
        for field, hint in vars(cls).get("__annotations__", {}).items()
        if isinstance(hint, str) and "|" in hint
    ]
    assert bad == [], "write Optional[X] / Union[X, Y] in these (3.9 cannot evaluate X | Y)"
    for cls in classes:
        if dataclasses.is_dataclass(cls):
            typing.get_type_hints(cls)  # what records.from_json does
