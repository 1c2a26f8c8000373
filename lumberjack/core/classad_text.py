"""ClassAd expression TEXT as stored in job_queue.log: string literals, booleans, integers.

Stdlib only: this module may be copied to an HPC login node on its own.

job_queue.log holds every attribute value as expression text in the OLD ClassAd syntax,
not the new one. The schedd reads each value with ``ParseClassAdRvalExpr`` (an old-syntax
parser) and writes strings with an old-syntax unparser (``ExprTreeToString`` /
``QuoteAdStringValue``). In a string literal of that syntax:

- a backslash is an ordinary character, except that ``\\"`` stands for a literal ``"``;
- a backslash just before the closing quote at the very end of the text means the string
  ends with a backslash (``"a\\"`` is the one-character-longer string ``a\\``);
- there are no other escapes (no ``\\n``, no octal) and nothing is written for non-ASCII
  characters: they go into the line as they are.

So ``x"y\\z`` is stored as ``"x\\"y\\z"``. The new syntax (``classad2.quote``,
``classad2.ExprTree``) would write and read ``"x\\"y\\\\z"`` instead; the two agree only on
strings without a backslash. Using the new syntax here would double every backslash in
a path each time a job crosses a schedd.

A line-based log cannot hold a newline inside a value, so ``quote_string`` refuses
newline, carriage return and NUL (``ValueError``; callers turn it into their own error).
Text the site wrote goes through ``site_string`` instead, which never refuses.
"""

from __future__ import annotations

import re
from typing import Optional

_INT_RE = re.compile(r"\s*([-+]?[0-9]+)\s*")
_UNREPRESENTABLE = ("\n", "\r", "\x00")


def quote_string(s: str) -> str:
    """Return the ClassAd string literal for ``s``, as job_queue.log stores it."""
    for ch in _UNREPRESENTABLE:
        if ch in s:
            raise ValueError(f"a ClassAd string in job_queue.log cannot contain {ch!r}")
    return '"' + s.replace('"', '\\"') + '"'


def site_text(text: str, most: int) -> str:
    """`text` another side wrote (the site), as a string at home may hold it: at most
    `most` characters, white space (newline, tab) a blank and every other character that
    cannot be printed (control characters, NUL, lone surrogates that are no UTF-8) "?".
    One character for one, so text that needs none of it is kept as it is."""
    # Cut first: a hostile answer may be megabytes; each character maps to one.
    return "".join(" " if c.isspace() else c if c.isprintable() else "?" for c in text[:most])


def site_string(text: str, most: int) -> str:
    """The ClassAd string literal for `text` the site wrote (site_text): always a
    literal, never an expression the local schedd would evaluate in its jobs' ads."""
    return quote_string(site_text(text, most))


def unquote_string(text: str) -> Optional[str]:
    """Return the value of ``text`` if it is one string literal, else None.

    None for anything else: ``strcat(...)``, ``undefined``, a number, two strings in a
    row, an unterminated literal. Leading and trailing whitespace is allowed, as the
    schedd's parser allows it.
    """
    s = text.lstrip()
    if not s.startswith('"'):
        return None
    n = len(s)
    parts: list[str] = []
    run_start = 1  # where the current run of plain characters begins
    pos = 1
    while True:
        j = s.find('"', pos)
        if j < 0:
            return None  # unterminated
        # Mirrors the schedd's lexer: a quote right after a backslash (that was read in
        # this run) is literal, unless it is the last character of the text.
        if j > run_start and s[j - 1] == "\\":
            if j + 1 >= n or s[j + 1] == "\n":
                parts.append(s[run_start:j])  # string ends with a backslash
                rest = s[j + 1 :]
                break
            parts.append(s[run_start : j - 1])
            parts.append('"')
            run_start = pos = j + 1
            continue
        parts.append(s[run_start:j])
        rest = s[j + 1 :]
        break
    if rest.strip():
        return None
    return "".join(parts)


def int_or_none(text: Optional[str]) -> Optional[int]:
    """The value of an integer literal (``0``, ``-1``, `` 42 ``), else None."""
    if text is None:
        return None
    m = _INT_RE.fullmatch(text)
    return int(m.group(1)) if m else None


def literal_bool(text: Optional[str]) -> Optional[bool]:
    """True/False for a boolean or integer literal (as HTCondor reads flags), else None."""
    if text is None:
        return None
    word = text.strip().lower()
    if word == "true":
        return True
    if word == "false":
        return False
    n = int_or_none(text)
    return None if n is None else n != 0


def is_true(text: Optional[str]) -> bool:
    """True only for a literal that HTCondor reads as true (``true``, ``TRUE``, ``1``)."""
    return literal_bool(text) is True


def is_undefined(text: Optional[str]) -> bool:
    """True for the literal ``undefined`` (any case), which means the same as unset."""
    return text is not None and text.strip().lower() == "undefined"
