"""A job_queue.log to its ads in one pass: each line parsed and played as it is read, with
no list of records in between (what `inspect` needs; jobqueuelog.py has the two passes).

The pass plays a transaction's records as it reads them instead of at its 106: the same
records in the same order, so the same ads once the 106 is read. What one pass cannot
settle as it goes makes the two passes (jobqueuelog.parse_file, then replay) answer for
the whole log instead: an unfinished final transaction (the schedd drops it), a line
without its final newline (a torn write, or not), any line or replay error (the two passes
give it, with its line number, exactly as before), two spellings of one attribute name
(ClassAd names are case-insensitive). The answer is therefore always the two passes'
answer; this is only the fast way to it for a log a schedd wrote.

Every check of jobqueuelog._parse_line stays: a line the pass does not vouch for on sight
goes through _parse_line itself, and the names and ad types it stored without a look are
checked once each at the end.

Stdlib only, like jobqueuelog.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from itertools import repeat

from lumberjack.core import jobqueuelog as jql

__all__ = ["read_ads", "read_json"]

#: Bytes of a log read at a time, as in jobqueuelog.parse_file.
PIECE_BYTES = jql.PIECE_BYTES
# Stand-ins for "\n" in a JSON-escaped text: printable ASCII, so escaping keeps them as
# they are; a piece takes the first one it does not contain.
_SEPARATORS = "~`|^}{"
# Blanks other than " ": JSON escapes them, so an escaped value could start with one
# unseen (see _Pass.lines); a piece with any of them is read unescaped.
_ESCAPED_BLANKS = "\t\r\x0b\x0c"


class _TwoPasses(Exception):
    """The two-pass reader answers for this log (see the module docstring)."""


class _Unescapable(Exception):
    """A piece cannot be read JSON-escaped: read the log again unescaped."""


class _Pass:
    """The state of one pass over a log: the live ads, and what the end must check.

    ``escaped``: lines are JSON-escaped text (ensure_ascii), so names and values are
    stored as they go into the JSON; keys are the same either way (digits, "." and "-").
    A key is taken as spelt: another spelling of a live ad's key ("1.-1" for "01.-1",
    which the schedd never writes) is left to the two passes.
    """

    def __init__(self, escaped: bool) -> None:
        self.escaped = escaped
        self.ads: dict[str, dict[str, str]] = {}  # key of a live ad -> attrs, in order
        self.types: dict[str, tuple[str, str]] = {}  # key -> (MyType, TargetType)
        self.gone_keys: list[str] = []  # keys of destroyed ads
        self.gone_names: set[str] = set()  # names once stored, since deleted or destroyed
        self.good_types: set[str] = set()  # ad types _parse_line passed
        self.good_keys: dict[str, str] = {}  # _parse_line's memories
        self.good_tokens: dict[str, str] = {}
        self.open_txn = False

    def lines(self, lines: Iterable[str]) -> None:
        """Play whole lines of the log, in order.

        The shortcut takes a 103 to the key of a live ad whose value starts with a
        character above " " (so it is not blank; NUL was refused for the whole text; a
        JSON-escaped blank starts with "\\" only for _ESCAPED_BLANKS, which an escaped
        piece does not hold), a 101 of ad types seen before, "105 " and "106 ". Their
        keys and names are checked at the end (finish). Anything else takes _slow.
        """
        ads, types, good_types = self.ads, self.types, self.good_types
        attrs_of = ads.get
        open_txn = self.open_txn
        for line in lines:
            parts = line.split(" ", 3)
            if len(parts) == 4:
                op, key, name, value = parts
                if op == "103":
                    if value >= "!":
                        attrs = attrs_of(key)
                        if attrs is not None:
                            attrs[name] = value
                            continue
                elif op == "101" and name in good_types and value in good_types:
                    if key in ads:
                        raise _TwoPasses  # 101 of a live ad
                    ads[key] = {}
                    types[key] = (name, value)
                    continue
            elif line == "105 ":
                if open_txn:
                    raise _TwoPasses
                open_txn = True
                continue
            elif line == "106 ":
                if not open_txn:
                    raise _TwoPasses
                open_txn = False
                continue
            self.open_txn = open_txn
            self._slow(line)
            open_txn = self.open_txn
        self.open_txn = open_txn

    def _slow(self, line: str) -> None:
        """Any line, with every check of jobqueuelog._parse_line, then played."""
        raw = self._unescape(line)
        try:
            record = jql._parse_line(raw, self.good_keys, self.good_tokens)
        except jql._LineError:
            raise _TwoPasses from None
        op = record[0]
        if op == jql.OP_BEGIN_TRANSACTION or op == jql.OP_END_TRANSACTION:
            if self.open_txn == (op == jql.OP_BEGIN_TRANSACTION):
                raise _TwoPasses  # nested 105, or 106 without 105
            self.open_txn = not self.open_txn
            return
        if op == jql.OP_LOG_HISTORICAL_SEQUENCE_NUMBER:
            return
        # The fields as the ads store them (escaped if the line is): split like the line.
        _, key, *rest = line.split(" ", 3 if op == jql.OP_SET_ATTRIBUTE else -1)
        if op == jql.OP_NEW_CLASSAD:
            if key in self.ads:
                raise _TwoPasses  # 101 of a live ad
            self.ads[key] = {}
            self.types[key] = (rest[0], rest[1])
            self.good_types.update(rest)
            return
        attrs = self.ads.get(key)
        if attrs is None:
            raise _TwoPasses  # no such ad, or another spelling of a live ad's key
        if op == jql.OP_SET_ATTRIBUTE:
            attrs[rest[0]] = rest[1]
        elif op == jql.OP_DELETE_ATTRIBUTE:
            stored = jql._find_spelling(attrs, rest[0])
            if stored is not None:
                del attrs[stored]
                self.gone_names.add(stored)
        else:  # OP_DESTROY_CLASSAD
            del self.ads[key]
            self.gone_keys.append(key)
            self.gone_names.update(attrs)
            del self.types[key]

    def finish(self) -> dict[str, dict[str, str]]:
        """The ads, once the end of the log is read, after the checks the shortcut left
        for the end: every key and name, each once."""
        if self.open_txn:
            raise _TwoPasses  # an unfinished final transaction: the schedd drops it
        _check_keys([*self.ads, *self.gone_keys], repeats=bool(self.gone_keys))
        names = self.gone_names.union(*self.ads.values())
        for name in names:
            token = self._unescape(name)
            if not token or jql.BAD_TOKEN.search(token):
                raise _TwoPasses
        if len({jql.fold_name(name) for name in names}) != len(names):
            raise _TwoPasses  # two spellings of one name: only the replay knows which
        return self.ads

    def _unescape(self, text: str) -> str:
        return json.loads(f'"{text}"') if self.escaped else text


# Each key a CLUSTER.PROC line.
_KEYS = re.compile(r"(?:[0-9]+\.-?[0-9]+\n)*")


def _check_keys(keys: list[str], repeats: bool) -> None:
    """_TwoPasses unless every key is CLUSTER.PROC and no two keys spell the same
    numbers (a 101 of a live ad under another spelling is an error, and an ad destroyed
    and made again under another spelling is rare enough for the two passes).
    `repeats`: whether a key may be in `keys` twice (destroyed and made again)."""
    text = "\n" + "\n".join(keys) + "\n"
    if not _KEYS.fullmatch(text, 1):
        raise _TwoPasses
    # Keys are their numbers: without the leading zeros ("-0" is 0 too), one spelling each.
    for zeros, bare in (("\n0", "\n"), (".0", "."), (".-0", ".-")):
        while zeros in text:
            text = text.replace(zeros, bare)
    spellings = len(set(keys)) if repeats else len(keys)
    if len(set(text.replace(".-\n", ".\n").split("\n"))) != spellings + 1:  # + 1: ""
        raise _TwoPasses


def _pieces(handle: jql.Readable, piece_bytes: int) -> Iterable[str]:
    """The log's text in pieces of whole lines; _TwoPasses if it does not end in "\\n"
    or holds a NUL anywhere (an error, or a torn write: the two passes tell which)."""
    rest = b""
    while True:
        block = handle.read(piece_bytes)
        if not block:
            if rest:
                raise _TwoPasses
            return
        data = rest + block if rest else block
        cut = data.rfind(b"\n") + 1
        piece, rest = data[:cut], data[cut:]
        del data
        if b"\x00" in piece:
            raise _TwoPasses
        if piece:
            yield piece.decode("utf-8", "surrogateescape")


def _escaped_lines(text: str) -> list[str]:
    """The lines of `text`, each JSON-escaped (ensure_ascii): the text escaped at once,
    its "\\n" first made a character that is in none of its lines, so it can be split
    on again. _Unescapable if a blank other than " " is in the text (see _Pass.lines)."""
    if any(blank in text for blank in _ESCAPED_BLANKS):
        raise _Unescapable
    sep = next((c for c in _SEPARATORS if c not in text), None)
    if sep is not None:  # printable ASCII: escaping keeps it as it is
        return json.encoder.encode_basestring_ascii(text.replace("\n", sep))[1:-1].split(sep)
    # NUL (refused in any log) is escaped to \u0000; nothing else is, but the text's own
    # \u0000 (a backslash, then u0000) would be escaped to \\u0000, which holds it too.
    if "\\u0000" in text:
        raise _Unescapable
    escaped = json.encoder.encode_basestring_ascii(text.replace("\n", "\x00"))
    return escaped[1:-1].split("\\u0000")


def _one_pass(handle: jql.Readable, escaped: bool, piece_bytes: int) -> _Pass:
    state = _Pass(escaped)
    for text in _pieces(handle, piece_bytes):
        lines = _escaped_lines(text) if escaped else text.split("\n")
        del text
        lines.pop()  # the empty remainder after the final newline
        state.lines(lines)
        del lines
    state.finish()
    return state


def _two_passes(handle: jql.Readable, source: str) -> dict[str, jql.Ad]:
    handle.seek(0)  # type: ignore[attr-defined]
    return jql.replay(jql.parse_file(handle, source), source=source)


def read_ads(
    handle: jql.Readable, source: str, piece_bytes: int = PIECE_BYTES
) -> dict[str, jql.Ad]:
    """The ads of the log open in `handle` (binary, at its start, seekable), exactly as
    jobqueuelog.replay(jobqueuelog.parse_file(handle, source)) gives them, errors
    included."""
    with jql.no_gc():
        try:
            state = _one_pass(handle, False, piece_bytes)
        except _TwoPasses:
            return _two_passes(handle, source)
        return {key: jql.Ad(key, *state.types[key], attrs) for key, attrs in state.ads.items()}


def read_json(handle: jql.Readable, source: str, piece_bytes: int = PIECE_BYTES) -> str:
    """`inspect --json`'s document for the log open in `handle` (binary, at its start,
    seekable): json.dumps({"ads": {KEY: {NAME: VALUE}}}) of read_ads' ads, errors
    included; no newline at the end."""
    with jql.no_gc():
        try:
            return _escaped_document(_one_pass(handle, True, piece_bytes).ads)
        except _Unescapable:
            handle.seek(0)  # type: ignore[attr-defined]
        except _TwoPasses:
            return json.dumps({"ads": _two_passes_attrs(handle, source)})
        try:
            return json.dumps({"ads": _one_pass(handle, False, piece_bytes).ads})
        except _TwoPasses:
            return json.dumps({"ads": _two_passes_attrs(handle, source)})


def _two_passes_attrs(handle: jql.Readable, source: str) -> dict[str, dict[str, str]]:
    return {key: ad.attrs for key, ad in _two_passes(handle, source).items()}


def _escaped_document(ads: dict[str, dict[str, str]]) -> str:
    """json.dumps({"ads": ads}) of ads whose names and values are JSON-escaped already
    (and whose keys need no escaping): joins, no per-string work."""
    if not ads:
        return '{"ads": {}}'
    bodies = map('", "'.join, map(map, repeat('": "'.join), map(dict.items, ads.values())))
    text = '{"ads": {"' + '"}, "'.join(map('": {"'.join, zip(ads, bodies))) + '"}}}'
    # An empty ad came out as {""}: no other {""} can be in the text, as every raw '"' is
    # one of the joins' and names are never empty.
    return text.replace('{""}', "{}") if not all(ads.values()) else text
