"""Root exports and ships for a submitter who plants things in her paths: root never
creates, chmods, chowns or opens by path inside a directory she can write, never follows
`--out`, and reads her bundle's files only as regular files, without blocking, bounded.

The race the review found (a link planted at bundles/<name>/native between root's
handing the bundle over and root's making native/) is checked by construction: export
runs under strace, and no process of root's euid touches a path inside the bundle.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import testbed
from journey import (
    SITE_BASE,
    last_json,
    lumberjack,
    make_job_dir,
    query,
    site_path,
    site_run,
    submit,
)

from lumberjack.core.crashpoints import ENV

pytestmark = pytest.mark.integration

#: Syscalls that create, change or open by path, and those that change who acts.
PATH_CALLS = ("chown", "lchown", "fchownat", "chmod", "fchmodat", "mkdir", "mkdirat",
              "open", "openat", "rename", "renameat", "renameat2", "unlink", "unlinkat",
              "rmdir", "symlink", "symlinkat", "link", "linkat")  # fmt: skip
ID_CALLS = ("setuid", "setresuid", "setreuid")
LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)$")


def managed(cluster: int) -> list[object]:
    return [a.get("Managed") for a in query(f"ClusterId == {cluster}", ["Managed"])]


def root_path_calls(trace: Path, inside: Path) -> list[str]:
    """The calls in an strace -f log made with euid 0 on a path inside `inside` (by
    name from the current directory or /, not through a directory's descriptor)."""
    euid: dict[str, int] = {}
    found = []
    prefix = f'"{inside}/'
    for line in trace.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if not match:
            continue
        pid, call, args = match.groups()
        numbers = [int(n) for n in re.findall(r"-?\d+", args.split(")")[0])]
        if call == "setuid" and numbers:
            euid[pid] = numbers[0]
        elif call in ("setresuid", "setreuid") and len(numbers) > 1 and numbers[1] != -1:
            euid[pid] = numbers[1]
        elif call in PATH_CALLS and euid.get(pid, 0) == 0:
            by_name = args.startswith(prefix) or args.startswith(f"AT_FDCWD, {prefix}")
            if by_name:
                found.append(line)
    return found


def test_export_as_root_acts_by_path_nowhere_inside_the_bundle(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    """What root did by path inside bundles/<name>/ (made, chmod'ed and chown'ed native/
    after the owner had the bundle; hashed the manifest) is done through descriptors
    before the handover, or by the owner's child: a link planted there reaches nothing."""
    cluster = submit(make_job_dir(workspace), 1)
    name = f"bypath-{uuid.uuid4().hex[:6]}"
    trace = workspace.parent / f"{name}.strace"
    calls = ",".join((*PATH_CALLS, *ID_CALLS))
    command = ["strace", "-f", "-qq", "-s", "4096", "-e", f"trace={calls}", "-e",
               "signal=none", "-o", str(trace), sys.executable, "-m", "lumberjack", "export",
               "--ids", str(cluster), "--site", "testbed", "--name", name]  # fmt: skip
    at_site.append(name)
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    try:
        assert result.returncode == 0, result.stderr
        bundle = state_dir / "bundles" / name
        assert (bundle / "native" / "job_queue.log").is_file()
        assert os.lstat(bundle / "native").st_uid == testbed.SUBMITTER_UID
        assert root_path_calls(trace, bundle) == []
    finally:
        trace.unlink(missing_ok=True)
        lumberjack("unexport", name, check=False)


def test_out_a_link_to_a_root_directory_is_refused_and_left_alone(
    workspace: Path, state_dir: Path
) -> None:
    """`export --out DIR` with DIR alice's link to an empty root directory: one line,
    non-zero, no job leaves the queue, the directory stays root's and empty."""
    cluster = submit(make_job_dir(workspace), 1)
    target = workspace.parent / f"root-empty-{uuid.uuid4().hex[:6]}"
    target.mkdir(mode=0o755)
    link = workspace / "out"
    link.symlink_to(target)
    os.lchown(link, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    try:
        result = lumberjack("export", "--ids", str(cluster), "--out", str(link),
                            "--remote-spool", "/site/spool", check=False)  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"error: export directory {link} is a symbolic link; give a real directory"
        ]
        info = os.lstat(target)
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 0, 0o755)
        assert list(target.iterdir()) == []
        assert managed(cluster) == [None]
        assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []
    finally:
        for entry in json.loads(lumberjack("exports", "--json").stdout)["exports"]:
            lumberjack("unexport", entry["name"], check=False)  # what a failure left
        shutil.rmtree(target)


def _ship_capped(name: str) -> subprocess.CompletedProcess[str]:
    """`ship` as root with 2 GB of address space, killed after 120 s (the code this
    replaces hung on a FIFO and grew without bound on /dev/zero)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-m", "lumberjack", "ship", name],
                          capture_output=True, text=True, env=os.environ,
                          preexec_fn=cap, timeout=120)  # fmt: skip


@pytest.mark.parametrize("swap", ["a FIFO", "a link to /dev/zero"])
def test_ship_refuses_a_manifest_swapped_for_something_unbounded(
    workspace: Path, state_dir: Path, at_site: list, swap: str
) -> None:
    cluster = submit(make_job_dir(workspace), 1)
    name = f"manifest-{uuid.uuid4().hex[:6]}"
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", name)
    at_site.append(name)
    manifest = state_dir / "bundles" / name / "manifest.json"
    manifest.unlink()
    if swap == "a FIFO":
        os.mkfifo(manifest, 0o600)
    else:
        manifest.symlink_to("/dev/zero")
    os.lchown(manifest, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    try:
        result = _ship_capped(name)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "manifest" in lines[0], lines
        remote = site_path(f"{SITE_BASE}/{name}")
        assert not remote.exists() or [p for p in remote.rglob("*") if p.is_file()] == []
        assert last_json(lumberjack("exports", "--json"))["exports"][0]["phase"] == "exported"
    finally:
        lumberjack("unexport", name, check=False)


def test_sync_exports_a_lease_opt_in_acting_by_path_nowhere_inside_the_bundle(
    workspace: Path, state_dir: Path
) -> None:
    """cron's path: `sync` exports jobs opted into a lease (+LumberjackLease) under a
    predictable name; under strace, root acts by path nowhere inside that bundle. The
    lease dies before it starts anything at the site (lease.after-dir) and `sync` right
    after the export (export.after-manifest): nothing runs anywhere."""
    lease = f"bypath-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    create = ["lease", "create", lease, "--site", "testbed", "--nodes", "1", "--walltime",
              "10m", "--owner", testbed.SUBMITTER, "--json"]  # fmt: skip
    subprocess.run([sys.executable, "-m", "lumberjack", *create], capture_output=True,
                   text=True, env={**env, ENV: "lease.after-dir"}, timeout=300)  # fmt: skip
    trace = workspace.parent / f"{lease}.strace"
    try:
        cluster = submit(make_job_dir(workspace), 1, **{"MY.LumberjackLease": f'"{lease}"'})
        calls = ",".join((*PATH_CALLS, *ID_CALLS))
        command = ["strace", "-f", "-qq", "-s", "4096", "-e", f"trace={calls}", "-e",
                   "signal=none", "-o", str(trace), sys.executable, "-m", "lumberjack",
                   "sync", "--json"]  # fmt: skip
        subprocess.run(command, capture_output=True, text=True, timeout=300,
                       env={**env, ENV: "export.after-manifest"})  # fmt: skip
        exports = json.loads(lumberjack("exports", "--json").stdout)["exports"]
        assert [(e["phase"], e["jobs"]) for e in exports] == [("exporting", [f"{cluster}.0"])]
        bundle = state_dir / "bundles" / exports[0]["name"]
        assert (bundle / "manifest.json").is_file()
        assert root_path_calls(trace, bundle) == []
    finally:
        trace.unlink(missing_ok=True)
        for entry in json.loads(lumberjack("exports", "--json").stdout)["exports"]:
            lumberjack("unexport", entry["name"], check=False)
        site_run(f"rm -rf {SITE_BASE}/lease-{lease}", check=False)
