"""Jobs in their own container image at the site: a container-universe cluster and a
vanilla job with +SingularityImage name the same .sif (by two paths); it ships once, by
its sha256, every job runs inside it (its output carries the image's own marker), and
import gives the jobs back their own image attributes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import testbed
from journey import (
    chown_tree,
    history,
    last_json,
    lumberjack,
    site_path,
    site_run,
    submit,
    wait_finished,
)

from lumberjack.core.images import IMAGES_DIRNAME

pytestmark = pytest.mark.integration

JOB = """#!/bin/sh
# Runs inside the job's image: the marker exists only there (not in the site image).
echo "job $1 in image: $(cat /etc/lumberjack-test-image)"
"""
# What the tiny image holds, taken from the testbed's root filesystem (same glibc).
IMAGE_PROGRAMS = ("usr/bin/dash", "usr/bin/cat")
IMAGE_LIBS = ("lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2")


def build_image(where: Path, marker: str) -> Path:
    """A SIF of a few MB built from a local sandbox with the testbed's Apptainer (no
    registry): dash as /bin/sh, cat, glibc and a marker file."""
    rootfs = (testbed.testbed_dir() / "rootfs").resolve()
    sandbox = where / "sandbox"
    for relative in IMAGE_PROGRAMS + IMAGE_LIBS:
        target = sandbox / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(rootfs / relative, target, follow_symlinks=True)
    for directory in ("bin", "etc", "tmp", "srv", "proc", "dev", "sys", "home", "var/tmp"):
        (sandbox / directory).mkdir(parents=True, exist_ok=True)
    (sandbox / "bin" / "sh").symlink_to("/usr/bin/dash")
    (sandbox / "bin" / "cat").symlink_to("/usr/bin/cat")
    (sandbox / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (sandbox / "etc" / "group").write_text("root:x:0:\n")
    (sandbox / "etc" / "lumberjack-test-image").write_text(marker + "\n")
    sif = where / "app.sif"
    tmp = where / "build-tmp"
    tmp.mkdir()
    testbed.run_in_rootfs(
        rootfs, ["apptainer", "-s", "build", "--force", str(sif), str(sandbox)],
        binds=[str(where)], env={"APPTAINER_TMPDIR": str(tmp)},
    )  # fmt: skip
    shutil.rmtree(sandbox)
    shutil.rmtree(tmp)
    return sif


def why_idle(remote_dir: str) -> str:
    """The remote schedd's analysis of its jobs and the startds' logs (for a failure)."""
    pool = f"instance://lumberjack-{Path(remote_dir).name}"
    analysis = site_run(
        f"apptainer -s exec {pool} env CONDOR_CONFIG={remote_dir}/pool/condor_config "
        "condor_q -better-analyze -allusers 2>&1 | head -60; "
        f"apptainer -s exec {pool} env CONDOR_CONFIG={remote_dir}/pool/condor_config "
        "condor_q -better-analyze -reverse -allusers 2>&1 | head -80; "
        f"apptainer -s exec {pool} env CONDOR_CONFIG={remote_dir}/pool/condor_config "
        "condor_status -l 2>&1 | grep -iE '^(start|requirements|has[a-z]*|.*sif.*) ='",
        check=False,
    )
    logs = [
        f"{log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        for log in site_path(remote_dir).glob("pilots/nodes/*/log/Start*Log")
    ]
    return analysis + "\n".join(logs)


def test_jobs_run_in_their_image_shipped_once(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    job_dir = workspace / "images"
    job_dir.mkdir()
    marker = uuid.uuid4().hex
    sif = build_image(job_dir, marker)
    other = job_dir / "elsewhere" / "same.sif"  # the same image by another path
    other.parent.mkdir()
    shutil.copy2(sif, other)
    digest = hashlib.sha256(sif.read_bytes()).hexdigest()
    (job_dir / "img.sh").write_text(JOB)
    (job_dir / "img.sh").chmod(0o755)
    chown_tree(job_dir)
    common = {
        "executable": str(job_dir / "img.sh"), "arguments": "$(Process)",
        "transfer_input_files": "",
    }  # fmt: skip
    contained = submit(job_dir, 3, universe="container", container_image="app.sif", **common)
    vanilla = submit(
        job_dir, 1, output="vout.$(Process)", error="verr.$(Process)",
        **{"+SingularityImage": json.dumps(str(other))}, **common,
    )  # fmt: skip
    name = f"images-{uuid.uuid4().hex[:6]}"
    exported = last_json(lumberjack(
        "export", "--ids", str(contained), str(vanilla), "--site", "testbed", "--nodes", "1",
        "--walltime", "20m", "--name", name, "--json",
    ))  # fmt: skip
    at_site.append(name)

    # One copy in the bundle, named by its sha256; none in the inputs mirror.
    bundle = state_dir / "bundles" / name
    manifest = json.loads((bundle / "manifest.json").read_text())
    sifs = [f for f in manifest["files"] if f["path"].endswith(".sif")]
    assert [(f["path"], f["sha256"]) for f in sifs] == [(f"{IMAGES_DIRNAME}/{digest}.sif", digest)]
    assert sorted(p.name for p in (bundle / "spool" / IMAGES_DIRNAME).iterdir()) == [
        f"{digest}.sif"
    ]

    lumberjack("ship", name)
    lumberjack("launch", name)
    try:
        final = wait_finished(name, timeout=240, poll=3)
    except TimeoutError:
        print(why_idle(exported["remote_dir"]))
        raise
    assert final["jobs"] == {"completed": 4}, final
    images_at_site = site_path(exported["remote_dir"]) / "spool" / IMAGES_DIRNAME
    assert [p.name for p in images_at_site.iterdir()] == [f"{digest}.sif"]
    shipped = images_at_site / f"{digest}.sif"
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == digest

    lumberjack("fetch", name)
    imported = last_json(lumberjack("import", name, "--json"))
    assert imported["completed"] == 4
    outputs = [(job_dir / f"out.{p}").read_text() for p in range(3)]
    assert outputs == [f"job {p} in image: {marker}\n" for p in range(3)]
    assert (job_dir / "vout.0").read_text() == f"job 0 in image: {marker}\n"
    # The jobs' own attributes came home, not the site's (the image left TransferInput
    # at the site: it was never copied into a sandbox).
    ads = history(contained, ["ProcId", "ContainerImage", "TransferInput"], expect=3)
    assert {(a["ContainerImage"], a["TransferInput"]) for a in ads} == {("app.sif", "app.sif")}
    (ad,) = history(vanilla, ["ProcId", "SingularityImage"], expect=1)
    assert ad["SingularityImage"] == str(other)
    assert os.stat(job_dir / "out.0").st_uid == testbed.SUBMITTER_UID
