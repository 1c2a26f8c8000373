"""Finding and reading site profiles: one TOML file per HPC system (`NAME.toml`), checked
by the models in `lumberjack.profiles.profile_file`; any problem is one BadInput line naming the
file, the key and a fix. Where profiles are found: see `profile_dirs()`.
"""

from __future__ import annotations

import difflib
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Union

from pydantic import ValidationError

from lumberjack.errors import BadInput, SetupError
from lumberjack.profiles.messages import display_path, one_line
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.profile_file import ProfileFile
from lumberjack.site.batch import SYSTEMS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

__all__ = [
    "SiteProfile",
    "display_path",
    "find_profile",
    "check_not_retired",
    "list_profiles",
    "load_profile",
    "load_profiles",
    "profile_dirs",
    "profile_files",
    "shipped_profile_dir",
]

PROFILES_ENV = "LUMBERJACK_SITE_PROFILES"
USER_PROFILE_DIR = "~/.config/condor-lumberjack/sites"
#: The shipped profiles of the project's emulated site (testbed*.toml) are found only where
#: the testbed is, i.e. where it exports this variable: a user's site list never names them.
TESTBED_ENV = "LUMBERJACK_TESTBED_DIR"
TESTBED_PREFIX = "testbed"


def shipped_profile_dir() -> Path:
    """The profiles shipped inside the package (package data; `site-profiles/` at the top
    of a checkout links to it)."""
    return Path(str(resources.files("lumberjack.profiles") / "site-profiles"))


def profile_dirs() -> list[Path]:
    """Where profiles are looked for, first match wins (so your own copy of a profile
    replaces the shipped one of the same name):

    1. each directory in $LUMBERJACK_SITE_PROFILES, in the order given (":" between);
    2. ~/.config/condor-lumberjack/sites;
    3. the profiles shipped with lumberjack (`shipped_profile_dir()`).

    The two others may be missing (then skipped); a directory of $LUMBERJACK_SITE_PROFILES
    must exist: a typo there (a cron job's) would quietly take the shipped profile.
    """
    dirs = [
        Path(part.strip()).expanduser()
        for part in os.environ.get(PROFILES_ENV, "").split(os.pathsep)
        if part.strip()
    ]
    for directory in dirs:
        if not directory.is_dir():
            raise SetupError(
                f"{PROFILES_ENV} names {directory}, which is not a directory: fix or unset it"
            )
    return [*dirs, Path(USER_PROFILE_DIR).expanduser(), shipped_profile_dir()]


def profile_files() -> dict[str, Path]:
    """Every profile file found, by site name (the file name without .toml)."""
    found: dict[str, Path] = {}
    for directory in profile_dirs():
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                if not _testbed_only(path):
                    found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def _testbed_only(path: Path) -> bool:
    """A shipped testbed profile while no testbed is configured (your own are kept)."""
    return (
        path.stem.startswith(TESTBED_PREFIX)
        and path.parent == shipped_profile_dir()
        and not os.environ.get(TESTBED_ENV)
    )


def find_profile(name: str) -> SiteProfile:
    """Load the profile of site `name`; BadInput naming the known sites if none."""
    files = profile_files()
    if name not in files:
        known = ", ".join(files) or "none (see site-profiles/README.md)"
        close = difflib.get_close_matches(name, list(files), n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        if (shipped_profile_dir() / f"{name}.toml").is_file():  # hidden: the testbed's
            hint = f"; {name} is the project's emulated site, known where {TESTBED_ENV} is set"
        raise BadInput(f"unknown site '{name}'; known sites: {known}{hint}")
    return load_profile(files[name])


def list_profiles() -> list[SiteProfile]:
    """Every profile found that loads (and so checks), sorted by name."""
    return load_profiles()[0]


def load_profiles() -> tuple[list[SiteProfile], list[str]]:
    """(every profile found that loads, one line per one that does not): a broken file
    is reported and skipped, never hides the others."""
    loaded: list[SiteProfile] = []
    broken: list[str] = []
    for path in profile_files().values():
        try:
            loaded.append(load_profile(path))
        except BadInput as exc:
            broken.append(f"skipped {exc}")
    return loaded, broken


def check_not_retired(profile: SiteProfile) -> None:
    """BadInput for a site its centre has retired (`retired = true`): no new export or
    launch goes there; the message names the successor when the profile does."""
    if profile.retired:
        instead = f'; use its successor "{profile.successor}"' if profile.successor else ""
        raise BadInput(f"site {profile.name} ({profile.system}) is retired{instead}")


def load_profile(path: Union[str, os.PathLike[str]]) -> SiteProfile:
    """Read and check one profile file; BadInput on any problem."""
    path = Path(path)
    shown = display_path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{shown}: no such profile file") from None
    # A profile that is there but does not load is a setup mistake (exit 7), not a typo.
    except OSError as exc:
        raise SetupError(f"{shown}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SetupError(f"{shown}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"{shown}: not valid TOML: {exc}") from None
    context = {"path": path, "batch_system": _known_batch_system(data)}
    try:
        checked = ProfileFile.model_validate(data, context=context)
    except ValidationError as exc:
        raise SetupError(str(one_line(exc, ProfileFile, data, shown))) from None
    return SiteProfile.from_file(checked, path)


def _known_batch_system(data: dict[str, Any]) -> str | None:
    """[site].batch_system when it names a known one: other tables' checks need it."""
    site = data.get("site")
    name = site.get("batch_system") if isinstance(site, dict) else None
    return name.strip() if isinstance(name, str) and name.strip() in SYSTEMS else None
