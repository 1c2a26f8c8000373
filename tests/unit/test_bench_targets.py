"""The benchmarks' targets table (bench/targets.py): a row whose section was not rerun
keeps its line from the table as it was; the many-exports row (P10) is met only when
every part of the issue's target is."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import targets  # noqa: E402

OLD_P6 = "| P6 | no-change `sync`, 50 exports | 1 login, 0.95 s (50 exports) | x | met |"


def many(**changes: object) -> dict:
    good = {"exports": 20, "logins": 1, "no_change_sync_s": 0.8, "outputs_checked": 200,
            "outputs_wrong": [], "errors": [], "contention": []}  # fmt: skip
    return {"many": {**good, **changes}}


def row(text: str, ident: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {ident} |"))


def test_a_section_not_rerun_keeps_its_row_and_one_never_measured_says_so() -> None:
    text = targets.markdown(many(), {"P6": OLD_P6})
    assert row(text, "P6") == OLD_P6
    assert "(section `export` not in these results)" in row(text, "P1")
    assert row(text, "P10").endswith("| met |")


def test_the_many_row_is_met_only_when_every_part_is() -> None:
    for bad in (
        {"logins": 2},
        {"no_change_sync_s": 3.5},
        {"outputs_wrong": ["many-1-00: out.0 differs or is missing"]},
        {"errors": ["sync 3: exit 1"]},
        {"contention": ["sync 2: export 'x' is being worked on by another lumberjack"]},
        {"exports": 3},
    ):
        assert row(targets.markdown(many(**bad)), "P10").endswith("| **not met** |"), bad


def test_a_rerun_section_replaces_its_kept_row() -> None:
    old = "| P10 | old | old | old | **not met** |"
    assert row(targets.markdown(many(), {"P10": old}), "P10") != old


def test_the_header_keeps_the_date_of_each_section_not_rerun() -> None:
    old = (
        "# Benchmarks\n\nMeasured by `make bench` (sections: export, log) on 2026-11-26 11:39,\n"
        "(section: many) on 2026-11-26 11:51 (x86_64, 2 cores),\non the testbed.\n\n## Targets\n"
        "(section: run) on 2020-01-01 00:00 is body text, not the header\n"
    )
    when = targets.measured_when(old, ["log", "run"], "2026-11-26 15:59")
    assert " ".join(when.split()) == (
        "Measured by `make bench` (section: export) on 2026-11-26 11:39, (section: many) on "
        "2026-11-26 11:51 and (sections: log, run) on 2026-11-26 15:59"
    )
    assert targets.measured_when("", ["run"], "2026-11-26 15:59") == (
        "Measured by `make bench` (section: run) on 2026-11-26 15:59"
    )


def imports(*ratios: tuple[int, float]) -> dict:
    other = {"export_ratio": 1.2, "export_peak_mib": 900, "import_peak_mib": 800}
    rows = [{"jobs": jobs, "import_ratio": r, **other} for jobs, r in ratios]
    return {"export": {"rows": rows}}


def test_the_import_row_is_met_only_when_10000_and_100000_jobs_both_are() -> None:
    assert row(targets.markdown(imports((10_000, 1.4), (100_000, 1.5))), "P7").endswith("| met |")
    missed = row(targets.markdown(imports((10_000, 1.4), (100_000, 1.6))), "P7")
    assert "1.40x / 1.60x" in missed and missed.endswith("**not met** |")
    assert "import 10,000 jobs" in row(targets.markdown(imports((10_000, 1.4))), "P7")


def test_run_wait_is_judged_against_the_plain_pool_when_one_ran() -> None:
    run = {"jobs": 200, "job_s": 1, "seconds": 90.0, "ideal_s": 33.3, "goal_s": 63.3}
    against = {**run, "ratio_vs_plain_pool": 1.13, "plain_pool": {"seconds": 80.0},
               "rounds": [{}, {}, {}]}  # fmt: skip
    text = row(targets.markdown({"run": against}), "P8")
    assert "1.13x (median of 3: 90.0 s / 80.0 s)" in text and text.endswith("| met |")
    slower = row(targets.markdown({"run": {**against, "ratio_vs_plain_pool": 1.25}}), "P8")
    assert slower.endswith("**not met** |")
    # A run without the plain pool (older results) keeps its goal in seconds.
    assert "≤ 63.3 s" in row(targets.markdown({"run": run}), "P8")
