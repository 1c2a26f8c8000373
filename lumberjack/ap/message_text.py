"""How a value from a file or from the site is shown in a one-line message: quoted,
shortened, nothing in it that could break the line or the terminal."""

from __future__ import annotations

_MAX_SHOWN = 80  # characters of a bad value quoted in an error message


def printable(text: str, keep: str = "") -> str:
    """`text` with every character that cannot be printed (control characters, lone
    surrogates) but those in `keep` made "?": what the site says, safe to show here."""
    return "".join(c if c.isprintable() or c in keep else "?" for c in text)


def one_line(text: str, empty: str = "") -> str:
    """`text` on one line, every run of white space (newlines too) one space; `empty`
    when nothing is left."""
    return " ".join(text.split()) or empty


def shortened(text: str, most: int = _MAX_SHOWN) -> str:
    """`text`, cut to `most` characters with "..." at the end when longer."""
    return text if len(text) <= most else text[: most - 3] + "..."


def shown(text: str) -> str:
    """A value for a one-line message: repr-quoted (no raw newlines), shortened."""
    return repr(shortened(text))
