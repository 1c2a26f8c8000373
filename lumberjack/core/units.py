"""Walltimes and memory sizes: how people and profiles write them, how batch systems take
them; byte counts as messages show them. Stdlib only: both sides of the SSH link use it.

Walltime as "HH:MM:SS", "MM:SS", "D-HH:MM:SS", "2h", "90m", "45s", "1d12h" or a plain
number of minutes (as sbatch reads it); memory as "4GB", "4000MB", "4G", "1.5T" or a
plain number of MB, in binary units as Slurm counts them (1 GB = 1024 MB).
"""

from __future__ import annotations

import math
import re
from typing import Union

_HMS = re.compile(r"^(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?$")
_UNITS = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])", re.IGNORECASE)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]I?B?)?$", re.IGNORECASE)
_MEMORY_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_STRICT_HMS = re.compile(r"^(\d+):([0-5]\d):([0-5]\d)$")


def parse_walltime(text: str) -> int:
    """Seconds from "HH:MM:SS", "MM:SS", "D-HH:MM:SS", "2h", "90m", "1d12h" or minutes.

    Raises ValueError with a short reason; callers add the flag or key.
    """
    value = str(text).strip().lower()
    if not value:
        raise ValueError("is empty")
    if value.isdigit():
        return int(value) * 60
    match = _HMS.match(value)
    if match:
        days, first, second, third = match.groups()
        if third is None and days is None:  # MM:SS; minutes may pass 59, as in Slurm
            hours, minutes, seconds = 0, int(first), int(second)
            if seconds > 59:
                raise ValueError("has seconds above 59")
        else:  # HH:MM:SS, D-HH:MM:SS or D-HH:MM
            hours, minutes, seconds = int(first), int(second), int(third or 0)
            if minutes > 59 or seconds > 59:
                raise ValueError("has minutes or seconds above 59")
        return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
    parts = _UNITS.findall(value)
    if parts and "".join(f"{n}{u}" for n, u in parts) == value.replace(" ", ""):
        total = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
        return int(math.ceil(total))
    raise ValueError('is not a duration; write e.g. "02:00:00", "90m", "2h" or "1d12h"')


def parse_hhmmss(text: str) -> int:
    """Seconds from a strict "HH:MM:SS" (hours may pass 24); ValueError otherwise."""
    match = _STRICT_HMS.match(str(text).strip())
    if not match:
        raise ValueError("is not HH:MM:SS")
    hours, minutes, seconds = (int(part) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def parse_memory(text: Union[str, int], *, unit_required: bool = False) -> int:
    """MB from "4GB", "4000MB", "4G", "1.5T", "512MiB" or a plain number of MB."""
    if isinstance(text, int) and not isinstance(text, bool):
        if unit_required:
            raise ValueError("has no unit")
        return text
    value = str(text).strip()
    match = _MEMORY.match(value)
    if not match:
        raise ValueError('is not a memory size; write e.g. "4GB" or "4000MB"')
    number, unit = match.groups()
    if unit is None:
        if unit_required:
            raise ValueError("has no unit")
        return int(math.ceil(float(number)))
    return int(math.ceil(float(number) * _MEMORY_MB[unit[0].upper()]))


def parse_size(text: str) -> int:
    """Bytes from a size in parse_memory's spellings ("1KB", "500MB", "4GB"; a plain
    number is MB): a limit below a megabyte stays what it says."""
    match = _MEMORY.match(str(text).strip())
    if not match:
        raise ValueError('is not a size; write e.g. "500MB" or "4GB"')
    number, unit = match.groups()
    return int(math.ceil(float(number) * _MEMORY_MB[(unit or "M")[0].upper()] * 1024 * 1024))


def format_size(size: int) -> str:
    """Bytes, rounded up, in the largest unit that keeps a whole number above 0:
    26000 -> "26KB" (binary units, as parse_size reads them)."""
    for unit, factor in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= factor:
            return f"{-(-size // factor)}{unit}"
    return f"{size} bytes"


def format_walltime(seconds: int) -> str:
    """Seconds as HH:MM:SS, hours beyond 24 allowed ("48:00:00"), as batch systems take."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def format_memory(mb: int) -> str:
    """MB in the largest whole binary unit: 2048 -> "2GB", 1536 -> "1536MB"."""
    if mb and mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}TB"
    if mb and mb % 1024 == 0:
        return f"{mb // 1024}GB"
    return f"{mb}MB"


def format_bytes(size: int) -> str:
    """Bytes in the largest binary unit it reaches, one decimal: 2147483648 -> "2.0 GiB"."""
    value, unit = float(size), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{size} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
