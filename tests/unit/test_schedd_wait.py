"""A schedd that answers an export after the bindings' 20 s: the outcome is read from the
schedd's state (ap/schedd_wait.py). The bindings' Schedd is replaced at LocalSchedd's
boundary (a 20 s timeout cannot be forced cheaply; tests/integration/test_big_export.py
crosses it for real); the queue answers are real ClassAds and the export log a real
job_queue.log read by lumberjack's own reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lumberjack.ap import schedd as schedd_mod
from lumberjack.ap.schedd_wait import Patience, look_at_log, may_have_acted, schedd_busy
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.errors import LumberjackError
from lumberjack.state.exporting import rollback
from lumberjack.state.ledger import Ledger

classad2 = pytest.importorskip("classad2")

# What the bindings raise, as seen on the testbed (HTCondor 24/25).
LATE_EXPORT = "DCSchedd::exportJobs:6004:Can't read response ad"
BUSY = (
    "Failed to fetch ads from schedd, errmsg=SECMAN:2007:Failed to read resume session "
    "response classad from server."
)
DENIED = 'SECMAN:2010:Received "DENIED" from server for user alice using method FS.'
NOT_FOUND = "DCSchedd::exportJobs:6005:No jobs found to export"


class HTCondorException(Exception):
    """The bindings' exception type, by name (the adapter reads only its text)."""


class Clock:
    """Time that passes only when the code sleeps; `on_sleep` runs at each pause."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []
        self.on_sleep: list[Any] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep.pop(0)()

    def patience(self, limit: float = 600.0) -> Patience:
        return Patience(limit=limit, first=1.0, most=15.0, sleep=self.sleep, clock=lambda: self.now)


class Bindings:
    """The bindings' Schedd as LocalSchedd calls it: each method's answers in turn (an
    exception is raised)."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def _next(self, name: str) -> Any:
        self.calls.append(name)
        queue = self.answers[name]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def export_jobs(self, spec: list[str], directory: str, spool: str) -> Any:
        return self._next("export_jobs")

    def unexport_jobs(self, spec: list[str]) -> Any:
        return self._next("unexport_jobs")

    def query(self, constraint: str, projection: list[str]) -> Any:
        return self._next("query")

    def import_exported_job_results(self, directory: str) -> Any:
        return self._next("import_exported_job_results")


def local_schedd(bindings: Bindings, patience: Patience) -> schedd_mod.LocalSchedd:
    schedd = object.__new__(schedd_mod.LocalSchedd)  # no schedd to reach: the bindings'
    schedd._schedd, schedd.location, schedd.patience = bindings, None, patience
    return schedd


def job_ads(jobs: list[str], managed: str = "External", by: str = "Lumberjack") -> list[Any]:
    ads = []
    for job in jobs:
        cluster, proc = (int(n) for n in job.split("."))
        ads.append(classad2.ClassAd({"ClusterId": cluster, "ProcId": proc, "Managed": managed,
                                     "ManagedManager": by}))  # fmt: skip
    return ads


def log_text(jobs: list[str]) -> str:
    """A job_queue.log as the schedd's export writes it: the cluster ads, each proc ad."""
    ads: dict[str, jql.Ad] = {}
    for cluster in sorted({int(j.split(".")[0]) for j in jobs}):
        key = jql.cluster_key(cluster)
        attrs = {"ClusterId": str(cluster), "Owner": '"alice"'}
        ads[key] = jql.Ad(key, "(empty)", "(empty)", attrs)
    for job in jobs:
        cluster, proc = (int(n) for n in job.split("."))
        attrs = {"ClusterId": str(cluster), "ProcId": str(proc), "JobStatus": "1"}
        ads[job] = jql.Ad(job, "Job", "Machine", attrs)
    return jqlw.format_records(jqlw.records_for_ads(ads))  # one transaction, as an export


JOBS = [f"7.{p}" for p in range(5)] + ["9.0"]


def test_the_texts_are_told_apart() -> None:
    assert may_have_acted(LATE_EXPORT) and schedd_busy(LATE_EXPORT)
    assert may_have_acted("DCSchedd::importExportedJobResults:6004:Can't read response ad")
    assert not may_have_acted(BUSY) and schedd_busy(BUSY)  # never reached it: it did nothing
    for refused in (DENIED, NOT_FOUND, "the schedd rejected the export directory"):
        assert not may_have_acted(refused) and not schedd_busy(refused)


def test_the_log_reader_sees_an_unfinished_or_partial_export(tmp_path: Path) -> None:
    log = tmp_path / "job_queue.log"
    whole = log_text(JOBS)
    log.write_text(whole)
    look = look_at_log(log, JOBS)
    assert look.complete and (look.procs, look.clusters) == (6, 2)
    log.write_text(whole[: whole.rindex("106")])  # the commit not written yet
    look = look_at_log(log, JOBS)
    assert not look.complete and "unfinished transaction" in look.problem
    log.write_text(log_text(JOBS[:-1]))
    assert look_at_log(log, JOBS).missing == ("9.0",)
    assert "does not exist" in look_at_log(tmp_path / "none", JOBS).problem


def test_a_late_answer_of_a_whole_export_is_a_success(tmp_path: Path) -> None:
    clock = Clock()
    log = tmp_path / "job_queue.log"
    whole = log_text(JOBS)
    log.write_text(whole[: whole.rindex("106")])  # the schedd is still writing
    clock.on_sleep = [lambda: None, lambda: log.write_text(whole)]
    bindings = Bindings(
        export_jobs=[HTCondorException(LATE_EXPORT)],
        query=[HTCondorException(BUSY), HTCondorException(BUSY), job_ads(JOBS)],
    )
    result = local_schedd(bindings, clock.patience()).export_jobs(
        [7, 9], tmp_path, "/x/spool", expected=JOBS
    )
    assert result.settled and (result.total_job_ads, result.total_cluster_ads) == (6, 2)
    assert result.log == log
    assert bindings.calls.count("query") == 3  # asked again until the schedd answered
    assert clock.pauses[:3] == [1.0, 2.0, 1.0]  # then the log, until whole and still


@pytest.mark.parametrize(
    ("ads", "log_jobs", "expect"),
    [
        (job_ads(JOBS[:-1]), JOBS, "did not export 1 of 6 jobs (first: 9.0)"),
        (job_ads(JOBS, managed="Schedd"), JOBS, "did not export 6 of 6 jobs (first: 7.0)"),
        (job_ads(JOBS, by="SomeoneElse"), JOBS, "did not export 6 of 6 jobs"),
        (job_ads(JOBS), JOBS[:-2], "lacks 2 jobs (first: 7.4)"),
    ],
)
def test_a_late_answer_of_a_partial_export_is_a_failure(
    tmp_path: Path, ads: list[Any], log_jobs: list[str], expect: str
) -> None:
    clock = Clock()
    (tmp_path / "job_queue.log").write_text(log_text(log_jobs))
    bindings = Bindings(export_jobs=[HTCondorException(LATE_EXPORT)], query=[ads])
    with pytest.raises(LumberjackError) as caught:
        local_schedd(bindings, clock.patience(limit=60)).export_jobs(
            [7, 9], tmp_path, "/x/spool", expected=JOBS
        )
    message = str(caught.value)
    assert expect in message and "\n" not in message
    assert message.startswith("the schedd did not answer the export in time (")
    assert clock.now <= 60


def test_a_schedd_that_never_answers_again_is_a_failure_in_bounded_time(tmp_path: Path) -> None:
    clock = Clock()
    bindings = Bindings(
        export_jobs=[HTCondorException(LATE_EXPORT)], query=[HTCondorException(BUSY)]
    )
    with pytest.raises(LumberjackError, match="did not answer a query within 600 s"):
        local_schedd(bindings, clock.patience()).export_jobs(
            [7, 9], tmp_path, "/x/spool", expected=JOBS
        )
    assert clock.now == 600 and max(clock.pauses) == 15.0


@pytest.mark.parametrize("text", [DENIED, NOT_FOUND])
def test_a_refusal_is_not_waited_for(tmp_path: Path, text: str) -> None:
    clock = Clock()
    bindings = Bindings(export_jobs=[HTCondorException(text)], query=[job_ads(JOBS)])
    with pytest.raises(LumberjackError, match="the schedd refused to export"):
        local_schedd(bindings, clock.patience()).export_jobs(
            [7, 9], tmp_path, "/x/spool", expected=JOBS
        )
    assert bindings.calls == ["export_jobs"] and clock.pauses == []


def test_an_answer_in_time_is_taken_as_given(tmp_path: Path) -> None:
    answer = {"ActionResult": 1, "TotalJobAds": 6, "TotalClusterAds": 2}
    bindings = Bindings(export_jobs=[answer], query=[HTCondorException("not asked")])
    result = local_schedd(bindings, Clock().patience()).export_jobs(
        [7, 9], tmp_path, "/x/spool", expected=JOBS
    )
    assert not result.settled and result.total_job_ads == 6 and bindings.calls == ["export_jobs"]


def test_the_rollback_waits_for_a_busy_schedd(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    ledger.create("big", site=None, bundle_dir=tmp_path / "b", remote_spool="/x/spool",
                  owner=None, clusters=[7, 9], jobs=JOBS)  # fmt: skip
    ledger.move("big", "export")
    clock = Clock()
    bindings = Bindings(unexport_jobs=[HTCondorException(BUSY), HTCondorException(LATE_EXPORT),
                                       HTCondorException("No clusters to unexport")])  # fmt: skip
    rollback(local_schedd(bindings, clock.patience()), ledger, "big", [7, 9], reason="too late")
    assert bindings.calls == ["unexport_jobs"] * 3 and clock.pauses == [1.0, 2.0]
    assert ledger.get("big").phase.value == "failed"


def test_a_rollback_refused_is_not_waited_for(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    ledger.create("big", site=None, bundle_dir=tmp_path / "b", remote_spool="/x/spool",
                  owner=None, clusters=[7], jobs=JOBS[:5])  # fmt: skip
    ledger.move("big", "export")
    clock = Clock()
    bindings = Bindings(unexport_jobs=[HTCondorException(DENIED)])
    with pytest.raises(LumberjackError, match="refused to unexport"):
        rollback(local_schedd(bindings, clock.patience()), ledger, "big", [7], reason="x")
    assert clock.pauses == [] and ledger.get("big").phase.value == "exporting"


def test_a_late_import_that_merged_is_a_success(tmp_path: Path) -> None:
    (tmp_path / "job_queue.log").write_text(log_text(JOBS))
    late = HTCondorException("DCSchedd::importExportedJobResults:6004:Can't read response ad")
    clock = Clock()
    # Busy once; then no job of the import is still exported by lumberjack.
    bindings = Bindings(import_exported_job_results=[late], query=[HTCondorException(BUSY), []])
    assert schedd_mod._import_into(bindings, str(tmp_path), patience=clock.patience()) == 6
    assert clock.pauses == [1.0]


def test_a_late_import_that_did_not_merge_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "job_queue.log").write_text(log_text(JOBS))
    late = HTCondorException("DCSchedd::importExportedJobResults:6004:Can't read response ad")
    bindings = Bindings(import_exported_job_results=[late], query=[job_ads(JOBS[2:3])])
    with pytest.raises(LumberjackError, match=r"did not take back 1 of 6 jobs \(first: 7.2\)"):
        schedd_mod._import_into(bindings, str(tmp_path), patience=Clock().patience())


# What the bindings raise when DCSchedd could not start the command (seen on the
# testbed while another 10,000-job import held the schedd): it never reached the schedd.
NOT_STARTED = "No result ad"


def test_an_import_the_schedd_never_took_is_asked_again(tmp_path: Path) -> None:
    clock = Clock()
    answer = {"ActionResult": 1, "TotalJobAds": 6}
    bindings = Bindings(import_exported_job_results=[HTCondorException(NOT_STARTED), answer])
    assert schedd_mod._import_into(bindings, str(tmp_path), patience=clock.patience()) == 6
    assert bindings.calls == ["import_exported_job_results"] * 2 and clock.pauses == [1.0]


def test_an_import_never_taken_in_patience_is_refused_in_one_line(tmp_path: Path) -> None:
    clock = Clock()
    bindings = Bindings(import_exported_job_results=[HTCondorException(NOT_STARTED)])
    with pytest.raises(LumberjackError, match="^the schedd refused the import: No result ad$"):
        schedd_mod._import_into(bindings, str(tmp_path), patience=clock.patience(limit=30))
    assert clock.now == 30


def test_an_import_refused_is_not_asked_again(tmp_path: Path) -> None:
    clock = Clock()
    bindings = Bindings(import_exported_job_results=[HTCondorException(DENIED)])
    with pytest.raises(LumberjackError, match="refused the import"):
        schedd_mod._import_into(bindings, str(tmp_path), patience=clock.patience())
    assert bindings.calls == ["import_exported_job_results"] and clock.pauses == []


def test_the_jobs_of_a_query_share_their_names_and_equal_values() -> None:
    """A query of 100,000 jobs holds each attribute name and each value the jobs share
    (the executable, its directory) once: export's memory at that size."""
    classad2 = pytest.importorskip("classad2")
    ads = [
        classad2.parseOne(
            f'ClusterId = 7\nProcId = {p}\nCmd = "/home/alice/run.sh"\nRequirements = true && '
            f'TARGET.Memory > 10\nOut = "out.{p}"\n',
            parser=classad2.ParserType.Old,
        )
        for p in range(3)
    ]
    jobs = schedd_mod.ads_to_dicts(ads)
    assert [job["Out"] for job in jobs] == ["out.0", "out.1", "out.2"]
    for name in ("Cmd", "Requirements"):
        keys = [next(k for k in job if k == name) for job in jobs]
        assert all(k is keys[0] for k in keys)
        assert all(job[name] is jobs[0][name] for job in jobs)
        assert all(job.texts[name] is jobs[0].texts[name] for job in jobs)
