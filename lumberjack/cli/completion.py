"""Tab completion of the names a command takes: sites (the profile files), exports and
leases (the ledger), queues (the profile of the site already on the line). click asks
these when the shell does (docs/shell-completion.md); a completion never fails and never
creates anything: no ledger yet, or one that cannot be read, completes nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import click
from click.shell_completion import CompletionItem


def _starting(names: Iterable[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def complete_site(
    _ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from lumberjack.profiles.sites import profile_files

    return _starting(profile_files(), incomplete)


def _ledger_names(leases: bool = False) -> list[str]:
    """The ledger's export (or lease) names; none when there is no ledger to read."""
    from lumberjack.host.state_home import state_dir
    from lumberjack.state.ledger import Ledger

    with contextlib.suppress(Exception):  # a completion prints nothing rather than fail
        if (state_dir() / "ledger.sqlite").is_file():  # never create one to complete
            ledger = Ledger()
            try:
                return [r.name for r in (ledger.leases() if leases else ledger.list())]
            finally:
                ledger.close()
    return []


def complete_export(
    _ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    return _starting(_ledger_names(), incomplete)


def complete_lease(
    _ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    return _starting(_ledger_names(leases=True), incomplete)


def complete_queue(
    ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The queues of the site named earlier on the line (--site, or `sites check SITE`);
    none before a site is named."""
    from lumberjack.profiles.sites import find_profile, profile_files

    # `sites check SITE --queue <TAB>`: while --queue waits for its value, click leaves
    # the words before it unparsed (in ctx.args), so SITE is looked for there too.
    site = ctx.params.get("site") or next((w for w in ctx.args if w in profile_files()), None)
    if not site:
        return []
    try:
        profile = find_profile(site)
    except Exception:  # noqa: BLE001  (an unknown or broken profile completes nothing)
        return []
    return _starting((queue.name for queue in profile.queues), incomplete)
