"""The conformance suite's case format and comparison (tests/integration/conformance_cases.py):
directives read from job.sub's first comment lines only, a bad `differ` refused, every
shipped case readable, what counts as a job's settled state, and a difference named with
the case, the attribute and both values unless the case allows it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from conformance_cases import (  # noqa: E402
    EVENTS,
    STARTED,
    WHERE,
    BadCase,
    all_cases,
    differences,
    event_sequence,
    observed,
    read_case,
    settled,
)


def case_dir(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "a_case"
    directory.mkdir()
    (directory / "job.sub").write_text(text)
    return directory


def test_directives_come_from_the_first_comment_lines_only(tmp_path: Path) -> None:
    case = read_case(case_dir(tmp_path, (
        "# why: exit codes\n# an ordinary comment\n# compare: RemoteUserCpu  Args\n"
        "# files: a.txt b.txt\n# differ: LastRemoteHost the site's host, on purpose\n"
        "executable = job.sh\n# compare: NotThis\nqueue\n"
    )))  # fmt: skip
    assert (case.name, case.why) == ("a_case", "exit codes")
    assert case.compare == ["RemoteUserCpu", "Args"] and case.files == ["a.txt", "b.txt"]
    assert case.differ == {"LastRemoteHost": "the site's host, on purpose"}
    assert "RemoteUserCpu" in case.attrs and "JobStatus" in case.attrs


@pytest.mark.parametrize("text", ["# differ: JobStatus\nqueue\n", "# differ:\nqueue\n"])
def test_a_differ_line_without_its_reason_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(BadCase, match="needs an attribute and a reason"):
        read_case(case_dir(tmp_path, text))


def test_every_shipped_case_reads_and_says_why() -> None:
    cases = all_cases()
    assert len(cases) >= 15
    assert all(case.why for case in cases), [c.name for c in cases if not c.why]
    for case in cases:
        for name in case.files:
            assert not Path(name).is_absolute() and ".." not in Path(name).parts


@pytest.mark.parametrize(
    ("ad", "in_queue", "expected"),
    [
        ({"JobStatus": 4}, False, True),
        ({"JobStatus": 4, "LeaveJobInQueue": True}, True, True),  # leave_in_queue
        ({"JobStatus": 4, "LeaveJobInQueue": False}, True, False),  # the sweep is coming
        ({"JobStatus": 3}, True, False),
        ({"JobStatus": 1}, True, False),
        ({"JobStatus": 2}, True, False),
        ({"JobStatus": 5}, True, True),
        ({"JobStatus": 5, "PeriodicRelease": "NumJobStarts < 2"}, True, False),
        ({"JobStatus": 5, "PeriodicRelease": "false"}, True, True),
    ],
)  # fmt: skip
def test_a_job_is_settled_when_nothing_would_change_it(
    ad: dict, in_queue: bool, expected: bool
) -> None:
    assert settled(ad, in_queue) is expected


def test_differences_name_the_case_attribute_and_both_values(tmp_path: Path) -> None:
    case = read_case(case_dir(tmp_path, "# differ: HoldReason names the site\nqueue\n"))
    case.compare = ["HoldReason"]
    ref = observed({"JobStatus": 4, "ExitCode": 0, "NumJobStarts": 1, "HoldReason": "a"},
                   case, False, ["ULOG_SUBMIT", "ULOG_EXECUTE"], b"out\n", b"", {})  # fmt: skip
    same = observed({"JobStatus": 4, "ExitCode": 0, "NumJobStarts": 2, "HoldReason": "b"},
                    case, False, ["ULOG_SUBMIT", "ULOG_EXECUTE"], b"out\n", b"", {})  # fmt: skip
    assert (ref[STARTED], ref[WHERE]) == (True, "history")
    assert differences(case, "7.0", ref, same) == []  # starts > 0 both; HoldReason allowed
    other = observed({"JobStatus": 4, "ExitCode": 1, "NumJobStarts": 1}, case, True,
                     ["ULOG_SUBMIT"], b"out\n", b"", {})  # fmt: skip
    lines = differences(case, "7.0", ref, other)
    assert "a_case (job 7.0): ExitCode: reference pool 0, through lumberjack 1" in lines
    assert (
        f"a_case (job 7.0): {WHERE}: reference pool 'history', through lumberjack 'queue'" in lines
    )
    assert any(line.startswith(f"a_case (job 7.0): {EVENTS}:") for line in lines)


def test_events_that_depend_on_timing_are_not_compared() -> None:
    # A failed output transfer: one or two FILE_TRANSFER events, in either pool.
    one = ["ULOG_SUBMIT", "ULOG_FILE_TRANSFER", "ULOG_EXECUTE", "ULOG_IMAGE_SIZE",
           "ULOG_FILE_TRANSFER", "ULOG_REMOTE_ERROR", "ULOG_JOB_HELD"]  # fmt: skip
    two = ["ULOG_SUBMIT", "ULOG_FILE_TRANSFER", "ULOG_FILE_TRANSFER", "ULOG_EXECUTE",
           "ULOG_FILE_TRANSFER", "ULOG_FILE_TRANSFER", "ULOG_REMOTE_ERROR",
           "ULOG_JOB_HELD"]  # fmt: skip
    assert event_sequence(one) == event_sequence(two) == [
        "ULOG_SUBMIT", "ULOG_FILE_TRANSFER", "ULOG_EXECUTE", "ULOG_FILE_TRANSFER",
        "ULOG_REMOTE_ERROR", "ULOG_JOB_HELD",
    ]  # fmt: skip
    # Two executions stay two; an event missing stays missing.
    assert event_sequence(["ULOG_EXECUTE", "ULOG_EXECUTE"]) == ["ULOG_EXECUTE", "ULOG_EXECUTE"]
    assert event_sequence(one[:-1]) != event_sequence(two)
