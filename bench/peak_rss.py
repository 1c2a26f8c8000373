"""Run a command and print its peak RSS in KiB (with its children's), nothing else.

`python bench/peak_rss.py CMD ARGS...`: CMD's exit status, and on the last line of
stdout its peak. Why not the spawning process's own wait4: Linux carries a process's
ru_maxrss across exec (exec_mmap keeps the larger of it and the old memory's peak), so
a command started by a big benchmark process inherits that process's size as its
"peak". Started from this small process by fork, the command's peak is its own (and
its children's: wait4 reports the largest of them)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    print(usage.ru_maxrss, flush=True)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
