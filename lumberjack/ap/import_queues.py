"""The two queues an import reads: the one sent (from the bundle, as it left the access
point) and the one returned (from the site, untrusted and bounded by the one sent).

Each is read in one pass (jobqueuelog_onepass: every record played as it is read, no
list of records and no second replay); the sent one is hashed while it is read, so the
manifest vouches for the very bytes parsed.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import BinaryIO

from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap.handover import QUEUE_LOG
from lumberjack.ap.pathmap import PathMap, rewrite_job
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_onepass as onepass
from lumberjack.errors import BadInput
from lumberjack.host.bounded_read import open_regular

#: A returned queue may grow this much over the one sent (status, results, history).
QUEUE_GROWTH = 16
QUEUE_SLACK_BYTES = 1 << 20


def read_returned_queue(path: Path, sent_bytes: int, sent_records: int) -> dict[str, jql.Ad]:
    """The returned queue, refused when far larger than the one sent."""
    max_bytes = QUEUE_GROWTH * sent_bytes + QUEUE_SLACK_BYTES
    max_records = QUEUE_GROWTH * sent_records + 10_000
    try:
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"returned queue {path} is not a regular file")
        if st.st_size > max_bytes:
            raise BadInput(
                f"returned queue is {st.st_size} bytes, more than {max_bytes} for a queue "
                f"of {sent_bytes} bytes sent; refusing to read it"
            )
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            # One pass: each record played as it is read (no list of records, no replay).
            ads, _ = onepass.read_ads_counted(
                _BoundedReader(handle, max_bytes), str(path), max_records=max_records
            )
            return ads
    except OSError as exc:
        raise BadInput(f"returned queue unreadable: {exc.strerror or exc}") from exc
    except jql.TooManyRecords:
        raise BadInput(
            f"returned queue has more than {max_records} records for {sent_records} sent; "
            "refusing to read it"
        ) from None
    except jql.JobQueueLogError as exc:
        raise BadInput(f"returned queue is corrupt: {exc}") from exc


class _BoundedReader:
    """A file read a piece at a time (the queue's text never exists whole) that refuses
    to give more than `limit` bytes: a file growing while it is read is refused too."""

    def __init__(self, handle: BinaryIO, limit: int) -> None:
        self.handle, self.limit, self.total = handle, limit, 0

    def read(self, size: int, /) -> bytes:
        data = self.handle.read(size)
        self.total += len(data)
        if self.total > self.limit:
            raise BadInput(f"returned queue grew past {self.limit} bytes while read; refusing it")
        return data

    def seek(self, offset: int, /) -> None:
        """Back to the start (a log the one pass leaves to the two passes is read again)."""
        self.handle.seek(offset)
        self.total = offset


def sent_queue(
    bundle_dir: Path, manifest: bundle_mod.Manifest, path_map: PathMap | None = None
) -> dict[str, jql.Ad] | None:
    """The queue as it left the access point, paths rewritten for the site.

    From the bundle's spool/job_queue.log while it is the file the manifest vouches for;
    else rebuilt from native/job_queue.log (what the schedd exported) by the same rewrite
    export did (with `import --in` the spool holds the other schedd's queue).
    """
    return read_sent_queue(bundle_dir, manifest, path_map)[0]


def read_sent_queue(
    bundle_dir: Path, manifest: bundle_mod.Manifest, path_map: PathMap | None = None
) -> tuple[dict[str, jql.Ad] | None, tuple[int, int] | None]:
    """sent_queue(), and the (bytes, records) of its log when it is the bundle's spool
    log: read once, hashed while it is parsed (write_log wrote it; _log_size would
    write it again to count them)."""
    spool_log = bundle_dir / bundle_mod.SPOOL / QUEUE_LOG
    entry = next((f for f in manifest.files if f.path == QUEUE_LOG), None)
    try:
        if entry is not None:
            # No more than the manifest says; a link, FIFO or device is no intact copy.
            with open_regular(spool_log, "queue log", entry.size) as handle:
                reader = _Hashing(handle)  # type: ignore[arg-type]
                ads, records = onepass.read_ads_counted(reader, str(spool_log))
                if reader.digest.hexdigest() == entry.sha256:
                    return ads, (reader.size, records)
    except (OSError, jql.JobQueueLogError, BadInput):
        pass
    return _rebuilt_sent(bundle_dir, manifest, path_map), None


class _Hashing:
    """A file whose bytes are hashed and counted as they are read."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def read(self, size: int, /) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data

    def seek(self, offset: int, /) -> None:
        """Back to the start, hashing anew (see _BoundedReader.seek)."""
        self.handle.seek(offset)
        self.digest, self.size = hashlib.sha256(), offset


def _rebuilt_sent(
    bundle_dir: Path, manifest: bundle_mod.Manifest, path_map: PathMap | None
) -> dict[str, jql.Ad] | None:
    """The sent queue from native/job_queue.log, by the rewrite export did."""
    try:
        ads = bundle_mod.read_queue_log(bundle_dir / bundle_mod.NATIVE / QUEUE_LOG)
    except (OSError, jql.JobQueueLogError, BadInput):
        return None
    path_map = path_map or PathMap.from_json(manifest.path_map)
    clusters = {
        jql.parse_key(k).cluster: ad for k, ad in ads.items() if jql.key_kind(k) == "cluster"
    }
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc" or key not in path_map.jobs:
            continue
        job = jql.parse_key(key)
        cluster_ad = clusters.get(job.cluster)
        rewrite = rewrite_job(
            job.cluster,
            job.proc,
            cluster_ad.attrs if cluster_ad else {},
            ad.attrs,
            path_map.remote_spool,
            local_iwd=path_map.jobs[key].local_iwd,
        )
        for attr, value in rewrite.proc_overrides.items():
            ad.set(attr, value)
    return ads


def _sent_queue(bundle_dir: Path) -> dict[str, jql.Ad] | None:
    """sent_queue() for a bundle whose manifest is read here (tests, older callers)."""
    try:
        return sent_queue(bundle_dir, bundle_mod.load_manifest(bundle_dir))
    except BadInput:
        return None
