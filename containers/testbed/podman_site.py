"""The site image for podman-hpc, built on this machine with Debian's podman (the engine
podman-hpc wraps) by `condor_lumberjack sites image build --runtime podman-hpc`, from a
debootstrapped sid base (no registry is reachable). Built once per recipe and cached in
podman storage of its own under the testbed's cache directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import testbed

from lumberjack.ap.site_image import recipe_hash

PODMAN_DIR = testbed.cache_dir() / "podman"
BASE_SCRIPT = testbed.SITE_IMAGE_DIR / "podman-base.sh"
IMAGE_NAME = "localhost/lumberjack-site"

# vfs storage (overlay on overlay fails in these VMs), runc (crun refuses hybrid
# cgroups), no systemd: cgroupfs and a file for events. Builds use the host's network
# (apt inside RUN); no podman network is ever created.
_STORAGE = """[storage]
driver = "vfs"
graphroot = "{root}/storage"
runroot = "{root}/run"
"""
_CONTAINERS = """[containers]
netns = "host"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
"""


def podman_env() -> dict[str, str]:
    """The environment every podman command here runs with: this cache's own storage."""
    PODMAN_DIR.mkdir(parents=True, exist_ok=True)
    storage = PODMAN_DIR / "storage.conf"
    storage.write_text(_STORAGE.format(root=PODMAN_DIR))
    containers = PODMAN_DIR / "containers.conf"
    containers.write_text(_CONTAINERS)
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(storage),
            "CONTAINERS_CONF": str(containers)}  # fmt: skip


def why_not() -> Optional[str]:
    """Why podman cannot build here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "podman builds run rootful here (vfs storage); run the tests as root"
    if not shutil.which("podman"):
        return "podman is not installed (Debian: apt-get install podman)"
    if not shutil.which("debootstrap"):
        return "debootstrap is not installed (the base image is made without a registry)"
    probe = subprocess.run(["podman", "info"], env=podman_env(), capture_output=True, text=True)
    if probe.returncode != 0:
        return f"podman does not run here: {(probe.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=podman_env(), capture_output=True,
                          text=True, check=check)  # fmt: skip


def _exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def ensure_base() -> str:
    """The sid base image, made once per version of podman-base.sh."""
    digest = testbed.recipe_hash(BASE_SCRIPT.parent, (BASE_SCRIPT.name,))
    tag = f"localhost/lumberjack-sid-base:{digest}"
    if not _exists(tag):
        testbed.log(f"making the podman base image {tag} (debootstrap; about a minute, once)")
        subprocess.run([str(BASE_SCRIPT), tag], env=podman_env(), check=True)
    return tag


def ensure_image(cli: Path, workdir: Path) -> tuple[str, Optional[dict]]:
    """The site image tagged with its recipe's hash, built through the CLI unless cached:
    (tag, the CLI's --json answer, None when cached)."""
    import json

    tag = f"{IMAGE_NAME}:{recipe_hash()}"
    if _exists(tag):
        return tag, None
    base = ensure_base()
    testbed.log(f"building {tag} with podman (a few minutes, once)")
    done = subprocess.run(
        [str(cli), "sites", "image", "build", "--runtime", "podman-hpc", "--engine", "podman",
         "--base", base, "--output", str(workdir), "--json"],
        env=podman_env(), capture_output=True, text=True,
    )  # fmt: skip
    answer = json.loads(done.stdout)
    assert done.returncode == 0, (answer, (workdir / "build.log").read_text()[-3000:])
    podman("tag", answer["target"], tag)
    return tag, answer
