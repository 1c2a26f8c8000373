"""Reading a file its owner could replace (bounded_read): a FIFO, a device, a link or an
oversized file is refused in one line and never hangs."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from lumberjack.ap import bundle
from lumberjack.errors import BadInput
from lumberjack.host.bounded_read import open_regular, read_regular


@pytest.fixture(autouse=True)
def never_hangs() -> Iterator[None]:
    """A read that blocks fails the test instead of hanging it."""

    def hung(*_: object) -> None:
        raise AssertionError("the read blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def one_line(exc: pytest.ExceptionInfo[BadInput]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_bytes(b"{}")
    assert read_regular(tmp_path / "manifest.json", "manifest", 2) == b"{}"


def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(BadInput) as exc:
        read_regular(tmp_path / "manifest.json", "manifest", 100)
    assert one_line(exc).endswith("manifest.json is not a regular file; refusing to read it")


def test_a_link_to_dev_zero_is_refused(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(BadInput) as exc:
        read_regular(tmp_path / "manifest.json", "manifest", 100)
    assert one_line(exc).endswith("manifest.json is a symbolic link; not following it")


def test_a_device_is_refused() -> None:
    with pytest.raises(BadInput, match="^manifest /dev/zero is not a regular file"):
        read_regular("/dev/zero", "manifest", 100)


def test_a_link_to_a_regular_file_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("{}")
    (tmp_path / "manifest.json").symlink_to(tmp_path / "real")
    with pytest.raises(BadInput, match="is a symbolic link"):
        read_regular(tmp_path / "manifest.json", "manifest", 100)


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "job_queue.log").write_bytes(b"x" * 101)
    with pytest.raises(BadInput) as exc:
        read_regular(tmp_path / "job_queue.log", "queue log", 100)
    assert one_line(exc).endswith("is 101 bytes, more than the 100 allowed; refusing to read it")


def test_a_file_that_grows_past_the_bound_while_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    path.write_bytes(b"x" * 10)
    with open_regular(path, "queue log", 20) as handle:
        with open(path, "ab") as more:
            more.write(b"y" * 100)
        with pytest.raises(BadInput, match="grew past 20 bytes while read"):
            handle.read()


def test_a_missing_file_stays_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nothing", "manifest", 100)


def test_the_manifest_and_queue_readers_use_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / bundle.MANIFEST)
    with pytest.raises(BadInput, match="not a regular file"):
        bundle.read_manifest_once(tmp_path)
    (tmp_path / "native").mkdir()
    (tmp_path / "native" / "job_queue.log").symlink_to("/dev/zero")
    with pytest.raises(BadInput, match="symbolic link"):
        bundle.read_queue_log(tmp_path / "native" / "job_queue.log")
    os.unlink(tmp_path / bundle.MANIFEST)
    (tmp_path / bundle.MANIFEST).write_bytes(b"{" * 50)
    with pytest.raises(BadInput, match="50 bytes, more than the 49 allowed"):
        bundle.read_manifest_bytes(tmp_path, 49)
