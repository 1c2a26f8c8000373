#!/usr/bin/env python3
"""SSH_ASKPASS for the testbed's MFA sshds: answers a one-time-code prompt with the code
of now, as a person reading an authenticator app would (a wrong code when
$LUMBERJACK_TESTBED_WRONG_CODE is set). Every prompt is appended to site/askpass.log,
so tests can tell how often ssh asked. ssh runs it with the prompt as its argument."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import os  # noqa: E402

import testbed  # noqa: E402


def main() -> int:
    prompt = " ".join(sys.argv[1:])
    site = testbed.site()
    with open(site.root / "askpass.log", "a") as log:
        log.write(f"{time.time():.3f} {prompt!r}\n")
    if "one-time password" not in prompt.lower():
        return 1  # nothing else is ever asked: no passphrase, no host key question
    code = site.otp_code()
    if os.environ.get("LUMBERJACK_TESTBED_WRONG_CODE"):
        code = f"{(int(code) + 500000) % 1000000:06d}"
    print(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
