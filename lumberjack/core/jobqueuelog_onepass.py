"""A job_queue.log to its ads in one pass: each line parsed and played as it is read, with
no list of records in between (what `inspect` needs; jobqueuelog.py has the two passes).

The pass plays a transaction's records as it reads them instead of at its 106: the same
records in the same order, so the same ads once the 106 is read. What one pass cannot
settle as it goes makes the two passes (jobqueuelog.parse_file, then replay) answer for
the whole log instead: an unfinished final transaction (the schedd drops it), a line
without its final newline (a torn write, or not), any line or replay error (the two passes
give it, with its line number, exactly as before), two spellings of one attribute name
(ClassAd names are case-insensitive) or of one key (keys are their numbers). The answer is
therefore always the two passes' answer; this is only the fast way to it for a log a
schedd wrote.

Every check of jobqueuelog._parse_line stays: a line the pass does not vouch for on sight
goes through _parse_line itself, and the keys and names it stored without a look are
checked once each at the end.

Stdlib only, like jobqueuelog.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from lumberjack.core import jobqueuelog as jql

__all__ = ["read_ads", "read_ads_counted", "read_json"]

#: Values shorter than this are kept as one string each too ("0", "true", "undefined",
#: small numbers: most of a job's values, the same in every job).
SHARED_BELOW = 12

#: Bytes of a log read at a time, as in jobqueuelog.parse_file.
PIECE_BYTES = jql.PIECE_BYTES


class _TwoPasses(Exception):
    """The two-pass reader answers for this log (see the module docstring)."""


class _Pass:
    """The state of one pass over a log: the live ads, and what the end must check.

    A key is taken as spelt: another spelling of a live ad's key ("1.-1" for "01.-1",
    which the schedd never writes) is left to the two passes.
    """

    def __init__(self) -> None:
        self.ads: dict[str, dict[str, str]] = {}  # key of a live ad -> attrs, in order
        self.types: dict[str, tuple[str, str]] = {}  # key -> (MyType, TargetType)
        self.gone_keys: list[str] = []  # keys of destroyed ads
        self.gone_names: set[str] = set()  # names once stored, since deleted or destroyed
        self.good_types: set[str] = set()  # ad types _parse_line passed
        self.good_keys: dict[str, str] = {}  # _parse_line's memories
        self.good_tokens: dict[str, str] = {}
        self.open_txn = False
        self.records = 0  # lines played: each line of a log is one record
        # each attribute name and short value, the one string it is kept as
        self.shared: dict[str, str] = {}

    def lines(self, lines: Iterable[str]) -> None:
        """Play whole lines of the log, in order.

        The shortcut takes a 103 to the key of a live ad whose value starts with a
        character above " " (so it is not blank; NUL was refused for the whole text), a
        101 of ad types seen before, "105 " and "106 ". Their keys and names are checked
        at the end (finish). Anything else takes _slow.
        """
        ads, types, good_types = self.ads, self.types, self.good_types
        # One string per attribute name for the whole log (100,000 jobs hold each name
        # 100,000 times: a string each would be a third of the ads' memory).
        share = self.shared.setdefault
        open_txn = self.open_txn
        for line in lines:
            parts = line.split(" ", 3)
            op = parts[0]
            if op == "103":
                try:
                    _, key, name, value = parts
                    if value >= "!":
                        if len(value) < SHARED_BELOW:
                            value = share(value, value)
                        ads[key][share(name, name)] = value
                        continue
                except (ValueError, KeyError):
                    pass  # not KEY NAME VALUE, or no such ad (as spelt): _slow
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
            elif op == "101" and len(parts) == 4:
                _, key, name, value = parts
                if name in good_types and value in good_types:
                    if key in ads:
                        raise _TwoPasses  # 101 of a live ad
                    ads[key] = {}
                    types[key] = (name, value)
                    continue
            self.open_txn = open_txn
            self._slow(line)
            open_txn = self.open_txn
        self.open_txn = open_txn

    def _slow(self, line: str) -> None:
        """Any line, with every check of jobqueuelog._parse_line, then played."""
        try:
            record = jql._parse_line(line, self.good_keys, self.good_tokens)
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
        _, key, *rest = record  # (for a 101: MyType and TargetType)
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
            if not name or jql.BAD_TOKEN.search(name):
                raise _TwoPasses
        if len({jql.fold_name(name) for name in names}) != len(names):
            raise _TwoPasses  # two spellings of one name: only the replay knows which
        return self.ads


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


def _one_pass(
    handle: jql.Readable, piece_bytes: int, max_records: int | None = None, source: str = ""
) -> _Pass:
    state = _Pass()
    for text in _pieces(handle, piece_bytes):
        lines = text.split("\n")  # not splitlines(): \r, \x85, U+2028 are in values
        del text
        lines.pop()  # the empty remainder after the final newline
        state.records += len(lines)
        if max_records is not None and state.records > max_records:
            raise jql.TooManyRecords(f"more than {max_records} records", source=source)
        state.lines(lines)
        del lines
    state.finish()
    return state


def _two_passes(
    handle: jql.Readable, source: str, max_records: int | None = None
) -> tuple[dict[str, jql.Ad], int]:
    handle.seek(0)  # type: ignore[attr-defined]
    records = jql.parse_file(handle, source, max_records=max_records)
    return jql.replay(records, source=source), len(records)


def read_ads(
    handle: jql.Readable, source: str, piece_bytes: int = PIECE_BYTES
) -> dict[str, jql.Ad]:
    """The ads of the log open in `handle` (binary, at its start, seekable), exactly as
    jobqueuelog.replay(jobqueuelog.parse_file(handle, source)) gives them, errors
    included."""
    return read_ads_counted(handle, source, piece_bytes=piece_bytes)[0]


def read_ads_counted(
    handle: jql.Readable,
    source: str,
    max_records: int | None = None,
    piece_bytes: int = PIECE_BYTES,
) -> tuple[dict[str, jql.Ad], int]:
    """read_ads(), and the log's number of records; jobqueuelog.TooManyRecords once the
    log holds more than `max_records` (as parse_file: a returned queue is bounded before
    it is read whole). `handle` is read again from its start (seek(0)) when the two
    passes answer: a reader that hashes or bounds what it gives starts again there."""
    with jql.no_gc():
        try:
            state = _one_pass(handle, piece_bytes, max_records, source)
        except _TwoPasses:
            return _two_passes(handle, source, max_records)
        ads = {key: jql.Ad(key, *state.types[key], attrs) for key, attrs in state.ads.items()}
        return ads, state.records


def read_json(handle: jql.Readable, source: str, piece_bytes: int = PIECE_BYTES) -> str:
    """`inspect --json`'s document for the log open in `handle` (binary, at its start,
    seekable): json.dumps({"ads": {KEY: {NAME: VALUE}}}) of read_ads' ads, errors
    included; no newline at the end."""
    with jql.no_gc():  # json.dumps too: it makes a tuple per attribute
        try:
            ads = _one_pass(handle, piece_bytes).ads
        except _TwoPasses:
            ads = {key: ad.attrs for key, ad in _two_passes(handle, source)[0].items()}
        # the same text as json.dumps({"ads": ads}): ads hold no cycles to look for
        return json.dumps({"ads": ads}, check_circular=False)
