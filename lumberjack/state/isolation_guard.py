"""At ship, launch and lease create: no export or lease of another local owner on the
same site account while the jobs of either run there without a container (see
lumberjack/profiles/isolation.py).

The site account is what the SSH login reaches, `user@host` (transport/login_account.py),
whatever the profile is called and wherever its base_dir is: a job without a container
runs as the account and reaches every file of it. The ledger keeps the account and how
jobs run when files first go to the site, because a profile may be edited or removed
while the files stay where they went.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lumberjack.errors import BadInput, LumberjackError
from lumberjack.profiles.isolation import CONTAINED, ONE_OWNER, isolation_of
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.sites import find_profile
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.phases import LeasePhase, Phase
from lumberjack.transport.login_account import login_account

#: One check at a time: a check and its record are one act, or two owners could pass.
#: Never an export's name (those hold no colon).
GUARD_LOCK = "isolation:site-accounts"

#: Phases in which an export has files (inputs, queue, outputs) at the site.
AT_SITE = (
    Phase.SHIPPED, Phase.LAUNCHED, Phase.RUNNING, Phase.FINISHED, Phase.FETCHED,
    Phase.IMPORTED,
)  # fmt: skip
#: Phases in which an export has files there once a ship began (its account recorded):
#: a ship cut short, or handed back without a cleanup.
AT_SITE_IF_SHIPPED = (Phase.EXPORTED, Phase.UNEXPORTED)
LEASE_AT_SITE = (LeasePhase.CREATING, LeasePhase.ACTIVE, LeasePhase.STOPPING)
#: The ledger's mark of an export launched with jobs that get no container. Such jobs
#: could write the account's shell startup files or ~/.ssh, which run with every later
#: command there (sshd runs each through the login shell): the account stays that
#: owner's after the export's cleanup, until a person has checked it (--shared-account).
RAN_UNCONTAINED = "ran_uncontained"


@dataclass(frozen=True)
class Tenant:
    """An export or a lease of one local owner on a site account."""

    kind: str  # "export" or "lease"
    name: str
    owner: str | None
    phase: str
    site: str | None  # the profile's name: for messages only
    account: str | None  # user@host; None: recorded before accounts were, profile gone
    isolation: str  # CONTAINED, SHARED or ONE_OWNER (profiles/isolation.py)
    gone: bool = False  # nothing of it is at the site, but its jobs ran there uncontained

    @property
    def contained(self) -> bool:
        return self.isolation == CONTAINED

    def same_account(self, other: Tenant) -> bool:
        if self.account is None or other.account is None:
            return self.site == other.site  # all an old record tells
        return self.account == other.account


def account_facts(profile: SiteProfile, shared_account: bool = False) -> dict[str, str]:
    """What the ledger keeps for the guard: the site account, and how its jobs run."""
    return {
        "site_account": login_account(profile),
        "isolation": isolation_of(profile, shared_account),
    }


def _recorded(info: dict[str, Any], site: str | None, known: dict[str, dict[str, Any]]) -> dict:
    """The facts `info` recorded; for a record older than them, its profile's now (`known`
    keeps them per site); nothing known when that profile is gone."""
    if "site_account" in info:
        return info
    if site not in known:
        try:
            known[site] = account_facts(find_profile(str(site)))
        except LumberjackError:
            known[site] = {"site_account": None, "isolation": ONE_OWNER}
    return known[site]


def tenants(ledger: Ledger) -> Iterator[Tenant]:
    """Every export and lease of the ledger with files at a site."""
    known: dict[str, dict[str, Any]] = {}
    for record in ledger.list():
        shipped = "site_account" in record.info and record.phase in AT_SITE_IF_SHIPPED
        there = record.phase in AT_SITE or shipped
        if record.site is not None and (there or record.info.get(RAN_UNCONTAINED)):  # not --out
            facts = _recorded(record.info, record.site, known)
            yield Tenant("export", record.name, record.owner, record.phase.value, record.site,
                         facts["site_account"], facts["isolation"], not there)  # fmt: skip
    for lease in ledger.leases():
        if lease.phase in LEASE_AT_SITE:
            facts = _recorded(lease.info, lease.site, known)
            yield Tenant("lease", lease.name, lease.owner, lease.phase.value, lease.site,
                         facts["site_account"], facts["isolation"])  # fmt: skip


def refuse_beside(ledger: Ledger, new: Tenant, profile: SiteProfile, shared: bool) -> None:
    """BadInput, in one line naming the other export or lease, when `new` would be on the
    site account of another owner's while the jobs of either get no container. `shared`:
    this command (or the profile) says the account's users may see each other's files."""
    if shared:
        return
    for other in tenants(ledger):
        if (other.kind, other.name) == (new.kind, new.name) or other.owner == new.owner:
            continue
        if not new.same_account(other) or (new.contained and other.contained):
            continue
        there = (
            f"{other.kind} {other.name} of {other.owner or 'an unrecorded owner'} is there "
            f"({other.phase}) on the same site account {new.account} (site {other.site})"
        )
        if other.gone:
            raise BadInput(
                f"export {other.name} of {other.owner or 'an unrecorded owner'} ran its jobs "
                f"without a container on the same site account {new.account} (site "
                f"{other.site}): what they could have left there (shell startup files, "
                "~/.ssh) runs with every command lumberjack sends; once a person has "
                "checked the account, --shared-account (or [site] shared_account = true)"
            )
        if new.contained:
            why = f"{there}, and its jobs get no container: they could read this {new.kind}'s files"
        else:
            why = (
                f"site {profile.name} gives jobs no container (runtime "
                f"{profile.container.runtime}) and {there}: each owner's jobs could read the "
                "other's files"
            )
        raise BadInput(
            f"{why}; go on after its cleanup, or set [site] shared_account = true (or "
            "--shared-account) if the site account's users may see each other's files"
        )


def check_isolation(
    ledger: Ledger, record: ExportRecord, profile: SiteProfile, shared_account: bool = False
) -> None:
    """Refuse (BadInput, one line) an export beside another owner's on its site account
    where the jobs of either get no container; else record its account (where its files
    go, kept from its first ship) and how its jobs run now (the profile at launch
    decides)."""
    facts = account_facts(profile, shared_account)
    facts["site_account"] = record.info.get("site_account", facts["site_account"])
    new = Tenant("export", record.name, record.owner, record.phase.value, record.site,
                 facts["site_account"], facts["isolation"])  # fmt: skip
    with ledger.lock(GUARD_LOCK, wait=True):
        refuse_beside(ledger, new, profile, profile.shared_account or shared_account)
        ledger.update_info(record.name, **facts)


def check_lease_isolation(
    ledger: Ledger, name: str, owner: str | None, profile: SiteProfile
) -> dict[str, str]:
    """For a new lease of `owner`: refuse as check_isolation does; else the facts its
    ledger info keeps. The caller holds GUARD_LOCK until the lease is recorded."""
    facts = account_facts(profile)
    new = Tenant("lease", name, owner, LeasePhase.CREATING.value, profile.name,
                 facts["site_account"], facts["isolation"])  # fmt: skip
    refuse_beside(ledger, new, profile, profile.shared_account)
    return facts
