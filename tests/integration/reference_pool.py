"""The conformance suite's reference: a plain HTCondor pool (collector, negotiator,
schedd and a startd) from the testbed's rootfs, as testbed.py starts its pools: its
own CONDOR_CONFIG, LOCAL_DIR, port and collector, loopback only. It never sees the
access point's jobs (another collector, another schedd). One per test session, named
by the session's PID on a free port (two sessions never share one), stopped by its
master's PID and removed whatever happens."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Iterator

import testbed


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def reference_pool(extra_config: str = "") -> Iterator[testbed.Pool]:
    """A started reference pool (``extra_config``: lines after its own, such as its
    slots for a benchmark); stopped (by PID) and removed on the way out."""
    pool = testbed.Pool(
        f"{testbed.REFERENCE_HOST}-{os.getpid()}", free_port(), execute=True,
        host=testbed.REFERENCE_HOST, extra_config=extra_config,
    )  # fmt: skip
    try:
        pool.start(testbed.rootfs_path())
        yield pool
    finally:
        pool.stop()
        shutil.rmtree(pool.root, ignore_errors=True)
