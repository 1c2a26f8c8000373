"""At ship and launch: no export of another local owner at the same site account, where
nothing keeps its jobs out of this one's files (see lumberjack/profiles/isolation.py)."""

from __future__ import annotations

from lumberjack.errors import BadInput
from lumberjack.profiles.isolation import ONE_OWNER, isolation_of
from lumberjack.profiles.model import SiteProfile
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.phases import Phase

#: Phases in which an export has files (inputs, queue, outputs) at the site.
AT_SITE = (
    Phase.SHIPPED, Phase.LAUNCHED, Phase.RUNNING, Phase.FINISHED, Phase.FETCHED,
    Phase.IMPORTED,
)  # fmt: skip


def other_owners_at_site(ledger: Ledger, record: ExportRecord) -> list[ExportRecord]:
    """Exports of the same site whose owner is not this export's, with files there."""
    return [
        other
        for other in ledger.list()
        if other.name != record.name
        and other.site == record.site
        and other.owner != record.owner
        and other.phase in AT_SITE
    ]


def check_isolation(
    ledger: Ledger, record: ExportRecord, profile: SiteProfile, shared_account: bool = False
) -> None:
    """BadInput, in one line naming the other export, when `record` would share the site
    account with another owner's export and the site gives their jobs no container."""
    if isolation_of(profile, shared_account) != ONE_OWNER:
        return
    others = other_owners_at_site(ledger, record)
    if others:
        other = others[0]
        raise BadInput(
            f"site {profile.name} gives jobs no container (runtime "
            f"{profile.container.runtime}) and export {other.name} of {other.owner} is "
            f"there ({other.phase}): each owner's jobs could read the other's files; go on after "
            "its cleanup, or set [site] shared_account = true (or --shared-account) if the "
            "site account's users may see each other's files"
        )
