"""core.records: one JSON helper for every dataclass that crosses a boundary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from lumberjack.core.jobstatus import FINAL, JobStatus, status_of, word_of
from lumberjack.core.manifest import FileEntry, Manifest, ManifestError, parse_manifest
from lumberjack.core.records import NOT_IN_JSON, JsonRecord, RecordError, from_json, to_json


@dataclass
class Inner(JsonRecord):
    name: str
    size: int = 0


@dataclass
class Outer(JsonRecord):
    where: Path
    items: list[Inner]
    pairs: list[tuple[str, str]] = field(default_factory=list)
    by_name: dict[str, Inner] = field(default_factory=dict)
    note: Optional[str] = None
    ratio: float = 1.0
    scratch: list[int] = field(default_factory=list, metadata=NOT_IN_JSON)


def sample() -> Outer:
    return Outer(Path("/a b/c"), [Inner("x", 3)], [("s", "d")], {"k": Inner("y")}, None, 2.5, [1])


def test_round_trip_through_json_text() -> None:
    data = json.loads(json.dumps(sample().to_json()))
    assert "scratch" not in data
    assert data["where"] == "/a b/c"
    back = Outer.from_json(data)
    assert back == Outer(
        Path("/a b/c"), [Inner("x", 3)], [("s", "d")], {"k": Inner("y")}, None, 2.5
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(items="x"), "outer.items: not a list"),
        (lambda d: d["items"][0].update(size="3"), "outer.items[0].size: not an int"),
        (lambda d: d["items"][0].update(size=True), "outer.items[0].size: not an int"),
        (lambda d: d.update(pairs=[["a"]]), "outer.pairs[0]: not a list of 2"),
        (lambda d: d.update(extra=1), "outer: unknown field 'extra'"),
        (lambda d: d.pop("where"), "outer: missing field 'where'"),
        (lambda d: d.update(note=5), "outer.note: not a str"),
        (lambda d: d.update(ratio="1"), "outer.ratio: not a number"),
        (lambda d: d["by_name"].update(z=[]), "outer.by_name['z']: not an object"),
    ],
)
def test_wrong_shapes_name_the_field(mutate, message: str) -> None:
    data = sample().to_json()
    mutate(data)
    with pytest.raises(RecordError) as caught:
        from_json(Outer, data, "outer")
    assert str(caught.value) == message


@dataclass
class Plain(JsonRecord):
    names: list[str] = field(default_factory=list)
    sizes: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    table: dict[str, str] = field(default_factory=dict)
    pairs: list[tuple[str, int]] = field(default_factory=list)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"names": ["a", "b"], "table": {"k": "v"}, "pairs": [["a", 1], ("b", 2)]},
         Plain(["a", "b"], table={"k": "v"}, pairs=[("a", 1), ("b", 2)])),
        ({"sizes": [1, 2.5]}, Plain(sizes=[1.0, 2.5])),  # ints become floats, as ever
        ({"names": ("a",)}, "plain.names: not a list"),
        ({"names": ["a", 1]}, "plain.names[1]: not a str"),
        ({"counts": [1, True]}, "plain.counts[1]: not an int"),
        ({"sizes": [1, "2"]}, "plain.sizes[1]: not a number"),
        ({"table": {"k": 1}}, "plain.table['k']: not a str"),
        ({"table": []}, "plain.table: not an object"),
        ({"pairs": [["a", 1, 2]]}, "plain.pairs[0]: not a list of 2"),
        ({"pairs": [["a", "1"]]}, "plain.pairs[0][1]: not an int"),
        ({"pairs": [["a", False]]}, "plain.pairs[0][1]: not an int"),
        ({"pairs": "ab"}, "plain.pairs: not a list"),
    ],
)  # fmt: skip
def test_lists_and_dicts_of_plain_values_are_checked_item_by_item(data, expected) -> None:
    # Such fields take a quick pass when every item fits; any other value is checked
    # one item at a time, and the error names the item.
    if isinstance(expected, str):
        with pytest.raises(RecordError) as caught:
            from_json(Plain, data, "plain")
        assert str(caught.value) == expected
    else:
        got = from_json(Plain, data, "plain")
        assert got == expected
        assert [type(p) for p in got.pairs] == [tuple] * len(got.pairs)
        assert all(type(s) is float for s in got.sizes)


def test_to_json_of_plain_values_is_identity() -> None:
    assert to_json({"a": (1, 2), "b": [Path("/x")]}) == {"a": [1, 2], "b": ["/x"]}


def test_manifest_refuses_other_formats_and_shapes() -> None:
    path_map = {"jobs": {"1.0": {"remote_iwd": "/s/1/0/cluster1.proc0.subproc0"}}}
    files = [FileEntry("a", 1, "0" * 64)]
    good = Manifest("n", "alice", "/s", "25", "0.1", [1], ["1.0"], files, path_map)
    data = json.loads(json.dumps(good.to_json()))
    assert parse_manifest(data, "m.json") == good
    assert good.remote_iwds() == ["/s/1/0/cluster1.proc0.subproc0"]
    with pytest.raises(ManifestError, match="m.json: not a lumberjack manifest"):
        parse_manifest({**data, "format": "other/1"}, "m.json")
    with pytest.raises(ManifestError, match=r"manifest.files\[0\].size: not an int"):
        parse_manifest({**data, "files": [{"path": "a", "size": "1", "sha256": "x"}]}, "m.json")
    with pytest.raises(ManifestError):
        parse_manifest([], "m.json")


def test_job_status_words() -> None:
    assert status_of("4") is JobStatus.COMPLETED
    assert status_of(" 2 ") is JobStatus.RUNNING
    assert status_of("99") is None and status_of(None) is None
    assert word_of(6) == "transferring_output"
    assert JobStatus.TRANSFERRING_OUTPUT.title == "Transferring Output"
    assert word_of("x") == "x"
    assert JobStatus.HELD in FINAL and JobStatus.IDLE not in FINAL


def test_records_read_at_the_site_evaluate_on_python_3_9() -> None:
    # from_json evaluates annotations; `X | None` fails on the Python 3.9 of login nodes.
    import dataclasses

    for record in (Manifest, FileEntry):
        for f in dataclasses.fields(record):
            assert "|" not in str(f.type), f"{record.__name__}.{f.name}: use Optional[...]"
