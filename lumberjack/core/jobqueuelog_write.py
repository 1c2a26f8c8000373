"""Write HTCondor's job queue log (``job_queue.log``) the way HTCondor writes it: one
record a line (format_record), a whole compact log of ads (records_for_ads, log_text),
and files written atomically, mode 0600 (write_log). The format, and what reads back as
itself, is in jobqueuelog.py, the reader.

Stdlib only: the site agent writes the remote queue with it.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import BinaryIO

from lumberjack.core.jobqueuelog import (
    ASCII_WS,
    BAD_TOKEN,
    DIGITS,
    EMPTY_TYPE_NAME,
    KEY_RE,
    OP_BEGIN_TRANSACTION,
    OP_DELETE_ATTRIBUTE,
    OP_DESTROY_CLASSAD,
    OP_END_TRANSACTION,
    OP_LOG_HISTORICAL_SEQUENCE_NUMBER,
    OP_NEW_CLASSAD,
    OP_SET_ATTRIBUTE,
    OP_WHAT,
    Ad,
    JobQueueLogError,
    LogRecord,
    fold_name,
    key_numbers,
    no_gc,
)

# Ops whose key format_record() checks.
_KEYED_OPS = frozenset((101, 102, 103, 104))
# Built with tuple.__new__ on the hot path: the same record without LogRecord.__new__.
_new_record = tuple.__new__
_BEGIN = LogRecord(OP_BEGIN_TRANSACTION)
_END = LogRecord(OP_END_TRANSACTION)


def _write_error(record: LogRecord, problem: str) -> JobQueueLogError:
    what = OP_WHAT.get(record.op, str(record.op))
    where = f" for ad {record.key!r}" if record.key else ""
    attr = f" attribute {record.name!r}" if record.op in (103, 104) else ""
    return JobQueueLogError(f"cannot write {what}{where}{attr}: {problem}")


def _w_token(record: LogRecord, token: str, what: str) -> None:
    if not token or BAD_TOKEN.search(token):
        raise _write_error(record, f"{what} {token!r} is empty or contains whitespace/NUL")


def _w_key(record: LogRecord) -> None:
    if not KEY_RE.fullmatch(record.key):
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
        if not value.strip(ASCII_WS):
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
        if not (DIGITS.fullmatch(record.key) and DIGITS.fullmatch(record.value)):
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
    ws = ASCII_WS
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
    with no_gc():
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
    fold = functools.lru_cache(maxsize=None)(fold_name)  # names repeat from ad to ad
    seen: dict[tuple[int, int], str] = {}
    for key, ad in ads.items():
        if ad.key != key:
            raise JobQueueLogError(f"ad stored under key {key!r} says its key is {ad.key!r}")
        num = key_numbers(key)
        if num in seen:
            raise JobQueueLogError(f"keys {seen[num]!r} and {key!r} name the same ad")
        seen[num] = key
        attrs = ad.attrs
        if len(set(map(fold, attrs))) != len(attrs):
            names: set[str] = set()
            for name in attrs:
                lname = fold_name(name)
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
