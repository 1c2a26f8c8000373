"""How the access point starts python3 at the site: every command line it sends that
runs Python (the agent's loader, the transfer helper) is built here.

Isolated (`-I`): the site account is shared by every export, and code that escaped a
job can write to it. Without `-I`, a `.pth` file in the account's user site-packages, a
PYTHONPATH or PYTHONSTARTUP its startup files export, or a module named like a stdlib
one in the login's current directory (the account's home) would run inside every
lumberjack command on the login node, outside every container.

Stdlib only: the site's pools use the prefix in their own scripts too.
"""

from __future__ import annotations

import base64
import shlex
import zlib

#: The interpreter and its flags, as the site runs it: no PYTHON* variables, no user
#: site-packages, no script or current directory on sys.path.
PYTHON3 = ("python3", "-I")


def packed(source: str) -> str:
    """`source` as a one-line `-c` program (compressed): one line is what every login
    shell passes as is, quoted."""
    data = base64.b64encode(zlib.compress(source.encode(), 9)).decode()
    return f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{data}')))"


def python_command(program: str, *args: str) -> str:
    """The remote command line running the one-line `program` with `args`."""
    return shlex.join([*PYTHON3, "-c", program, *args])
