"""The site image's recipe, shipped in the package (site-image/ beside this module): one
package list and one setup script, rendered as an Apptainer definition file or as a
Containerfile (podman-hpc), and the command that builds each. The project's testbed
builds its image from the same two files.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import string
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from lumberjack.errors import BadInput, LumberjackError

#: The recipe's files, package data beside this module.
RECIPE_DIR = Path(__file__).resolve().with_name("site-image")
PACKAGES_FILE = "packages.txt"
SETUP_FILE = "setup.sh"
#: The base image when none is given: Debian sid, whose `condor` is HTCondor 25.x.
DEFAULT_BASE = "debian:sid-slim"
#: The image's name for OCI engines when the profile names none.
DEFAULT_TAG = "lumberjack-site:latest"
#: Each architecture a profile's queue may have (HTCondor's spelling, the slot ad's Arch)
#: as Apptainer's --arch and an OCI engine's --platform spell it.
ENGINE_ARCH = {"X86_64": "amd64", "aarch64": "arm64"}
#: uname -m -> HTCondor's spelling.
_MACHINE_ARCH = {"x86_64": "X86_64", "amd64": "X86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def host_arch() -> str:
    """This machine's architecture in HTCondor's spelling (the machine name if unknown)."""
    machine = platform.machine()
    return _MACHINE_ARCH.get(machine.lower(), machine)


def packages() -> list[str]:
    """The Debian packages of the image (packages.txt, comments left out)."""
    lines = (RECIPE_DIR / PACKAGES_FILE).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def recipe_hash() -> str:
    """A short hash of every recipe file: names a build (and a cached one) by its recipe."""
    digest = hashlib.sha256()
    for path in sorted(RECIPE_DIR.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _setup_text() -> str:
    return (RECIPE_DIR / SETUP_FILE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Recipe:
    """One runtime's recipe: the files it renders and the command that builds them."""

    runtime: ClassVar[str]
    template: ClassVar[str]
    #: Engines that build it, preferred first (the first on PATH is the default).
    engines: ClassVar[tuple[str, ...]]

    def render(self, out: Path, base: str = DEFAULT_BASE) -> list[Path]:
        """Write the recipe's files into `out` (created); their paths."""
        out.mkdir(parents=True, exist_ok=True)
        text = string.Template((RECIPE_DIR / self.template).read_text(encoding="utf-8"))
        rendered = text.substitute(
            base=base, packages=" ".join(packages()), recipe=recipe_hash(), setup=self._setup()
        )
        target = out / self.template[: -len(".in")]
        target.write_text(rendered, encoding="utf-8")
        return [target, *self._extra_files(out)]

    def default_engine(self) -> str:
        return next((e for e in self.engines if shutil.which(e)), self.engines[0])

    def _setup(self) -> str:
        return ""

    def _extra_files(self, out: Path) -> list[Path]:
        return []

    def default_target(self, out: Path, image: Optional[str], arch: str) -> str:
        raise NotImplementedError

    def build_command(
        self, engine: str, out: Path, target: str, base: str, cross: Optional[str]
    ) -> list[str]:
        """`cross`: the engine's name of the architecture to build for when it is not this
        machine's (the base image of that architecture, its setup run under emulation)."""
        raise NotImplementedError


@dataclass(frozen=True)
class ApptainerRecipe(Recipe):
    """lumberjack-site.def: the setup inlined in %post (a .def cannot read files while it
    is built), so the one file is all a site needs."""

    runtime = "apptainer"
    template = "lumberjack-site.def.in"
    engines = ("apptainer", "singularity")

    def _setup(self) -> str:
        lines = _setup_text().splitlines()[1:]  # %post is already a shell script
        return "\n".join(f"    {line}" if line else "" for line in lines)

    def default_target(self, out: Path, image: Optional[str], arch: str) -> str:
        # One SIF per architecture, named as the aarch64 profiles' [container] image is.
        suffix = "" if arch == "X86_64" else f"-{arch}"
        return str(out / f"lumberjack-site{suffix}.sif")

    def build_command(
        self, engine: str, out: Path, target: str, base: str, cross: Optional[str]
    ) -> list[str]:
        # Root builds need no fakeroot; an ordinary user needs /etc/subuid entries.
        fakeroot = [] if os.geteuid() == 0 else ["--fakeroot"]
        # --arch picks the base image's architecture from the registry's manifest list.
        arch = ["--arch", cross] if cross else []
        return [engine, "build", *fakeroot, *arch, "--build-arg", f"BASE={base}", target,
                str(out / "lumberjack-site.def")]  # fmt: skip


@dataclass(frozen=True)
class ContainerfileRecipe(Recipe):
    """Containerfile + setup.sh, a build context for podman-hpc (or plain podman)."""

    runtime = "podman-hpc"
    template = "Containerfile.in"
    engines = ("podman-hpc", "podman")

    def _extra_files(self, out: Path) -> list[Path]:
        setup = out / SETUP_FILE
        shutil.copyfile(RECIPE_DIR / SETUP_FILE, setup)
        return [setup]

    def default_target(self, out: Path, image: Optional[str], arch: str) -> str:
        return image or DEFAULT_TAG

    def build_command(
        self, engine: str, out: Path, target: str, base: str, cross: Optional[str]
    ) -> list[str]:
        platform_ = ["--platform", f"linux/{cross}"] if cross else []
        return [engine, "build", *platform_, "--build-arg", f"BASE={base}", "-t", target,
                str(out)]  # fmt: skip


#: The recipe of each container runtime a profile may name.
RECIPES: dict[str, Recipe] = {
    "apptainer": ApptainerRecipe(),
    "singularity": ApptainerRecipe(),
    "apptainer-emulated": ApptainerRecipe(),
    "podman-hpc": ContainerfileRecipe(),
}


def recipe_for(runtime: str) -> Recipe:
    if runtime == "none":
        raise BadInput(
            "runtime none needs no site image: the site runs an HTCondor release tarball "
            "([container] condor_tarball)"
        )
    if runtime not in RECIPES:
        raise BadInput(f"no site image recipe for runtime {runtime!r}; use one of "
                       f"{', '.join(RECIPES)}")  # fmt: skip
    return RECIPES[runtime]


@dataclass(frozen=True)
class ImageBuild:
    """A build of the site image: what was rendered where, and the command."""

    runtime: str
    files: list[Path]
    command: list[str]
    target: str
    built: bool
    arch: str = "X86_64"
    #: Built for another architecture than this machine's: its setup runs under emulation.
    emulated: bool = False

    def to_json(self) -> dict[str, object]:
        return {"runtime": self.runtime, "files": [str(p) for p in self.files],
                "command": self.command, "target": self.target, "built": self.built,
                "arch": self.arch, "emulated": self.emulated,
                "recipe": recipe_hash()}  # fmt: skip


def build_image(
    runtime: str,
    out: Path,
    *,
    image: Optional[str] = None,
    target: Optional[str] = None,
    base: Optional[str] = None,
    engine: Optional[str] = None,
    arch: Optional[str] = None,
    dry_run: bool = False,
) -> ImageBuild:
    """Render the recipe for `runtime` into `out` and (unless `dry_run`) build it with
    `engine` (default: the first of the recipe's engines on PATH) for `arch` (HTCondor's
    spelling; default this machine's). `image` is the profile's [container] image (an
    OCI name is the tag a podman-hpc build gets)."""
    recipe = recipe_for(runtime)
    arch = arch or host_arch()
    if arch not in ENGINE_ARCH:
        raise BadInput(f"no site image for architecture {arch!r}; use one of "
                       f"{', '.join(ENGINE_ARCH)}")  # fmt: skip
    emulated = arch != host_arch()
    engine = engine or recipe.default_engine()
    if not dry_run and not shutil.which(engine):
        raise BadInput(f"{engine} is not on PATH; install it, name another with --engine, "
                       "or render only with --dry-run")  # fmt: skip
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out} is not a directory; name one with --output")
    base = base or DEFAULT_BASE
    files = recipe.render(out, base)
    target = target or recipe.default_target(out, image, arch)
    command = recipe.build_command(
        engine, out, target, base, ENGINE_ARCH[arch] if emulated else None
    )
    if not dry_run:
        done = subprocess.run(command, cwd=out, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
        (out / "build.log").write_text(done.stdout, encoding="utf-8")
        if done.returncode != 0:
            last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            raise LumberjackError(
                f"{engine} build failed (exit {done.returncode}): {last}; "
                f"whole log: {out / 'build.log'}"
            )
    return ImageBuild(runtime, files, command, target, built=not dry_run, arch=arch,
                      emulated=emulated)  # fmt: skip
