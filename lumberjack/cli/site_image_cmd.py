"""`condor_lumberjack sites image build SITE | --runtime R [--output DIR] [--dry-run]`."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import click

from lumberjack.ap.site_image import (
    DEFAULT_BASE,
    ENGINE_ARCH,
    RECIPES,
    ImageBuild,
    build_image,
    host_arch,
)
from lumberjack.cli.common import LumberjackGroup, emit, json_option
from lumberjack.errors import BadInput
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.sites import find_profile


@click.group("image", cls=LumberjackGroup)
def image() -> None:
    """The site image: HTCondor 25.x in a container, the one image a site needs.

    \b
    Examples:
      condor_lumberjack sites image build polaris --dry-run
      condor_lumberjack sites image build --runtime podman-hpc --output ./site-image --dry-run
    """


@image.command("build")
@click.argument("site", required=False)
@click.option(
    "--runtime",
    type=click.Choice(sorted(RECIPES)),
    help="Build for this runtime instead of a site's (default: the profile's [container] runtime).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default="lumberjack-site-image",
    help="Directory for the rendered recipe, the build log and (Apptainer) the SIF.",
)
@click.option(
    "--base",
    metavar="IMAGE",
    help=f"Base image (default {DEFAULT_BASE}; a centre's copy or a dated sid tag).",
)
@click.option(
    "--engine",
    metavar="COMMAND",
    help="The build command (default: apptainer or singularity; podman-hpc or podman).",
)
@click.option(
    "--arch",
    type=click.Choice(sorted(ENGINE_ARCH)),
    help="Build for this CPU architecture (default: the site's queues', else this machine's).",
)
@click.option(
    "--dry-run", is_flag=True, help="Render the recipe, show the commands; build nothing."
)
@json_option
def build_cmd(
    site: Optional[str],
    runtime: Optional[str],
    output: Path,
    base: Optional[str],
    engine: Optional[str],
    arch: Optional[str],
    dry_run: bool,
    as_json: bool,
) -> None:
    """Render the site image's recipe (shipped with lumberjack) for a site's container
    runtime and build it: an Apptainer definition file (apptainer, singularity) or a
    Containerfile with its setup.sh (podman-hpc). Then prints how to put the image where
    the site's profile expects it.

    The image is built for the architecture of the site's queues (--arch when they
    differ). Build where that architecture is (often on the site's login node); on
    another machine the command builds under emulation (qemu-user registered with
    binfmt_misc), which is slow. An ordinary user's Apptainer build needs /etc/subuid
    and /etc/subgid entries.

    \b
    Examples:
      condor_lumberjack sites image build stampede3 --dry-run
      condor_lumberjack sites image build vista --dry-run
      condor_lumberjack sites image build perlmutter --output ./perlmutter-image --dry-run
      condor_lumberjack sites image build --runtime apptainer --output /tmp/img --json --dry-run
    """
    if bool(site) == bool(runtime):
        raise BadInput("name a SITE or give --runtime (not both)")
    profile = find_profile(site) if site else None
    chosen = profile.container.runtime if profile else runtime
    assert chosen is not None
    if profile and arch and all(queue.arch != arch for queue in profile.queues):
        raise BadInput(f"site {profile.name} has no {arch} queue (its queues are "
                       f"{site_arch(profile)}); leave out --arch")  # fmt: skip
    arch = arch or (site_arch(profile) if profile else None)
    done = build_image(chosen, output, image=profile.container.image if profile else None,
                       base=base, engine=engine, arch=arch, dry_run=dry_run)  # fmt: skip
    steps = place_steps(done, profile)
    emit(as_json, {"ok": True, **done.to_json(), "place": steps}, _text(done, steps))


def site_arch(profile: SiteProfile) -> str:
    """The one architecture of a site's queues; a site with two needs --arch."""
    arches = sorted({queue.arch for queue in profile.queues})
    if len(arches) == 1:
        return arches[0]
    by_arch = "; ".join(
        f"{arch}: {', '.join(q.name for q in profile.queues if q.arch == arch)}" for arch in arches
    )
    raise BadInput(f"site {profile.name} has queues of more than one architecture ({by_arch}); "
                   "name one with --arch")  # fmt: skip


def place_steps(done: ImageBuild, profile: Optional[SiteProfile]) -> list[str]:
    """The commands that put the built image where the profile's [container] image says."""
    if profile is None:
        return []
    host = f"{profile.user + '@' if profile.user else ''}{profile.login_host}"
    # The profile's key, known_hosts and port, as lumberjack logs in (scp spells port -P).
    identity, known = profile.identity_file_path(), profile.known_hosts_path()
    key = f"-i {shlex.quote(str(identity))} " if identity else ""
    key += f"-o UserKnownHostsFile={shlex.quote(str(known))} " if known else ""
    ssh = f"ssh {key}{f'-p {profile.port} ' if profile.port != 22 else ''}{host}"
    scp = f"scp {key}{f'-P {profile.port} ' if profile.port != 22 else ''}-r"
    if done.runtime == "podman-hpc":
        # podman-hpc images live in the user's storage at the site: build them there.
        context = Path(done.files[0]).parent.name
        return [
            f"{scp} {shlex.quote(str(Path(done.files[0]).parent))} {host}:",
            f"{ssh} 'cd {context} && podman-hpc build -t {done.target} . "
            f"&& podman-hpc migrate {done.target}'",
        ]
    image = profile.container.image
    if "://" in image:
        return [f"push {done.target} to {image} (the profile names a registry URI)"]
    # $SCRATCH and the like are the site's: expanded by the login shell there (scp's
    # SFTP mode would not), and the image replaced whole, never left half written.
    remote = (f'mkdir -p "$(dirname "{image}")" && cat >"{image}.partial" '
              f'&& mv "{image}.partial" "{image}"')  # fmt: skip
    return [f"{ssh} {shlex.quote(remote)} < {shlex.quote(done.target)}"]


def _text(done: ImageBuild, steps: list[str]) -> str:
    verb = "built" if done.built else "would build (dry run)"
    lines = [f"recipe for {done.runtime} ({done.arch}) rendered: "
             + ", ".join(str(p) for p in done.files),
             f"{verb}: {shlex.join(done.command)}"]  # fmt: skip
    if done.emulated:
        lines.append(f"  ({done.arch} on this {host_arch()} machine: the setup runs under "
                     "emulation, qemu-user registered with binfmt_misc; building on the "
                     "site's login node is much faster)")  # fmt: skip
    if steps:
        lines.append("then put it where the profile expects it:")
        lines += [f"  {step}" for step in steps]
    return "\n".join(lines)
