"""Read, replay and write HTCondor's job queue log (``job_queue.log``, a "ClassAd log").

Pure Python and stdlib only (no ``htcondor`` import): this module is also shipped to HPC
login nodes, where the bindings are usually absent.

Format
------
One record per line, ``<op> <body>``; the body is split on its FIRST spaces only, because
attribute values (ClassAd expression text) contain spaces, quotes, backslashes and unicode::

    107 SEQ CreationTimestamp T     historical sequence number (normally the first line)
    101 KEY MyType TargetType       new ad ("(empty)" is HTCondor's placeholder for "")
    102 KEY                         destroy ad
    103 KEY Name EXPRESSION...      set attribute (the expression runs to the end of line)
    104 KEY Name                    delete attribute
    105                             begin transaction, written as "105 " (trailing space)
    106                             end transaction, written as "106 " (trailing space), or
                                    "106 #comment" by HTCondor versions that annotate commits

Keys: ``0.0`` header ad, ``0C.-1`` cluster ad (HTCondor writes cluster keys with a leading
zero, e.g. ``01.-1``), ``C.P`` proc ad, ``C.-2`` cluster-private ad, ``C.-100`` jobset ad,
``0.N`` (N > 0) user records. The schedd identifies ads by the *numbers* (it parses every key
into a cluster/proc pair), so ``1.-1`` and ``01.-1`` name the same ad; replay() does the same
and keeps the spelling that created the ad.

Records take effect only when their transaction's 106 is read; records outside a
transaction apply at once; an unfinished final transaction (105 with no 106 before EOF) is
dropped, exactly as the schedd does when it loads the log.

What we accept and what we reject (checked against HTCondor's classad_log.cpp / log.cpp)
-----------------------------------------------------------------------------------------
Rejected with ``JobQueueLogError("<file> line N: ...")``:

* unknown or non-numeric op code, missing or extra fields, empty tokens (double spaces), a key
  that is not ``INT.INT``, an empty / all-blank 103 value, NUL bytes. The schedd treats these
  as a corrupt record: fatal if a 106 follows it, otherwise it silently discards everything
  from that record to EOF. We always reject (except the torn-tail case below).
* an empty line, except the empty remainder after the final newline. (The schedd stops
  reading at an empty line and forces a log rotation.)
* nested 105 and 106 without 105. The schedd only logs a warning for these, but it never
  writes them, so a log that has them was not written by a schedd.
* 101 for an ad that already exists, and 102/103/104 for an ad that does not exist (never
  created, or already destroyed). The schedd silently ignores these operations; we reject
  them because a log that needs that leniency is not one the schedd wrote.

Accepted:

* a torn final write: a malformed last line with no terminating newline, when it sits inside
  the unfinished final transaction or is a prefix of "105 " (i.e. a crash while a
  transaction was being appended). It is dropped, as the schedd drops it.
* "105" and "106" without HTCondor's trailing space (normalised to "105 " / "106 " when
  formatted). NOTE: the schedd itself does NOT accept these: after the op code it requires
  a space, then the newline.
* a final record with no terminating newline is still a record. (The schedd would drop it;
  HTCondor always terminates its records, so this only matters for hand-made files.)
* 107 anywhere (the schedd warns if it is not the first line); any 107 label token.
* 104 of an attribute the ad does not have (a no-op, as in the schedd).
* a 103 value is kept byte-exact (minus the newline) and never parsed as a ClassAd
  expression (it is OLD ClassAd syntax: core/classad_text.py decodes plain literals).
* attribute names are case-insensitive (``iwd`` updates ``Iwd``, and the first spelling
  is kept, as ClassAds do).

Files are read as UTF-8 with errors="surrogateescape" and written back the same way, so
arbitrary bytes survive a read/write round trip. Lines are split on "\\n" only: "\\r",
U+2028 and friends are ordinary characters of an expression.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

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
    "format_record",
    "format_records",
    "replay",
    "read_records",
    "read_log",
    "records_for_ads",
    "write_log",
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
# Ops whose key format_record() checks.
_KEYED_OPS = frozenset((101, 102, 103, 104))
_OP_WHAT = {
    101: "101 (new ad)",
    102: "102 (destroy ad)",
    103: "103 (set attribute)",
    104: "104 (delete attribute)",
    105: "105 (begin transaction)",
    106: "106 (end transaction)",
    107: "107 (historical sequence number)",
}
# C's isspace() in the "C" locale, plus NUL: the schedd's readword() splits on these.
_BAD_TOKEN = re.compile(r"[ \t\n\r\x0b\x0c\x00]")
_ASCII_WS = " \t\n\r\x0b\x0c"
_KEY_RE = re.compile(r"([0-9]+)\.(-?[0-9]+)")
_DIGITS = re.compile(r"[0-9]+")
# strcasecmp() folds ASCII only; str.lower() would also fold e.g. "Ä".
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _fold(name: str) -> str:
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
        folded = _fold(name)
        size = len(name)
        for attr in [a for a in self.attrs if len(a) == size and _fold(a) == folded]:
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
    folded = _fold(name)
    size = len(name)  # folding keeps the length: compare only names that could match
    for attr in attrs:
        if len(attr) == size and _fold(attr) == folded:
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
def _no_gc() -> Iterator[None]:
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
    if _BAD_TOKEN.search(token):
        raise _LineError(f"{what} {token!r} contains whitespace or a NUL byte")


def _check_key(key: str, good_keys: dict[str, str]) -> None:
    if key in good_keys:
        return
    if not _KEY_RE.fullmatch(key):  # digits, "." and "-" only: no blank, no NUL
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
        raise _LineError(f"expected an op code 101-107, found {op_text[:40]!r}")

    if op == OP_SET_ATTRIBUTE:
        parts = body.split(" ", 2)
        if len(parts) < 3:
            raise _LineError(f"{_OP_WHAT[op]} needs KEY NAME VALUE")
        key, name, value = parts
        _check_key(key, good_keys)
        _check_name(name, "attribute name", good_tokens)
        if not value.strip(_ASCII_WS):
            raise _LineError(f"{_OP_WHAT[op]} of {name} has an empty value")
        if "\x00" in value:
            raise _LineError(f"{_OP_WHAT[op]} value contains a NUL byte")
        return LogRecord(op, key, name, value)

    if op == OP_BEGIN_TRANSACTION:
        if body:
            raise _LineError(f"unexpected text after {_OP_WHAT[op]}")
        return _BEGIN

    if op == OP_END_TRANSACTION:
        if not body:
            return _END
        if body[0] != "#" or len(body) < 2:
            raise _LineError(f"unexpected text after {_OP_WHAT[op]}")
        if "\x00" in body:
            raise _LineError(f"{_OP_WHAT[op]} comment contains a NUL byte")
        return LogRecord(op, value=body[1:])

    parts = body.split(" ") if body else []
    if op == OP_NEW_CLASSAD:
        if len(parts) != 3:
            raise _LineError(f"{_OP_WHAT[op]} needs exactly KEY MYTYPE TARGETTYPE")
        _check_key(parts[0], good_keys)
        _check_name(parts[1], "MyType", good_tokens)
        _check_name(parts[2], "TargetType", good_tokens)
        return LogRecord(op, parts[0], parts[1], parts[2])
    if op == OP_DESTROY_CLASSAD:
        if len(parts) != 1:
            raise _LineError(f"{_OP_WHAT[op]} needs exactly KEY")
        _check_key(parts[0], good_keys)
        return LogRecord(op, parts[0])
    if op == OP_DELETE_ATTRIBUTE:
        if len(parts) != 2:
            raise _LineError(f"{_OP_WHAT[op]} needs exactly KEY NAME")
        _check_key(parts[0], good_keys)
        _check_name(parts[1], "attribute name", good_tokens)
        return LogRecord(op, parts[0], parts[1])
    # OP_LOG_HISTORICAL_SEQUENCE_NUMBER
    if len(parts) != 3:
        raise _LineError(f"{_OP_WHAT[op]} needs exactly SEQ CreationTimestamp TIME")
    seq, label, stamp = parts
    _check_token(label, "label")
    if not (_DIGITS.fullmatch(seq) and _DIGITS.fullmatch(stamp)):
        raise _LineError(f"{_OP_WHAT[op]} sequence number and timestamp must be numbers")
    return LogRecord(op, seq, label, stamp)


def _snippet(line: str) -> str:
    return repr(line if len(line) <= 80 else line[:77] + "...")


def parse_records(text: str, source: str = "job_queue.log") -> list[LogRecord]:
    """Every record of a log's text, transactions included, in order (one per line).

    Raises JobQueueLogError naming ``source`` and the line for malformed lines, an empty
    line in the middle, nested 105 and 106 without 105. A torn final write is dropped (see
    the module docstring). Record i of the result is line i + 1 of the text.
    """
    with _no_gc():
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
    new, record_type, ws = _new_record, LogRecord, _ASCII_WS
    good_keys, good_tokens = state.good_keys, state.good_tokens
    key_of, token_of = good_keys.get, good_tokens.get
    key_match = _KEY_RE.fullmatch
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
    with _no_gc():
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


# ---------------------------------------------------------------------------- formatting


def _write_error(record: LogRecord, problem: str) -> JobQueueLogError:
    what = _OP_WHAT.get(record.op, str(record.op))
    where = f" for ad {record.key!r}" if record.key else ""
    attr = f" attribute {record.name!r}" if record.op in (103, 104) else ""
    return JobQueueLogError(f"cannot write {what}{where}{attr}: {problem}")


def _w_token(record: LogRecord, token: str, what: str) -> None:
    if not token or _BAD_TOKEN.search(token):
        raise _write_error(record, f"{what} {token!r} is empty or contains whitespace/NUL")


def _w_key(record: LogRecord) -> None:
    if not _KEY_RE.fullmatch(record.key):
        raise _write_error(record, "key is not CLUSTER.PROC")


def format_record(record: LogRecord) -> str:
    """The line for one record, without its newline, exactly as HTCondor writes it.

    Raises JobQueueLogError for a record that would not read back as itself (a newline in
    a value, whitespace in a key or name, an unknown op, ...).
    """
    op = record.op
    if op == OP_SET_ATTRIBUTE:
        _w_key(record)
        _w_token(record, record.name, "attribute name")
        value = record.value
        if "\n" in value or "\x00" in value:
            raise _write_error(record, "value contains a newline or NUL byte")
        if not value.strip(_ASCII_WS):
            raise _write_error(record, "value is empty")
        return f"103 {record.key} {record.name} {value}"
    if op == OP_NEW_CLASSAD:
        _w_key(record)
        _w_token(record, record.name, "MyType")
        _w_token(record, record.value, "TargetType")
        return f"101 {record.key} {record.name} {record.value}"
    if op == OP_BEGIN_TRANSACTION:
        return "105 "
    if op == OP_END_TRANSACTION:
        if not record.value:
            return "106 "
        if "\n" in record.value or "\x00" in record.value:
            raise _write_error(record, "comment contains a newline or NUL byte")
        return f"106 #{record.value}"
    if op == OP_DESTROY_CLASSAD:
        _w_key(record)
        return f"102 {record.key}"
    if op == OP_DELETE_ATTRIBUTE:
        _w_key(record)
        _w_token(record, record.name, "attribute name")
        return f"104 {record.key} {record.name}"
    if op == OP_LOG_HISTORICAL_SEQUENCE_NUMBER:
        if not (_DIGITS.fullmatch(record.key) and _DIGITS.fullmatch(record.value)):
            raise _write_error(record, "sequence number and timestamp must be numbers")
        _w_token(record, record.name, "label")
        return f"107 {record.key} {record.name} {record.value}"
    raise _write_error(record, "unknown op code")


def format_records(records: Iterable[LogRecord]) -> str:
    """The text of a log: each record's line followed by a newline.

    format_records(parse_records(t)) == t for any log text t written the way HTCondor writes.
    """
    lines: list[str] = []
    append = lines.append
    ws = _ASCII_WS
    # Tokens format_record() has already accepted: most records repeat a key and a name.
    good_keys: set[str] = set()
    good_names: set[str] = set()
    for record in records:
        op, key, name, value = record
        if (
            op == OP_SET_ATTRIBUTE
            and key in good_keys
            and name in good_names
            and value
            and value[0] not in ws  # not blank (a value starting with a blank: full check)
            and "\n" not in value
            and "\x00" not in value
        ):
            append(f"103 {key} {name} {value}")
            continue
        append(format_record(record))
        if op in _KEYED_OPS:
            good_keys.add(key)
            if op == OP_SET_ATTRIBUTE or op == OP_DELETE_ATTRIBUTE:
                good_names.add(name)
    append("")  # the newline after the last line
    return "\n".join(lines)


# ------------------------------------------------------------------------------- replay


def replay(records: Iterable[LogRecord], source: str = "job_queue.log") -> dict[str, Ad]:
    """Play the records the way the schedd does on startup: key -> Ad, insertion ordered.

    Transactions apply at their 106; an unfinished final transaction is dropped; destroyed
    ads are absent. Errors name "<source> line N" where N is the record's 1-based position,
    which is its line number when the records came from parse_records.
    """
    if not isinstance(records, list):
        records = list(records)
    with _no_gc():
        return _replay(records, source)


def _replay(records: list[LogRecord], source: str) -> dict[str, Ad]:
    ads: dict[str, Ad] = {}
    # (cluster, proc) -> (key spelling, attrs, folded attr name -> stored spelling) of the
    # live ad: the schedd knows an ad by its numbers, and keeps the spelling that made it.
    live: dict[tuple[int, int], tuple[str, dict[str, str], dict[str, str]]] = {}
    numbers: dict[str, tuple[int, int]] = {}  # key spelling -> (cluster, proc), a cache
    folds: dict[str, str] = {}  # attribute name -> _fold(name), a cache

    def fail(index: int, message: str) -> JobQueueLogError:
        return JobQueueLogError(message, source=source, line=index + 1)

    def ident(index: int, key: str) -> tuple[int, int]:
        m = _KEY_RE.fullmatch(key)
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
                    lname = folds[name] = _fold(name)
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
                stored = entry[2].pop(_fold(name), None)
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


def records_for_ads(
    ads: Mapping[str, Ad], seq: int = 1, timestamp: int | None = None
) -> list[LogRecord]:
    """A compact log holding exactly ``ads``: 107, then 105, each ad as 101 + 103s, then 106.

    (HTCondor's own compaction writes the same records without the 105/106 pair; wrapping
    them in one transaction loads identically and makes a torn copy load as nothing.)

    ``timestamp`` (the log's CreationTimestamp) defaults to now. An empty MyType/TargetType
    is written as "(empty)", as HTCondor does. Raises JobQueueLogError for ads that would
    not read back as themselves (mismatched key, two keys naming the same ad, an attribute
    set twice under different capitalisation); bad tokens are caught by format_record().
    """
    out = [_header(seq, timestamp), _BEGIN]
    new, record_type = _new_record, LogRecord
    with _no_gc():
        for key, ad in _checked_ads(ads):
            out.append(new(record_type, (101, key, *_types(ad))))
            out += [new(record_type, (103, key, name, value)) for name, value in ad.attrs.items()]
    out.append(_END)
    return out


def _header(seq: int, timestamp: int | None) -> LogRecord:
    if timestamp is None:
        timestamp = int(time.time())
    if seq < 0 or timestamp < 0:
        raise JobQueueLogError("sequence number and timestamp must not be negative")
    stamp = str(timestamp)
    return LogRecord(OP_LOG_HISTORICAL_SEQUENCE_NUMBER, str(seq), "CreationTimestamp", stamp)


def _types(ad: Ad) -> tuple[str, str]:
    return ad.my_type or EMPTY_TYPE_NAME, ad.target_type or EMPTY_TYPE_NAME


def _checked_ads(ads: Mapping[str, Ad]) -> Iterator[tuple[str, Ad]]:
    """Each (key, ad), once it is known to read back as itself (see records_for_ads)."""
    fold = functools.lru_cache(maxsize=None)(_fold)  # names repeat from ad to ad
    seen: dict[tuple[int, int], str] = {}
    for key, ad in ads.items():
        if ad.key != key:
            raise JobQueueLogError(f"ad stored under key {key!r} says its key is {ad.key!r}")
        num = _key_numbers(key)
        if num in seen:
            raise JobQueueLogError(f"keys {seen[num]!r} and {key!r} name the same ad")
        seen[num] = key
        attrs = ad.attrs
        if len(set(map(fold, attrs))) != len(attrs):
            names: set[str] = set()
            for name in attrs:
                lname = _fold(name)
                if lname in names:
                    raise JobQueueLogError(
                        f"ad {key} sets attribute {name} twice (names ignore case)"
                    )
                names.add(lname)
        yield key, ad


def log_text(ads: Mapping[str, Ad], seq: int = 1, timestamp: int | None = None) -> str:
    """The text write_log() writes for ``ads``; no list of records is built on the way."""
    return "".join(_log_chunks(ads, seq, timestamp))


#: Ads per piece of text _log_chunks yields: a 100,000-job queue is written a few MB at a
#: time instead of as one list of lines, one string and one bytes object of it all.
CHUNK_ADS = 2000


def _log_chunks(
    ads: Mapping[str, Ad], seq: int, timestamp: int | None, chunk_ads: int = CHUNK_ADS
) -> Iterator[str]:
    """format_records(records_for_ads(ads, seq, timestamp)) in pieces of whole lines,
    without building the records.

    Each ad's attributes are checked together (names already accepted, no newline or NUL
    in any value, no blank value); an ad that fails that goes through format_record() one
    attribute at a time, which says what is wrong.
    """
    lines = [format_record(_header(seq, timestamp)), "105 "]
    good_names: set[str] = set()
    good_types: set[str] = set()
    for count, (key, ad) in enumerate(_checked_ads(ads), 1):  # the key is known good
        if count % chunk_ads == 0:
            lines.append("")  # the newline after the piece's last line
            yield "\n".join(lines)
            lines = []
        my_type, target_type = _types(ad)
        if my_type in good_types and target_type in good_types:
            lines.append(f"101 {key} {my_type} {target_type}")
        else:
            lines.append(format_record(LogRecord(OP_NEW_CLASSAD, key, my_type, target_type)))
            good_types.update((my_type, target_type))
        attrs = ad.attrs
        values = attrs.values()
        joined = "".join(values)
        if (
            good_names.issuperset(attrs)
            and "\n" not in joined
            and "\x00" not in joined
            and all(map(str.strip, values))  # strip() drops at least the ASCII blanks
        ):
            lines += [f"103 {key} {name} {value}" for name, value in attrs.items()]
        else:
            for name, value in attrs.items():
                lines.append(format_record(LogRecord(OP_SET_ATTRIBUTE, key, name, value)))
                good_names.add(name)
    lines.append("106 \n")
    yield "\n".join(lines)


def write_log_to(
    fh: BinaryIO, ads: Mapping[str, Ad], seq: int = 1, timestamp: int | None = None
) -> None:
    """Write records_for_ads(ads) to the open file ``fh`` a piece at a time, fsynced."""
    for piece in _log_chunks(ads, seq, timestamp):
        try:
            fh.write(piece.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError as exc:
            raise JobQueueLogError(f"cannot encode the log as UTF-8: {exc.reason}") from None
    fh.flush()
    os.fsync(fh.fileno())


def write_log(
    path: str | os.PathLike[str],
    ads: Mapping[str, Ad],
    seq: int = 1,
    timestamp: int | None = None,
) -> None:
    """Write records_for_ads(ads) to ``path`` atomically, mode 0600.

    Temp file in the same directory, fsync, os.replace, fsync of the directory: a reader
    (or a schedd starting up) sees the old file or the new one, never a half-written one.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(
        prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)  # as the schedd creates it: ads can hold secrets
            write_log_to(fh, ads, seq, timestamp)  # a bad ad: the temp file goes
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the data is already synced
    finally:
        os.close(dir_fd)


# ----------------------------------------------------------------------------------- keys


def parse_key(key: str) -> JobKey:
    """``"01.-1"`` -> JobKey(1, -1); raises JobQueueLogError if ``key`` is not CLUSTER.PROC."""
    return JobKey(*_key_numbers(key))


def _key_numbers(key: str) -> tuple[int, int]:
    m = _KEY_RE.fullmatch(key) if isinstance(key, str) else None
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
