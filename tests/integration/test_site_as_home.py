"""Jobs run at the site as at home, driven by `sync` alone as cron runs it: the job's
environment (`environment`, which condor_submit writes in V2 syntax whichever the user
wrote, and `getenv`, copied into it at submit) arrives byte for byte through the
per-job container, a job killed by a signal comes home killed by that signal
(ExitBySignal, ExitSignal, the user log's abnormal termination), directory inputs keep
their empty directories, and a remapped output lands where HTCondor puts it. One export
carries every case. (A job removed by its periodic_remove, with its one aborted event,
is a case of the conformance suite, compared there with a plain pool.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from journey import chown_tree, history, lumberjack, query, submit_items, sync_until_imported

pytestmark = pytest.mark.integration

#: Values HTCondor lets a job carry, each one a way Apptainer's own quoting lost them.
#: (`$(name)` is left out: condor_submit expands it as a macro, at home as here; a
#: newline cannot be written in a submit file, and getenv leaves such a variable out.)
TRICKY = {
    "LJ_QUOTES": 'say "hi", it\'s',
    "LJ_DOLLAR": "$HOME ${X:-y} `id` $x",
    "LJ_SPACES": "  two  spaces\tand a tab ",
    "LJ_EQUALS": "a=b=c",
    "LJ_UNICODE": "é漢字 ✓",
    "LJ_BACKSLASH": "ends in a backslash \\",
    "LJ_EMPTY": "",
}
#: From the submitter's environment at submit time (condor_submit copies it into the ad).
FROM_GETENV = {"LJ_GOT_QUOTE": 'a"b', "LJ_GOT_PATHS": "/x y:/z"}

ENV_JOB = """#!/bin/sh
/usr/bin/env -0 > env.bin
"""
#: Dies by the signal it is given, or exits with the code it is given (143 alone is
#: no signal: 128+N must not be taken for one).
SIGNAL_JOB = """#!/bin/sh
echo "job $1 about to end with $2"
case "$2" in
  exit*) exit "${2#exit}" ;;
  sleep*) sleep "${2#sleep}" ;;
  *) kill -s "$2" $$ ;;
esac
"""
SIGNALS = {"HUP": 1, "QUIT": 3, "ILL": 4, "TERM": 15}
#: Prints every path the inputs made in its sandbox, one a line.
DIRS_JOB = """#!/bin/sh
for p in dirA dirB dirC dirD e g.txt; do
  if [ -e "$p" ]; then find "$p"; fi
done
"""
#: Writes an output that its remap sends into a directory missing at home.
REMAP_JOB = """#!/bin/sh
echo result > res.txt
"""
#: The inputs' tree: empty and nested empty directories, files beside them.
TREE = ("dirA/empty/", "dirA/n1/n2/", "dirA/f.txt", "dirB/e/", "dirB/g.txt", "dirC/", "dirD/")
#: `dir` is the directory itself, `dir/` its contents (HTCondor's rule).
DIR_INPUTS = "dirA, dirB/, dirC, dirD/"


def sandbox_paths(top: Path, inputs: str) -> set[str]:
    """The paths HTCondor makes in a sandbox for `inputs` (directories of `top`)."""
    made = set()
    for entry in (e.strip() for e in inputs.split(",")):
        name = entry.rstrip("/")
        for path in [top / name, *(top / name).rglob("*")]:
            relative = path.relative_to(top / name)
            if entry.endswith("/"):
                made |= {str(relative)} if str(relative) != "." else set()
            else:
                made.add(str(Path(name) / relative) if str(relative) != "." else name)
    return made


def v2_environment(env: dict[str, str]) -> str:
    """HTCondor's V2 syntax for a submit file: every value in single quotes (a quote in
    it doubled), the whole in double quotes (a double quote in it doubled)."""
    words = " ".join(
        f"{name}='{value.replace(chr(39), chr(39) * 2)}'" for name, value in env.items()
    )
    return '"' + words.replace('"', '""') + '"'


def _job_dir(workspace: Path, name: str, script: str) -> Path:
    job_dir = workspace / name
    job_dir.mkdir()
    (job_dir / "run.sh").write_text(script)
    (job_dir / "run.sh").chmod(0o755)
    chown_tree(job_dir)
    return job_dir


def finished(cluster: int, projection: list[str], expect: int, status: int = 4) -> list[dict]:
    """The cluster's imported jobs, from the queue or, once the schedd's sweep moved
    them, its history (the sweep can take a minute; there is no need to wait for it)."""
    deadline = time.monotonic() + 120
    while True:
        found = query(f"ClusterId == {cluster}", ["ProcId", "JobStatus", *projection])
        ads = {a["ProcId"]: a for a in found}
        if len(ads) < expect:
            earlier = history(cluster, ["ProcId", "JobStatus", *projection], 0, 0)
            ads |= {a["ProcId"]: a for a in earlier}
        done = [ads[p] for p in sorted(ads) if ads[p].get("JobStatus") == status]
        if len(done) >= expect or time.monotonic() > deadline:
            return done
        time.sleep(1)


def test_environment_and_signals_come_home_as_htcondor_reports_them(
    workspace: Path, state_dir: Path, at_site: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dir = _job_dir(workspace, "env", ENV_JOB)
    for name, value in FROM_GETENV.items():
        monkeypatch.setenv(name, value)
    env_cluster = submit_items(env_dir, [{}], environment=v2_environment(TRICKY),
                          getenv="LJ_GOT_*", transfer_output_files="env.bin")  # fmt: skip
    sig_dir = _job_dir(workspace, "signals", SIGNAL_JOB)
    ends = [*SIGNALS, "exit143", "exit0"]
    sig_cluster = submit_items(sig_dir, [{"end": e} for e in ends], arguments="$(Process) $(end)")

    dirs_dir = _job_dir(workspace, "dirs", DIRS_JOB)
    for path in TREE:
        if path.endswith("/"):
            (dirs_dir / path).mkdir(parents=True, exist_ok=True)
        else:
            (dirs_dir / path).write_text(path)
    chown_tree(dirs_dir)
    dirs_cluster = submit_items(dirs_dir, [{}], transfer_input_files=DIR_INPUTS)

    remap_dir = _job_dir(workspace, "remap", REMAP_JOB)
    remap_cluster = submit_items(
        remap_dir, [{}], transfer_output_remaps='"res.txt = missing/res.txt"'
    )

    name = f"as-home-{env_cluster}"
    clusters = [str(c) for c in (env_cluster, sig_cluster, dirs_cluster, remap_cluster)]
    lumberjack("export", "--ids", *clusters, "--site", "testbed",
               "--nodes", "1", "--walltime", "15m", "--name", name)  # fmt: skip
    at_site.append(name)
    sync_until_imported(name)

    # Every value byte for byte, the getenv ones included, as the starter sets them at home.
    (done,) = finished(env_cluster, ["JobStatus", "ExitCode"], expect=1)
    assert (done["JobStatus"], done["ExitCode"]) == (4, 0), done
    seen = dict(
        item.split(b"=", 1) for item in (env_dir / "env.bin").read_bytes().split(b"\0") if item
    )
    for var, value in {**TRICKY, **FROM_GETENV}.items():
        assert seen.get(var.encode()) == value.encode(), (var, seen.get(var.encode()))
    # The starter's own variables reach the job too (lost with the first bad value before).
    assert seen.get(b"_CONDOR_JOB_AD") is not None, sorted(seen)

    # Killed by a signal: killed by that signal, as the starter reports it at home; an
    # exit with 128+N stays an exit.
    ads = finished(sig_cluster, ["JobStatus", "ExitBySignal", "ExitSignal", "ExitCode"], len(ends))
    log = (sig_dir / "job.log").read_text()
    for ad, end in zip(ads, ends):
        job = f"({sig_cluster:03d}.{ad['ProcId']:03d}.000)"
        terminated = log[log.index(f"005 {job}") :].split("...", 1)[0]
        assert ad["JobStatus"] == 4, ad
        if end in SIGNALS:
            assert ad["ExitBySignal"] is True and ad["ExitSignal"] == SIGNALS[end], (end, ad)
            assert f"Abnormal termination (signal {SIGNALS[end]})" in terminated, terminated
        else:
            code = int(end.removeprefix("exit"))
            assert ad["ExitBySignal"] is False and ad["ExitCode"] == code, (end, ad)
            assert f"Normal termination (return value {code})" in terminated, terminated
        assert (sig_dir / f"out.{ad['ProcId']}").read_text() == (
            f"job {ad['ProcId']} about to end with {end}\n"
        )

    # Directory inputs: the same sandbox as at home, empty directories and all.
    (dirs_done,) = finished(dirs_cluster, ["ExitCode"], 1)
    assert dirs_done["ExitCode"] == 0, dirs_done
    made = set((dirs_dir / "out.0").read_text().split())
    assert made == sandbox_paths(dirs_dir, DIR_INPUTS), made

    # An output remapped into a missing directory: HTCondor 25's shadow makes the
    # directory (the conformance suite's reference pool shows it), and so does import.
    (done,) = finished(remap_cluster, ["NumJobCompletions"], 1, status=4)
    assert done.get("NumJobCompletions") == 1, done
    assert (remap_dir / "missing" / "res.txt").read_text() == "result\n"
