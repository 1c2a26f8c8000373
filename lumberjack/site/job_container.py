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
container of its own, or names Apptainer's variables in its environment (they would
steer the nested Apptainer itself), does not start.

Runtimes "none" and podman-hpc have no such container: there, exports of different
owners must not share the site account at once unless the profile says the account is
shared on purpose (`[site] shared_account`; see lumberjack/profiles/isolation.py).

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

#: Runtimes whose startd runs every job in a nested container (see job_container_lines).
ISOLATING_RUNTIMES = ("apptainer", "singularity")
#: Apptainer inside the site image (containers/site-image/packages.txt installs it).
INNER_APPTAINER = "/usr/bin/apptainer"
#: Where the job's scratch directory appears inside its container.
JOB_TARGET_DIR = "/srv"
#: Jobs the startd refuses: their own container (docker, container universe, an image),
#: or Apptainer's own variables in their environment (APPTAINER_BIND would add binds).
JOB_GUARD = (
    "(TARGET.WantDocker =!= true) && (TARGET.ContainerImage =?= undefined) && "
    "(TARGET.DockerImage =?= undefined) && (TARGET.JobUniverse =?= 5) && "
    '(TARGET.Environment =?= undefined || !regexp("APPTAINER|SINGULARITY", '
    'TARGET.Environment, "i")) && '
    '(TARGET.Env =?= undefined || !regexp("APPTAINER|SINGULARITY", TARGET.Env, "i"))'
)


def isolates(runtime_name: str) -> bool:
    """Whether jobs of this runtime run in a container of their own."""
    return runtime_name in ISOLATING_RUNTIMES


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


def job_container_lines(runtime_name: str, image: str, gpu_vendor: str = "") -> str:
    """Config lines of a pilot's startd: every job in its own nested container (nothing
    for a runtime that cannot nest); `gpu_vendor`: the devices a GPU job's container gets."""
    if not isolates(runtime_name):
        return (
            f"# Runtime {runtime_name}: jobs run beside the startd, as the site account, with\n"
            "# no container of their own (see [site] shared_account in the profile)."
        )
    quoted = image.replace("\\", "\\\\").replace('"', '\\"')
    return f"""# Every job in its own container of the site image, nested in the startd's: it
# sees the image and its scratch directory (at {JOB_TARGET_DIR}), no export directory, key,
# token or process of anyone else. Image, binds and arguments are fixed here: HTCondor's
# defaults would take them from the job ad.
SINGULARITY = {INNER_APPTAINER}
SINGULARITY_JOB = TRUE
SINGULARITY_IMAGE_EXPR = "{quoted}"
SINGULARITY_BIND_EXPR = ""
SINGULARITY_EXTRA_ARGUMENTS = ""
SINGULARITY_TARGET_DIR = {JOB_TARGET_DIR}
SINGULARITY_MOUNT_HOME = FALSE
SINGULARITY_USE_PID_NAMESPACES = TRUE
START = ($(START)) && {JOB_GUARD}
{gpu_job_lines(gpu_vendor)}""".rstrip()
