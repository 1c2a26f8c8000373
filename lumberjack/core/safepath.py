"""Safe relative paths: the one rule for a name that must stay below its root.

Used wherever a name comes from a file we did not write or from the other side of the
SSH link (bundle manifests, the transfer stream, listings and outputs from the site).
Each caller words its own message from the reason returned here.
"""

from __future__ import annotations

#: Longer names are refused from the site (no file system allows them; a bad listing does).
MAX_LENGTH = 4096


def has_control_character(text: str) -> bool:
    """True if `text` holds a C0 control character or DEL: what breaks a log line, a
    terminal or a file list when a name from a side we do not trust is shown or stored."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def why_unsafe(path: object, *, printable: bool = False) -> str | None:
    """Why `path` is not a safe relative POSIX path below a root, or None if it is.

    Refused: empty, NUL, absolute, any `..` component, and anything that normalises
    differently (`./a`, `a//b`, `a/`, `.`). With `printable`, also control characters,
    names that are not UTF-8 and names longer than MAX_LENGTH: what goes into a file
    system, a log or a terminal from a side we do not trust.
    """
    if not isinstance(path, str) or not path:
        return "empty"
    if "\x00" in path:
        return "contains NUL"
    if path.startswith("/"):
        return "is absolute"
    parts = path.split("/")
    if ".." in parts:
        return "contains '..'"
    if any(part in ("", ".") for part in parts):
        return "is not normalised"
    if printable:
        if len(path) > MAX_LENGTH:
            return "is too long"
        if has_control_character(path):
            return "contains a control character"
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            return "is not UTF-8"
    return None
