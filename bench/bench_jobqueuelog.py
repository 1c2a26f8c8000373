"""Throughput of lumberjack.core.jobqueuelog on a synthetic but schedd-shaped job_queue.log.

    python bench/bench_jobqueuelog.py [N_RECORDS]

prints one JSON object; run(n) returns the same dict. Rates are records per second:

- read:           read_records() of the file (decode + parse every line)
- replay_rewrite: replay() of those records + log_text(ads) (the compact log's text, as
                  write_log() makes it)
- write:          write_log() of the replayed queue (format + fsync + rename)

and inspect_vs_naive(n) the time of `condor_lumberjack inspect --json` of a log of about
n records against NAIVE_REPLAY (the same ads as JSON from a replay without any check:
no torn-write, key, name or value checks, no case-insensitive names), each a process of
its own, best of 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw

_CLUSTER_ATTRS = [
    ("Owner", '"alice"'),
    ("User", '"alice@submit.example.org"'),
    ("Cmd", '"/home/alice/bin/simulate"'),
    ("Iwd", '"/home/alice/runs/campaign 7"'),
    ("Arguments", "\"--seed $(Process) --out 'result $(Process).h5'\""),
    ("Requirements", '(TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX")'),
    ("RequestCpus", "1"),
    ("RequestMemory", "2048"),
    ("RequestDisk", "1048576"),
    ("Environment", '"OMP_NUM_THREADS=1 LANG=en_US.UTF-8 GREETING=héllo"'),
    ("TransferInputFiles", '"input.dat,config/params.yaml"'),
    ("QDate", "1718000000"),
]
_PROC_ATTRS = [
    ("ProcId", None),
    ("ClusterId", None),
    ("JobStatus", "1"),
    ("GlobalJobId", None),
    ("EnteredCurrentStatus", "1718000000"),
    ("NumJobStarts", "0"),
]


def synthetic_log(n_records: int) -> str:
    """About n_records records: submit transactions, then status updates, as a schedd logs."""
    records = [jql.LogRecord(107, "1", "CreationTimestamp", "1718000000")]
    records.append(jql.LogRecord(101, "0.0", "Job", "Machine"))
    cluster = 0
    update_budget = n_records // 4  # leave a quarter of the records for updates
    while len(records) < n_records - update_budget:
        cluster += 1
        ckey = jql.cluster_key(cluster)
        records += [jql.LogRecord(105), jql.LogRecord(101, ckey, "Job", "Machine")]
        records += [jql.LogRecord(103, ckey, name, value) for name, value in _CLUSTER_ATTRS]
        for proc in range(10):
            pkey = jql.proc_key(cluster, proc)
            records.append(jql.LogRecord(101, pkey, "Job", "Machine"))
            for name, value in _PROC_ATTRS:
                if value is None:
                    value = {
                        "ProcId": str(proc),
                        "ClusterId": str(cluster),
                        "GlobalJobId": f'"submit.example.org#{cluster}.{proc}#1718000000"',
                    }[name]
                records.append(jql.LogRecord(103, pkey, name, value))
        records.append(jql.LogRecord(106))
    proc_count = cluster * 10
    i = 0
    while len(records) < n_records:
        c, p = divmod(i % proc_count, 10)
        key = jql.proc_key(c + 1, p)
        records += [
            jql.LogRecord(105),
            jql.LogRecord(103, key, "JobStatus", "2"),
            jql.LogRecord(103, key, "EnteredCurrentStatus", str(1718000000 + i)),
            jql.LogRecord(106),
        ]
        i += 1
    return jqlw.format_records(records)


def run(n_records: int, repeat: int = 3) -> dict[str, Any]:
    """Benchmark read, replay+rewrite and write on a log of about ``n_records`` records.

    Each is timed ``repeat`` times and the best kept: on a shared machine the other
    runs measure the neighbours.
    """
    with tempfile.TemporaryDirectory(prefix="lumberjack-bench-") as directory:
        path = os.path.join(directory, "job_queue.log")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(synthetic_log(n_records))
        out = os.path.join(directory, "job_queue.log.new")
        t_read = t_replay = t_write = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            records = jql.read_records(path)
            t_read = min(t_read, time.perf_counter() - t0)

            t0 = time.perf_counter()
            ads = jql.replay(records)
            compact = jqlw.log_text(ads, timestamp=1718000000)  # what write_log writes
            t_replay = min(t_replay, time.perf_counter() - t0)

            t0 = time.perf_counter()
            jqlw.write_log(out, ads, timestamp=1718000000)
            t_write = min(t_write, time.perf_counter() - t0)

        written = compact.count("\n")
        return {
            "n_records": len(records),
            "n_ads": len(ads),
            "n_records_written": written,
            "repeat": repeat,
            "read_records_per_s": round(len(records) / t_read),
            "replay_rewrite_records_per_s": round(len(records) / t_replay),
            "write_records_per_s": round(written / t_write),
        }


#: What `inspect --json` is compared with: the log replayed with no check at all.
NAIVE_REPLAY = """
import json, sys
ads, pending = {}, None
def apply(op, parts):
    if op == "101":
        ads[parts[0]] = {}
    elif op == "102":
        ads.pop(parts[0], None)
    elif op == "103":
        ads[parts[0]][parts[1]] = parts[2]
    elif op == "104":
        ads[parts[0]].pop(parts[1], None)
with open(sys.argv[1], encoding="utf-8", errors="surrogateescape", newline="\\n") as fh:
    for line in fh:
        op, _, rest = line.rstrip("\\n").partition(" ")
        if op == "105":
            pending = []
        elif op == "106":
            for o, p in pending:
                apply(o, p)
            pending = None
        elif op in ("101", "102", "103", "104"):
            parts = rest.split(" ", 2)
            if pending is None:
                apply(op, parts)
            else:
                pending.append((op, parts))
sys.stdout.write(json.dumps({"ads": ads}) + "\\n")
"""


def inspect_vs_naive(n_records: int, repeat: int = 3) -> dict[str, Any]:
    """`inspect --json` of a log of about n_records records against NAIVE_REPLAY."""
    with tempfile.TemporaryDirectory(prefix="lumberjack-bench-") as directory:
        path = os.path.join(directory, "job_queue.log")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(synthetic_log(n_records))
        commands = {
            "inspect": [sys.executable, "-m", "lumberjack", "inspect", "--json", path],
            "naive": [sys.executable, "-c", NAIVE_REPLAY, path],
        }
        best = dict.fromkeys(commands, float("inf"))
        outputs = {}
        for _ in range(repeat):
            for name, command in commands.items():
                t0 = time.perf_counter()
                done = subprocess.run(command, check=True, capture_output=True)
                best[name] = min(best[name], time.perf_counter() - t0)
                outputs[name] = json.loads(done.stdout)
        assert outputs["inspect"] == outputs["naive"], "inspect and the naive replay differ"
        records = sum(1 for _ in open(path, encoding="utf-8", errors="surrogateescape"))
        return {
            "inspect_records": records,
            "inspect_json_s": round(best["inspect"], 3),
            "naive_replay_s": round(best["naive"], 3),
            "inspect_ratio": round(best["inspect"] / best["naive"], 2),
        }


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)))
