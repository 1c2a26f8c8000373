"""The value types a profile key may hold, each with its check and its example.

A check that fails raises `problem(...)`; `lumberjack.profiles.messages` turns it into
one line naming the file, the key and a fix ("write e.g. KEY = EXAMPLE"). Validation
context: `batch_system`, the [site] batch system's name when it is a known one (its
directive prefix and launchers check [batch] and [[queues]]).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Callable

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictStr,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

from lumberjack.core.contract import PLACEMENTS as CONTRACT_PLACEMENTS
from lumberjack.core.shell_safe import DIRECTIVE_WORD, REMOTE_PATH
from lumberjack.core.slot_ad import ARCHES
from lumberjack.core.units import format_walltime, parse_hhmmss, parse_memory, parse_walltime
from lumberjack.site.batch import SYSTEMS
from lumberjack.site.gpus import GPU_VENDORS
from lumberjack.site.runtime import RUNTIMES as RUNTIME_CLASSES

# The runtimes the agent registers (site/runtime.py): "podman-hpc" (NERSC),
# "container-engine" (CSCS) and "none" (HTCondor from a release tarball) too, so that
# profiles can say what the centre documents; see site-profiles/README.md for what runs.
# "apptainer-emulated": test sites only (site/runtime.py EmulatedApptainer).
RUNTIMES = tuple(RUNTIME_CLASSES)
# The contract's placements: "login", the remote schedd lives on the login node;
# "allocation", inside the pilots' batch allocation, for sites whose login nodes must
# not host long-running services.
PLACEMENTS = CONTRACT_PLACEMENTS
# "key": a key logs in without a prompt; "mfa": every new connection asks for a one-time code.
AUTH_MODES = ("key", "mfa")

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()/+-]*$")
_REMOTE_RULE = (
    "is not a path at the site (it starts with /, ~ or $VAR and holds letters, digits "
    "and _ . / $ { } ~ @ : + , = -)"
)


def batch_system(name: str) -> Any:
    """The batch system `name` of `lumberjack.site.batch.SYSTEMS`; profiles use only its
    `DIRECTIVE` (header prefix, e.g. "#SBATCH") and `LAUNCHERS` (names a pilot may use)."""
    return SYSTEMS[name]


def problem(
    text: str, *, key: tuple[str | int, ...] = (), value: Any = None, show: bool = True
) -> PydanticCustomError:
    """A failed check, shown as `WHERE VALUE TEXT`: WHERE is where the check ran plus
    `key`; VALUE is what the file holds there, `value` if given, or nothing (show=False)."""
    ctx: dict[str, Any] = {"problem": text, "key": key, "show": show}
    if value is not None:
        ctx["value"] = value
    return PydanticCustomError("profile", "{problem}", ctx)


def _matching(pattern: re.Pattern[str], rule: str, example: str) -> Any:
    def check(value: str, info: ValidationInfo) -> str:
        if not pattern.match(value):
            raise problem(f"{rule}; write e.g. {info.field_name} = {example}")
        return value

    return Annotated[StrictStr, Field(examples=[example]), AfterValidator(check)]


def _choice(choices: Callable[[], tuple[str, ...]], example: str) -> Any:
    def check(value: str) -> str:
        if value not in choices():
            options = " or ".join(json.dumps(choice) for choice in choices())
            raise problem(f"is not one of the choices; write {options}")
        return value

    return Annotated[StrictStr, Field(examples=[example]), AfterValidator(check)]


def _lines(example: Callable[[ValidationInfo], str]) -> Any:
    def check(value: Any, info: ValidationInfo) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise problem(
                f"is not a list of strings; write e.g. {info.field_name} = [{example(info)}]"
            )
        if any("\n" in item or "\r" in item for item in value):
            raise problem("holds a string with a line break; give one line per item")
        return tuple(item.strip() for item in value)

    return Annotated[tuple[str, ...], BeforeValidator(check)]


def _hhmmss(value: Any) -> int:
    try:
        seconds = parse_hhmmss(value if isinstance(value, str) else "")
    except ValueError:
        try:
            hint = format_walltime(parse_walltime(str(value)))
        except ValueError:
            hint = "48:00:00"
        raise problem(f'is not HH:MM:SS; write e.g. "{hint}"') from None
    if seconds <= 0:
        raise problem("must be longer than 00:00:00")
    return seconds


def _memory(value: Any) -> int:
    try:
        mb = parse_memory(value if isinstance(value, str) else str(value), unit_required=True)
    except ValueError as exc:
        raise problem(f'{exc}; write e.g. "512GB"') from None
    if mb <= 0:
        raise problem("must be more than 0")
    return mb


def port_below_65536(fix: str) -> AfterValidator:
    def check(value: int) -> int:
        if value > 65535:
            raise problem(f"is above 65535; {fix}")
        return value

    return AfterValidator(check)


def _directives(info: ValidationInfo) -> str:
    name = (info.context or {}).get("batch_system")
    return f'"{batch_system(name).DIRECTIVE} ..."' if name else '"#... ..."'


def _directive_prefix(lines: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
    name = (info.context or {}).get("batch_system")
    if name:
        prefix = batch_system(name).DIRECTIVE
        for line in lines:
            if not line.startswith(prefix + " "):
                raise problem(
                    f"does not start with {prefix!r}; write e.g. "
                    f'"{prefix} {line.lstrip("#").strip() or "..."}"',
                    value=line,
                )
    return lines


Text = Annotated[StrictStr, Field(examples=['"..."'])]
SiteName = _matching(_NAME, "is not lower-case letters, digits, - and _", '"mysite"')
QueueName = _matching(QUEUE_NAME, "is not a queue name", '"regular"')
UserName = _matching(_USER, "is not a user name", '"jdoe"')
Hostname = _matching(_HOST, "is not a host name", '"login.example.org"')
NodeAddress = _matching(_HOST, "is not a host name", '"login01"')
RemotePath = _matching(REMOTE_PATH, _REMOTE_RULE, '"$SCRATCH/lumberjack"')
Scratch = _matching(REMOTE_PATH, _REMOTE_RULE, '"$SCRATCH"')
Allocation = _matching(DIRECTIVE_WORD, "is not a project name", '"m1234"')
BatchSystemName = _choice(lambda: tuple(SYSTEMS), '"slurm"')
Runtime = _choice(lambda: RUNTIMES, '"apptainer"')
GpuVendor = _choice(lambda: GPU_VENDORS, '"nvidia"')
Arch = _choice(lambda: ARCHES, '"aarch64"')
GpuModel = _matching(_GPU_MODEL, "is not a GPU model name", '"A100-SXM4-40GB"')
Placement = _choice(lambda: PLACEMENTS, '"login"')
AuthMode = _choice(lambda: AUTH_MODES, '"key"')
#: How far lumberjack has run a site of this kind: its batch system and runtime end to end
#: on the project's testbed (Slurm + Apptainer, Slurm + none), or its scripts rendered and
#: checked only; a profile of your own is "untested" until you say otherwise.
TESTED = ("end-to-end on the testbed", "rendered only", "untested")
Tested = _choice(lambda: TESTED, '"rendered only"')
Walltime = Annotated[int, BeforeValidator(_hhmmss), Field(examples=['"48:00:00"'])]
Memory = Annotated[int, BeforeValidator(_memory), Field(examples=['"512GB"'])]
Directives = Annotated[_lines(_directives), AfterValidator(_directive_prefix)]
Binds = _lines(lambda _: '"/pscratch:/pscratch"')
SetupLines = _lines(lambda _: '"module load apptainer"')
ChunkResources = _lines(lambda _: '"system=polaris"')


class Table(BaseModel):
    """One TOML table: unknown keys are errors, strings are stripped, values immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, populate_by_name=True
    )
