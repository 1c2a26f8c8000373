"""Dataclasses to and from JSON, written once for every record that crosses a boundary
(the manifest, the path map, the ledger, the CLI's --json, and every message of the
contract between the access point and the site agent, both ways).

`from_json` checks every field's type against the dataclass's annotations, because the
data may come back from a site or from a file a user could edit: a wrong shape is a
`RecordError` naming the field, never a half-built record. Stdlib only (both sides).
Records read at the site write `Optional[X]`, not `X | None`: a login node's Python 3.9
cannot evaluate the latter when the annotations are checked.

A record with a `check()` method is checked once built, and one may check itself as
it is built (`__post_init__`); either's ValueError becomes the RecordError. `encode` and
`decode` are the same codec for a whole file or message: a type with a `VERSION`
travels as {"version": N, ...its fields}; `decode` reads that version only (or, through
the type's `upgrade`, the unversioned text an earlier release wrote) and refuses
anything else as a one-line ContractError.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

T = TypeVar("T")

#: Field metadata that keeps a field out of the JSON (e.g. working data of a plan).
NOT_IN_JSON = {"json": False}


_PLAIN = frozenset({str, int, float, bool, type(None)})
_UNIONS = (Union, getattr(types, "UnionType", Union))  # `X | None` is types.UnionType


class RecordError(ValueError):
    """The data does not have the record's shape; the message names the field."""


class ContractError(RecordError):
    """A file or message of the contract (core/contract.py, core/answers.py) that cannot
    be read as its type; the message is one line."""


@functools.cache
def _json_names(cls: type) -> tuple[str, ...]:
    """The fields of a dataclass that go into its JSON (a class's fields never change)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("json", True))


@functools.cache
def _init_fields(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """(type hints, init fields by name) of a dataclass: evaluating the annotations costs
    more than building a record, and a manifest holds one record per job."""
    hints = typing.get_type_hints(cls)
    return hints, {f.name: f for f in dataclasses.fields(cls) if f.init}


@functools.cache
def _as_is(kind: Any) -> frozenset[type] | None:
    """The types of a value `_build(kind, value)` returns unchanged (None: any value):
    most fields of a manifest's million records are checked by one lookup."""
    if kind is Any:
        return None
    if kind in _PLAIN:  # int is not float: an int for a float field is converted
        return frozenset({kind})
    _, origin, args = _shape(kind)
    if origin in _UNIONS and all(a in _PLAIN for a in args):
        return frozenset(args)
    return frozenset()


def to_json(record: Any) -> Any:
    """A dataclass (or list/dict/tuple of them) as plain JSON values."""
    if type(record) in _PLAIN:  # most values: no dataclass test (a manifest has millions)
        return record
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {name: to_json(getattr(record, name)) for name in _json_names(type(record))}
    if isinstance(record, dict):
        return {str(k): to_json(v) for k, v in record.items()}
    if isinstance(record, (list, tuple, set, frozenset)):
        return [to_json(v) for v in record]
    if isinstance(record, Path):
        return str(record)
    return record


class JsonRecord:
    """Mixin for dataclasses: `record.to_json()` and `Record.from_json(data, where)`."""

    def to_json(self) -> Any:
        return to_json(self)

    @classmethod
    def from_json(cls: type[T], data: Any, where: str = "") -> T:
        return from_json(cls, data, where)


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """Build `cls` from JSON data, checking each field; unknown keys are refused."""
    return _build(cls, data, where or cls.__name__)


@functools.cache
def _shape(kind: Any) -> tuple[bool, Any, tuple[Any, ...]]:
    """(is a dataclass, origin, args) of a type, worked out once per type."""
    return dataclasses.is_dataclass(kind), typing.get_origin(kind), typing.get_args(kind)


def _build(kind: Any, data: Any, where: str) -> Any:
    if kind is Any or (kind is str and type(data) is str):  # the common case first
        return data
    is_record, origin, args = _shape(kind)
    if is_record:
        return _dataclass(kind, data, where)
    if origin in _UNIONS:
        if data is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _build(option, data, where)
            except RecordError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is list:
        _expect(isinstance(data, list), where, "a list")
        plain = _as_is(args[0])
        if plain is None or all(type(v) in plain for v in data):
            return list(data)
        return [_build(args[0], v, f"{where}[{i}]") for i, v in enumerate(data)]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        _expect(isinstance(data, (list, tuple)), where, "a list")
        return tuple(_build(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin is tuple:
        _expect(isinstance(data, (list, tuple)) and len(data) == len(args), where,
                f"a list of {len(args)}")  # fmt: skip
        return tuple(_build(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data)))
    if origin is dict:
        _expect(isinstance(data, dict), where, "an object")
        keys, values = _as_is(args[0]), _as_is(args[1])
        if (keys is None or all(type(k) in keys for k in data)) and (
            values is None or all(type(v) in values for v in data.values())
        ):
            return dict(data)
        return {
            _build(args[0], k, f"{where} key"): _build(args[1], v, f"{where}[{k!r}]")
            for k, v in data.items()
        }
    if kind is Path:
        _expect(isinstance(data, str), where, "a path")
        return Path(data)
    if kind is float:
        _expect(isinstance(data, (int, float)) and not isinstance(data, bool), where, "a number")
        return float(data)
    if kind in (str, int, bool):
        ok = isinstance(data, kind) and (kind is bool or not isinstance(data, bool))
        _expect(ok, where, f"{'an' if kind is int else 'a'} {kind.__name__}")
        return data
    raise TypeError(f"records cannot build {kind!r}")  # a programming error, not bad data


def _dataclass(cls: Any, data: Any, where: str) -> Any:
    _expect(isinstance(data, dict), where, "an object")
    names, fields = _field_plan(cls)
    if not names.issuperset(data):
        raise RecordError(f"{where}: unknown field {sorted(set(data) - names)[0]!r}")
    values = {}
    for name, hint, plain, required, convert in fields:
        if name in data:
            value = data[name]
            if plain is None or type(value) in plain:
                values[name] = value
                continue
            if convert is not None:
                value = convert(value)
                if value is not _MISS:
                    values[name] = value
                    continue
            values[name] = _build(hint, data[name], f"{where}.{name}")
        elif required:
            raise RecordError(f"{where}: missing field {name!r}")
    check = _check_of(cls)
    try:
        record = cls(**values)  # a type may check itself as it is built (__post_init__)
        if check is not None:
            check(record)
    except RecordError:
        raise
    except ValueError as exc:  # the type's own rule: one line, naming where
        raise RecordError(f"{where}: {exc}") from None
    return record


@functools.cache
def _check_of(cls: type) -> Callable[[Any], None] | None:
    return getattr(cls, "check", None)


_Field = tuple[str, Any, Any, bool, Optional[Callable[[Any], Any]]]


@functools.cache
def _field_plan(cls: type) -> tuple[frozenset[str], tuple[_Field, ...]]:
    """(init field names, (name, type, _as_is(type), required, _converter(type)) of each)
    of a dataclass."""
    hints, known = _init_fields(cls)
    fields = tuple(
        (name, hints[name], _as_is(hints[name]),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
         _converter(hints[name]))
        for name, f in known.items()
    )  # fmt: skip
    return frozenset(known), fields


#: What a converter returns for a value not of its simple shape.
_MISS = object()


@functools.cache
def _converter(kind: Any) -> Callable[[Any], Any] | None:
    """For a list or dict of plain values, or a list of tuples of them: a function giving
    what _build gives for a value of exactly that shape (from JSON: the usual case), in
    one pass and without a field path per item; _MISS for any other value, which _build
    then checks (and names what is wrong). None for other types."""
    _, origin, args = _shape(kind)
    if origin is dict and len(args) == 2:
        keys, values = _as_is(args[0]), _as_is(args[1])
        if keys and values:
            return lambda v: (
                dict(v)
                if type(v) is dict
                and all(type(k) in keys for k in v)
                and all(type(x) in values for x in v.values())
                else _MISS
            )
        return None
    if origin is not list or len(args) != 1:
        return None
    items = _as_is(args[0])
    if items:
        return lambda v: list(v) if type(v) is list and all(type(x) in items for x in v) else _MISS
    _, inner, parts = _shape(args[0])
    kinds = tuple(_as_is(a) for a in parts)
    if inner is not tuple or not parts or Ellipsis in parts or not all(kinds):
        return None
    size = len(kinds)

    def tuples(v: Any) -> Any:
        if type(v) is not list:
            return _MISS
        out = []
        for x in v:
            if type(x) not in (list, tuple) or len(x) != size:
                return _MISS
            if not all(type(e) in k for e, k in zip(x, kinds)):  # type: ignore[operator]
                return _MISS
            out.append(tuple(x))
        return out

    return tuples


def encode(record: Any) -> str:
    """The text of a file or message: the record's fields, and its type's VERSION."""
    data = to_json(record)
    version = getattr(type(record), "VERSION", None)
    if version is not None:
        data = {"version": version, **data}
    return json.dumps(data, sort_keys=True)


def decode(cls: type[T], text: str | bytes, where: str) -> T:
    """`cls` read strictly from the text `encode` wrote; `where` names it in errors."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ContractError(f"{where} is not JSON: {exc}") from None
    wanted = getattr(cls, "VERSION", None)
    if isinstance(data, dict) and "version" in data:
        data = dict(data)
        version = data.pop("version")
        if version != wanted:
            raise ContractError(
                f"{where} has version {version!r}; this side reads version {wanted} "
                "(ship the agent again with the same release)"
            )
    elif hasattr(cls, "upgrade"):
        data = cls.upgrade(data)  # type: ignore[attr-defined]
    try:
        return from_json(cls, data, where)
    except ContractError:
        raise
    except RecordError as exc:
        raise ContractError(str(exc)) from None


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise RecordError(f"{where}: not {what}")
