"""Export rewrites each job once: the bundle reuses the plan's rewrite of a job whose
exported ad reads as the queried one did, and gives the same bundle as rewriting it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lumberjack.ap import export
from lumberjack.ap.pathmap import rewrite_job
from lumberjack.ap.schedd import JOB_PROJECTION, JobAd
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.classad_text import quote_string, unquote_string

SPOOL = "/remote/spool"
CLUSTER = 7


def q(text: str) -> str:
    return quote_string(text)


def cluster_attrs(iwd: Path) -> dict[str, str]:
    return {
        "ClusterId": str(CLUSTER), "Owner": q("alice"), "Cmd": q(f"{iwd}/run.sh"),
        "Iwd": q(str(iwd)), "UserLog": q("job.log"), "TransferInput": q("in.txt,sub/"),
        "ShouldTransferFiles": q("IF_NEEDED"), "JobUniverse": "5", "Requirements": "true",
        "TransferOutputRemaps": q("a.txt = results/a.txt"), "DAGManNodesLog": q("dag.nodes.log"),
    }  # fmt: skip


def proc_attrs(proc: int) -> dict[str, str]:
    """A proc ad as the schedd's export writes it: the Iwd pointed at its spool."""
    return {
        "ProcId": str(proc), "JobStatus": "1", "Out": q(f"out.{proc}"), "err": q(f"err.{proc}"),
        "Iwd": q(f"{SPOOL}/{CLUSTER}/{proc}/cluster{CLUSTER}.proc{proc}.subproc0"),
    }  # fmt: skip


def queried(cluster: dict[str, str], proc: dict[str, str], iwd: Path) -> JobAd:
    """The job as the plan's query gave it: one flat ad, the local Iwd."""
    job = JobAd(ClusterId=CLUSTER, ProcId=int(proc["ProcId"]), Iwd=str(iwd))
    job.texts = {**cluster, **{k: v for k, v in proc.items() if k != "Iwd"}}
    return job


class Export:
    def __init__(self, tmp: Path, procs: int = 3) -> None:
        self.tmp = tmp
        self.iwd = tmp / "home"
        (self.iwd / "sub").mkdir(parents=True)
        for name in ("run.sh", "in.txt", "sub/x"):
            (self.iwd / name).write_text(name)
        ckey = jql.cluster_key(CLUSTER)
        self.cluster = cluster_attrs(self.iwd)
        self.ads = {
            "0.0": jql.Ad("0.0", "(empty)", "(empty)", {"NextClusterNum": "8"}),
            ckey: jql.Ad(ckey, "Job", "Machine", dict(self.cluster)),
        }
        for proc in range(procs):
            key = f"{CLUSTER}.{proc}"
            self.ads[key] = jql.Ad(key, "Job", "Machine", proc_attrs(proc))
        self.jobs = [queried(self.cluster, ad.attrs, self.iwd) for k, ad in self.procs()]

    def procs(self) -> list[tuple[str, jql.Ad]]:
        return [(k, ad) for k, ad in self.ads.items() if jql.key_kind(k) == "proc"]

    def rewrites(self) -> dict[str, export.PlannedRewrite]:
        out = {}
        for job in self.jobs:
            rewrite = rewrite_job(job["ClusterId"], job["ProcId"], job.texts, {}, SPOOL)
            planned = export.planned_rewrite(job, rewrite)
            if planned is not None:
                out[f"{job['ClusterId']}.{job['ProcId']}"] = planned
        return out

    def bundle(self, name: str, rewrites: dict | None) -> tuple[bytes, dict]:
        bundle = self.tmp / name
        (bundle / "native").mkdir(parents=True)
        jqlw.write_log(bundle / "native" / "job_queue.log", self.ads, timestamp=1)
        ids = [k for k, _ in self.procs()]
        plan = export.Plan(name, "alice", [CLUSTER], ids, bundle, SPOOL, 0, 0)
        iwds = dict.fromkeys(ids, str(self.iwd))
        manifest = export.write_bundle(
            plan, bundle / "native" / "job_queue.log", iwds, site=None, rewrites=rewrites
        )
        log = (bundle / "spool" / "job_queue.log").read_bytes()
        # the log's own creation time aside
        return log.split(b"\n", 1)[1], json.loads(json.dumps(manifest.path_map))


@pytest.fixture
def world(tmp_path: Path) -> Export:
    return Export(tmp_path)


def test_the_plan_reads_every_attribute_the_rewrite_reads() -> None:
    assert set(export.PATH_MAP_ATTRS) <= set(JOB_PROJECTION)


def test_rewrite_reads_nothing_but_the_path_map_attributes(world: Export) -> None:
    """A job's rewrite is the same with its other attributes gone: comparing these is
    enough to know the plan's rewrite holds for the exported ad."""
    kept = {a.lower() for a in export.PATH_MAP_ATTRS}
    for key, ad in world.procs():
        proc = jql.parse_key(key).proc
        full = rewrite_job(CLUSTER, proc, world.cluster, ad.attrs, SPOOL, local_iwd=str(world.iwd))
        only = rewrite_job(
            CLUSTER, proc,
            {k: v for k, v in world.cluster.items() if k.lower() in kept},
            {k: v for k, v in ad.attrs.items() if k.lower() in kept},
            SPOOL, local_iwd=str(world.iwd),
        )  # fmt: skip
        assert (full.proc_overrides, full.paths, full.inputs) == (
            only.proc_overrides, only.paths, only.inputs,
        )  # fmt: skip


def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs write_bundle rewrites itself."""
    calls: list[str] = []

    def counting(cluster: int, proc: int, *args, **kwargs):
        calls.append(f"{cluster}.{proc}")
        return rewrite_job(cluster, proc, *args, **kwargs)

    monkeypatch.setattr(export, "rewrite_job", counting)
    return calls


def test_reused_rewrite_gives_the_bundle_a_second_rewrite_gives(
    world: Export, monkeypatch: pytest.MonkeyPatch
) -> None:
    rewrites = world.rewrites()
    assert set(rewrites) == {"7.0", "7.1", "7.2"}
    expected = world.bundle("rewritten", None)
    calls = counted(monkeypatch)
    assert world.bundle("reused", rewrites) == expected
    assert calls == []


def test_job_whose_exported_ad_differs_is_rewritten(
    world: Export, monkeypatch: pytest.MonkeyPatch
) -> None:
    rewrites = world.rewrites()
    world.ads["7.1"].set("TransferInput", q("in.txt"))  # what the schedd exported
    calls = counted(monkeypatch)
    log, path_map = world.bundle("changed", rewrites)
    assert calls == ["7.1"]
    assert log == world.bundle("rewritten", None)[0]
    ads = jql.replay(jql.parse_records(log.decode()))
    assert unquote_string(ads["7.1"].get("TransferInput")).count(",") == 0
    assert unquote_string(ads["7.0"].get("TransferInput")).count(",") == 1
    assert path_map["jobs"]["7.1"]["input_names"] == ["in.txt"]


def test_job_whose_local_iwd_differs_is_rewritten(world: Export) -> None:
    rewrites = world.rewrites()
    other = world.tmp / "elsewhere"
    rewrites["7.2"] = export.PlannedRewrite(str(other), rewrites["7.2"].texts,
                                            rewrites["7.2"].rewrite)  # fmt: skip
    assert world.bundle("iwd", rewrites) == world.bundle("rewritten", None)


def test_job_with_a_container_image_is_not_reused(world: Export) -> None:
    job = world.jobs[0]
    job.texts["ContainerImage"] = q(f"{world.iwd}/image.sif")
    rewrite = rewrite_job(CLUSTER, 0, job.texts, {}, SPOOL)
    assert export.planned_rewrite(job, rewrite) is None
