"""The prototype's journey in containers: jobs submitted at an access point, exported
into an offline bundle for a MiniCondor's SPOOL, run there, and imported back.

The access point and the MiniCondor are the two services of
containers/minicondor/compose.yaml. condor_lumberjack runs on the host, a client of the
access point's schedd (loopback, an IDTOKEN of the submitter), the way it runs beside
a schedd it does not share a filesystem root with: the job directories and the bundle
are bind-mounted into the access point at the same path.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed
import yaml
from journey import expected_outputs, fetch_back, history, make_job_dir, query, tree
from site_spool import install_spool, remote_iwds_from_manifest

from .docker_tier import COMPOSE_FILE, MINI_SPOOL, Pools, Tier, addresses, new_private

pytestmark = pytest.mark.docker

EXIT_CODES = [0, 0, 3]
SUBMIT_FILE = """\
executable = run.sh
arguments = $(Process) $(code)
transfer_input_files = in put.txt, sub/data.txt
should_transfer_files = YES
output = out.$(Process)
error = err.$(Process)
log = job.log
transfer_output_remaps = "renamed.txt = results/renamed-$(Process).txt"
request_memory = 64
request_disk = 1024
queue code from (
{codes}
)
"""


def service_env(service: str) -> dict[str, str]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"][service]["environment"]


def write_client_config(pools: Pools, work: Path) -> Path:
    """A host-side client of the access point's pool, authenticated as the submitter."""
    ap = service_env("ap")
    tokens = work / "client-tokens"
    tokens.mkdir(mode=0o700)
    identity = f"{testbed.SUBMITTER}@{testbed.UID_DOMAIN}"
    token = pools.exec("ap", "condor_token_create", "-identity", identity)
    fd = os.open(tokens / testbed.SUBMITTER, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    config = work / "client_config"
    config.write_text(
        f"COLLECTOR_HOST = 127.0.0.1:{ap['_CONDOR_LJ_PORT']}\n"
        f"SCHEDD_HOST = {ap['_CONDOR_LJ_NAME']}@{testbed.UID_DOMAIN}\n"
        "SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
        f"SEC_TOKEN_DIRECTORY = {tokens}\n"
        "SEC_CLIENT_INTEGRITY = REQUIRED\n"
        "ENABLE_IPV6 = FALSE\n"
    )
    return config


def submit_in_container(pools: Pools, job_dir: Path) -> int:
    """condor_submit at the access point, as the submitter (root cannot own jobs)."""
    (job_dir / "job.sub").write_text(SUBMIT_FILE.format(codes="\n".join(map(str, EXIT_CODES))))
    out = pools.exec(
        "ap", "condor_submit", "-terse", "job.sub", user=testbed.SUBMITTER, workdir=str(job_dir)
    )
    first, _, last = out.split()  # -terse: "C.0 - C.2"
    cluster = int(first.split(".")[0])
    assert (first, last) == (f"{cluster}.0", f"{cluster}.{len(EXIT_CODES) - 1}"), out
    return cluster


def ids_of(pools: Pools, service: str, account: str) -> tuple[int, int]:
    uid = pools.exec(service, "id", "-u", account)
    gid = pools.exec(service, "id", "-g", account)
    return int(uid), int(gid)


def wait_all_completed(pools: Pools, count: int, timeout: float = 300) -> None:
    import time

    deadline = time.monotonic() + timeout
    while True:
        statuses = pools.exec("mini", "condor_q", "-allusers", "-af", "JobStatus").split()
        if len(statuses) == count and all(s == "4" for s in statuses):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs did not finish in the MiniCondor: {statuses}")
        time.sleep(1)


def attr(ads: dict[str, dict[str, str]], cluster: int, proc: int, name: str) -> str | None:
    """A proc's attribute as the log holds it, else its cluster's (`inspect --json`)."""
    for key in (f"{cluster}.{proc}", f"0{cluster}.-1"):
        if name in ads.get(key, {}):
            return ads[key][name]
    return None


def lumberjack_json(*args: str) -> dict:
    from journey import lumberjack

    return json.loads(lumberjack(*args, "--json").stdout.strip().splitlines()[-1])


@pytest.fixture
def ap_client(tier: Tier, pools: Pools) -> Iterator[None]:
    """This process and the CLI it runs: clients of the access point's pool."""
    import htcondor2

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONDOR_CONFIG", str(write_client_config(pools, tier.work)))
        patch.setenv("LUMBERJACK_STATE_DIR", str(testbed.root_state_dir(tier.work.name)))
        htcondor2.reload_config()
        yield
    htcondor2.reload_config()


def test_export_run_in_minicondor_import(tier: Tier, pools: Pools, ap_client: None) -> None:
    assert new_private(tier.addresses_before, addresses()) == set()
    work = tier.work

    job_dir = make_job_dir(work)
    cluster = submit_in_container(pools, job_dir)
    procs = range(len(EXIT_CODES))
    assert [a["JobStatus"] for a in query(f"ClusterId == {cluster}", ["JobStatus"])] == [1] * 3
    before = tree(job_dir)

    bundle = work / "bundle"
    exported = lumberjack_json(
        "export", "-ids", str(cluster), "-out", str(bundle), "-remotespool", MINI_SPOOL,
        "--name", "docker-journey",
    )  # fmt: skip
    assert exported["jobs"] == [f"{cluster}.{p}" for p in procs]

    # The access point's own queue log says the jobs are managed elsewhere now.
    pools.compose("cp", "ap:/var/lib/condor/spool/job_queue.log", str(work / "ap-queue.log"))
    ap_ads = lumberjack_json("inspect", str(work / "ap-queue.log"))["ads"]
    assert [attr(ap_ads, cluster, p, "Managed") for p in procs] == ['"External"'] * 3

    # The bundle's spool becomes the MiniCondor's SPOOL (bind-mounted), which runs it.
    schedd_ids = ids_of(pools, "mini", "condor")
    job_ids = ids_of(pools, "mini", testbed.SUBMITTER)
    pools.compose("stop", "mini")
    for item in tier.mini_spool.iterdir():
        shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()
    mini_iwds = remote_iwds_from_manifest(bundle / "manifest.json")
    assert all(iwd.startswith(MINI_SPOOL + "/") for iwd in mini_iwds)
    install_spool(
        bundle / "spool",
        tier.mini_spool,
        [str(tier.mini_spool / Path(iwd).relative_to(MINI_SPOOL)) for iwd in mini_iwds],
        schedd_ids=schedd_ids,
        job_ids=job_ids,
    )
    pools.compose("up", "--wait", "--no-recreate", "mini")
    wait_all_completed(pools, len(EXIT_CODES))
    assert new_private(tier.addresses_before, addresses()) == set()
    pools.compose("stop", "mini")  # the schedd writes its queue log out and lets go

    # What the MiniCondor's schedd wrote, read without any schedd.
    mini_ads = lumberjack_json("inspect", str(tier.mini_spool / "job_queue.log"))["ads"]
    assert [attr(mini_ads, cluster, p, "JobStatus") for p in procs] == ["4"] * 3
    assert [attr(mini_ads, cluster, p, "ExitCode") for p in procs] == list(map(str, EXIT_CODES))
    assert {attr(mini_ads, cluster, p, "Owner") for p in procs} == {f'"{testbed.SUBMITTER}"'}
    assert [attr(mini_ads, cluster, p, "Iwd") for p in procs] == [f'"{i}"' for i in mini_iwds]

    fetch_back(tier.mini_spool, bundle)
    imported = lumberjack_json("import", "-in", str(bundle))
    assert imported["completed"] == 3

    ads = history(cluster, ["ProcId", "JobStatus", "ExitCode", "Managed", "Out", "Iwd"], expect=3)
    assert [a["ExitCode"] for a in ads] == EXIT_CODES
    assert all(a["JobStatus"] == 4 and "Managed" not in a for a in ads)
    assert all(a["Out"] == f"out.{a['ProcId']}" and a["Iwd"] == str(job_dir) for a in ads)
    assert query(f"ClusterId == {cluster}", ["ProcId"]) == []

    after = tree(job_dir)
    expected = expected_outputs(job_dir, procs)
    assert {name for name in after if name not in before} == set(expected)
    assert {name: after[name] for name in expected} == expected
    assert after["job.log"].startswith(before["job.log"])
    assert after["job.log"].count(b"Job terminated") == 3
    assert all(after[name] == before[name] for name in before if name != "job.log")
    assert os.stat(job_dir / "out.0").st_uid == testbed.SUBMITTER_UID
