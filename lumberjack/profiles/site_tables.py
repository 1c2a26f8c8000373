"""[site], [container] and [schedd] of a profile file: who the site is, how to log in,
what the pilots run in, and where the remote schedd runs.

Validation context: `path`, the profile file (its name is the site's name, and a
relative condor_tarball is relative to its directory).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lumberjack.core.shell_safe import REMOTE_PATH
from lumberjack.profiles.local_paths import ENV_REF, tarball_path
from lumberjack.profiles.value_types import (
    AuthMode,
    BatchSystemName,
    Binds,
    Hostname,
    NodeAddress,
    Placement,
    RemotePath,
    Runtime,
    Scratch,
    SiteName,
    Table,
    Tested,
    Text,
    UserName,
    port_below_65536,
    problem,
)

_BIND = re.compile(r"^[A-Za-z0-9_./${}~@:+,=-]+$")
_URI = re.compile(r"^(docker|oras|library|shub|https?)://[^\s'\"`;|&<>]+$")
_OCI_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_.-]+)?(@sha256:[0-9a-f]{64})?$")


class SiteTable(Table):
    """[site]: who the site is and how to log in."""

    name: SiteName
    system: Annotated[StrictStr, Field(examples=['"NERSC Perlmutter"'])]
    description: Text = ""
    source: Annotated[StrictStr, Field(examples=['"https://docs.example.org/"'])] = ""
    checked: Annotated[StrictStr, Field(examples=['"2024-06"'])] = ""
    retired: StrictBool = False  # refused at export, launch and lease create
    successor: Optional[SiteName] = None  # named in that refusal
    tested: Tested = "untested"  # shown by `sites list` and `sites show`
    tested_note: Text = ""  # why: what ran (or did not) and where
    login_host: Hostname
    user: Optional[UserName] = None
    port: Annotated[
        StrictInt, Field(ge=1), port_below_65536("write the SSH port, e.g. port = 22")
    ] = 22
    known_hosts: Optional[Annotated[StrictStr, Field(examples=['"~/.ssh/known_hosts_mysite"'])]] = (
        None
    )
    identity_file: Optional[Annotated[StrictStr, Field(examples=['"~/.ssh/id_ed25519"'])]] = None
    auth: AuthMode = "key"
    connection_sharing: StrictBool = True
    base_dir: RemotePath
    scratch: Optional[Scratch] = None
    batch_system: BatchSystemName
    allocation_required: StrictBool = False
    # Exports of different owners may share the site account at once with no container
    # between their jobs (runtime none, podman-hpc): the operator says so (isolation.py).
    shared_account: StrictBool = False
    # Compute nodes reach the internet (a job may pull a docker://, oras://, library:// or
    # http(s):// container image). Where to check: the centre's pages on compute-node
    # network access, or `curl -sI https://example.org` in a short batch job. Default
    # false: a network image is refused before export instead of failing at the site.
    outbound_network: StrictBool = False

    @field_validator("name")
    @classmethod
    def _is_the_file_name(cls, name: str, info: ValidationInfo) -> str:
        stem = Path((info.context or {}).get("path", f"{name}.toml")).stem
        if name != stem:
            raise problem(
                f'must match the file name; rename the file to "{name}.toml" or set name = "{stem}"'
            )
        return name


class ContainerSpec(Table):
    """[container]: the runtime, and the site image pilots run in (or, with runtime
    "none", the HTCondor release tarball lumberjack ships to the site)."""

    runtime: Runtime = "apptainer"
    image: Optional[
        Annotated[StrictStr, Field(examples=['"$SCRATCH/lumberjack/image/lumberjack-site.sif"'])]
    ] = None
    bind: Binds = ()
    condor_tarball: Optional[
        Annotated[StrictStr, Field(examples=['"~/htcondor/condor-25.0.0-x86_64_x.tar.gz"'])]
    ] = None

    @field_validator("image")
    @classmethod
    def _path_or_uri(cls, image: str, info: ValidationInfo) -> str:
        if info.data.get("runtime") == "podman-hpc":
            if not _OCI_IMAGE.match(image):
                raise problem(
                    "is not an OCI image name (podman-hpc runs images pulled or migrated "
                    'beforehand); write e.g. "lumberjack-site:25.14"'
                )
            return image
        if not (REMOTE_PATH.match(image) or _URI.match(image)):
            raise problem(
                "is neither a path at the site nor a docker://, oras://, library:// or "
                'https:// URI; write e.g. "$SCRATCH/lumberjack/image/lumberjack-site.sif"'
            )
        return image

    @model_validator(mode="after")
    def _image_or_tarball(self, info: ValidationInfo) -> ContainerSpec:
        if self.runtime != "none":
            if self.condor_tarball is not None:
                raise problem(
                    f'is only for runtime = "none" (this profile runs {self.runtime}); remove it',
                    key=("condor_tarball",),
                )
            if self.image is None:
                raise problem(
                    f'runtime "{self.runtime}" needs the site image; add e.g. image = '
                    '"$SCRATCH/lumberjack/image/lumberjack-site.sif"',
                    show=False,
                )
            return self
        if self.condor_tarball is None:
            raise problem(
                'runtime "none" needs the HTCondor release tarball lumberjack ships to the '
                'site; add e.g. condor_tarball = "~/htcondor/condor-25.0.0-x86_64_x.tar.gz"',
                show=False,
            )
        if ENV_REF.search(self.condor_tarball):
            return self  # the variables are the environment's at use (condor_tarball_path)
        path = (info.context or {}).get("path")
        found = tarball_path(self.condor_tarball, Path(path).parent if path else Path.cwd())
        if found is not None and not found.is_file():
            raise problem(f"is not a file ({found})", key=("condor_tarball",))
        return self

    @field_validator("bind")
    @classmethod
    def _bind_specs(cls, bind: tuple[str, ...]) -> tuple[str, ...]:
        for item in bind:
            if not _BIND.match(item):
                raise problem(
                    'has characters a bind spec cannot hold; write e.g. "/scratch:/scratch:ro"',
                    value=item,
                )
        return bind


class ScheddSpec(Table):
    """[schedd]: where the remote pool's schedd runs, how compute nodes reach it, and how many
    jobs it may run at once (a site policy cap; None: no cap)."""

    placement: Placement = "login"
    port: Annotated[
        StrictInt, Field(ge=0), port_below_65536("use 0 to let the site agent choose")
    ] = 0
    address: Optional[NodeAddress] = None
    max_running_jobs: Optional[Annotated[StrictInt, Field(ge=1, examples=["64"])]] = None
