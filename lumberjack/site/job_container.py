"""Each job in a container of its own: what keeps one export's jobs from another's files.

Every export at a site runs as the profile's one site account, so the kernel cannot keep
bob's job out of alice's export directory, her pool's signing key or her spool: only a
mount namespace can. With runtime apptainer or singularity the startd already runs in
the site image; it starts each job in a second, nested container of the same image
(HTCondor's own Singularity support, unprivileged through user namespaces), contained
(`-C`: own PID, IPC and mount namespaces, clean environment) and binding nothing but
the job's scratch directory, at `/srv`. The job then sees the image and its sandbox:
no export directory, no token, no key, no other process. Which image, which binds and
which arguments are fixed here, never taken from the job ad (HTCondor's defaults read
`SingularityImage` and `SingularityBind` from the job), and a job that asks for a
Docker container, or names Apptainer's variables in its environment (they would steer
the nested Apptainer itself), does not start.

A job with an image of its own (`container_image`, `+SingularityImage`: a local .sif
that export shipped once per sha256, see lumberjack/core/images.py) runs the same way,
nested, with the same isolation, in its image instead of the site image: only when the
image's path is `<this export's spool>/lumberjack-images/<sha256>.sif`. Any other image
path (another export's, a path the job made up, a network image) and the startd does
not start the job. Nested, not beside the pilot's container: the starter that launches
the job lives in the site image, and HTCondor's own Singularity support there is what
contains the job; a runtime beside it would need a second way into the node.

Runtimes "none" and podman-hpc have no such container: there, exports of different
owners must not share the site account at once unless the profile says the account is
shared on purpose (`[site] shared_account`; see lumberjack/profiles/isolation.py).

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from lumberjack.core.images import IMAGE_NAME_REGEX, images_dir
from lumberjack.core.job_channels import ACTING_ATTRS, SWITCH_ATTRS
from lumberjack.site import job_wrapper
from lumberjack.site.templating import render

#: Runtimes whose startd runs every job in a nested container (see job_container_lines).
ISOLATING_RUNTIMES = ("apptainer", "singularity")
#: Apptainer inside the site image (containers/site-image/packages.txt installs it).
INNER_APPTAINER = "/usr/bin/apptainer"
#: Where the job's scratch directory appears inside its container.
JOB_TARGET_DIR = "/srv"
#: Apptainer's option that passes the job's environment without evaluating it.
NO_EVAL = "--no-eval"
#: The starter's job wrapper, beside the pilots' config: the static front script that
#: the starter runs (templates/job_wrapper.sh.tmpl), the wrapper proper it starts
#: (site/job_wrapper.py), and the private directory where the front script leaves each
#: job's environment for the wrapper.
WRAPPER_NAME = "job_wrapper"
WRAPPER_PY_NAME = "job_wrapper.py"
WRAPPER_ENV_DIR = "job-env"
#: The job attributes that may name an image, in the order the startd looks at them.
IMAGE_ATTRS = ("ContainerImage", "SingularityImage")


def _classad_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unasked(attr: str) -> str:
    """The START clause that holds when the job does not ask for ACTING_ATTRS' `attr`:
    as export's asks_for, a switch not true, any other member undefined or empty."""
    if attr in SWITCH_ATTRS:
        return f"(TARGET.{attr} =!= true)"
    return f'(TARGET.{attr} =?= undefined || TARGET.{attr} =?= "")'


#: Jobs the startd refuses: Docker, a network or sandbox-directory image, another
#: universe, or any attribute that would make the daemons act outside the job's
#: container (core/job_channels.py ACTING_ATTRS: Chirp, tool daemons, pre and post
#: commands, logs and manifests they write...). Which image paths it accepts: see
#: _image_lines. The job's environment needs no clause: nothing outside the job's
#: container reads it (site/job_wrapper.py).
JOB_GUARD = (
    "(TARGET.WantDocker =!= true) && (TARGET.DockerImage =?= undefined) && "
    "(TARGET.WantDockerImage =!= true) && (TARGET.WantSandboxImage =!= true) && "
    "(TARGET.JobUniverse =?= 5) && " + " && ".join(_unasked(a) for a in ACTING_ATTRS)
)


def isolates(runtime_name: str) -> bool:
    """Whether jobs of this runtime run in a container of their own."""
    return runtime_name in ISOLATING_RUNTIMES


def _image_lines(image: str, spool: str | None) -> tuple[str, str]:
    """(SINGULARITY_IMAGE_EXPR, the START clause on images): the job's own image when
    it names one shipped to this export (`spool`), the site image when it names none;
    a job naming any other image never starts (no spool: no job image at all)."""
    site = _classad_string(image)
    if spool is None:
        return site, " && ".join(f"(TARGET.{a} =?= undefined)" for a in IMAGE_ATTRS)
    prefix = images_dir(spool) + "/"
    if any(c in prefix for c in '\\"'):
        raise ValueError(f"spool {spool!r} has a character no ClassAd string may hold here")
    shipped = {
        a: f'(isString(TARGET.{a}) && substr(TARGET.{a}, 0, {len(prefix)}) =?= "{prefix}" && '
        f'regexp("{IMAGE_NAME_REGEX}", substr(TARGET.{a}, {len(prefix)})))'
        for a in IMAGE_ATTRS
    }
    expr = site
    for attr in reversed(IMAGE_ATTRS):
        expr = f"ifThenElse({shipped[attr]}, TARGET.{attr}, {expr})"
    start = " && ".join(f"((TARGET.{a} =?= undefined) || {shipped[a]})" for a in IMAGE_ATTRS)
    return expr, start


def gpu_job_lines(vendor: str) -> str:
    """What a job that was assigned GPUs gets in its container, by vendor. HTCondor's
    starter adds `--nv` itself to such a job's Apptainer when the discovery saw an NVIDIA
    driver (the slot's GPUs_NvidiaDriver), and `--rocm` when it saw ROCm (GPUs_Rocm) or
    SINGULARITY_ADD_ROCM_FLAG is set; Intel GPUs need /dev/dri bound, decided from the
    slot's own AssignedGPUs (MY.), never from the job ad. Jobs without GPUs get nothing."""
    if vendor == "amd":
        return "SINGULARITY_ADD_ROCM_FLAG = TRUE"
    if vendor == "intel":
        return 'SINGULARITY_BIND_EXPR = ifThenElse(isUndefined(MY.AssignedGPUs), "", "/dev/dri")'
    return ""


def write_wrapper(pilots_dir: str, runtime_name: str, image: str) -> None:
    """The job wrapper that job_container_lines names, for pilots of a nesting runtime:
    readable and runnable by the site account only."""
    if not isolates(runtime_name):
        return
    env_dir = Path(pilots_dir, WRAPPER_ENV_DIR)
    env_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(env_dir, 0o700)
    wrapper = Path(pilots_dir, WRAPPER_PY_NAME)
    wrapper.write_text(job_wrapper.script(image))
    os.chmod(wrapper, 0o700)
    front = Path(pilots_dir, WRAPPER_NAME)
    front.write_text(
        render(
            "lumberjack.site",
            "templates/job_wrapper.sh.tmpl",
            env_dir=shlex.quote(str(env_dir)),
            wrapper=shlex.quote(str(wrapper)),
            launcher_path=job_wrapper.LAUNCHER_PATH,
        )  # fmt: skip
    )
    os.chmod(front, 0o700)


def job_container_lines(
    runtime_name: str, image: str, spool: str | None = None, gpu_vendor: str = "",
    pilots_dir: str = "",
) -> str:  # fmt: skip
    """Config lines of a pilot's startd: every job in its own nested container of the
    site image, or of its own image when export shipped it to `spool` (the export's
    remote SPOOL; None for pilots that serve several exports, which then run no job
    image); `gpu_vendor`: the devices a GPU job's container gets; `pilots_dir`: where
    write_wrapper put the job wrapper (none: no wrapper). Nothing for a runtime that
    cannot nest."""
    if not isolates(runtime_name):
        return (
            f"# Runtime {runtime_name}: jobs run beside the startd, as the site account, with\n"
            "# no container of their own (see [site] shared_account in the profile)."
        )
    image_expr, image_start = _image_lines(image, spool)
    wrapper = (
        "# A job killed by a signal in its container is reported so (site/job_wrapper.py).\n"
        f"USER_JOB_WRAPPER = {pilots_dir}/{WRAPPER_NAME}\n"
        if pilots_dir
        else ""
    )
    return f"""# Every job in its own container nested in the startd's: the site image, or the
# job's own image when export shipped it into this export's images directory. It sees
# the image and its scratch directory (at {JOB_TARGET_DIR}), no export directory, key,
# token or process of anyone else. Binds and arguments are fixed here, and the image is
# chosen here: HTCondor's defaults would take them from the job ad.
SINGULARITY = {INNER_APPTAINER}
SINGULARITY_JOB = TRUE
SINGULARITY_IMAGE_EXPR = {image_expr}
SINGULARITY_BIND_EXPR = ""
# --no-eval: Apptainer writes the job's environment into a script it sources in the
# container, double-quoted and so evaluated (`$x`, backquotes; a value that ends in a
# backslash loses every variable) unless told not to: then single-quoted, each value
# arrives byte for byte.
SINGULARITY_EXTRA_ARGUMENTS = "{NO_EVAL}"
SINGULARITY_TARGET_DIR = {JOB_TARGET_DIR}
SINGULARITY_MOUNT_HOME = FALSE
SINGULARITY_USE_PID_NAMESPACES = TRUE
# No `apptainer test` of the image before each job: a second nested container per job
# (0.1-0.3 s of a node's cores), and no isolation of its own. The site image is the one
# this startd runs in; a job image came byte for byte (sha256) from its owner. An image
# that cannot start fails at the job's own start instead of at a test run before it.
SINGULARITY_RUN_TEST_BEFORE_JOB = FALSE
# The startd proves it can run a SIF with a test image that Debian's HTCondor does not
# ship; this startd runs every job from a SIF (the site image), so it says so itself:
# condor_submit asks for HasSIF in every container_image job.
HasSIF = True
STARTD_ATTRS = $(STARTD_ATTRS) HasSIF
START = ($(START)) && {JOB_GUARD} && {image_start}
{wrapper}{gpu_job_lines(gpu_vendor)}""".rstrip()
