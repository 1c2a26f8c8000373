"""The issue's targets (P1 ... P10) as one table: today's figure, the goal, and the ratio
that decides it, from one bench run's results (bench/run.py). A row whose section was not
run says so instead of guessing."""

from __future__ import annotations

import re
import textwrap
from typing import Any, Callable

Row = tuple[str, str, str, str, str]  # id, measure, today, goal, verdict


def _export_row(results: dict, jobs: int) -> dict[str, Any] | None:
    rows = (results.get("export") or {}).get("rows") or []
    return next((r for r in rows if r.get("jobs") == jobs), None)


def _p1(r: dict) -> Row | None:
    row = _export_row(r, 10_000)
    if row is None:
        return None
    ratio = row["export_ratio"]
    return ("P1", "export 10,000 jobs / bare `Schedd.export_jobs`", f"{ratio:.2f}x", "≤ 1.3x",
            _met(ratio <= 1.3))  # fmt: skip


def _p2(r: dict) -> Row | None:
    log = r.get("job_queue_log")
    if not log:
        return None
    keys = ("read_records_per_s", "replay_rewrite_records_per_s", "write_records_per_s")
    read, replay, write = (log[k] for k in keys)
    today = f"{read / 1e3:,.0f}k / {replay / 1e3:,.0f}k / {write / 1e3:,.0f}k"
    met = read >= 1e6 and replay >= 6e5 and write >= 1e6
    measure = "job_queue.log read / replay+rewrite / write, records/s"
    goal = "≥ 1,000k / 600k / 1,000k"
    inspect = log.get("inspect_ratio")
    if inspect is not None:  # runs before the inspect figures have none
        measure += "; `inspect --json` / naive replay"
        today, goal = f"{today}; {inspect:.2f}x", f"{goal}; ≤ 0.6x"
        met = met and inspect <= 0.6
    return ("P2", measure, today, goal, _met(met))


def _p3(r: dict) -> Row | None:
    uploads = {u["case"]: u for u in (r.get("shipping") or {}).get("uploads", [])}
    if not {"large", "small"} <= set(uploads):
        return None
    large, small = uploads["large"]["openssh_ratio"], uploads["small"]["openssh_ratio"]
    return ("P3", "ship 200 MiB large / 10,000 small files (OpenSSH) / tar \\| ssh",
            f"{large:.2f}x / {small:.2f}x", "≤ 1.1x / ≤ 1.0x",
            _met(large <= 1.1 and small <= 1.0))  # fmt: skip


def _p5(r: dict) -> Row | None:
    first = (r.get("launch") or {}).get("first_job_s")
    if first is None:
        return None
    return ("P5", "`launch` → first job running", f"{first:.2f} s", "≤ 6 s", _met(first <= 6))


def _p6(r: dict) -> Row | None:
    sync = r.get("sync")
    if not sync:
        return None
    today = f"{sync['logins']} login, {sync['sync_s']:.2f} s ({sync['exports']} exports)"
    return ("P6", "no-change `sync`, 50 exports at one site", today, "1 login, ≤ 3 s",
            _met(sync["logins"] == 1 and sync["sync_s"] <= 3))  # fmt: skip


def _p7(r: dict) -> Row | None:
    """10,000 jobs, and 100,000 when that row ran: both must be within the goal."""
    rows = [row for jobs in (10_000, 100_000) if (row := _export_row(r, jobs)) is not None]
    if not rows:
        return None
    today = " / ".join(f"{row['import_ratio']:.2f}x" for row in rows)
    sizes = " / ".join(f"{row['jobs']:,}" for row in rows)
    return ("P7", f"import {sizes} jobs / bare `import_exported_job_results`", today,
            "≤ 1.5x", _met(all(row["import_ratio"] <= 1.5 for row in rows)))  # fmt: skip


#: P8's goal: `run --wait` against the same jobs on a plain pool of the same slots.
P8_GOAL = 1.2


def _p8(r: dict) -> Row | None:
    run = r.get("run")
    if not run or "seconds" not in run:
        return None
    measure = f"{run['jobs']} jobs of {run['job_s']} s, `run --wait`"
    ratio = run.get("ratio_vs_plain_pool")
    if ratio is None:  # runs before the plain pool's baseline
        today = f"{run['seconds']:.1f} s (ideal {run['ideal_s']:.1f} s)"
        return ("P8", measure, today, f"≤ {run['goal_s']:.1f} s",
                _met(run["seconds"] <= run["goal_s"]))  # fmt: skip
    rounds = run.get("rounds") or []
    today = (f"{ratio:.2f}x (median of {len(rounds)}: {run['seconds']:.1f} s / "
             f"{run['plain_pool']['seconds']:.1f} s)")  # fmt: skip
    return ("P8", measure + " / the same jobs on a plain pool of the same slots", today,
            f"≤ {P8_GOAL}x", _met(ratio <= P8_GOAL))  # fmt: skip


def _p9(r: dict) -> Row | None:
    """The whole commands at 100,000 jobs when that row ran, else export's and import's
    own work on the largest cloned queue."""
    memory = (r.get("export") or {}).get("memory") or []
    m = _export_row(r, 100_000) or (memory[-1] if memory else None)
    if m is None:
        return None
    worst = max(m["export_peak_mib"], m["import_peak_mib"])
    what = "whole commands" if "export_ratio" in m else "own work"
    return ("P9", f"peak memory, export / import of {m['jobs']:,} jobs ({what})",
            f"{m['export_peak_mib']:.0f} / {m['import_peak_mib']:.0f} MiB", "≤ 1,024 MiB",
            _met(worst <= 1024))  # fmt: skip


def _p10(r: dict) -> Row | None:
    many = r.get("many")
    if not many or many.get("no_change_sync_s") is None:
        return None
    exact = many["outputs_checked"] and not many["outputs_wrong"]
    clean = not many["errors"] and not many["contention"]
    today = (
        f"{many['logins']} login, {many['no_change_sync_s']:.2f} s; outputs "
        f"{'exact' if exact else 'WRONG'}, {len(many['errors']) + len(many['contention'])} "
        f"errors ({many['exports']} exports)"
    )
    met = many["logins"] == 1 and many["no_change_sync_s"] <= 3 and exact and clean
    return ("P10", "20 exports at once at one site, one login, `sync` rounds", today,
            "1 login, exact, 0 lock errors, no-change `sync` ≤ 3 s",
            _met(met and many["exports"] >= 20))  # fmt: skip


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


ROWS: tuple[tuple[str, Callable[[dict], Row | None]], ...] = (
    ("export", _p1), ("log", _p2), ("shipping", _p3), ("launch", _p5), ("sync", _p6),
    ("export", _p7), ("run", _p8), ("export", _p9), ("many", _p10),
)  # fmt: skip


def markdown(results: dict, kept: dict[str, str] | None = None) -> str:
    """The table; a row whose section is not in `results` is its line in `kept` (the
    table as it was, by id), if there."""
    lines = ["| id | measure | today | goal | verdict |", "|---|---|---:|---:|---|"]
    for section, row_of in ROWS:
        row = row_of(results)
        ident = row_of.__name__.lstrip("_").upper()
        if row is None and ident in (kept or {}):
            lines.append((kept or {})[ident])
            continue
        if row is None:
            row = (ident, f"(section `{section}` not in these results)", "—", "—", "—")
        lines.append("| " + " | ".join(row) + " |")
    intro = (
        "The issue's targets, each from the section below that measures it; a section not "
        "rerun keeps\nits last figures (the header names the sections of this run).\n\n"
    )
    return "## Targets\n\n" + intro + "\n".join(lines) + "\n\n"


#: "(sections: export, log) on 2026-11-26 11:39" in BENCHMARKS.md's first paragraph.
_WHEN = re.compile(r"\(sections?: ([a-z, ]+)\) on (\d{4}-\d\d-\d\d \d\d:\d\d)")


def measured_when(old_text: str, ran: list[str], date: str, machine: str = "") -> str:
    """The header's "Measured by ..." sentence: the sections of this run on `date`, and
    every section not rerun on the date the old header gave it (as its text is kept)."""
    head = " ".join(old_text.split("\n## ")[0].split())
    dates = {}
    for names, when in _WHEN.findall(head):
        dates.update({name.strip(): when for name in names.split(",") if name.strip()})
    dates.update({name: date for name in ran})
    by_date: dict[str, list[str]] = {}
    for name, when in dates.items():
        by_date.setdefault(when, []).append(name)
    phrases = [
        f"(section{'s' if len(names) > 1 else ''}: {', '.join(names)}) on {when}"
        for when, names in sorted(by_date.items())
    ]
    listed = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    on = f" ({machine})," if machine else ""
    return textwrap.fill(f"Measured by `make bench` {listed}{on}", width=92)
