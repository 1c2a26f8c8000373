"""Container images a job names by local path: which ship, and how.

ContainerImage and SingularityImage ship when they are local paths (not URLs, not
``docker:``; not under what the site provides itself, like ``/cvmfs/``; ContainerImage
also not when TransferContainer is false). Given an ``image_digest`` (export, reading as
the owner), an image file goes to ``{remote_spool}/lumberjack-images/<sha256>.sif``
instead of the inputs mirror, once per content however many jobs or paths name it
(lumberjack/core/images.py): the startd runs the job in the shipped copy and nothing is
copied per job. A sandbox directory (``dir/``) is mirrored like any input.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Optional

from lumberjack.ap.job_attrs import (
    CONTAINER_IMAGE,
    CONTAINER_IMAGE_FULL_PATH,
    SINGULARITY_IMAGE,
    TRANSFER_CONTAINER,
)
from lumberjack.ap.proc_rewriter import ProcRewriter

# Paths the site provides itself; an image there is used in place, never shipped.
SITE_PROVIDED_PREFIXES = ("/cvmfs/",)


def local_images(rw: ProcRewriter, iwd: str) -> dict[str, str]:
    """{attribute: local path} of the container images to ship."""
    found = {}
    for name in (CONTAINER_IMAGE, SINGULARITY_IMAGE):
        value = rw.string(name)
        if not value or "://" in value or value.startswith("docker:"):
            continue
        if name == CONTAINER_IMAGE and not rw.flag(TRANSFER_CONTAINER, True):
            continue
        local = rw.resolve(value, iwd)
        if not any(local.startswith(p) for p in SITE_PROVIDED_PREFIXES):
            found[name] = local
    return found


def shipped_by_content(rw: ProcRewriter, images: dict[str, str]) -> set[str]:
    """The images shipped by content: all but sandbox directories ("dir/")."""
    return {local for name, local in images.items() if not (rw.string(name) or "").endswith("/")}


def rewrite_images(
    rw: ProcRewriter,
    images: dict[str, str],
    by_content: set[str],
    image_digest: Optional[Callable[[str], str]],
) -> None:
    """Point each image attribute at the image's place at the site, and ship it."""
    for name, local in images.items():
        if image_digest is not None and local in by_content:
            item = rw.add_image(local, image_digest(local))
        else:
            item = rw.add_input(local, is_dir=(rw.string(name) or "").endswith("/"))
            rw.input_names.append(posixpath.basename(item.local_path))
        rw.set_string(name, item.remote_path)
        # condor_submit also records the image's full local path; the site gets its own.
        if name == CONTAINER_IMAGE and rw.string(CONTAINER_IMAGE_FULL_PATH) is not None:
            rw.set_string(CONTAINER_IMAGE_FULL_PATH, item.remote_path)
