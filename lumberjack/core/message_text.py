"""How a value from a file or from the site is shown in a one-line message: quoted,
shortened, nothing in it that could break the line or the terminal. Stdlib only: the
access point's rooms all use it, and so may the site."""

from __future__ import annotations

_MAX_SHOWN = 80  # characters of a bad value quoted in an error message


def printable(text: str, keep: str = "") -> str:
    """`text` with every character that cannot be printed (control characters, lone
    surrogates) but those in `keep` made "?": what the site says, safe to show here."""
    return "".join(c if c.isprintable() or c in keep else "?" for c in text)


def one_line(text: str, empty: str = "", most: int | None = None) -> str:
    """`text` on one line (a message, a ClassAd string): every run of white space and
    NUL one space; `empty` when nothing is left; at most `most` characters."""
    line = " ".join(text.replace("\0", " ").split()) or empty
    return line if most is None else line[:most]


def shortened(text: str, most: int = _MAX_SHOWN) -> str:
    """`text`, cut to `most` characters with "..." at the end when longer."""
    return text if len(text) <= most else text[: most - 3] + "..."


def shown(text: str) -> str:
    """A value for a one-line message: repr-quoted (no raw newlines), shortened."""
    return repr(shortened(text))
