"""The MiniCondor image of the docker tier: which one, and building it here.

LUMBERJACK_MINICONDOR_IMAGE names the image the tier runs (for instance
`htcondor/mini:<version>` where a registry is reachable; pulled if missing). Unset, the
tier builds its own from Debian sid's `minicondor` package without any registry: a copy
of the testbed's rootfs prepared by prepare-rootfs.sh, imported with `docker import`.
Both the copy and the image are named by a hash of their recipe, so a changed recipe
builds anew and an unchanged one is reused.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "testbed"))

import testbed  # noqa: E402

IMAGE_VARIABLE = "LUMBERJACK_MINICONDOR_IMAGE"
RECIPE_FILES = ("prepare-rootfs.sh",)
LOCAL_REPOSITORY = "condor-lumberjack/minicondor"


def log(message: str) -> None:
    """The Docker tier's progress line (engine.py uses it too: it imports this module)."""
    print(f"[docker-tier] {message}", file=sys.stderr, flush=True)


def recipe_hash() -> str:
    return testbed.recipe_hash() + "-" + testbed.recipe_hash(HERE, RECIPE_FILES)


def image_name() -> str:
    return os.environ.get(IMAGE_VARIABLE) or f"{LOCAL_REPOSITORY}:{recipe_hash()}"


def ensure_rootfs() -> Path:
    """The image's own tree: a prepared copy of the testbed rootfs, built once."""
    rootfs = testbed.cache_dir() / f"minicondor-rootfs-{recipe_hash()}"
    if rootfs.is_dir():
        return rootfs
    source = testbed.ensure_rootfs()
    with open(testbed.cache_dir() / "minicondor-rootfs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if rootfs.is_dir():  # built by whoever held the lock before us
            return rootfs
        started = time.monotonic()
        work = rootfs.with_name(rootfs.name + ".partial")
        subprocess.run(["rm", "-rf", str(work)], check=True)
        subprocess.run(["cp", "-a", "--one-file-system", str(source), str(work)], check=True)
        subprocess.run([str(HERE / "prepare-rootfs.sh"), str(work)], check=True)
        work.rename(rootfs)
        log(f"prepared the MiniCondor rootfs {rootfs} in {time.monotonic() - started:.1f} s")
    return rootfs


def image_exists(name: str) -> bool:
    result = subprocess.run(["docker", "image", "inspect", name], capture_output=True)
    return result.returncode == 0


def ensure_image() -> str:
    """The tier's image in the running engine: pulled (a named one) or built (ours)."""
    name = image_name()
    if image_exists(name):
        return name
    started = time.monotonic()
    if os.environ.get(IMAGE_VARIABLE):
        subprocess.run(["docker", "pull", name], check=True)
        log(f"pulled {name} in {time.monotonic() - started:.1f} s")
        return name
    rootfs = ensure_rootfs()
    tar = subprocess.Popen(
        ["tar", "--one-file-system", "--numeric-owner", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
    )
    versions = (rootfs / "etc/lumberjack-minicondor-versions").read_text().split()
    subprocess.run(
        ["docker", "import", "-c", 'CMD ["condor_master", "-f"]',
         "-c", f"LABEL org.htcondor.version={versions[1]}", "-", name],
        stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    tar.stdout.close()
    if tar.wait() != 0:
        raise RuntimeError(f"tar of {rootfs} failed")
    log(f"built {name} ({' '.join(versions)}) in {time.monotonic() - started:.1f} s")
    return name
