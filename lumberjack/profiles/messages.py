"""One line from a profile's ValidationError: `FILE: WHERE VALUE PROBLEM; FIX`.

WHERE is the key as the file spells it (`[site].login_host`, `[[queues]][2].max_nodes`,
queues numbered from 1), VALUE what the file holds there, and the fix an example taken
from the model's field (`Field(examples=[...])`) or the check's own words (`problem`).
Only the first error is shown (unknown keys first: a typo explains a "missing" key).
"""

from __future__ import annotations

import difflib
import json
import typing
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from lumberjack.errors import BadInput

Loc = tuple[typing.Union[str, int], ...]


def display_path(path: Path) -> str:
    """The path as messages show it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def one_line(error: ValidationError, model: type[BaseModel], data: Any, shown: str) -> BadInput:
    """The first of `error`'s problems as a BadInput; `data` is what was validated and
    `shown` the file as messages name it."""
    details = sorted(error.errors(), key=_order)
    return BadInput(f"{shown}: {_describe(details[0], model, data)}")


def _order(detail: ErrorDetails) -> int:
    """Unknown top-level keys, then missing tables, then unknown keys, then the rest."""
    extra, top = detail["type"] == "extra_forbidden", len(detail["loc"]) == 1
    missing_table = top and detail["type"] == "missing"
    return 0 if extra and top else 1 if missing_table else 2 if extra else 3


def _describe(detail: ErrorDetails, model: type[BaseModel], data: Any) -> str:
    loc: Loc = tuple(detail["loc"])
    kind = detail["type"]
    ctx = detail.get("ctx") or {}
    if kind == "profile":
        loc = loc + tuple(ctx["key"])
        where = _where(model, loc)
        if not ctx["show"]:
            return f"{where} {ctx['problem']}"
        value = ctx["value"] if "value" in ctx else _raw(data, loc)
        return f"{where} {_shown(value)} {ctx['problem']}"
    if kind == "extra_forbidden":
        parent, key = loc[:-1], str(loc[-1])
        allowed = _keys(_model_at(model, parent))
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f'did you mean "{close[0]}"?' if close else "known keys: " + ", ".join(allowed)
        return f"unknown key {_where(model, parent)}.{key}; {hint}"
    where = _where(model, loc)
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"{where} must be a table"
    if len(loc) == 1 and kind == "missing":
        return f"{where} is missing; see site-profiles/README.md"
    if len(loc) == 1 and kind in ("tuple_type", "list_type", "too_short"):
        return f"{where} must hold at least one {where} table"
    key, field = str(loc[-1]), _field_at(model, loc)
    value = _shown(_raw(data, loc))
    if kind == "missing":
        return f"{where} is missing; add e.g. {key} = {_example(field)}"
    if kind == "string_type":
        return f"{where} {value} is not a string; write e.g. {key} = {_example(field)}"
    if kind == "int_type":
        return f"{where} {value} is not a whole number; write e.g. {key} = {_example(field)}"
    if kind == "greater_than_equal":
        return f"{where} {value} must be at least {ctx['ge']}"
    if kind == "bool_type":
        return f"{where} {value} is not true or false; write {key} = true or {key} = false"
    return f"{where} {value}: {detail['msg']}"


def _where(model: type[BaseModel], loc: Loc) -> str:
    """`[site].name`, `[[queues]][2].max_nodes`; list items are shown by their key."""
    if not loc:
        return "profile"
    head, rest = str(loc[0]), loc[1:]
    if _is_array_of_tables(_field_at(model, (head,))):
        text = f"[[{head}]]"
        if rest and isinstance(rest[0], int):
            text, rest = f"{text}[{rest[0] + 1}]", rest[1:]
    else:
        text = f"[{head}]"
    return text + "".join(f".{part}" for part in rest if isinstance(part, str))


def _is_array_of_tables(field: Optional[FieldInfo]) -> bool:
    return (
        field is not None
        and typing.get_origin(field.annotation) is tuple
        and any(
            isinstance(arg, type) and issubclass(arg, BaseModel)
            for arg in typing.get_args(field.annotation)
        )
    )


def _field_at(model: type[BaseModel], loc: Loc) -> Optional[FieldInfo]:
    current: Optional[type[BaseModel]] = model
    field = None
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None:
            return None
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)), None
        )
        if field is None:
            return None
        current = _model_in(field.annotation)
    return field


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel]:
    field = _field_at(model, loc)
    return (_model_in(field.annotation) if field else None) or model


def _model_in(annotation: Any) -> Optional[type[BaseModel]]:
    """The model a field holds: itself, or in Optional[...] or tuple[..., ...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _example(field: Optional[FieldInfo]) -> str:
    examples = _examples(field.annotation) if field is not None else []
    if field is not None and (field.examples or examples):
        return str((field.examples or examples)[0])
    floor = next((m.ge for m in (field.metadata if field else []) if hasattr(m, "ge")), 1)
    return str(max(int(floor), 1))


def _examples(annotation: Any) -> list[Any]:
    """Examples of a type wrapped in Optional[...] (its Field sits inside the Annotated)."""
    for arg in typing.get_args(annotation):
        if isinstance(arg, FieldInfo) and arg.examples:
            return arg.examples
        found = _examples(arg)
        if found:
            return found
    return []


def _raw(data: Any, loc: Loc) -> Any:
    for part in loc:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            break
    return data


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)
