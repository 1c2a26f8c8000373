"""`condor_lumberjack inspect FILE`: show the queue a job_queue.log holds, without a schedd."""

from __future__ import annotations

import os
from typing import Any

import click

from lumberjack.ap.queue_log import DEFAULT_MAX_SIZE, load_ads, load_json
from lumberjack.ap.queue_log import cell as _cell
from lumberjack.ap.queue_log import shorten as _shorten
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option, plural, text_table
from lumberjack.core import jobqueuelog
from lumberjack.core.units import parse_size
from lumberjack.errors import BadInput


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
        lines.append(text_table(rows))
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
    return text_table(rows)


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
        max_bytes = parse_size(max_size)
    except ValueError as exc:
        raise BadInput(f"--max-size {max_size} {exc}") from None
    if diff or other is not None:
        if not (diff and other is not None):
            raise BadInput("compare two logs with: inspect --diff FILE OTHER")
        changes = diff_ads(load_ads(path, max_bytes), load_ads(other, max_bytes))
        if as_json:
            emit(True, {"a": path, "b": other, "ads": changes})
        else:
            emit(False, None, render_diff(path, other, changes))
        return
    if as_json:  # the ads' attributes printed as they are
        click.echo(load_json(path, max_bytes))  # what emit(True, {"ads": ...}) would print
        return
    from lumberjack.ap.queue_summary import queue_summary  # only the table needs it

    emit(False, None, render(path, queue_summary(load_ads(path, max_bytes))))
