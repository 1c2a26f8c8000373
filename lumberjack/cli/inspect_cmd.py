"""`condor_lumberjack inspect FILE`: show the queue a job_queue.log holds, without a schedd."""

from __future__ import annotations

import os
import stat
from typing import Any

import click

from lumberjack.ap.message_text import printable, shortened
from lumberjack.ap.queue_summary import queue_summary
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option, plural
from lumberjack.core import jobqueuelog
from lumberjack.core.units import format_memory, parse_memory
from lumberjack.errors import BadInput

#: The largest log `inspect` reads unless --max-size says more (it is held in memory).
DEFAULT_MAX_SIZE = "1GB"


def load_ads(path: str, max_mb: int | None = None) -> dict[str, jobqueuelog.Ad]:
    """The ads of the log at `path`, with every failure turned into a one-line BadInput
    naming the file. Only a regular file of at most `max_mb` MB is read: a device or a
    FIFO would be read forever (opened non-blocking, so a FIFO does not hang the open)."""
    limit_mb = parse_memory(DEFAULT_MAX_SIZE) if max_mb is None else max_mb
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            _check_regular(path, os.fstat(fd), limit_mb)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as handle:
            return jobqueuelog.replay(jobqueuelog.parse_file(handle, path), source=path)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except PermissionError:
        raise BadInput(f"{path}: permission denied") from None
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except jobqueuelog.JobQueueLogError as exc:
        raise BadInput(log_error(path, exc)) from None


def _check_regular(path: str, info: os.stat_result, limit_mb: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise BadInput(f"{_cell(path)}: is {what}, not a job_queue.log")
    if info.st_size > limit_mb * 1024 * 1024:
        raise BadInput(
            f"{_cell(path)}: {format_memory(-(-info.st_size // (1024 * 1024)))} is more "
            f"than --max-size {format_memory(limit_mb)}; give a larger --max-size"
        )


#: How much of a bad line an error shows.
EXCERPT_CHARS = 60


def log_error(path: str, exc: jobqueuelog.JobQueueLogError) -> str:
    """One short line: the file, the line number, what is wrong, the start of the line."""
    if exc.line is None:
        return f"{_cell(path)}: {_shorten(exc.problem, 2 * EXCERPT_CHARS)}"
    where = f"{_cell(path)} line {exc.line}"
    if exc.text is None:
        return f"{where}: {_shorten(exc.problem, 2 * EXCERPT_CHARS)}"
    if _binary(exc.text):
        return f"{where}: binary data, not a job_queue.log"
    return f"{where}: {_shorten(exc.problem, 2 * EXCERPT_CHARS)}: {_excerpt(exc.text)}"


def _binary(text: str) -> bool:
    start = text[:200]
    odd = sum(1 for c in start if not c.isprintable() and c != "\t")
    return "\x00" in start or odd > len(start) // 10


def _shorten(text: str, limit: int) -> str:
    return shortened(_cell(text), limit)


def _excerpt(text: str) -> str:
    return '"' + _shorten(text, EXCERPT_CHARS) + '"'


def _cell(value: Any) -> str:
    """One table cell: no control characters (they would break the layout) and no lone
    surrogates from undecodable bytes (they cannot be printed)."""
    if value is None:
        return "-"
    text = str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return printable(text)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows
    )


def render(path: str, summary: dict[str, Any]) -> str:
    """The human-readable view: one row per proc (a cluster without procs gets one row)."""
    clusters = summary["clusters"]
    procs = [p for c in clusters for p in c["procs"]]
    managed = any(p["managed"] is not None for p in procs)
    header = ["ID", "STATUS", "OWNER", "CMD", "ARGS", "IWD"] + (["MANAGED"] if managed else [])
    rows = [header]
    for cluster in clusters:
        if not cluster["procs"]:
            rows.append(
                [str(cluster["cluster"]), "(no procs)"]
                + [_cell(cluster[k]) for k in ("owner", "cmd", "args", "iwd")]
                + (["-"] if managed else [])
            )
        for proc in cluster["procs"]:
            row = [proc["id"]] + [_cell(proc[k]) for k in ("status", "owner", "cmd", "args", "iwd")]
            if managed:
                how = proc["managed"]
                if how is not None and proc["managed_manager"] is not None:
                    how = f"{how} ({proc['managed_manager']})"
                row.append(_cell(how))
            rows.append(row)

    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary["status_counts"].items()))
    total = (
        f"{plural(summary['num_clusters'], 'cluster')}, {plural(summary['num_procs'], 'proc')}"
        + (f" ({counts})" if counts else "")
    )
    lines = [f"{_cell(path)}: {total}"]
    if len(rows) > 1:
        lines.append(_table(rows))
    return "\n".join(lines)


def diff_ads(a: dict[str, jobqueuelog.Ad], b: dict[str, jobqueuelog.Ad]) -> dict[str, Any]:
    """Per ad (by its numbers, so 1.-1 and 01.-1 match), each attribute that differs:
    {KEY: {"only_in": "a"|"b"}} or {KEY: {"attrs": {NAME: [A or None, B or None]}}}."""
    by_a = {jobqueuelog.parse_key(k): ad for k, ad in a.items()}
    by_b = {jobqueuelog.parse_key(k): ad for k, ad in b.items()}
    out: dict[str, Any] = {}
    for num in sorted(set(by_a) | set(by_b), key=lambda n: (n.cluster, n.proc)):
        ad_a, ad_b = by_a.get(num), by_b.get(num)
        if ad_a is None or ad_b is None:
            out[(ad_a or ad_b).key] = {"only_in": "a" if ad_b is None else "b"}  # type: ignore[union-attr]
            continue
        names = {n.lower(): n for n in [*ad_b.attrs, *ad_a.attrs]}
        attrs = {
            name: [ad_a.get(name), ad_b.get(name)]
            for _, name in sorted(names.items())
            if ad_a.get(name) != ad_b.get(name)
        }
        if attrs:
            out[ad_a.key] = {"attrs": attrs}
    return out


def render_diff(path_a: str, path_b: str, diff: dict[str, Any]) -> str:
    if not diff:
        return f"{_cell(path_a)} and {_cell(path_b)}: the same ads"
    rows = [["AD", "ATTRIBUTE", "A: " + _shorten(path_a, 40), "B: " + _shorten(path_b, 40)]]
    for key, what in diff.items():
        if "only_in" in what:
            rows.append([key, "(whole ad)", "present" if what["only_in"] == "a" else "-",
                         "present" if what["only_in"] == "b" else "-"])  # fmt: skip
            continue
        for name, (va, vb) in what["attrs"].items():
            rows.append([key, _cell(name), _shorten(_cell(va), 60), _shorten(_cell(vb), 60)])
    return _table(rows)


@cli.command("inspect")
@click.argument("log_file", metavar="FILE", type=click.Path(path_type=str))
@click.argument("other", metavar="[OTHER]", required=False, type=click.Path(path_type=str))
@click.option(
    "--diff", "diff", is_flag=True, help="Compare FILE with OTHER ad by ad, attribute by attribute."
)
@click.option(
    "--max-size", default=DEFAULT_MAX_SIZE, metavar="SIZE",
    help='Refuse a log larger than this ("500MB", "4GB").',
)  # fmt: skip
@json_option
def inspect_cmd(log_file: str, other: str | None, diff: bool, max_size: str, as_json: bool) -> None:
    """Show the jobs recorded in an HTCondor job_queue.log (no schedd needed).

    Replays the log the way the schedd does on startup: committed transactions
    apply, an unfinished final transaction is dropped, destroyed ads are gone.
    A proc shows its own attribute, else its cluster's.

    --json prints {"ads": {KEY: {ATTR: EXPR, ...}, ...}}: every ad by its key
    as written in the file (0.0, 01.-1, 1.0, ...) with each attribute's
    expression text exactly as in the file.

    --diff FILE OTHER shows, per ad, every attribute that differs (what a site
    changed: inspect --diff BUNDLE/spool/job_queue.log BUNDLE/returned/job_queue.log).

    \b
    Examples:
      condor_lumberjack inspect "$(condor_config_val SPOOL)/job_queue.log"
      condor_lumberjack inspect --json job_queue.log | jq '.ads["1.0"].JobStatus'
    """
    path = os.fspath(log_file)
    try:
        max_mb = parse_memory(max_size)
    except ValueError as exc:
        raise BadInput(f"--max-size {max_size} {exc}") from None
    if diff or other is not None:
        if not (diff and other is not None):
            raise BadInput("compare two logs with: inspect --diff FILE OTHER")
        changes = diff_ads(load_ads(path, max_mb), load_ads(other, max_mb))
        if as_json:
            emit(True, {"a": path, "b": other, "ads": changes})
        else:
            emit(False, None, render_diff(path, other, changes))
        return
    ads = load_ads(path, max_mb)
    if as_json:
        emit(True, {"ads": {key: ad.attrs for key, ad in ads.items()}})  # printed as they are
    else:
        emit(False, None, render(path, queue_summary(ads)))
