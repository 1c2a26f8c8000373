"""lumberjack.core.jobqueuelog_onepass gives exactly what the two passes give
(jobqueuelog.parse_file then replay): the same ads, or the same error with the same line
number; and `inspect --json`'s document is json.dumps of those ads, byte for byte."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_jobqueuelog import BAD_LOGS, BAD_REPLAYS, FIXTURE

from lumberjack.ap import queue_log
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_onepass as onepass
from lumberjack.core import jobqueuelog_write as jqlw

# A queue as a schedd writes it (header, cluster and proc ads, transactions, re-sets,
# a delete, destroyed ads), all of it committed: the one pass reads it without the two.
SCHEDD_LOG = (
    "107 1 CreationTimestamp 1718000000\n"
    "101 0.0 Job Machine\n"
    "105 \n"
    '103 0.0 UidDomain "submit.example.org"\n'
    "106 \n"
    "103 0.0 NextClusterNum 1\n"
    "105 \n"
    "101 01.-1 Job Machine\n"
    "103 01.-1 ClusterId 1\n"
    "101 1.0 Job Machine\n"
    "103 1.0 JobStatus 1\n"
    '103 1.0 Args "a \\"quoted\\" \\\\ back"\n'
    '103 1.0 Description "naïve café ☕ 日本語 x=1"\n'
    "101 1.-2 ClusterPvt (empty)\n"
    "101 1.1 Job Machine\n"
    "103 1.0 ProcId 0\n"
    "103 1.1 ProcId 1\n"
    '103 1.1 Environment "GREETING=héllo \udcff\udc80"\n'
    '103 01.-1 Requirements (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX")\n'
    "106 \n"
    "105 \n"
    "103 1.0 JobStatus 5\n"
    "104 1.1 Environment\n"
    "103 1.1 Environment  leading blanks\n"
    "106 \n"
    "105 \n"
    "101 03.-1 Job Machine\n"
    "101 3.0 Job Machine\n"
    "106 \n"
    "105 \n"
    "102 3.0\n"
    "102 03.-1\n"
    "106 #a comment\n"
    "101 3.0 Job Machine\n"
)


def _two_passes(text: str, source: str = "q.log") -> dict[str, jql.Ad] | str:
    """What the two passes make of `text`: the ads, or the error's message."""
    handle = io.BytesIO(text.encode("utf-8", "surrogateescape"))
    try:
        return jql.replay(jql.parse_file(handle, source), source=source)
    except jql.JobQueueLogError as exc:
        return f"{type(exc).__name__}: {exc} (line {exc.line})"


def _one_pass(read, text: str, piece: int, source: str = "q.log"):  # noqa: ANN001, ANN202
    handle = io.BytesIO(text.encode("utf-8", "surrogateescape"))
    try:
        return read(handle, source, piece)
    except jql.JobQueueLogError as exc:
        return f"{type(exc).__name__}: {exc} (line {exc.line})"


def _document(answer: dict[str, jql.Ad] | str) -> str:
    if isinstance(answer, str):
        return answer
    return json.dumps({"ads": {key: ad.attrs for key, ad in answer.items()}})


def _same_answers(text: str, piece: int = onepass.PIECE_BYTES) -> None:
    want = _two_passes(text)
    assert _one_pass(onepass.read_ads, text, piece) == want
    assert _one_pass(onepass.read_json, text, piece) == _document(want)


@pytest.mark.parametrize("piece", [7, 64, onepass.PIECE_BYTES])
def test_a_schedd_log_is_read_in_one_pass(piece: int) -> None:
    """Not left to the two passes: the one pass itself gives their answer."""
    handle = io.BytesIO(SCHEDD_LOG.encode("utf-8", "surrogateescape"))
    state = onepass._one_pass(handle, piece)
    want = _two_passes(SCHEDD_LOG)
    assert isinstance(want, dict) and "1.1" in want and "3.0" in want and "03.-1" not in want
    assert {key: jql.Ad(key, *state.types[key], a) for key, a in state.ads.items()} == want
    _same_answers(SCHEDD_LOG, piece)


@pytest.mark.parametrize(
    "tail",
    [
        "105 \n103 1.0 JobStatus 2\n",  # an unfinished final transaction
        "105 \n103 1.0 JobStatus 2\n103 1.0 Job",  # ... torn mid-line
        "105",  # a torn 105
        "103 1.0 JobStatus 2",  # a final line without its newline (a record)
        "103 1.0 jobstatus 2\n",  # another spelling of a name
        "103 1.0 JOBSTATUS 2\n104 1.0 jobStatus\n103 1.0 JobStatus 3\n",
        "103 1.-1 A 1\n",  # another spelling of a key (of no live ad: an error)
        "103 01.-1 A 1\n103 1.-1 B 2\n",  # ... and of a live one
        "101 1.-1 Job Machine\n",  # a 101 of a live ad under another spelling
        "101 003.0 Job Machine\n",  # ... of a destroyed one: fine
        "105\n106\n",  # markers without their trailing space
        "105 \n106 \n106 \n",
        "105 \n105 \n",
        "103 1.0 A \n",
        "103 1.0 A \t\n",
        "103 1.0 A\t1 x\n",
        "103 1.0  1\n",
        "103 1.0 A \x01\n",
        "103 1.0 A 1\x00\n",
        "101 3.0 Job Machine Extra\n",
        "101 3.0 Jo\tb Machine\n",
        "101 3.x Job Machine\n",
        "101 3.-0 Job Machine\n103 3.0 A 1\n",
        "102 9.9\n",
        "104 9.9 A\n",
        "104 1.0 NoSuchName\n",
        "107 2 CreationTimestamp 1718000001\n",
        "\n",
        "hello\n",
        "\udcff\n",
    ],
)
@pytest.mark.parametrize("piece", [5, onepass.PIECE_BYTES])
def test_logs_the_one_pass_leaves_to_the_two_get_their_answer(tail: str, piece: int) -> None:
    _same_answers(SCHEDD_LOG + tail, piece)
    _same_answers(tail, piece)


@pytest.mark.parametrize(
    "text", [FIXTURE, FIXTURE + "106 \n"] + [text for text, _, _ in BAD_LOGS + BAD_REPLAYS]
)
def test_the_two_passes_samples_get_their_answer(text: str) -> None:
    """jobqueuelog's own samples: a schedd's queue (with and without its unfinished final
    transaction), and every malformed line and impossible replay, with its line number."""
    _same_answers(text)
    _same_answers(text, 9)


def test_an_empty_log_has_no_ads() -> None:
    assert onepass.read_ads(io.BytesIO(b""), "q.log") == {}
    assert onepass.read_json(io.BytesIO(b""), "q.log") == '{"ads": {}}'


# ------------------------------------------------------------------------------ properties

_KEY = st.sampled_from(["0.0", "1.0", "01.-1", "1.-1", "1.1", "2.0", "02.-1", "00.0", "1.x"])
_NAME = st.sampled_from(["A", "a", "Foo", "FOO", "B", "é", '"q"', "b\\s", "~"])
_VALUE = st.text(
    st.one_of(
        st.sampled_from([" ", '"', "\\", "\t", "\r", "é", "\udcff", "~", "`", "|", "^", "{", "}"]),
        st.characters(exclude_characters="\n\x00", exclude_categories=("Cs",)),
    ),
    min_size=0,
    max_size=8,
)
_TYPE = st.sampled_from(["Job", "Machine", "(empty)", "ClusterPvt"])
_LINE = st.one_of(
    st.builds("101 {} {} {}".format, _KEY, _TYPE, _TYPE),
    st.builds("102 {}".format, _KEY),
    st.builds("103 {} {} {}".format, _KEY, _NAME, _VALUE),
    st.builds("103 {} {} {}".format, _KEY, _NAME, _VALUE),
    st.builds("104 {} {}".format, _KEY, _NAME),
    st.sampled_from(["105 ", "106 ", "105 ", "106 ", "106 #c", "107 1 CreationTimestamp 2"]),
    st.sampled_from(["", "105", "106", "junk", "103 1.0 A", "101 1.0 Job"]),
)
_FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(st.lists(_LINE, max_size=25), st.sampled_from(["\n", "", "\n1", "\n105 \n"]), st.data())
def test_property_any_log_gets_the_two_passes_answer(
    lines: list[str], end: str, data: st.DataObject
) -> None:
    text = "\n".join(lines) + end
    _same_answers(text, data.draw(st.sampled_from([3, 16, 64, 4096]), label="piece"))


@st.composite
def _queue_logs(draw: st.DrawFn) -> str:
    """A committed queue, then transactions of changes to it: the schedd's usual log."""
    ads: dict[str, jql.Ad] = {}
    for key in draw(st.lists(st.sampled_from(["0.0", "01.-1", "1.0", "1.1", "2.0"]), unique=True)):
        attrs = {name: draw(_VALUE.filter(str.strip)) for name in draw(st.sets(_NAME, max_size=3))}
        folded = {name.lower(): name for name in attrs}
        ads[key] = jql.Ad(key, "Job", "Machine", {n: attrs[n] for n in folded.values()})
    text = jqlw.format_records(jqlw.records_for_ads(ads, timestamp=1))
    for _ in range(draw(st.integers(0, 4))):
        body = draw(st.lists(_LINE.filter(lambda line: line[:3] in ("101", "102", "103", "104"))))
        text += "105 \n" + "".join(line + "\n" for line in body) + "106 \n"
    return text


@_FAST
@given(_queue_logs(), st.sampled_from([3, 64, 4096]))
def test_property_a_queue_and_its_changes_get_the_two_passes_answer(text: str, piece: int) -> None:
    _same_answers(text, piece)


# ----------------------------------------------------------------- inspect --json, quickly


def test_quick_inspect_json_prints_the_command_lines_document(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(os.fspath(tmp_path), "job_queue.log")
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(SCHEDD_LOG)
    assert queue_log.quick_inspect_json(["inspect", path, "--json"])
    assert capsys.readouterr().out == _document(_two_passes(SCHEDD_LOG)) + "\n"
    assert queue_log.quick_inspect_json(["inspect", "--json", path])
    printed = capsys.readouterr().out
    # `python -m lumberjack` takes that way, and prints what the command line prints
    done = subprocess.run(
        [sys.executable, "-m", "lumberjack", "inspect", "--json", path],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        check=True,
    )
    assert done.stdout == printed


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "--json"],
        ["inspect", "{path}"],
        ["inspect", "--json", "{path}", "--max-size", "1GB"],
        ["inspect", "--json", "--diff"],
        ["inspect", "--json", "{missing}"],
        ["inspect", "--json", "{directory}"],
        ["inspect", "--json", "{bad}"],
        ["export", "--json", "{path}"],
    ],
)
def test_quick_inspect_json_leaves_anything_else_to_the_command_line(
    args: list[str], tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    directory = os.fspath(tmp_path)
    names = {
        "path": os.path.join(directory, "job_queue.log"),
        "missing": os.path.join(directory, "missing.log"),
        "directory": directory,
        "bad": os.path.join(directory, "bad.log"),
    }
    with open(names["path"], "w", encoding="utf-8") as fh:
        fh.write("101 1.0 Job Machine\n")
    with open(names["bad"], "w", encoding="utf-8") as fh:
        fh.write("101 1.0 Job Machine\n103 1.0 A\n")
    assert not queue_log.quick_inspect_json([word.format(**names) for word in args])
    assert capsys.readouterr().out == ""


def test_quick_inspect_json_leaves_a_misspelt_crash_point_to_the_command_line(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = os.path.join(os.fspath(tmp_path), "job_queue.log")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("101 1.0 Job Machine\n")
    monkeypatch.setenv("LUMBERJACK_CRASH_AT", "no-such-point")
    assert not queue_log.quick_inspect_json(["inspect", "--json", path])


@pytest.mark.parametrize("more", [[], ["--max-size", "1GB"]])  # quickly, and by click
def test_inspect_json_into_a_pipe_closed_early_ends_quietly(
    more: list[str], tmp_path: os.PathLike[str]
) -> None:
    path = os.path.join(os.fspath(tmp_path), "job_queue.log")
    with open(path, "w", encoding="utf-8") as fh:  # more than a pipe holds
        fh.write("101 1.0 Job Machine\n" + "".join(f"103 1.0 A{n} {n:0500}\n" for n in range(999)))
    reader = subprocess.Popen(
        [sys.executable, "-m", "lumberjack", "inspect", "--json", path, *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.read(10) == b'{"ads": {"'
    reader.stdout.close()  # as `| head -c 10` does
    assert (reader.wait(timeout=60), reader.stderr.read()) == (0, b"")


def test_python_m_lumberjack_inspect_json_loads_no_command_line_machinery(
    tmp_path: os.PathLike[str],
) -> None:
    path = os.path.join(os.fspath(tmp_path), "job_queue.log")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("101 1.0 Job Machine\n103 1.0 A 1\n")
    script = (
        "import runpy, sys\n"
        "runpy.run_module('lumberjack', run_name='__main__')\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "inspect", "--json", path],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == '{"ads": {"1.0": {"A": "1"}}}\n'
    loaded = set(done.stderr.split())
    assert "lumberjack.core.jobqueuelog_onepass" in loaded
    assert not {"click", "pydantic", "lumberjack.cli", "lumberjack.profiles"} & loaded


def test_the_installed_command_takes_the_same_entry_as_python_m() -> None:
    """`condor_lumberjack inspect --json` is as quick as `python -m lumberjack ...`."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "condor_lumberjack"]
    assert script.value == "lumberjack.__main__:main"


@pytest.mark.parametrize("tail", ["", "103 1.0 jobstatus 1\n"])  # one pass; two passes
@pytest.mark.parametrize("piece", [7, onepass.PIECE_BYTES])
def test_the_records_are_counted_and_bounded_as_parse_file_does(tail: str, piece: int) -> None:
    """import bounds a returned queue by the one sent (records and bytes): the count and
    the bound are parse_file's, whichever way the log is read."""
    data = (SCHEDD_LOG + tail).encode("utf-8", "surrogateescape")
    records = len(jql.parse_file(io.BytesIO(data), "q.log"))
    ads, counted = onepass.read_ads_counted(io.BytesIO(data), "q.log", piece_bytes=piece)
    assert counted == records and ads == _two_passes(SCHEDD_LOG + tail)
    assert onepass.read_ads_counted(io.BytesIO(data), "q.log", max_records=records)[1] == records
    with pytest.raises(jql.TooManyRecords, match=f"more than {records - 1} records"):
        onepass.read_ads_counted(io.BytesIO(data), "q.log", records - 1, piece_bytes=piece)


def test_each_name_and_short_value_is_one_string_for_the_whole_log() -> None:
    """A queue of 100,000 jobs holds each attribute name (and each short value: "0",
    "true") once, not once a job: a third of import's memory at that size."""
    text = "".join(
        f'101 1.{p} Job Machine\n103 1.{p} Cmd "/home/alice/run.sh"\n103 1.{p} OnExitRemove true\n'
        for p in range(3)
    )
    ads = onepass.read_ads(io.BytesIO(text.encode()), "q.log")
    names = [next(n for n in ad.attrs if n == "OnExitRemove") for ad in ads.values()]
    values = [ad.attrs["OnExitRemove"] for ad in ads.values()]
    assert all(n is names[0] for n in names) and all(v is values[0] for v in values)
    assert ads == _two_passes(text)
