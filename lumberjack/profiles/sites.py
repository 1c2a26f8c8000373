"""Site profiles: one TOML file per HPC system (`site-profiles/NAME.toml`), read strictly.

Every key is checked: an unknown key (a typo) is an error, and every error names the
file, the key and a fix. Where profiles are found: see `profile_dirs()`. Remote paths
(`base_dir`, `scratch`, `image`, `bind`) may use `$USER`, `$SCRATCH`, `${VAR}` or `~`:
the site's shell expands them. Local paths (`known_hosts`, `identity_file`) may use
`${VAR}`, `$VAR` and `~`, expanded here when used; a relative one is relative to the
profile file.

[site]
  name                 the site's short name; must equal the file name without .toml
  system               the machine and its centre, e.g. "NERSC Perlmutter"
  description          one line about it (optional)
  source               the public documentation the profile follows (URL, optional)
  checked              when the values were last compared with that documentation
  retired              true when the machine no longer runs (kept for the record)
  login_host           host name (or address) of the login node to SSH to
  user                 login name there (optional; default: your ssh config, then your
                       local user name)
  port                 SSH port (default 22)
  known_hosts          pinned known_hosts file for login_host (optional, local path)
  identity_file        private key to log in with (optional, local path)
  base_dir             where lumberjack keeps exports at the site (remote path)
  scratch              the site's scratch area (remote path; default: base_dir)
  batch_system         "slurm", "pbs" or "cobalt"
  allocation_required  true when every job must name an allocation (project/account)

[container]
  runtime              "apptainer" (default) or "singularity"
  image                site image: a SIF path at the site, or a docker://, oras://,
                       library:// or https:// URI the runtime can pull
  bind                 extra bind mounts, "src[:dst[:opts]]" (default none)

[schedd]               the remote pool's schedd (and collector)
  placement            "login" (default): on the login node; "batch": in a batch job
  port                 port the compute nodes use to reach it (0, the default: any
                       free port, chosen at launch)
  address              host name the compute nodes use to reach it (default: the
                       login node's own name)

[[queues]]             one table per queue (partition / QOS) pilots may use
  name                 lumberjack's name for it (what --queue takes)
  batch_queue          the name the batch system knows (default: name; "" leaves the
                       queue directive out, e.g. where a QOS directive selects it)
  description          one line (optional)
  min_nodes            fewest nodes per job (default 1)
  max_nodes            most nodes per job
  cores_per_node       cores of one node a job may use
  memory_per_node      memory of one node, e.g. "512GB" (unit required)
  gpus_per_node        GPUs of one node (default 0)
  max_walltime         longest walltime, "HH:MM:SS" (hours may pass 24: "48:00:00")
  whole_node           true when the queue only hands out whole nodes (default false)
  default              true for the queue used when --queue is not given; exactly one
                       (not needed when there is a single queue)
  directives           header lines for this queue only, e.g. "#SBATCH --qos=debug"

[batch]
  extra_directives     header lines added verbatim to every pilot script; each starts
                       with the batch system's prefix (#SBATCH, #PBS, #COBALT)
  setup                shell lines run before the pilot starts its startds
  launcher             how a pilot starts one process per node: slurm "srun"; pbs
                       "mpiexec" (default, Cray PALS as on ALCF systems) or "pbsdsh";
                       cobalt "aprun"
  chunk_resources      pbs only: extra resources for each select chunk ("system=polaris")

[defaults]             the request when no flag says otherwise (each optional)
  nodes, cores, gpus   integers; memory "4GB"; walltime "HH:MM:SS"
  queue                a [[queues]] name (alternative to default = true)
  allocation           the allocation to charge (for a personal copy of a profile)
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lumberjack.errors import BadInput
from lumberjack.profiles.request import (
    format_memory,
    format_walltime,
    parse_hhmmss,
    parse_memory,
    parse_walltime,
)
from lumberjack.site.batch import SYSTEMS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

PROFILES_ENV = "LUMBERJACK_SITE_PROFILES"
USER_PROFILE_DIR = "~/.config/condor-lumberjack/sites"
RUNTIMES = ("apptainer", "singularity")
PLACEMENTS = ("login", "batch")

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_REMOTE_PATH = re.compile(r"^(/|~|\$)[A-Za-z0-9_./${}~@:+,=-]*$")
_BIND = re.compile(r"^[A-Za-z0-9_./${}~@:+,=-]+$")
_URI = re.compile(r"^(docker|oras|library|shub|https?)://[^\s'\"`;|&<>]+$")
_ALLOCATION = re.compile(r"^[A-Za-z0-9_.@+:-]+$")
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class Queue:
    """One queue (Slurm partition or QOS, PBS/Cobalt queue) and its per-job limits."""

    name: str
    max_nodes: int
    cores_per_node: int
    memory_per_node_mb: int
    gpus_per_node: int
    max_walltime_s: int
    whole_node: bool = False
    default: bool = False
    min_nodes: int = 1
    batch_queue: str = ""  # "" = no queue directive
    directives: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class ContainerSpec:
    runtime: str
    image: str
    bind: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScheddSpec:
    placement: str = "login"
    port: int = 0
    address: str | None = None


@dataclass(frozen=True)
class BatchSettings:
    extra_directives: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    launcher: str = ""
    chunk_resources: tuple[str, ...] = ()


@dataclass(frozen=True)
class RequestDefaults:
    nodes: int | None = None
    cores: int | None = None
    memory_mb: int | None = None
    gpus: int | None = None
    walltime_s: int | None = None
    queue: str | None = None
    allocation: str | None = None


@dataclass(frozen=True)
class SiteProfile:
    """A site as its profile file describes it (see the module docstring)."""

    name: str
    system: str
    login_host: str
    base_dir: str
    batch_system: str
    container: ContainerSpec
    queues: tuple[Queue, ...]
    path: Path
    description: str = ""
    source: str = ""
    checked: str = ""
    retired: bool = False
    user: str | None = None
    port: int = 22
    known_hosts: str | None = None  # as written; see known_hosts_path()
    identity_file: str | None = None  # as written; see identity_file_path()
    scratch: str = ""
    allocation_required: bool = False
    schedd: ScheddSpec = ScheddSpec()
    batch: BatchSettings = BatchSettings()
    defaults: RequestDefaults = RequestDefaults()

    @property
    def default_queue(self) -> Queue:
        wanted = self.defaults.queue
        for queue in self.queues:
            if queue.name == wanted or (wanted is None and queue.default):
                return queue
        return self.queues[0]  # load_profile guarantees a single queue here

    def queue(self, name: str) -> Queue:
        for queue in self.queues:
            if queue.name == name:
                return queue
        names = ", ".join(queue.name for queue in self.queues)
        raise BadInput(f'site "{self.name}" has no queue "{name}"; its queues: {names}')

    def known_hosts_path(self) -> Path | None:
        """The pinned known_hosts file, with ${VAR} and ~ expanded (BadInput if unset)."""
        return self._local_path("known_hosts", self.known_hosts)

    def identity_file_path(self) -> Path | None:
        """The private key file, with ${VAR} and ~ expanded (BadInput if unset)."""
        return self._local_path("identity_file", self.identity_file)

    def _local_path(self, key: str, value: str | None) -> Path | None:
        if value is None:
            return None

        def expand(match: re.Match[str]) -> str:
            var = match.group(1) or match.group(2)
            if var not in os.environ:
                raise BadInput(
                    f"{display_path(self.path)}: [site].{key} needs ${var}, which is not "
                    f"set; export {var} or write the path into the profile"
                )
            return os.environ[var]

        expanded = Path(_ENV_REF.sub(expand, value)).expanduser()
        if not expanded.is_absolute():
            expanded = self.path.parent / expanded
        return expanded

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (for --json)."""
        return {
            "name": self.name,
            "system": self.system,
            "description": self.description,
            "source": self.source,
            "checked": self.checked,
            "retired": self.retired,
            "path": str(self.path),
            "login_host": self.login_host,
            "user": self.user,
            "port": self.port,
            "known_hosts": self.known_hosts,
            "identity_file": self.identity_file,
            "base_dir": self.base_dir,
            "scratch": self.scratch,
            "batch_system": self.batch_system,
            "allocation_required": self.allocation_required,
            "container": {
                "runtime": self.container.runtime,
                "image": self.container.image,
                "bind": list(self.container.bind),
            },
            "schedd": {
                "placement": self.schedd.placement,
                "port": self.schedd.port,
                "address": self.schedd.address,
            },
            "queues": [
                {
                    "name": q.name,
                    "batch_queue": q.batch_queue,
                    "description": q.description,
                    "min_nodes": q.min_nodes,
                    "max_nodes": q.max_nodes,
                    "cores_per_node": q.cores_per_node,
                    "memory_per_node": format_memory(q.memory_per_node_mb),
                    "memory_per_node_mb": q.memory_per_node_mb,
                    "gpus_per_node": q.gpus_per_node,
                    "max_walltime": format_walltime(q.max_walltime_s),
                    "max_walltime_s": q.max_walltime_s,
                    "whole_node": q.whole_node,
                    "default": q.name == self.default_queue.name,
                    "directives": list(q.directives),
                }
                for q in self.queues
            ],
            "batch": {
                "extra_directives": list(self.batch.extra_directives),
                "setup": list(self.batch.setup),
                "launcher": self.batch.launcher,
                "chunk_resources": list(self.batch.chunk_resources),
            },
            "defaults": {
                "nodes": self.defaults.nodes,
                "cores": self.defaults.cores,
                "memory_mb": self.defaults.memory_mb,
                "gpus": self.defaults.gpus,
                "walltime": (
                    format_walltime(self.defaults.walltime_s)
                    if self.defaults.walltime_s is not None
                    else None
                ),
                "queue": self.default_queue.name,
                "allocation": self.defaults.allocation,
            },
        }


# ---- finding profiles ----------------------------------------------------------------


def profile_dirs() -> list[Path]:
    """Where profiles are looked for, in order; a profile in a later directory replaces
    one of the same name in an earlier one (so your own copy wins over the shipped one):

    1. the project's `site-profiles/` (next to the `lumberjack` package, in a checkout);
    2. each directory in $LUMBERJACK_SITE_PROFILES (separated by ":");
    3. ~/.config/condor-lumberjack/sites.

    Directories that do not exist are listed but skipped when searching.
    """
    dirs: list[Path] = []
    shipped = Path(__file__).resolve().parents[2] / "site-profiles"
    if shipped.is_dir():
        dirs.append(shipped)
    for part in os.environ.get(PROFILES_ENV, "").split(os.pathsep):
        if part.strip():
            dirs.append(Path(part.strip()).expanduser())
    dirs.append(Path(USER_PROFILE_DIR).expanduser())
    return dirs


def profile_files() -> dict[str, Path]:
    """Every profile file found, by site name (the file name without .toml)."""
    found: dict[str, Path] = {}
    for directory in profile_dirs():
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found[path.stem] = path
    return dict(sorted(found.items()))


def find_profile(name: str) -> SiteProfile:
    """Load the profile of site `name`; BadInput naming the known sites if none."""
    files = profile_files()
    if name not in files:
        known = ", ".join(files) or "none (see site-profiles/README.md)"
        close = difflib.get_close_matches(name, list(files), n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        raise BadInput(f"unknown site '{name}'; known sites: {known}{hint}")
    return load_profile(files[name])


def list_profiles() -> list[SiteProfile]:
    """Every profile found, loaded (and so checked), sorted by name."""
    return [load_profile(path) for path in profile_files().values()]


def display_path(path: Path) -> str:
    """The path as messages show it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


# ---- loading and checking ------------------------------------------------------------


def load_profile(path: str | os.PathLike[str]) -> SiteProfile:
    """Read and check one profile file; BadInput on any problem."""
    path = Path(path)
    ctx = _Context(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{ctx.shown}: no such profile file") from None
    except OSError as exc:
        raise BadInput(f"{ctx.shown}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{ctx.shown}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{ctx.shown}: not valid TOML: {exc}") from None
    return _Loader(ctx, data).profile()


class _Context:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.shown = display_path(path)

    def error(self, message: str) -> BadInput:
        return BadInput(f"{self.shown}: {message}")


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


class _Table:
    """One TOML table with typed getters whose errors name the file and the key."""

    def __init__(self, ctx: _Context, where: str, data: Any, allowed: Sequence[str]) -> None:
        if not isinstance(data, dict):
            raise ctx.error(f"{where} must be a table")
        self.ctx, self.where, self.data = ctx, where, data
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = (
                    f'did you mean "{close[0]}"?' if close else "known keys: " + ", ".join(allowed)
                )
                raise ctx.error(f"unknown key {where}.{key}; {hint}")

    def key(self, name: str) -> str:
        return f"{self.where}.{name}"

    def fail(self, name: str, problem: str) -> BadInput:
        value = self.data.get(name)
        return self.ctx.error(f"{self.key(name)} {_shown(value)} {problem}")

    def missing(self, name: str, example: str) -> BadInput:
        return self.ctx.error(f"{self.key(name)} is missing; add e.g. {name} = {example}")

    def text(self, name: str, example: str, default: str | None = None) -> str:
        if name not in self.data:
            if default is None:
                raise self.missing(name, example)
            return default
        value = self.data[name]
        if not isinstance(value, str):
            raise self.fail(name, f"is not a string; write e.g. {name} = {example}")
        return value.strip()

    def optional_text(self, name: str, example: str) -> str | None:
        return self.text(name, example) if name in self.data else None

    def matching(self, name: str, pattern: re.Pattern[str], rule: str, example: str) -> str:
        value = self.text(name, example)
        if not pattern.match(value):
            raise self.fail(name, f"{rule}; write e.g. {name} = {example}")
        return value

    def choice(self, name: str, choices: Sequence[str], default: str | None = None) -> str:
        example = json.dumps(choices[0])
        value = self.text(name, example, default)
        if value not in choices:
            options = " or ".join(json.dumps(choice) for choice in choices)
            raise self.fail(name, f"is not one of the choices; write {options}")
        return value

    def integer(self, name: str, minimum: int, default: int | None = None) -> int:
        if name not in self.data:
            if default is None:
                raise self.missing(name, str(max(minimum, 1)))
            return default
        value = self.data[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"is not a whole number; write e.g. {name} = {max(minimum, 1)}")
        if value < minimum:
            raise self.fail(name, f"must be at least {minimum}")
        return value

    def optional_integer(self, name: str, minimum: int) -> int | None:
        return self.integer(name, minimum) if name in self.data else None

    def boolean(self, name: str, default: bool) -> bool:
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(name, f"is not true or false; write {name} = true or {name} = false")
        return value

    def lines(self, name: str, example: str) -> tuple[str, ...]:
        value = self.data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(name, f"is not a list of strings; write e.g. {name} = [{example}]")
        for item in value:
            if "\n" in item or "\r" in item:
                raise self.fail(name, "holds a string with a line break; give one line per item")
        return tuple(item.strip() for item in value)

    def walltime(self, name: str, required: bool) -> int | None:
        if name not in self.data:
            if required:
                raise self.missing(name, '"48:00:00"')
            return None
        value = self.data[name]
        try:
            seconds = parse_hhmmss(value if isinstance(value, str) else "")
        except ValueError:
            raise self.fail(name, f'is not HH:MM:SS; write e.g. "{_hhmmss_hint(value)}"') from None
        if seconds <= 0:
            raise self.fail(name, "must be longer than 00:00:00")
        return seconds

    def memory(self, name: str, required: bool) -> int | None:
        if name not in self.data:
            if required:
                raise self.missing(name, '"512GB"')
            return None
        value = self.data[name]
        try:
            mb = parse_memory(value if isinstance(value, str) else str(value), unit_required=True)
        except ValueError as exc:
            raise self.fail(name, f'{exc}; write e.g. "512GB"') from None
        if mb <= 0:
            raise self.fail(name, "must be more than 0")
        return mb


def _hhmmss_hint(value: Any) -> str:
    try:
        return format_walltime(parse_walltime(str(value)))
    except ValueError:
        return "48:00:00"


class _Loader:
    def __init__(self, ctx: _Context, data: dict[str, Any]) -> None:
        self.ctx = ctx
        self.root = _Table(
            ctx, "profile", data, ["site", "container", "schedd", "queues", "batch", "defaults"]
        )
        for section in ("site", "container", "queues"):
            if section not in data:
                what = "[[queues]]" if section == "queues" else f"[{section}]"
                raise ctx.error(f"{what} is missing; see site-profiles/README.md")
        self.data = data

    def profile(self) -> SiteProfile:
        site = _Table(self.ctx, "[site]", self.data["site"], _SITE_KEYS)
        name = site.matching(
            "name", _NAME, "is not lower-case letters, digits, - and _", '"mysite"'
        )
        if name != self.ctx.path.stem:
            raise site.fail(
                "name",
                f'must match the file name; rename the file to "{name}.toml" or set '
                f'name = "{self.ctx.path.stem}"',
            )
        batch_system = site.choice("batch_system", tuple(SYSTEMS))
        base_dir = site.matching("base_dir", _REMOTE_PATH, _REMOTE_RULE, '"$SCRATCH/lumberjack"')
        scratch = base_dir
        if "scratch" in site.data:
            scratch = site.matching("scratch", _REMOTE_PATH, _REMOTE_RULE, '"$SCRATCH"')
        user = None
        if "user" in site.data:
            user = site.matching("user", _USER, "is not a user name", '"jdoe"')
        known_hosts = site.optional_text("known_hosts", '"~/.ssh/known_hosts_mysite"')
        identity_file = site.optional_text("identity_file", '"~/.ssh/id_ed25519"')
        queues = self.queues(batch_system)
        defaults = self.defaults(queues)
        default_queue = _pick_default(self.ctx, queues, defaults.queue)
        self.check_defaults(defaults, default_queue)
        profile = SiteProfile(
            name=name,
            system=site.text("system", '"NERSC Perlmutter"'),
            description=site.text("description", '"..."', ""),
            source=site.text("source", '"https://docs.example.org/"', ""),
            checked=site.text("checked", '"2024-06"', ""),
            retired=site.boolean("retired", False),
            login_host=site.matching(
                "login_host", _HOST, "is not a host name", '"login.example.org"'
            ),
            user=user,
            port=_port(site),
            known_hosts=known_hosts or None,
            identity_file=identity_file or None,
            base_dir=base_dir,
            scratch=scratch,
            batch_system=batch_system,
            allocation_required=site.boolean("allocation_required", False),
            container=self.container(),
            schedd=self.schedd(),
            queues=queues,
            batch=self.batch(batch_system),
            defaults=RequestDefaults(
                nodes=defaults.nodes,
                cores=defaults.cores,
                memory_mb=defaults.memory_mb,
                gpus=defaults.gpus,
                walltime_s=defaults.walltime_s,
                queue=default_queue.name,
                allocation=defaults.allocation,
            ),
            path=self.ctx.path,
        )
        return profile

    def container(self) -> ContainerSpec:
        table = _Table(
            self.ctx, "[container]", self.data["container"], ["runtime", "image", "bind"]
        )
        image = table.text("image", '"$SCRATCH/lumberjack/image/lumberjack-site.sif"')
        if not (_REMOTE_PATH.match(image) or _URI.match(image)):
            raise table.fail(
                "image",
                "is neither a path at the site nor a docker://, oras://, library:// or "
                'https:// URI; write e.g. "$SCRATCH/lumberjack/image/lumberjack-site.sif"',
            )
        bind = table.lines("bind", '"/pscratch:/pscratch"')
        for item in bind:
            if not _BIND.match(item):
                raise self.ctx.error(
                    f"[container].bind {_shown(item)} has characters a bind spec cannot hold; "
                    'write e.g. "/scratch:/scratch:ro"'
                )
        return ContainerSpec(
            runtime=table.choice("runtime", RUNTIMES, "apptainer"), image=image, bind=bind
        )

    def schedd(self) -> ScheddSpec:
        table = _Table(
            self.ctx, "[schedd]", self.data.get("schedd", {}), ["placement", "port", "address"]
        )
        address = None
        if "address" in table.data:
            address = table.matching("address", _HOST, "is not a host name", '"login01"')
        port = table.integer("port", 0, 0)
        if port > 65535:
            raise table.fail("port", "is above 65535; use 0 to let the site agent choose")
        return ScheddSpec(
            placement=table.choice("placement", PLACEMENTS, "login"), port=port, address=address
        )

    def queues(self, batch_system: str) -> tuple[Queue, ...]:
        raw = self.data["queues"]
        if not isinstance(raw, list) or not raw:
            raise self.ctx.error("[[queues]] must hold at least one [[queues]] table")
        queues: list[Queue] = []
        prefix = SYSTEMS[batch_system].DIRECTIVE
        for number, item in enumerate(raw, start=1):
            table = _Table(self.ctx, f"[[queues]][{number}]", item, _QUEUE_KEYS)
            name = table.matching("name", _QUEUE_NAME, "is not a queue name", '"regular"')
            if any(queue.name == name for queue in queues):
                raise table.fail(
                    "name", "is used by an earlier queue; give each queue its own name"
                )
            batch_queue = name
            if "batch_queue" in table.data:
                batch_queue = table.text("batch_queue", '"regular"')
                if batch_queue and not _QUEUE_NAME.match(batch_queue):
                    raise table.fail(
                        "batch_queue", 'is not a queue name; write e.g. "regular" or ""'
                    )
            min_nodes = table.integer("min_nodes", 1, 1)
            max_nodes = table.integer("max_nodes", 1)
            if min_nodes > max_nodes:
                raise table.fail("min_nodes", f"is above max_nodes ({max_nodes}); lower it")
            directives = table.lines("directives", f'"{prefix} ..."')
            _check_directives(self.ctx, table.key("directives"), directives, prefix)
            queues.append(
                Queue(
                    name=name,
                    max_nodes=max_nodes,
                    cores_per_node=table.integer("cores_per_node", 1),
                    memory_per_node_mb=table.memory("memory_per_node", True) or 0,
                    gpus_per_node=table.integer("gpus_per_node", 0, 0),
                    max_walltime_s=table.walltime("max_walltime", True) or 0,
                    whole_node=table.boolean("whole_node", False),
                    default=table.boolean("default", False),
                    min_nodes=min_nodes,
                    batch_queue=batch_queue,
                    directives=directives,
                    description=table.text("description", '"..."', ""),
                )
            )
        return tuple(queues)

    def batch(self, batch_system: str) -> BatchSettings:
        table = _Table(
            self.ctx, "[batch]", self.data.get("batch", {}),
            ["extra_directives", "setup", "launcher", "chunk_resources"],
        )  # fmt: skip
        module = SYSTEMS[batch_system]
        directives = table.lines("extra_directives", f'"{module.DIRECTIVE} ..."')
        _check_directives(self.ctx, table.key("extra_directives"), directives, module.DIRECTIVE)
        launcher = ""
        if "launcher" in table.data:
            launcher = table.choice("launcher", module.LAUNCHERS)
        chunk = table.lines("chunk_resources", '"system=polaris"')
        if chunk and batch_system != "pbs":
            raise table.fail("chunk_resources", "is for PBS sites only; remove it")
        for item in chunk:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:+-]+$", item):
                raise self.ctx.error(
                    f"[batch].chunk_resources {_shown(item)} is not name=value; "
                    'write e.g. "system=polaris"'
                )
        return BatchSettings(
            extra_directives=directives,
            setup=table.lines("setup", '"module load apptainer"'),
            launcher=launcher,
            chunk_resources=chunk,
        )

    def defaults(self, queues: Sequence[Queue]) -> RequestDefaults:
        table = _Table(
            self.ctx, "[defaults]", self.data.get("defaults", {}),
            ["nodes", "cores", "memory", "gpus", "walltime", "queue", "allocation"],
        )  # fmt: skip
        queue = table.optional_text("queue", '"regular"')
        if queue is not None and not any(q.name == queue for q in queues):
            names = ", ".join(json.dumps(q.name) for q in queues)
            raise table.fail("queue", f"names no [[queues]] entry; use one of {names}")
        allocation = None
        if "allocation" in table.data:
            allocation = table.matching(
                "allocation", _ALLOCATION, "is not a project name", '"m1234"'
            )
        return RequestDefaults(
            nodes=table.optional_integer("nodes", 1),
            cores=table.optional_integer("cores", 1),
            memory_mb=table.memory("memory", False),
            gpus=table.optional_integer("gpus", 0),
            walltime_s=table.walltime("walltime", False),
            queue=queue,
            allocation=allocation,
        )

    def check_defaults(self, defaults: RequestDefaults, queue: Queue) -> None:
        where = f'of the default queue "{queue.name}"'
        checks = (
            ("nodes", defaults.nodes, queue.max_nodes, f"max_nodes ({queue.max_nodes})"),
            ("cores", defaults.cores, queue.cores_per_node,
             f"cores_per_node ({queue.cores_per_node})"),
            ("memory", defaults.memory_mb, queue.memory_per_node_mb,
             f"memory_per_node ({format_memory(queue.memory_per_node_mb)})"),
            ("gpus", defaults.gpus, queue.gpus_per_node, f"gpus_per_node ({queue.gpus_per_node})"),
            ("walltime", defaults.walltime_s, queue.max_walltime_s,
             f"max_walltime ({format_walltime(queue.max_walltime_s)})"),
        )  # fmt: skip
        for key, value, limit, label in checks:
            if value is not None and value > limit:
                shown = self.data["defaults"][key]
                raise self.ctx.error(
                    f"[defaults].{key} {_shown(shown)} exceeds the {label} {where}; lower it"
                )
        if defaults.nodes is not None and defaults.nodes < queue.min_nodes:
            raise self.ctx.error(
                f"[defaults].nodes {defaults.nodes} is below the min_nodes ({queue.min_nodes}) "
                f"{where}; raise it"
            )


_SITE_KEYS = [
    "name", "system", "description", "source", "checked", "retired", "login_host", "user",
    "port", "known_hosts", "identity_file", "base_dir", "scratch", "batch_system",
    "allocation_required",
]  # fmt: skip
_QUEUE_KEYS = [
    "name", "batch_queue", "description", "min_nodes", "max_nodes", "cores_per_node",
    "memory_per_node", "gpus_per_node", "max_walltime", "whole_node", "default", "directives",
]  # fmt: skip
_REMOTE_RULE = (
    "is not a path at the site (it starts with /, ~ or $VAR and holds letters, digits "
    "and _ . / $ { } ~ @ : + , = -)"
)


def _port(site: _Table) -> int:
    port = site.integer("port", 1, 22)
    if port > 65535:
        raise site.fail("port", "is above 65535; write the SSH port, e.g. port = 22")
    return port


def _check_directives(ctx: _Context, where: str, lines: Iterable[str], prefix: str) -> None:
    for line in lines:
        if not line.startswith(prefix + " "):
            raise ctx.error(
                f"{where} {_shown(line)} does not start with {prefix!r}; write e.g. "
                f'"{prefix} {line.lstrip("#").strip() or "..."}"'
            )


def _pick_default(ctx: _Context, queues: Sequence[Queue], named: str | None) -> Queue:
    marked = [queue for queue in queues if queue.default]
    if len(marked) > 1:
        names = ", ".join(json.dumps(queue.name) for queue in marked)
        raise ctx.error(f"[[queues]] marks {names} as default; keep default = true on one only")
    if named is not None:
        if marked and marked[0].name != named:
            raise ctx.error(
                f'[defaults].queue "{named}" disagrees with [[queues]] "{marked[0].name}" '
                "marked default = true; keep one of the two"
            )
        return next(queue for queue in queues if queue.name == named)
    if marked:
        return marked[0]
    if len(queues) == 1:
        return queues[0]
    raise ctx.error(
        "[[queues]] has no default queue; add default = true to the queue pilots use "
        "when --queue is not given"
    )
