"""Where a job's container image lives at the site: once per content hash, per export.

Export ships each local .sif a job names (`container_image`, `+SingularityImage`) as
`{remote SPOOL}/lumberjack-images/<sha256>.sif`, however many jobs or paths name it, and
points the jobs' ads there; the pilots' startds run a job in the image it names only
when the name has exactly this shape under their own export's spool (see
lumberjack/site/job_container.py). Both sides read the shape from here.

Stdlib only: used on the access point and at the site.
"""

from __future__ import annotations

import re

IMAGES_DIRNAME = "lumberjack-images"
IMAGE_SUFFIX = ".sif"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def is_digest(text: str) -> bool:
    """Whether `text` is a sha256 in lower-case hex (the name of a shipped image)."""
    return bool(_DIGEST.match(text))


def images_dir(remote_spool: str) -> str:
    """The export's images directory at the site."""
    return remote_spool.rstrip("/") + "/" + IMAGES_DIRNAME


def image_path(remote_spool: str, digest: str) -> str:
    """The site's path of the image whose content hashes to `digest`."""
    if not is_digest(digest):
        raise ValueError(f"not a sha256 digest: {digest[:80]!r}")
    return f"{images_dir(remote_spool)}/{digest}{IMAGE_SUFFIX}"


#: What a shipped image's file name matches (a regexp without backslashes: HTCondor's
#: config reads ClassAd strings in its old syntax, where a backslash is no escape).
IMAGE_NAME_REGEX = "^[0-9a-f]{64}[.]sif$"
