"""Unit tests for lumberjack.core.jobqueuelog: parse, format, replay, write, keys, summary."""

from __future__ import annotations

import io
import os
import stat
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.jobqueuelog import Ad, JobKey, JobQueueLogError, LogRecord

# A queue as a 25.x schedd writes it: header ad created outside any transaction, "105 "
# and "106 " with their trailing space, cluster keys with a leading zero, values that are
# ClassAd expression text (quotes, backslashes, spaces, unicode, "="), a case-insensitive
# re-set of an attribute, destroyed ads, and an unfinished final transaction (a crash).
FIXTURE = (
    "107 1 CreationTimestamp 1718000000\n"
    "101 0.0 Job Machine\n"
    "105 \n"
    '103 0.0 UidDomain "submit.example.org"\n'
    "106 \n"
    "105 \n"
    "101 0.1 Owner (empty)\n"
    '103 0.1 User "alice@submit.example.org"\n'
    '103 0.1 Owner "alice"\n'
    "106 \n"
    "103 0.0 NextClusterNum 1\n"
    "105 \n"
    "103 0.0 NextClusterNum 2\n"
    "101 01.-1 Job Machine\n"
    "101 1.-2 ClusterPvt (empty)\n"
    "101 1.0 Job Machine\n"
    "103 1.0 ProcId 0\n"
    "103 1.0 JobStatus 1\n"
    '103 1.0 Args "a \\"quoted\\" \\\\ back"\n'
    '103 1.0 Description "naïve café ☕ 日本語 x=1"\n'
    "101 1.1 Job Machine\n"
    "103 1.1 ProcId 1\n"
    "103 1.1 JobStatus 2\n"
    '103 1.1 Iwd "/home/alice/other dir"\n'
    '103 1.1 Environment "GREETING=héllo wörld MSG=日本語 PATH=/usr/bin:/bin"\n'
    "103 01.-1 ClusterId 1\n"
    '103 01.-1 Owner "alice"\n'
    '103 01.-1 Cmd "/bin/echo"\n'
    '103 01.-1 Iwd "/home/alice/run dir"\n'
    "103 01.-1 QDate 1718000100\n"
    '103 01.-1 Requirements (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX")\n'
    '103 1.-2 SecretTag "s=3 t=4"\n'
    "106 \n"
    "105 \n"
    '103 1.0 iwd "/home/alice/first dir"\n'
    '103 1.0 HoldReason "Spooling input data files"\n'
    "103 1.0 JobStatus 5\n"
    '103 1.1 IWD "/home/alice/moved dir"\n'
    "104 1.1 environment\n"
    "106 \n"
    "105 \n"
    "103 0.0 NextClusterNum 3\n"
    "101 02.-1 Job Machine\n"
    "101 2.0 Job Machine\n"
    '103 02.-1 Owner "bob"\n'
    "103 2.0 JobStatus 1\n"
    "106 \n"
    "105 \n"
    "102 2.0\n"
    "102 02.-1\n"
    "106 \n"
    "105 \n"
    "103 1.1 JobStatus 4\n"
    "101 3.0 Job Machine\n"
)


def _line(exc: pytest.ExceptionInfo[JobQueueLogError]) -> str:
    return str(exc.value)


# ------------------------------------------------------------------------- parse/format


def test_fixture_round_trips_byte_exact() -> None:
    records = jql.parse_records(FIXTURE)
    assert len(records) == FIXTURE.count("\n")
    assert jqlw.format_records(records) == FIXTURE


def test_record_fields_per_op() -> None:
    records = jql.parse_records(FIXTURE)
    assert records[0] == LogRecord(107, "1", "CreationTimestamp", "1718000000")
    assert records[1] == LogRecord(101, "0.0", "Job", "Machine")
    assert records[2] == LogRecord(105)
    assert records[4] == LogRecord(106)
    assert records[6] == LogRecord(101, "0.1", "Owner", "(empty)")
    assert records[18] == LogRecord(103, "1.0", "Args", '"a \\"quoted\\" \\\\ back"')
    assert records[30] == LogRecord(
        103, "01.-1", "Requirements", '(TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX")'
    )
    assert LogRecord(104, "1.1", "environment") in records
    assert LogRecord(102, "02.-1") in records


def test_value_is_everything_after_the_third_space() -> None:
    (rec,) = jql.parse_records('103 1.0 Env  "A=1  B=2" \\ x\n')
    assert rec.value == ' "A=1  B=2" \\ x'
    (rec,) = jql.parse_records("103 1.0 Cmd a\r\n")
    assert rec.value == "a\r"  # byte-exact except the newline
    (rec,) = jql.parse_records('103 1.0 Msg "line\u2028sep\x85next"\n')
    assert rec.value == '"line\u2028sep\x85next"'


def test_final_line_without_newline_is_a_record() -> None:
    assert jql.parse_records("101 1.0 Job Machine\n103 1.0 A 1") == [
        LogRecord(101, "1.0", "Job", "Machine"),
        LogRecord(103, "1.0", "A", "1"),
    ]
    assert jql.replay(jql.parse_records("105 \n101 1.0 Job Machine\n106"))["1.0"].attrs == {}


def test_empty_text_is_an_empty_log() -> None:
    assert jql.parse_records("") == []
    assert jql.replay([]) == {}
    assert jqlw.format_records([]) == ""


def test_transaction_markers_without_trailing_space_are_accepted_and_normalised() -> None:
    records = jql.parse_records("105\n101 1.0 Job Machine\n106\n")
    assert records == [LogRecord(105), LogRecord(101, "1.0", "Job", "Machine"), LogRecord(106)]
    assert jqlw.format_records(records) == "105 \n101 1.0 Job Machine\n106 \n"


def test_end_transaction_comment_round_trips() -> None:
    text = "105 \n101 1.0 Job Machine\n106 #submit from alice\n"
    records = jql.parse_records(text)
    assert records[-1] == LogRecord(106, value="submit from alice")
    assert jqlw.format_records(records) == text
    assert "1.0" in jql.replay(records)


def test_historical_sequence_number_anywhere_is_tolerated() -> None:
    text = "101 1.0 Job Machine\n107 4 CreationTimestamp 1700000000\n103 1.0 A 1\n"
    assert jql.replay(jql.parse_records(text))["1.0"].attrs == {"A": "1"}


# ---------------------------------------------------------------------------------- replay


def test_fixture_replay() -> None:
    ads = jql.replay(jql.parse_records(FIXTURE))
    assert list(ads) == ["0.0", "0.1", "01.-1", "1.-2", "1.0", "1.1"]
    assert ads["0.0"] == Ad(
        "0.0", "Job", "Machine", {"UidDomain": '"submit.example.org"', "NextClusterNum": "3"}
    )
    assert ads["0.1"].my_type == "Owner" and ads["0.1"].target_type == "(empty)"
    assert ads["01.-1"].attrs["Iwd"] == '"/home/alice/run dir"'
    assert ads["1.-2"].attrs == {"SecretTag": '"s=3 t=4"'}
    proc0 = ads["1.0"].attrs
    assert proc0 == {
        "ProcId": "0",
        "JobStatus": "5",
        "Args": '"a \\"quoted\\" \\\\ back"',
        "Description": '"naïve café ☕ 日本語 x=1"',
        "iwd": '"/home/alice/first dir"',
        "HoldReason": '"Spooling input data files"',
    }
    proc1 = ads["1.1"].attrs
    # "IWD" updated the attribute first spelled "Iwd", in place; "environment" deleted it
    assert list(proc1) == ["ProcId", "JobStatus", "Iwd"]
    assert proc1["Iwd"] == '"/home/alice/moved dir"'
    # the unfinished final transaction (JobStatus 4, ad 3.0) is dropped
    assert proc1["JobStatus"] == "2"
    assert "3.0" not in ads and "2.0" not in ads and "02.-1" not in ads


def test_records_outside_transactions_apply_immediately() -> None:
    ads = jql.replay(jql.parse_records("101 1.0 Job Machine\n103 1.0 A 1\n105 \n103 1.0 A 2\n"))
    assert ads["1.0"].attrs == {"A": "1"}


def test_recreated_ad_starts_empty() -> None:
    text = (
        "105 \n101 1.0 Job Machine\n103 1.0 A 1\n106 \n"
        "105 \n102 1.0\n101 1.0 Job Machine\n103 1.0 B 2\n106 \n"
    )
    assert jql.replay(jql.parse_records(text))["1.0"].attrs == {"B": "2"}


def test_keys_are_numbers_like_in_the_schedd() -> None:
    # the schedd parses keys, so 1.-1 and 01.-1 are the same (cluster) ad
    ads = jql.replay(jql.parse_records('101 01.-1 Job Machine\n103 1.-1 Owner "alice"\n'))
    assert ads == {"01.-1": Ad("01.-1", "Job", "Machine", {"Owner": '"alice"'})}


def test_delete_of_absent_attribute_is_a_no_op() -> None:
    ads = jql.replay(jql.parse_records("101 1.0 Job Machine\n104 1.0 Nope\n"))
    assert ads["1.0"].attrs == {}


def test_ad_get_is_case_insensitive() -> None:
    ad = Ad("1.0", "Job", "Machine", {"Iwd": '"/x"'})
    assert ad.get("Iwd") == ad.get("IWD") == ad.get("iwd") == '"/x"'
    assert ad.get("Cmd") is None and ad.get("Cmd", "d") == "d"


# ----------------------------------------------------------------------------- errors

BAD_LOGS = [
    # (text, line, words the message must contain)
    ("101 1.0 Job Machine\n999 1.0 X 1\n", 2, "unknown op code 999"),
    ("abc 1.0\n", 1, "expected an op code"),
    ("-105 \n", 1, "expected an op code"),
    ("0105 \n", 1, "unknown op code 0105"),
    ("101 1.0 Job Machine\n103 1.0 Name\n", 2, "needs KEY NAME VALUE"),
    ("101 1.0 Job Machine\n103 1.0\n", 2, "needs KEY NAME VALUE"),
    ("101 1.0 Job Machine\n103 1.0 Name \n", 2, "empty value"),
    ("101 1.0 Job Machine\n103 1.0 Name    \n", 2, "empty value"),
    ("101 1.0 Job\n", 1, "KEY MYTYPE TARGETTYPE"),
    ("101 1.0 Job Machine Extra\n", 1, "KEY MYTYPE TARGETTYPE"),
    ("102\n", 1, "needs exactly KEY"),
    ("102 1.0 1.1\n", 1, "needs exactly KEY"),
    ("104 1.0\n", 1, "needs exactly KEY NAME"),
    ("104 1.0 A B\n", 1, "needs exactly KEY NAME"),
    ("105 junk\n", 1, "unexpected text after 105"),
    ("105 \n106 junk\n", 2, "unexpected text after 106"),
    ("105 \n106 #\n", 2, "unexpected text after 106"),
    ("107 1 CreationTimestamp\n", 1, "SEQ CreationTimestamp TIME"),
    ("107 one CreationTimestamp 17\n", 1, "must be numbers"),
    ("103  1.0 A 1\n", 1, "empty key"),
    ("101 abc Job Machine\n", 1, "not CLUSTER.PROC"),
    ("101 1 Job Machine\n", 1, "not CLUSTER.PROC"),
    ("101 1.0.0 Job Machine\n", 1, "not CLUSTER.PROC"),
    ("101 1.0\tx Job Machine\n", 1, "whitespace"),
    ("101 1.0 Job Machine\n103 1.0 A\t1\n", 2, "needs KEY NAME VALUE"),
    ('101 1.0 Job Machine\n103 1.0 A "a\x00b"\n', 2, "NUL"),
    ("101 1.0 Job Machine\n\n103 1.0 A 1\n", 2, "empty line"),
    ("101 1.0 Job Machine\n\n", 2, "empty line"),
    ("105 \n101 1.0 Job Machine\n105 \n106 \n", 3, "begun at line 1"),
    ("101 1.0 Job Machine\n106 \n", 2, "without a 105"),
    ("hello world", 1, "expected an op code"),  # unterminated garbage, not in a transaction
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_LOGS)
def test_malformed_lines_raise_with_line_number(text: str, line: int, words: str) -> None:
    with pytest.raises(JobQueueLogError) as exc:
        jql.replay(jql.parse_records(text))
    assert _line(exc).startswith(f"job_queue.log line {line}: ")
    assert words in _line(exc)
    assert exc.value.line == line and exc.value.source == "job_queue.log"
    assert "\n" not in _line(exc)


BAD_REPLAYS = [
    ("103 1.0 A 1\n", 1, "103 sets A on ad 1.0, which does not exist"),
    ("101 1.0 Job Machine\n102 1.0\n103 1.0 A 1\n", 3, "does not exist"),
    ("104 1.0 A\n", 1, "104 deletes A from ad 1.0, which does not exist"),
    ("102 1.0\n", 1, "102 destroys ad 1.0, which does not exist"),
    ("101 1.0 Job Machine\n101 1.0 Job Machine\n", 2, "already exists"),
    ("101 01.-1 Job Machine\n105 \n101 1.-1 Job Machine\n106 \n", 3, "already exists"),
    ("105 \n103 1.0 A 1\n106 \n105 \n", 2, "does not exist"),
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_REPLAYS)
def test_operations_on_missing_or_duplicate_ads_raise(text: str, line: int, words: str) -> None:
    records = jql.parse_records(text)  # syntactically fine
    with pytest.raises(JobQueueLogError) as exc:
        jql.replay(records)
    assert _line(exc).startswith(f"job_queue.log line {line}: ")
    assert words in _line(exc)


def test_replay_checks_transaction_structure_of_hand_made_records() -> None:
    with pytest.raises(JobQueueLogError, match="line 2: 105"):
        jql.replay([LogRecord(105), LogRecord(105)])
    with pytest.raises(JobQueueLogError, match="line 1: 106"):
        jql.replay([LogRecord(106)])
    with pytest.raises(JobQueueLogError, match="line 1: unknown op code 42"):
        jql.replay([LogRecord(42, "1.0")])
    with pytest.raises(JobQueueLogError, match="line 1: key 'x' is not CLUSTER.PROC"):
        jql.replay([LogRecord(101, "x", "Job", "Machine")])


def test_errors_in_an_unfinished_final_transaction_are_ignored() -> None:
    # the schedd never plays those records, so neither do we
    assert jql.replay(jql.parse_records("105 \n103 9.9 A 1\n102 8.8\n")) == {}


def test_torn_final_write_is_dropped() -> None:
    base = "101 1.0 Job Machine\n105 \n103 1.0 A 1\n"
    for torn in ("1", "10", "103 1.", "103 1.0 A", "103 1.0 A ", "104 1.0"):
        assert jql.parse_records(base + torn)[-1] == LogRecord(103, "1.0", "A", "1")
        assert jql.replay(jql.parse_records(base + torn))["1.0"].attrs == {}
    # a torn "105 " after a complete transaction is dropped too
    text = "101 1.0 Job Machine\n105 \n103 1.0 A 1\n106 \n1"
    assert jql.replay(jql.parse_records(text))["1.0"].attrs == {"A": "1"}
    # but garbage that ends a file outside a transaction is not a torn write
    with pytest.raises(JobQueueLogError, match="line 2"):
        jql.parse_records("101 1.0 Job Machine\n103 1.0")


def test_read_log_errors_name_the_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(os.fspath(tmp_path), "job_queue.log")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("107 1 CreationTimestamp 1\n101 1.0 Job Machine\n103 1.0 A\n")
    with pytest.raises(JobQueueLogError) as exc:
        jql.read_log(path)
    assert str(exc.value).startswith(f"{path} line 3: ")
    with pytest.raises(JobQueueLogError, match=f"^{path} line 3: "):
        jql.read_records(path)


# ---------------------------------------------------------------------------------- writing


def test_records_for_ads_is_a_compact_log() -> None:
    ads = jql.replay(jql.parse_records(FIXTURE))
    records = jqlw.records_for_ads(ads, seq=7, timestamp=1718000000)
    assert records[0] == LogRecord(107, "7", "CreationTimestamp", "1718000000")
    assert records[1] == LogRecord(105) and records[-1] == LogRecord(106)
    assert records[2] == LogRecord(101, "0.0", "Job", "Machine")
    assert records[3] == LogRecord(103, "0.0", "UidDomain", '"submit.example.org"')
    assert sum(r.op == 101 for r in records) == len(ads)
    assert sum(r.op == 103 for r in records) == sum(len(ad.attrs) for ad in ads.values())
    text = jqlw.format_records(records)
    assert text.startswith("107 7 CreationTimestamp 1718000000\n105 \n101 0.0 Job Machine\n")
    assert text.endswith("106 \n")
    assert jql.replay(jql.parse_records(text)) == ads


def test_records_for_ads_defaults_timestamp_and_writes_empty_types() -> None:
    records = jqlw.records_for_ads({"1.0": Ad("1.0", "", "", {"A": "1"})})
    assert records[0].key == "1" and records[0].value.isdigit()
    assert records[2] == LogRecord(101, "1.0", "(empty)", "(empty)")


@pytest.mark.parametrize(
    ("ads", "words"),
    [
        ({"1.0": Ad("1.1", "Job", "Machine")}, "says its key is"),
        (
            {"01.-1": Ad("01.-1", "Job", "Machine"), "1.-1": Ad("1.-1", "Job", "Machine")},
            "name the same ad",
        ),
        ({"1.0": Ad("1.0", "Job", "Machine", {"Iwd": "1", "IWD": "2"})}, "twice"),
        ({"junk": Ad("junk", "Job", "Machine")}, "not a job queue key"),
    ],
)
def test_records_for_ads_rejects_ads_that_would_not_read_back(
    ads: dict[str, Ad], words: str
) -> None:
    with pytest.raises(JobQueueLogError, match=words):
        jqlw.records_for_ads(ads)


@pytest.mark.parametrize(
    "record",
    [
        LogRecord(103, "1.0", "A", "1\n2"),
        LogRecord(103, "1.0", "A", "  "),
        LogRecord(103, "1.0", "A", ""),
        LogRecord(103, "1.0", "A B", "1"),
        LogRecord(103, "1.0", "", "1"),
        LogRecord(103, "x", "A", "1"),
        LogRecord(101, "1.0", "Job Type", "Machine"),
        LogRecord(101, "1.0", "Job", ""),
        LogRecord(102, "1.0 "),
        LogRecord(104, "1.0", "A\tB"),
        LogRecord(106, value="a\nb"),
        LogRecord(107, "x", "CreationTimestamp", "1"),
        LogRecord(99, "1.0"),
    ],
)
def test_format_record_refuses_what_would_not_read_back(record: LogRecord) -> None:
    with pytest.raises(JobQueueLogError, match="cannot write"):
        jqlw.format_record(record)


def test_write_log_is_atomic_private_and_round_trips(tmp_path: os.PathLike[str]) -> None:
    directory = os.fspath(tmp_path)
    path = os.path.join(directory, "job_queue.log")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("old contents\n")
    os.chmod(path, 0o644)
    ads = jql.replay(jql.parse_records(FIXTURE))
    jqlw.write_log(path, ads, seq=3, timestamp=1718000000)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(directory) == ["job_queue.log"]  # no temp file left behind
    assert jql.read_log(path) == ads
    with open(path, "rb") as fh:
        data = fh.read()
    assert data.startswith(b"107 3 CreationTimestamp 1718000000\n105 \n")
    assert '103 1.0 Description "naïve café ☕ 日本語 x=1"\n'.encode() in data


def test_write_log_failure_leaves_old_file_and_no_temp(tmp_path: os.PathLike[str]) -> None:
    directory = os.fspath(tmp_path)
    path = os.path.join(directory, "job_queue.log")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("101 1.0 Job Machine\n")
    with pytest.raises(JobQueueLogError):
        jqlw.write_log(path, {"1.0": Ad("1.0", "Job", "Machine", {"A": "1\n2"})})
    with pytest.raises(JobQueueLogError, match="encode"):
        jqlw.write_log(path, {"1.0": Ad("1.0", "Job", "Machine", {"A": '"\ud800"'})})
    assert os.listdir(directory) == ["job_queue.log"]
    assert jql.read_records(path) == [LogRecord(101, "1.0", "Job", "Machine")]


def test_arbitrary_bytes_survive_read_and_write(tmp_path: os.PathLike[str]) -> None:
    directory = os.fspath(tmp_path)
    src = os.path.join(directory, "in.log")
    raw = b'101 1.0 Job Machine\n103 1.0 Blob "\xff\xfe latin1 \xe9 ok \xc3\xa9"\r\n'
    with open(src, "wb") as fh:
        fh.write(raw)
    records = jql.read_records(src)
    assert records[1].value == '"\udcff\udcfe latin1 \udce9 ok é"\r'
    assert jqlw.format_records(records).encode("utf-8", "surrogateescape") == raw
    dst = os.path.join(directory, "out.log")
    jqlw.write_log(dst, jql.read_log(src), timestamp=1)
    assert jql.read_log(dst) == jql.read_log(src)


# ------------------------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    ("key", "expected", "kind"),
    [
        ("0.0", JobKey(0, 0), "header"),
        ("0.3", JobKey(0, 3), "user"),
        ("01.-1", JobKey(1, -1), "cluster"),
        ("012.-1", JobKey(12, -1), "cluster"),
        ("1.-1", JobKey(1, -1), "cluster"),
        ("12.0", JobKey(12, 0), "proc"),
        ("12.345", JobKey(12, 345), "proc"),
        ("12.-2", JobKey(12, -2), "cluster_private"),
        ("12.-100", JobKey(12, -100), "jobset"),
    ],
)
def test_parse_key_and_kind(key: str, expected: JobKey, kind: str) -> None:
    assert jql.parse_key(key) == expected
    assert jql.key_kind(key) == kind


@pytest.mark.parametrize(
    "key", ["", "1", "1.", ".1", "a.b", "1.x", "1.0.0", " 1.0", "1.0 ", "+1.0", "1_0.0", "١.٠"]
)
def test_parse_key_rejects_junk(key: str) -> None:
    with pytest.raises(JobQueueLogError, match="not a job queue key"):
        jql.parse_key(key)


@pytest.mark.parametrize("key", ["0.-1", "1.-3", "1.-99"])
def test_key_kind_rejects_unknown_kinds(key: str) -> None:
    with pytest.raises(JobQueueLogError, match="not a kind of ad"):
        jql.key_kind(key)


def test_key_builders() -> None:
    assert jql.cluster_key(1) == "01.-1"
    assert jql.cluster_key(12) == "012.-1"
    assert jql.proc_key(12, 3) == "12.3"
    assert jql.proc_key(12, -2) == "12.-2"
    with pytest.raises(ValueError):
        jql.cluster_key(0)
    with pytest.raises(ValueError):
        jql.proc_key(-1, 0)


# ------------------------------------------------------------------------------- properties

_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,12}", fullmatch=True)
# Characters that break naive parsers: separators, quoting, escapes, non-"\n" line breaks,
# non-ASCII, and the lone surrogates that surrogateescape makes of undecodable bytes.
_SPECIAL = st.sampled_from(
    [" ", '"', "\\", "=", "'", "#", "\t", "\r", "é", "日", "\u2028", "\x85", "\udcff", "\udc80"]
)
_PLAIN = st.characters(exclude_characters="\n\x00", exclude_categories=("Cs",))
_VALUE = st.text(st.one_of(_SPECIAL, _PLAIN), min_size=1, max_size=20).filter(
    lambda v: v.strip(" \t\r\x0b\x0c") != ""
)
_TYPE = st.sampled_from(["Job", "Machine", "Owner", "ClusterPvt", "JobSet", "(empty)", "*"])


@st.composite
def _ad_keys(draw: st.DrawFn) -> list[str]:
    keys = []
    if draw(st.booleans()):
        keys.append("0.0")
    keys += [jql.proc_key(0, n) for n in draw(st.sets(st.integers(1, 30), max_size=3))]
    for c in draw(st.sets(st.integers(1, 100_000), max_size=3)):
        if draw(st.booleans()):
            keys.append(jql.cluster_key(c))
        keys += [jql.proc_key(c, p) for p in draw(st.sets(st.integers(0, 500), max_size=3))]
        if draw(st.booleans()):
            keys.append(jql.proc_key(c, -2))
        if draw(st.booleans()):
            keys.append(jql.proc_key(c, -100))
    return draw(st.permutations(keys))


@st.composite
def _queues(draw: st.DrawFn) -> dict[str, Ad]:
    ads = {}
    for key in draw(_ad_keys()):
        attrs: dict[str, str] = {}
        folded = set()
        for name, value in draw(st.lists(st.tuples(_NAME, _VALUE), max_size=4)):
            if name.lower() not in folded:  # one spelling per attribute, as in a real ad
                folded.add(name.lower())
                attrs[name] = value
        ads[key] = Ad(key, draw(_TYPE), draw(_TYPE), attrs)
    return ads


_KEY = st.builds(lambda c, p: f"{c}.{p}", st.integers(0, 10**6), st.integers(-100, 10**4))
_SINGLE = st.one_of(
    st.builds(LogRecord, st.just(101), _KEY, _TYPE, _TYPE),
    st.builds(LogRecord, st.just(102), _KEY),
    st.builds(LogRecord, st.just(103), _KEY, _NAME, _VALUE),
    st.builds(LogRecord, st.just(104), _KEY, _NAME),
    st.builds(
        LogRecord,
        st.just(107),
        st.integers(0, 10**6).map(str),
        st.just("CreationTimestamp"),
        st.integers(0, 2**40).map(str),
    ),
)
_COMMENT = st.one_of(st.just(""), _VALUE)


@st.composite
def _record_streams(draw: st.DrawFn) -> list[LogRecord]:
    out: list[LogRecord] = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out.append(draw(_SINGLE))
        else:
            out += [LogRecord(105), *draw(st.lists(_SINGLE, max_size=5))]
            out.append(LogRecord(106, value=draw(_COMMENT)))
    if draw(st.booleans()):  # an unfinished final transaction
        out += [LogRecord(105), *draw(st.lists(_SINGLE, max_size=3))]
    return out


_FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(_queues(), st.integers(0, 10**6), st.integers(0, 2**40))
def test_property_queue_round_trips(ads: dict[str, Ad], seq: int, stamp: int) -> None:
    text = jqlw.format_records(jqlw.records_for_ads(ads, seq=seq, timestamp=stamp))
    back = jql.replay(jql.parse_records(text))
    assert back == ads
    assert list(back) == list(ads)
    assert all(list(back[k].attrs) == list(ads[k].attrs) for k in ads)


@_FAST
@given(_record_streams())
def test_property_format_parse_is_identity(records: list[LogRecord]) -> None:
    text = jqlw.format_records(records)
    assert jql.parse_records(text) == records
    assert jqlw.format_records(jql.parse_records(text)) == text


@_FAST
@given(_queues(), st.lists(_SINGLE, max_size=5), st.data())
def test_property_unfinished_final_transaction_is_dropped(
    ads: dict[str, Ad], tail: list[LogRecord], data: st.DataObject
) -> None:
    text = jqlw.format_records(jqlw.records_for_ads(ads, timestamp=1))
    text += jqlw.format_records([LogRecord(105), *tail])
    if data.draw(st.booleans(), label="torn"):  # plus a final line cut short by a crash
        line = jqlw.format_record(data.draw(_SINGLE, label="torn record"))
        text += line[: data.draw(st.integers(1, len(line)), label="cut")]
    assert jql.replay(jql.parse_records(text)) == ads


_OPS = {"101", "102", "103", "104", "105", "106", "107"}
_GARBAGE = st.one_of(
    st.text(st.characters(exclude_characters="\n"), max_size=30).filter(
        lambda s: s.partition(" ")[0] not in _OPS
    ),
    st.sampled_from(
        [
            "",
            "103 1.0 Name",
            "103 1.0 Name ",
            "101 1.0 Job",
            "102",
            "104 1.0",
            "105 x",
            "106 x",
            "107 1 CreationTimestamp",
            "101 1.0 Job Machine (empty)",
            "103 1..0 A 1",
            "103 1.0  A 1",
        ]
    ),
)


@_FAST
@given(_queues(), _GARBAGE, st.data())
def test_property_garbage_lines_raise_with_their_line_number(
    ads: dict[str, Ad], garbage: str, data: st.DataObject
) -> None:
    lines = jqlw.format_records(jqlw.records_for_ads(ads, timestamp=1)).split("\n")[:-1]
    at = data.draw(st.integers(0, len(lines)), label="position")
    lines.insert(at, garbage)
    text = "\n".join(lines) + "\n"
    with pytest.raises(JobQueueLogError) as exc:
        jql.replay(jql.parse_records(text, source="q.log"))
    assert str(exc.value).startswith(f"q.log line {at + 1}: ")


@_FAST
@given(_queues())
def test_property_files_round_trip(ads: dict[str, Ad]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "job_queue.log")
        jqlw.write_log(path, ads, timestamp=1)
        assert jql.read_log(path) == ads
        with open(path, "rb") as fh:
            data = fh.read()
        text = data.decode("utf-8", "surrogateescape")
        assert jqlw.format_records(jql.read_records(path)) == text


def _parsed(parse, *args):  # noqa: ANN001, ANN202 - the records, or the error's text
    try:
        return parse(*args)
    except JobQueueLogError as exc:
        return str(exc)


@_FAST
@given(_queues(), _GARBAGE, st.data())
def test_property_a_file_read_in_pieces_parses_as_its_whole_text(
    ads: dict[str, Ad], garbage: str, data: st.DataObject
) -> None:
    """Records, torn tails and errors (with their line numbers) do not depend on where the
    pieces of a file end."""
    text = jqlw.format_records(jqlw.records_for_ads(ads, timestamp=1))
    if data.draw(st.booleans(), label="garbage"):
        lines = text.split("\n")[:-1]
        lines.insert(data.draw(st.integers(0, len(lines)), label="at"), garbage)
        text = "\n".join(lines) + "\n"
    if data.draw(st.booleans(), label="torn"):
        text += "105 \n103 1.0 A"[: data.draw(st.integers(1, 15), label="cut")]
    piece = data.draw(st.integers(1, 64), label="piece bytes")
    whole = _parsed(jql.parse_records, text, "q.log")
    handle = io.BytesIO(text.encode("utf-8", "surrogateescape"))
    assert _parsed(jql.parse_file, handle, "q.log", None, piece) == whole


def test_parse_file_stops_at_too_many_records() -> None:
    handle = io.BytesIO(b"105 \n106 \n" * 1000)
    with pytest.raises(jql.TooManyRecords, match="more than 100 records"):
        jql.parse_file(handle, "q.log", max_records=100, piece_bytes=64)


@_FAST
@given(_queues(), st.integers(1, 4))
def test_property_a_log_written_in_chunks_is_the_same_text(
    ads: dict[str, Ad], chunk_ads: int
) -> None:
    assert "".join(jqlw._log_chunks(ads, 1, 1, chunk_ads)) == jqlw.log_text(ads, 1, 1)
    assert jqlw.log_text(ads, 1, 1) == jqlw.format_records(jqlw.records_for_ads(ads, 1, 1))


@_FAST
@given(st.integers(1, 10**9), st.integers(0, 10**9))
def test_property_key_builders_parse_back(cluster: int, proc: int) -> None:
    assert jql.parse_key(jql.cluster_key(cluster)) == JobKey(cluster, -1)
    assert jql.key_kind(jql.cluster_key(cluster)) == "cluster"
    assert jql.parse_key(jql.proc_key(cluster, proc)) == JobKey(cluster, proc)
    assert jql.key_kind(jql.proc_key(cluster, proc)) == "proc"
    assert jql.key_kind(jql.proc_key(0, proc + 1)) == "user"


# ------------------------------------------------------------- shortcuts keep every check

_SEEN = "101 1.0 Job Machine\n103 1.0 A 1\n"  # key 1.0 and name A are known good after this


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("103 1.0 A \n", "empty value"),
        ("103 1.0 A \t \n", "empty value"),
        ('103 1.0 A "a\x00b"\n', "NUL"),
        ("103 1.0 A\t1\n", "needs KEY NAME VALUE"),
        ("103 01.0.0 A 1\n", "not CLUSTER.PROC"),
        ("101 1.1 Job Machine Extra\n", "KEY MYTYPE TARGETTYPE"),
        ("101 1.x Job Machine\n", "not CLUSTER.PROC"),
        ("101 1.1\tx Job Machine\n", "whitespace"),
    ],
)
def test_lines_like_known_good_ones_are_still_checked(line: str, words: str) -> None:
    with pytest.raises(JobQueueLogError, match=f"line 3: .*{words}"):
        jql.parse_records(_SEEN + line)


def test_values_with_leading_blanks_are_kept_byte_exact() -> None:
    records = jql.parse_records(_SEEN + "103 1.0 A \t x\n103 1.0 A \x0b1 \n")
    assert [r.value for r in records[2:]] == ["\t x", "\x0b1 "]


def test_log_record_is_an_immutable_value() -> None:
    import copy
    import pickle

    record = LogRecord(103, "1.0", "A", "1")
    assert pickle.loads(pickle.dumps(record)) == record == copy.copy(record)
    assert (record.op, record.key, record.name, record.value) == (103, "1.0", "A", "1")
    with pytest.raises(AttributeError):
        record.value = "2"  # type: ignore[misc]
    assert repr(LogRecord(105)) == "LogRecord(op=105, key='', name='', value='')"


@pytest.mark.parametrize("enabled", [True, False])
def test_parse_and_replay_leave_the_garbage_collector_as_they_found_it(enabled: bool) -> None:
    import gc

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        jql.replay(jql.parse_records(FIXTURE))
        assert gc.isenabled() is enabled
        with pytest.raises(JobQueueLogError):
            jql.parse_records("101 1.0 Job Machine\n\n")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


@_FAST
@given(_queues(), st.integers(0, 10**6), st.integers(0, 2**40))
def test_property_write_log_writes_what_records_for_ads_says(
    ads: dict[str, Ad], seq: int, stamp: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "job_queue.log")
        jqlw.write_log(path, ads, seq=seq, timestamp=stamp)
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", "surrogateescape")
    assert text == jqlw.format_records(jqlw.records_for_ads(ads, seq=seq, timestamp=stamp))


def test_write_log_refuses_what_format_record_refuses(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(os.fspath(tmp_path), "job_queue.log")
    good = {"A": "1", "B": '"x"'}
    for attrs in ({"A": "1\n2"}, {"A": " "}, {"A B": "1"}, {"A": "a\x00"}):
        ads = {"1.0": Ad("1.0", "Job", "Machine", dict(good)), "1.1": Ad("1.1", "Job", "Machine")}
        ads["1.1"].attrs.update(good)
        ads["1.1"].attrs.update(attrs)  # names and values the first ad made known good
        with pytest.raises(JobQueueLogError, match="cannot write"):
            jqlw.write_log(path, ads)
    assert not os.path.exists(path)
