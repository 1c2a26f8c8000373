"""Read and replay HTCondor's job queue log (``job_queue.log``, a "ClassAd log"): text to
records (parse_records, parse_file), records to the ads a schedd would load (replay,
read_log), and the log's keys. Writing is jobqueuelog_write.py.

Pure Python and stdlib only (no ``htcondor`` import): this module is also shipped to HPC
login nodes, where the bindings are usually absent.

The format, and what is accepted and rejected against HTCondor's own reader, is in
docs/JOB_QUEUE_LOG.md. In short: one record per line, ``<op> <body>``, the body split on
its FIRST spaces only; records take effect when their transaction's 106 is read; an
unfinished final transaction is dropped, as the schedd drops it; anything the schedd would
not have written is refused with ``JobQueueLogError("<file> line N: ...")``.

Files are read as UTF-8 with errors="surrogateescape" and written back the same way, so
arbitrary bytes survive a read/write round trip. Lines are split on "\\n" only: "\\r",
U+2028 and friends are ordinary characters of an expression.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "OP_LOG_HISTORICAL_SEQUENCE_NUMBER",
    "OP_NEW_CLASSAD",
    "OP_DESTROY_CLASSAD",
    "OP_SET_ATTRIBUTE",
    "OP_DELETE_ATTRIBUTE",
    "OP_BEGIN_TRANSACTION",
    "OP_END_TRANSACTION",
    "EMPTY_TYPE_NAME",
    "JobQueueLogError",
    "LogRecord",
    "Ad",
    "JobKey",
    "parse_records",
    "replay",
    "read_records",
    "read_log",
    "parse_key",
    "key_kind",
    "cluster_key",
    "proc_key",
]

OP_NEW_CLASSAD = 101
OP_DESTROY_CLASSAD = 102
OP_SET_ATTRIBUTE = 103
OP_DELETE_ATTRIBUTE = 104
OP_BEGIN_TRANSACTION = 105
OP_END_TRANSACTION = 106
OP_LOG_HISTORICAL_SEQUENCE_NUMBER = 107

# HTCondor writes this instead of an empty MyType/TargetType so the field count stays right.
EMPTY_TYPE_NAME = "(empty)"


_OPS = {str(op): op for op in range(101, 108)}
OP_WHAT = {
    101: "101 (new ad)",
    102: "102 (destroy ad)",
    103: "103 (set attribute)",
    104: "104 (delete attribute)",
    105: "105 (begin transaction)",
    106: "106 (end transaction)",
    107: "107 (historical sequence number)",
}
# C's isspace() in the "C" locale, plus NUL: the schedd's readword() splits on these.
BAD_TOKEN = re.compile(r"[ \t\n\r\x0b\x0c\x00]")
ASCII_WS = " \t\n\r\x0b\x0c"
KEY_RE = re.compile(r"([0-9]+)\.(-?[0-9]+)")
DIGITS = re.compile(r"[0-9]+")
# strcasecmp() folds ASCII only; str.lower() would also fold e.g. "Ä".
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def fold_name(name: str) -> str:
    return name.lower() if name.isascii() else name.translate(_ASCII_LOWER)


class JobQueueLogError(ValueError):
    """A job_queue.log (or a record or ad to be written to one) is malformed.

    When the problem is in a file, the message starts with "<source> line N: " and
    ``source``/``line`` are set.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        text: str | None = None,
    ):
        self.source = source
        self.line = line
        self.problem = message  # what is wrong, without file, line number or the line
        self.text = text  # the offending line, when one is to blame
        if text is not None:
            message = f"{message}: {_snippet(text)}"
        if source is not None and line is not None:
            message = f"{source} line {line}: {message}"
        super().__init__(message)


class LogRecord(tuple):
    """One line of the log. Which fields an op uses (unused fields are ""):

    - 107: key = sequence number, name = "CreationTimestamp", value = timestamp (digits)
    - 101: key, name = MyType, value = TargetType
    - 102: key
    - 103: key, name = attribute name, value = expression text (byte-exact)
    - 104: key, name = attribute name
    - 105: nothing
    - 106: value = commit comment ("" for none, the usual case)

    An immutable (op, key, name, value) tuple, compared by value: a log has a record per
    line, and a tuple costs a fifth of a frozen dataclass to create. (Not a NamedTuple on
    purpose: tools that see ``_fields`` fill every field, even those with defaults.)
    """

    __slots__ = ()

    def __new__(cls, op: int, key: str = "", name: str = "", value: str = "") -> LogRecord:
        return tuple.__new__(cls, (op, key, name, value))

    def __getnewargs__(self) -> tuple[int, str, str, str]:  # copy and pickle
        return self[0], self[1], self[2], self[3]

    def __repr__(self) -> str:
        return f"LogRecord(op={self[0]!r}, key={self[1]!r}, name={self[2]!r}, value={self[3]!r})"

    @property
    def op(self) -> int:
        return self[0]

    @property
    def key(self) -> str:
        return self[1]

    @property
    def name(self) -> str:
        return self[2]

    @property
    def value(self) -> str:
        return self[3]


# Built with tuple.__new__ on the hot paths: the same record without the Python-level
# LogRecord.__new__ (its defaults are not needed when all four fields are given).
_new_record = tuple.__new__
_BEGIN = LogRecord(OP_BEGIN_TRANSACTION)
_END = LogRecord(OP_END_TRANSACTION)


@dataclass
class Ad:
    """A ClassAd as the log holds it: attribute name -> expression text, insertion ordered.

    Attribute names keep the spelling that first set them; lookups via get() are
    case-insensitive, as ClassAd attribute names are. ``my_type``/``target_type`` are the
    tokens as written (HTCondor writes "(empty)" for an empty type).
    """

    key: str
    my_type: str
    target_type: str
    attrs: dict[str, str] = field(default_factory=dict)

    def set(self, name: str, value: str) -> None:
        """Set attribute ``name`` (case-insensitive: an existing spelling is kept)."""
        attrs = self.attrs
        if name in attrs:  # the exact spelling, as get() prefers it too
            attrs[name] = value
            return
        attr = _find_spelling(attrs, name)
        attrs[name if attr is None else attr] = value

    def delete(self, name: str) -> None:
        """Remove attribute ``name`` (case-insensitive) if the ad has it."""
        folded = fold_name(name)
        size = len(name)
        for attr in [a for a in self.attrs if len(a) == size and fold_name(a) == folded]:
            del self.attrs[attr]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The expression text of attribute ``name`` (case-insensitive), or ``default``."""
        value = self.attrs.get(name)
        if value is not None:
            return value
        attr = _find_spelling(self.attrs, name)
        return default if attr is None else self.attrs[attr]


def _find_spelling(attrs: Mapping[str, str], name: str) -> str | None:
    """The first attribute name in ``attrs`` that equals ``name`` ignoring (ASCII) case."""
    folded = fold_name(name)
    size = len(name)  # folding keeps the length: compare only names that could match
    for attr in attrs:
        if len(attr) == size and fold_name(attr) == folded:
            return attr
    return None


@dataclass(frozen=True)
class JobKey:
    """The numbers inside a key: ``01.-1`` -> JobKey(1, -1), ``3.7`` -> JobKey(3, 7)."""

    cluster: int
    proc: int


class _LineError(Exception):
    """Internal: what is wrong with one line; parse_records adds file and line number."""


# ----------------------------------------------------------------------------- parsing


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a log is parsed or replayed.

    Those build a container object per record and free none: each one counts towards the
    collector's next pass, which then walks every object built so far, again and again
    (a third of the parse time). Records and ads hold no reference cycles, so there is
    nothing for it to find; reference counting still frees everything as usual.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _check_token(token: str, what: str) -> None:
    if not token:
        raise _LineError(f"empty {what} (two spaces in a row?)")
    if BAD_TOKEN.search(token):
        raise _LineError(f"{what} {token!r} contains whitespace or a NUL byte")


def _check_key(key: str, good_keys: dict[str, str]) -> None:
    if key in good_keys:
        return
    if not KEY_RE.fullmatch(key):  # digits, "." and "-" only: no blank, no NUL
        _check_token(key, "key")  # the better message when that is what is wrong
        raise _LineError(f"key {key!r} is not CLUSTER.PROC")
    good_keys[key] = key


def _check_name(token: str, what: str, good_tokens: dict[str, str]) -> None:
    """_check_token() with a memory: names and ad types repeat on most lines."""
    if token not in good_tokens:
        _check_token(token, what)
        good_tokens[token] = token


def _parse_line(line: str, good_keys: dict[str, str], good_tokens: dict[str, str]) -> LogRecord:
    """Any line, every check. parse_records() takes a shortcut for the common lines first;
    this is the one full statement of what a line may be."""
    op_text, _, body = line.partition(" ")
    op = _OPS.get(op_text)
    if op is None:
        if not line:
            raise _LineError("empty line")
        if op_text.isascii() and op_text.isdigit():
            raise _LineError(f"unknown op code {op_text}")
        raise _LineError("expected an op code 101-107")  # (the line itself follows, once)

    if op == OP_SET_ATTRIBUTE:
        parts = body.split(" ", 2)
        if len(parts) < 3:
            raise _LineError(f"{OP_WHAT[op]} needs KEY NAME VALUE")
        key, name, value = parts
        _check_key(key, good_keys)
        _check_name(name, "attribute name", good_tokens)
        if not value.strip(ASCII_WS):
            raise _LineError(f"{OP_WHAT[op]} of {name} has an empty value")
        if "\x00" in value:
            raise _LineError(f"{OP_WHAT[op]} value contains a NUL byte")
        return LogRecord(op, key, name, value)

    if op == OP_BEGIN_TRANSACTION:
        if body:
            raise _LineError(f"unexpected text after {OP_WHAT[op]}")
        return _BEGIN

    if op == OP_END_TRANSACTION:
        if not body:
            return _END
        if body[0] != "#" or len(body) < 2:
            raise _LineError(f"unexpected text after {OP_WHAT[op]}")
        if "\x00" in body:
            raise _LineError(f"{OP_WHAT[op]} comment contains a NUL byte")
        return LogRecord(op, value=body[1:])

    parts = body.split(" ") if body else []
    if op == OP_NEW_CLASSAD:
        if len(parts) != 3:
            raise _LineError(f"{OP_WHAT[op]} needs exactly KEY MYTYPE TARGETTYPE")
        _check_key(parts[0], good_keys)
        _check_name(parts[1], "MyType", good_tokens)
        _check_name(parts[2], "TargetType", good_tokens)
        return LogRecord(op, parts[0], parts[1], parts[2])
    if op == OP_DESTROY_CLASSAD:
        if len(parts) != 1:
            raise _LineError(f"{OP_WHAT[op]} needs exactly KEY")
        _check_key(parts[0], good_keys)
        return LogRecord(op, parts[0])
    if op == OP_DELETE_ATTRIBUTE:
        if len(parts) != 2:
            raise _LineError(f"{OP_WHAT[op]} needs exactly KEY NAME")
        _check_key(parts[0], good_keys)
        _check_name(parts[1], "attribute name", good_tokens)
        return LogRecord(op, parts[0], parts[1])
    # OP_LOG_HISTORICAL_SEQUENCE_NUMBER
    if len(parts) != 3:
        raise _LineError(f"{OP_WHAT[op]} needs exactly SEQ CreationTimestamp TIME")
    seq, label, stamp = parts
    _check_token(label, "label")
    if not (DIGITS.fullmatch(seq) and DIGITS.fullmatch(stamp)):
        raise _LineError(f"{OP_WHAT[op]} sequence number and timestamp must be numbers")
    return LogRecord(op, seq, label, stamp)


def _snippet(line: str) -> str:
    return repr(line if len(line) <= 80 else line[:77] + "...")


def parse_records(text: str, source: str = "job_queue.log") -> list[LogRecord]:
    """Every record of a log's text, transactions included, in order (one per line).

    Raises JobQueueLogError naming ``source`` and the line for malformed lines, an empty
    line in the middle, nested 105 and 106 without 105. A torn final write is dropped (see
    the module docstring). Record i of the result is line i + 1 of the text.
    """
    with no_gc():
        return _parse(text, source)


def _parse(text: str, source: str) -> list[LogRecord]:
    records: list[LogRecord] = []
    _parse_piece(text, source, records, _ParseState(), final=True)
    return records


@dataclass
class _ParseState:
    """What parsing carries from one piece of a log to the next.

    Keys and tokens (attribute names, ad types) already checked: most records repeat them.
    Each maps to its first copy, which the records share: at 100,000 jobs of 80
    attributes, one string per line for the key and the name is about 900 MB.
    """

    good_keys: dict[str, str] = field(default_factory=dict)
    good_tokens: dict[str, str] = field(default_factory=dict)
    open_txn: int = 0  # line number of the open 105, 0 when outside a transaction


def _parse_piece(
    text: str, source: str, records: list[LogRecord], state: _ParseState, final: bool
) -> None:
    """Append the records of `text` (whole lines, the log's next ones) to `records`.
    Only the `final` piece may end in a torn line."""
    lines = text.split("\n")  # not splitlines(): \r, \x85, U+2028 are part of values
    unterminated = lines[-1] != ""
    if not unterminated:
        lines.pop()  # the empty remainder after the final newline
    append = records.append
    new, record_type, ws = _new_record, LogRecord, ASCII_WS
    good_keys, good_tokens = state.good_keys, state.good_tokens
    key_of, token_of = good_keys.get, good_tokens.get
    key_match = KEY_RE.fullmatch
    # One search of the whole text instead of one per value (NUL is always refused).
    nul_free = "\x00" not in text
    open_txn = state.open_txn
    last = len(records) + len(lines) if final else -1
    for line in lines:
        # Shortcut for the lines a schedd writes most: a 103 whose key and name were seen
        # before (so they are known good) and whose value is not blank; a 101 of known ad
        # types; "105 "; "106 ". Anything else, or anything the shortcut cannot vouch for,
        # takes _parse_line, the one full statement of what a line may be.
        parts = line.split(" ", 3)
        record = None
        if len(parts) == 4:
            op_text, key, name, value = parts
            if op_text == "103":
                shared_key, shared_name = key_of(key), token_of(name)
                if (
                    shared_key is not None
                    and shared_name is not None
                    and value
                    and value[0] not in ws  # not blank (a leading blank: the full check)
                    and (nul_free or "\x00" not in value)
                ):
                    append(new(record_type, (103, shared_key, shared_name, value)))
                    continue
            elif op_text == "101" and name in good_tokens and value in good_tokens:
                if key in good_keys or key_match(key):
                    key = good_keys.setdefault(key, key)
                    name, value = good_tokens[name], good_tokens[value]
                    append(new(record_type, (101, key, name, value)))
                    continue
        elif line == "105 ":
            record = _BEGIN
        elif line == "106 ":
            record = _END
        if record is None:
            try:
                record = _parse_line(line, good_keys, good_tokens)
            except _LineError as exc:
                lineno = len(records) + 1
                if lineno == last and unterminated and (open_txn or "105 ".startswith(line)):
                    break  # a crash mid-append; the schedd drops this with its transaction
                raise JobQueueLogError(str(exc), source=source, line=lineno, text=line) from None
        op = record[0]
        if op == OP_BEGIN_TRANSACTION:
            if open_txn:
                raise JobQueueLogError(
                    f"105 (begin transaction) inside the transaction begun at line {open_txn}",
                    source=source,
                    line=len(records) + 1,
                )
            open_txn = len(records) + 1
        elif op == OP_END_TRANSACTION:
            if not open_txn:
                raise JobQueueLogError(
                    "106 (end transaction) without a 105 (begin transaction)",
                    source=source,
                    line=len(records) + 1,
                )
            open_txn = 0
        append(record)
    state.open_txn = open_txn


#: Bytes of a log file parsed at a time: its text and lines never exist whole.
PIECE_BYTES = 8 << 20


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class TooManyRecords(JobQueueLogError):
    """parse_file met more records than its caller allows."""


def parse_file(
    handle: Readable,
    source: str,
    max_records: int | None = None,
    piece_bytes: int = PIECE_BYTES,
) -> list[LogRecord]:
    """parse_records() of an open file, read `piece_bytes` at a time; TooManyRecords once
    it holds more than `max_records` records (a returned queue is bounded before it is
    read whole)."""
    records: list[LogRecord] = []
    state = _ParseState()
    rest = b""
    with no_gc():
        while True:
            block = handle.read(piece_bytes)
            data = rest + block if rest else block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            piece, rest = data[:cut], data[cut:]
            del data
            if piece:
                # bytes, not text mode: text mode would turn "\r\n" into "\n"
                text = piece.decode("utf-8", "surrogateescape")
                del piece
                _parse_piece(text, source, records, state, final=not block)
                del text
            if max_records is not None and len(records) > max_records:
                raise TooManyRecords(f"more than {max_records} records", source=source)
            if not block:
                return records


# ------------------------------------------------------------------------------- replay


def replay(records: Iterable[LogRecord], source: str = "job_queue.log") -> dict[str, Ad]:
    """Play the records the way the schedd does on startup: key -> Ad, insertion ordered.

    Transactions apply at their 106; an unfinished final transaction is dropped; destroyed
    ads are absent. Errors name "<source> line N" where N is the record's 1-based position,
    which is its line number when the records came from parse_records.
    """
    if not isinstance(records, list):
        records = list(records)
    with no_gc():
        return _replay(records, source)


def _replay(records: list[LogRecord], source: str) -> dict[str, Ad]:
    ads: dict[str, Ad] = {}
    # (cluster, proc) -> (key spelling, attrs, folded attr name -> stored spelling) of the
    # live ad: the schedd knows an ad by its numbers, and keeps the spelling that made it.
    live: dict[tuple[int, int], tuple[str, dict[str, str], dict[str, str]]] = {}
    numbers: dict[str, tuple[int, int]] = {}  # key spelling -> (cluster, proc), a cache
    folds: dict[str, str] = {}  # attribute name -> fold_name(name), a cache

    def fail(index: int, message: str) -> JobQueueLogError:
        return JobQueueLogError(message, source=source, line=index + 1)

    def ident(index: int, key: str) -> tuple[int, int]:
        m = KEY_RE.fullmatch(key)
        if m is None:
            raise fail(index, f"key {key!r} is not CLUSTER.PROC")
        found = numbers[key] = (int(m.group(1)), int(m.group(2)))
        return found

    def apply(start: int, stop: int) -> None:
        """Apply records[start:stop] (one transaction, or one record outside any)."""
        for index in range(start, stop):
            op, key, name, value = records[index]
            if op == OP_SET_ATTRIBUTE:
                num = numbers.get(key)
                entry = live.get(ident(index, key) if num is None else num)
                if entry is None:
                    raise fail(index, f"103 sets {name} on ad {key}, which does not exist")
                lname = folds.get(name)
                if lname is None:
                    lname = folds[name] = fold_name(name)
                names = entry[2]
                stored = names.get(lname)
                if stored is None:
                    names[lname] = stored = name
                entry[1][stored] = value
            elif op == OP_NEW_CLASSAD:
                num = numbers.get(key)
                if num is None:
                    num = ident(index, key)
                if num in live:
                    raise fail(index, f"101 creates ad {key}, which already exists")
                ad = ads[key] = Ad(key, name, value, {})
                live[num] = (key, ad.attrs, {})
            elif op == OP_DELETE_ATTRIBUTE:
                num = numbers.get(key)
                entry = live.get(ident(index, key) if num is None else num)
                if entry is None:
                    raise fail(index, f"104 deletes {name} from ad {key}, which does not exist")
                stored = entry[2].pop(fold_name(name), None)
                if stored is not None:  # deleting an absent attribute is a no-op, as in HTCondor
                    del entry[1][stored]
            elif op == OP_DESTROY_CLASSAD:
                num = numbers.get(key)
                entry = live.pop(ident(index, key) if num is None else num, None)
                if entry is None:
                    raise fail(index, f"102 destroys ad {key}, which does not exist")
                del ads[entry[0]]
            elif op != OP_LOG_HISTORICAL_SEQUENCE_NUMBER:  # metadata about the file: skipped
                raise fail(index, f"unknown op code {op}")

    begun = -1  # index of the open 105, -1 when outside a transaction
    for index, record in enumerate(records):
        op = record[0]
        if op == OP_BEGIN_TRANSACTION:
            if begun >= 0:
                raise fail(
                    index, f"105 (begin transaction) inside the one begun at line {begun + 1}"
                )
            begun = index
        elif op == OP_END_TRANSACTION:
            if begun < 0:
                raise fail(index, "106 (end transaction) without a 105 (begin transaction)")
            apply(begun + 1, index)
            begun = -1
        elif begun < 0:
            apply(index, index + 1)
    # An unfinished final transaction (begun >= 0) is dropped, as the schedd does.
    return ads


# ---------------------------------------------------------------------------------- files


def read_records(path: str | os.PathLike[str]) -> list[LogRecord]:
    """parse_records() of a file; errors name the file and line."""
    with open(path, "rb") as handle:
        return parse_file(handle, os.fspath(path))


def read_log(path: str | os.PathLike[str]) -> dict[str, Ad]:
    """The ads a schedd would load from this file: replay(read_records(path))."""
    return replay(read_records(path), source=os.fspath(path))


# ----------------------------------------------------------------------------------- keys


def parse_key(key: str) -> JobKey:
    """``"01.-1"`` -> JobKey(1, -1); raises JobQueueLogError if ``key`` is not CLUSTER.PROC."""
    return JobKey(*key_numbers(key))


def key_numbers(key: str) -> tuple[int, int]:
    m = KEY_RE.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        raise JobQueueLogError(f"not a job queue key (CLUSTER.PROC): {key!r}")
    return int(m[1]), int(m[2])


def _kind(num: JobKey) -> str | None:
    cluster, proc = num.cluster, num.proc
    if cluster == 0:
        return "header" if proc == 0 else "user" if proc > 0 else None
    if proc >= 0:
        return "proc"
    return {-1: "cluster", -2: "cluster_private", -100: "jobset"}.get(proc)


def key_kind(key: str) -> str:
    """One of "header", "cluster", "proc", "cluster_private", "jobset", "user"."""
    kind = _kind(parse_key(key))
    if kind is None:
        raise JobQueueLogError(f"key {key!r} is not a kind of ad the schedd stores")
    return kind


def cluster_key(cluster: int) -> str:
    """The key HTCondor writes for a cluster ad: cluster_key(12) == "012.-1"."""
    if cluster < 1:
        raise JobQueueLogError(f"cluster ids start at 1, not {cluster}")
    return f"0{cluster}.-1"


def proc_key(cluster: int, proc: int) -> str:
    """The key of a proc (or other per-cluster) ad: proc_key(12, 3) == "12.3"."""
    if cluster < 0:
        raise JobQueueLogError(f"cluster ids are never negative, not {cluster}")
    return f"{cluster}.{proc}"
