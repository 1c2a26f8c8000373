"""Where an exported job's files live at the site and in the bundle.

All under the site's SPOOL directory ``remote_spool``:

- ``{remote_spool}/{C}/{P}/clusterC.procP.subproc0``: the proc's Iwd (``proc_spool_dir``),
  where the remote schedd's shadow puts stdout, stderr, the output files and the user log.
- ``{remote_spool}/lumberjack-inputs/<absolute local path>``: every input file or directory,
  mirrored by its absolute local path. Basenames stay what they were (HTCondor puts a
  TransferInput entry into the sandbox under its basename; a directory keeps its name), and
  an executable shared by 10,000 procs is shipped once. In the bundle the same file lives at
  ``inputs/<absolute local path without the leading slash>``.
"""

from __future__ import annotations

import functools

from lumberjack.ap.path_text import CACHE_SIZE, norm_abs
from lumberjack.errors import BadInput

DEVNULL = "/dev/null"
INPUTS_DIRNAME = "lumberjack-inputs"
BUNDLE_INPUTS_DIR = "inputs"
# stdout and stderr are written under these relative names in the remote Iwd.
REMOTE_STDOUT = "_condor_stdout"
REMOTE_STDERR = "_condor_stderr"
# Every proc's user log at the site, whether or not the job had one (import replays it).
REMOTE_USERLOG_NAME = "lumberjack-user.log"
# Names lumberjack itself creates in a remote Iwd start with this; never outputs.
RESERVED_PREFIX = "lumberjack-"


def norm_spool(remote_spool: str) -> str:
    """The remote spool, normalised; BadInput for a relative path or / itself."""
    spool = norm_abs(remote_spool, "remote spool")
    if spool == "/":
        raise BadInput("the remote spool cannot be / itself")
    return spool


def proc_spool_dir(remote_spool: str, cluster: int, proc: int) -> str:
    """The proc's working directory at the site (the native export's Iwd layout)."""
    spool = norm_spool(remote_spool)
    return f"{spool}/{cluster}/{proc}/cluster{cluster}.proc{proc}.subproc0"


def inputs_root(remote_spool: str) -> str:
    """The directory under which inputs are mirrored by their absolute local path."""
    return norm_spool(remote_spool) + "/" + INPUTS_DIRNAME


@functools.lru_cache(maxsize=CACHE_SIZE)
def mirror_path(remote_spool: str, local_path: str) -> str:
    """Where the absolute local path ``local_path`` lives at the site."""
    local = norm_abs(local_path, "local path")
    root = inputs_root(remote_spool)
    return root if local == "/" else root + local


@functools.lru_cache(maxsize=CACHE_SIZE)
def bundle_path(local_path: str) -> str:
    """Where the absolute local path ``local_path`` lives inside the bundle."""
    local = norm_abs(local_path, "local path")
    return BUNDLE_INPUTS_DIR if local == "/" else BUNDLE_INPUTS_DIR + local
