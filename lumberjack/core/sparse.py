"""Writing a file so that its runs of zeros stay holes: a file that is sparse where it
comes from takes no real blocks for its zeros where it lands, however its bytes
travelled (a stream carries every zero; the holes are made again on arrival).

Stdlib only: the transfer helper writes with it (at the site and, for downloads, here)
and import places outputs with it.
"""

from __future__ import annotations

import os
from typing import Union

#: A file system block: a run of zeros shorter than this would save nothing as a hole.
BLOCK = 4096
_ZERO_BLOCK = bytes(BLOCK)


def write_past_end(fd: int, data: Union[bytes, bytearray]) -> None:
    """Write `data` at the descriptor's offset, which must be at or past the end of the
    file (a new file, or one being continued): every whole block of zeros is skipped by
    seeking instead of written, since past the end the file reads as zeros anyway. A
    hole at the end has no byte to set the size: finish with `end_at`."""
    position = os.lseek(fd, 0, os.SEEK_CUR)
    written = 0  # data[:written] is written or skipped
    # Blocks of the file, not of this piece of it: holes are whole file system blocks.
    block_start = -position % BLOCK
    while block_start + BLOCK <= len(data):
        block_end = block_start + BLOCK
        if data[block_start:block_end] == _ZERO_BLOCK:
            write_all(fd, memoryview(data)[written:block_start])
            os.lseek(fd, BLOCK, os.SEEK_CUR)
            written = block_end
        block_start = block_end
    write_all(fd, memoryview(data)[written:])


def end_at(fd: int, size: int) -> None:
    """The file is `size` bytes long, a trailing run of zeros (skipped) included."""
    os.ftruncate(fd, size)


def write_all(fd: int, data: Union[bytes, bytearray, memoryview]) -> None:
    """Every byte of `data` written (os.write may take fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
