"""The pilots' token: an IDTOKEN for `pilot@<trust domain>` that may only read and
advertise a startd and its master (remote_pool.PILOT_AUTHZ).

It lives for the pilots' walltime and a short margin (the plan's token_lifetime_s, see
state/plans.py), not for days: a token taken from a compute node is worth little for
long. A pilot may wait in the batch queue longer than that margin, so while one waits,
every `status` (sync runs it each minute) mints a fresh token once half the margin has
passed: the pilot that starts then finds a token valid for its whole walltime.

Stdlib only: this module runs at the site, inside the agent's zipapp.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

from lumberjack.core.contract import ExportLayout, LaunchPlan
from lumberjack.site.files import write_whole
from lumberjack.site.remote_pool import PILOT_AUTHZ, PoolSettings


def token_file(layout: ExportLayout) -> Path:
    return Path(layout.pilot_tokens, "pilot")


def claims(token: str) -> dict[str, Any]:
    """The JWT payload of an IDTOKEN (not verified: only its own issuer can)."""
    payload = token.strip().split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def create(
    settings: PoolSettings,
    config: str,
    identity: str,
    authz: tuple[str, ...],
    lifetime_s: int | None = None,
    *,
    fresh: bool = False,
) -> str:
    """An IDTOKEN for `identity` limited to `authz`, signed with the key of the pool
    whose condor_config is `config` (its trust domain the issuer); made in the running
    pool, or with `fresh` in a fresh container (no pool runs on the login node)."""
    lifetime = ["-lifetime", str(int(lifetime_s))] if lifetime_s is not None else []
    run = settings.runtime.run_fresh if fresh else settings.runtime.run_in_pool
    code, output = run(
        config, "condor_token_create", "-identity", identity, *lifetime,
        *[arg for scope in authz for arg in ("-authz", scope)],
    )  # fmt: skip
    lines = output.strip().splitlines()
    if code != 0 or not lines:
        raise RuntimeError(f"condor_token_create failed: {lines[-1] if lines else 'no output'}")
    return lines[-1]


def write(path: Path, token: str) -> None:
    """`token` at `path` (its directory 0700), written 0600 and moved into place whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    write_whole(path, token + "\n")


def mint(layout: ExportLayout, settings: PoolSettings, lifetime_s: int) -> None:
    """A new pilots' token in tokens.d (0700), written 0600 and moved into place whole."""
    token = create(settings, layout.pool_config, settings.pilot_identity, PILOT_AUTHZ, lifetime_s)
    write(token_file(layout), token)


def stale(layout: ExportLayout, plan: LaunchPlan, now: float | None = None) -> bool:
    """Whether a waiting pilot would start with less than its walltime left on the token."""
    margin = plan.token_lifetime_s - plan.spec.walltime_s
    try:
        issued = claims(token_file(layout).read_text())["iat"]
    except (OSError, ValueError, KeyError, IndexError):
        return True
    return (now or time.time()) - issued > margin / 2


def refresh_for_waiting(
    layout: ExportLayout, settings: PoolSettings, plan: LaunchPlan, states: dict[str, str]
) -> bool:
    """Mint a fresh token when a pilot still waits in the queue and the token is stale."""
    if "queued" not in states.values() or not stale(layout, plan):
        return False
    mint(layout, settings, plan.token_lifetime_s)
    return True
