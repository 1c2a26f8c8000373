"""HTCondor's file-list and output-remap syntax, read as HTCondor reads it.

TransferInput and TransferOutput are comma-separated lists; TransferOutputRemaps is
``"src1 = dst1; src2=dst2"`` and is applied by ``filename_remap_find``'s rules. Export
checks the remaps, import applies them to the outputs it places.
"""

from __future__ import annotations

from typing import Optional

from lumberjack.core.message_text import shown
from lumberjack.errors import BadInput

# HTCondor aborts a remap chain after this many steps (MAX_REMAP_RECURSIONS).
MAX_REMAP_DEPTH = 128
_ASCII_SPACE = " \t\n\r\f\v"  # what HTCondor (C isspace) trims around list entries


def split_file_list(text: str) -> list[str]:
    """Entries of an HTCondor file list (TransferInput, TransferOutput).

    Comma separated, no quoting; ASCII whitespace around an entry is dropped, spaces
    inside are kept.
    """
    entries = (e.strip(_ASCII_SPACE) for e in text.split(","))
    return [e for e in entries if e]


def parse_remaps(text: str) -> list[tuple[str, str]]:
    """Parse TransferOutputRemaps ``"src1 = dst1; src2=dst2"`` into (src, dst) pairs.

    As HTCondor does: tabs and newlines are dropped, spaces around names trimmed, a
    backslash makes a following ``;`` or ``=`` part of the name (the manual's escapes);
    any other backslash is an ordinary character. A field without ``=`` is skipped.
    """
    text = text.replace("\t", "").replace("\n", "")
    pairs: list[tuple[str, str]] = []
    for field_text in _split_escaped(text, ";"):
        parts = _split_escaped(field_text, "=", maxsplit=1)
        if len(parts) != 2:
            continue
        src, dst = (_unescape_remap(p).strip(_ASCII_SPACE) for p in parts)
        if src:
            pairs.append((src, dst))
    return pairs


def remap_name(remaps: list[tuple[str, str]], name: str, _depth: int = 0) -> Optional[str]:
    """Apply remaps to an output name as HTCondor's ``filename_remap_find`` does.

    The first rule whose source equals ``name`` wins and its destination is remapped again
    (chains); without an exact rule the parent directory is remapped and the last component
    appended (``results = /data/r`` sends ``results/a.txt`` to ``/data/r/a.txt``). None when
    no rule applies. A loop raises BadInput.
    """
    if _depth > MAX_REMAP_DEPTH:
        raise BadInput(f"output remaps loop on {shown(name)}")
    for src, dst in remaps:
        if src == name:
            further = remap_name(remaps, dst, _depth + 1)
            return dst if further is None else further
    parent, _, entry = name.rpartition("/")
    if parent:
        new_parent = remap_name(remaps, parent, _depth + 1)
        if new_parent is not None:
            return new_parent.rstrip("/") + "/" + entry
    return None


def _split_escaped(text: str, delim: str, maxsplit: int = -1) -> list[str]:
    """Split on ``delim`` not preceded by a backslash; escapes are left in place."""
    if "\\" not in text:  # no escapes: the plain split says the same
        return text.split(delim, maxsplit)
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in ";=":
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == delim and (maxsplit < 0 or len(parts) < maxsplit):
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape_remap(text: str) -> str:
    return text.replace("\\;", ";").replace("\\=", "=")
