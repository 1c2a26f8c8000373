"""Leases without daemons: the ledger's lease records and their moves, the refusals of
the command line (one line, exit code 2, nothing changed), and the configs a lease and a
joined export's schedd run with (who may do what; the pilots' token scopes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import load_fixture_module

import lumberjack.cli.exports_cmd  # noqa: F401  (registers the commands on `cli`)
import lumberjack.cli.lease_cmd  # noqa: F401
import lumberjack.cli.steps_cmd  # noqa: F401
from lumberjack.ap.agent_zipapp import shipped_agent
from lumberjack.cli import cli
from lumberjack.core.answers import (
    Accounting,
    Ad,
    LeaseStarted,
    LeaseStatus,
    LeaseStopped,
    PilotsSubmitted,
    PoolStarted,
    read_answer,
)
from lumberjack.core.contract import ContractError, ExportLayout
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile
from lumberjack.site import remote_pool
from lumberjack.site.pools import joined as joined_module
from lumberjack.site.pools import lease as lease_module
from lumberjack.site.remote_pool import PoolSettings
from lumberjack.state import leases, plans, sync
from lumberjack.state.ledger import Ledger, lease_key
from lumberjack.state.phases import LeasePhase, Phase


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    return Ledger()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def add_lease(ledger: Ledger, name: str = "calib", site: str = "testbed") -> None:
    request = build_request(find_profile(site))
    ledger.create_lease(name, site=site, info={
        "remote_dir": f"/home/hpcuser/lumberjack/lease-{name}",
        "request": plans.request_info(request),
    })  # fmt: skip


def add_export(ledger: Ledger, name: str, phase: Phase, lease: str | None) -> None:
    info = {"remote_dir": f"/site/{name}"} | ({"lease": lease} if lease else {})
    ledger.create(name, site="testbed", bundle_dir=Path("/nonexistent"), remote_spool="/s",
                  owner="alice", clusters=[7], jobs=["7.0"], info=info)  # fmt: skip
    ledger.set_phase(name, phase)


# ---- the ledger ----------------------------------------------------------------------


def test_a_lease_record_moves_through_its_phases(ledger: Ledger) -> None:
    add_lease(ledger)
    record = ledger.get_lease("calib")
    assert (record.phase, record.site) == (LeasePhase.CREATING, "testbed")
    assert record.info["request"]["site"] == "testbed"
    assert ledger.move_lease("calib", "create") == LeasePhase.ACTIVE
    assert ledger.move_lease("calib", "extend") == LeasePhase.ACTIVE
    ledger.update_lease_info("calib", rounds=2)
    assert ledger.move_lease("calib", "shutdown") == LeasePhase.STOPPING
    assert ledger.move_lease("calib", "shutdown") == LeasePhase.STOPPING  # again: idempotent
    assert ledger.move_lease("calib", "ended") == LeasePhase.ENDED
    record = ledger.get_lease("calib")
    assert record.phase == LeasePhase.ENDED and record.info["rounds"] == 2
    assert json.loads(json.dumps(record.to_json()))["phase"] == "ended"
    # Each move is in the steps, under the lease's own key (never an export's name).
    steps = [s["step"] for s in ledger.steps(lease_key("calib"))]
    assert steps == ["phase:active", "phase:active", "phase:stopping", "phase:stopping",
                     "phase:ended"]  # fmt: skip
    assert ledger.list() == []


@pytest.mark.parametrize(
    ("phase", "step"),
    [("creating", "extend"), ("ended", "join"), ("ended", "shutdown"), ("active", "ended")],
)
def test_moves_not_in_the_table_are_refused(ledger: Ledger, phase: str, step: str) -> None:
    add_lease(ledger)
    for move in {"active": ["create"], "ended": ["create", "shutdown", "ended"]}.get(phase, []):
        ledger.move_lease("calib", move)
    with pytest.raises(BadInput, match=f"lease 'calib' is {phase}; {step} needs phase"):
        ledger.move_lease("calib", step)
    assert ledger.get_lease("calib").phase == phase


def test_lease_names_are_checked_and_unique(ledger: Ledger) -> None:
    with pytest.raises(BadInput, match="lease name '../x' is not valid"):
        ledger.create_lease("../x", site="testbed", info={})
    add_lease(ledger)
    with pytest.raises(BadInput, match="a lease named 'calib' already exists"):
        add_lease(ledger)
    with pytest.raises(BadInput, match="no lease named 'other'; known leases: calib"):
        ledger.get_lease("other")
    assert ledger.find_lease("other") is None


def test_the_exports_of_a_lease_and_those_that_still_need_it(ledger: Ledger) -> None:
    add_lease(ledger)
    add_lease(ledger, "other")
    add_export(ledger, "a", Phase.RUNNING, "calib")
    add_export(ledger, "b", Phase.FETCHED, "calib")
    add_export(ledger, "c", Phase.SHIPPED, "other")
    add_export(ledger, "d", Phase.RUNNING, None)
    assert [r.name for r in ledger.joined("calib")] == ["a", "b"]
    assert [r.name for r in leases.still_needed_by(ledger, "calib")] == ["a"]
    ledger.set_phase("a", Phase.FETCHED)
    assert leases.still_needed_by(ledger, "calib") == []


# ---- the command line ----------------------------------------------------------------


def refused(result, match: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert match in lines[0], lines[0]


def test_cli_refuses_a_bad_lease_name(ledger: Ledger) -> None:
    refused(invoke("lease", "create", "bad name", "--site", "testbed"), "is not valid")
    assert ledger.leases() == []


def test_cli_refuses_an_unknown_site(ledger: Ledger) -> None:
    refused(invoke("lease", "create", "calib", "--site", "nosuch"), "unknown site 'nosuch'")
    assert ledger.leases() == []


@pytest.mark.parametrize(
    "args",
    [
        ("lease", "status", "nope"),
        ("lease", "extend", "nope"),
        ("lease", "shutdown", "nope"),
        ("export", "--ids", "7", "--lease", "nope"),
        ("run", "--ids", "7", "--lease", "nope"),
    ],
)
def test_cli_refuses_a_lease_not_found(ledger: Ledger, args: tuple[str, ...]) -> None:
    refused(invoke(*args), "no lease named 'nope'")


def test_cli_takes_leases_at_allocation_placement_with_one_pilot(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease's head node runs its pool in the allocation: one round of one pilot at
    a time (two heads would run two schedds on one queue)."""
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
    result = invoke("lease", "create", "calib", "--site", "testbed-alloc", "--nodes", "2",
                    "--dry-run")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "would create lease 'calib' at testbed-alloc" in result.output
    refused(invoke("lease", "create", "calib", "--site", "testbed-alloc", "--pilots", "2"),
            "--pilots 2: site testbed-alloc runs the schedd inside the allocation")  # fmt: skip
    assert ledger.leases() == []


def test_cli_refuses_request_flags_and_another_site_with_a_lease(ledger: Ledger) -> None:
    add_lease(ledger)
    refused(invoke("export", "--ids", "7", "--lease", "calib", "--nodes", "3"),
            "--nodes: an export in lease 'calib' runs on the lease's pilots")  # fmt: skip
    refused(invoke("export", "--ids", "7", "--lease", "calib", "--site", "testbed-nocontainer"),
            "lease 'calib' is at site testbed, not testbed-nocontainer")  # fmt: skip
    refused(invoke("export", "--ids", "7", "--lease", "calib", "--out", "/tmp/x"),
            "takes no --out")  # fmt: skip
    ledger.move_lease("calib", "shutdown")
    ledger.move_lease("calib", "ended")
    refused(invoke("export", "--ids", "7", "--lease", "calib"),
            "lease 'calib' is ended; join needs phase")  # fmt: skip


def test_cli_refuses_to_shut_a_lease_down_under_its_exports(ledger: Ledger) -> None:
    add_lease(ledger)
    ledger.move_lease("calib", "create")
    add_export(ledger, "a", Phase.RUNNING, "calib")
    dry = json.loads(invoke("lease", "shutdown", "calib", "--dry-run", "--json").output)
    assert dry["waiting"] == ["a"]
    with pytest.raises(BadInput, match=r"still serves a \(running\); fetch them first"):
        leases.shutdown(ledger, None, ledger.get_lease("calib"))  # refused before the site
    assert ledger.get_lease("calib").phase == LeasePhase.ACTIVE


def test_cli_dry_run_creates_nothing(ledger: Ledger) -> None:
    result = invoke("lease", "create", "calib", "--site", "testbed", "--nodes", "2",
                    "--dry-run", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["dry_run"] and answer["request"]["nodes"] == 2
    assert ledger.leases() == []


def test_leases_lists_each_lease_with_its_exports(ledger: Ledger) -> None:
    assert "no leases in" in invoke("leases").output
    add_lease(ledger)
    add_export(ledger, "a", Phase.RUNNING, "calib")
    listed = json.loads(invoke("leases", "--json").output)["leases"]
    assert [(e["name"], e["phase"], e["site"], e["exports"]) for e in listed] == [
        ("calib", "creating", "testbed", ["a"])
    ]
    assert "calib" in invoke("leases").output
    assert "(lease calib)" in invoke("exports").output


@pytest.mark.parametrize("command", ["create", "status", "share", "extend", "shutdown"])
def test_every_lease_command_has_examples(command: str) -> None:
    text = invoke("lease", command, "--help").output
    assert "Example" in text and f"lease {command}" in text and "--json" in text


# ---- configs -------------------------------------------------------------------------


config_values = load_fixture_module("condor_config").config_values  # rendered configs, read


LEASE = ExportLayout("/home/hpcuser/lumberjack/lease-calib")
EXPORT = ExportLayout("/home/hpcuser/lumberjack/run-1")


def settings(layout: ExportLayout, **more) -> PoolSettings:
    return PoolSettings(layout=layout, site_user="hpcuser", address="10.0.0.5", port=40123,
                        image="/images/site.sif", **more)  # fmt: skip


def joined() -> PoolSettings:
    return settings(EXPORT)


def expanded(text: str) -> dict[str, str]:
    """config_values, with `$(NAME)` of earlier lines expanded (`X = $(X) more` adds)."""
    values: dict[str, str] = {}
    for name, value in config_values_in_order(text):
        values[name] = re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1].upper(), m[0]), value)
    return values


def config_values_in_order(text: str) -> list[tuple[str, str]]:
    return [(n.strip().upper(), v.strip()) for n, _, v in
            (line.partition("=") for line in text.splitlines()
             if "=" in line and not line.startswith("#"))]  # fmt: skip


def test_a_lease_runs_collector_and_negotiator_only() -> None:
    values = config_values(lease_module.lease_config(settings(LEASE)))
    assert values["DAEMON_LIST"] == "MASTER, SHARED_PORT, COLLECTOR, NEGOTIATOR"
    assert values["TRUST_DOMAIN"] == "lumberjack-lease-calib"
    assert values["SEC_PASSWORD_DIRECTORY"] == "$(LOCAL_DIR)/passwords.d"
    assert values["LOCAL_DIR"] == f"{LEASE.root}/pool/local"
    # Joined schedds and masters advertise only with a token, never by FS.
    assert values["SEC_ADVERTISE_SCHEDD_AUTHENTICATION_METHODS"] == "IDTOKENS"
    assert values["SEC_ADVERTISE_MASTER_AUTHENTICATION_METHODS"] == "IDTOKENS"
    # HTCondor's config reading changes backslashes: the expression must have none.
    assert "\\" not in values["COLLECTOR_REQUIREMENTS"]


def test_a_joined_schedd_reports_to_the_lease_in_its_own_trust_domain() -> None:
    values = config_values(joined_module.joined_schedd_config(joined(), "lumberjack-lease-calib"))
    assert values["DAEMON_LIST"] == "MASTER, SCHEDD"
    assert values["COLLECTOR_HOST"] == "10.0.0.5:40123"
    assert values["USE_SHARED_PORT"] == "FALSE"
    assert values["TRUST_DOMAIN"] == values["UID_DOMAIN"] == "lumberjack-run-1"
    assert values["SEC_PASSWORD_DIRECTORY"] == "$(LOCAL_DIR)/passwords.d"  # its own key
    assert values["LOCAL_DIR"] == f"{EXPORT.root}/pool/local"
    assert values["SPOOL"] == EXPORT.spool  # its own queue
    assert values["SCHEDD_NAME"] == "run-1@lumberjack-run-1"  # unique in the lease
    # Only the lease's negotiator, with a token of this export's key, negotiates.
    assert values["ALLOW_NEGOTIATOR"] == "negotiator@lumberjack-run-1"
    assert values["SEC_NEGOTIATOR_AUTHENTICATION_METHODS"] == "IDTOKENS"
    with pytest.raises(ValueError, match="own trust domain"):
        joined_module.joined_schedd_config(settings(EXPORT, domain="lumberjack-lease-calib"), "x")


def test_a_joined_schedd_trusts_nothing_of_the_lease_or_other_exports() -> None:
    values = expanded(joined_module.joined_schedd_config(joined(), "lumberjack-lease-calib"))
    allowed = {k: v.split() for k, v in values.items() if k.startswith("ALLOW_")}
    everyone = {i for ids in allowed.values() for i in ids}
    assert {i.split("@")[1] for i in everyone} == {"lumberjack-run-1"}
    assert {k for k, ids in allowed.items() if "negotiator@lumberjack-run-1" in ids} == {
        "ALLOW_NEGOTIATOR"
    }


def test_the_tokens_between_a_lease_and_a_joined_export_are_narrow() -> None:
    assert lease_module.joined_identity("run-1", "lumberjack-lease-calib") == (
        "schedd-run-1@lumberjack-lease-calib"
    )
    # No DAEMON, WRITE or ADMINISTRATOR: an ad of its own and reading, negotiating.
    assert lease_module.JOINED_SCHEDD_AUTHZ == ("ADVERTISE_SCHEDD", "ADVERTISE_MASTER", "READ")
    assert joined_module.NEGOTIATOR_AUTHZ == ("NEGOTIATOR",)


@pytest.mark.parametrize("which", ["lease", "pilot"])
def test_the_pilots_of_a_lease_may_only_read_and_advertise(which: str) -> None:
    lease = settings(LEASE)
    text = {
        "lease": lambda: lease_module.lease_config(lease),
        "pilot": lambda: remote_pool.pilot_config(lease),
    }[which]()
    values = expanded(text)
    pilot = "pilot@lumberjack-lease-calib"
    schedds = "schedd-*@lumberjack-lease-calib"
    allowed = {k: v.split() for k, v in values.items() if k.startswith("ALLOW_")}
    assert allowed["ALLOW_ADVERTISE_STARTD"] == [pilot]
    assert {k for k, ids in allowed.items() if pilot in ids} == {
        "ALLOW_READ", "ALLOW_ADVERTISE_STARTD", "ALLOW_ADVERTISE_MASTER",
    }  # fmt: skip
    everyone = {i for ids in allowed.values() for i in ids}
    own = {"hpcuser@lumberjack-lease-calib", "condor@lumberjack-lease-calib", pilot}
    if which == "lease":  # joined schedds: their own ads, and reading
        assert {k for k, ids in allowed.items() if schedds in ids} == {
            "ALLOW_READ", "ALLOW_ADVERTISE_SCHEDD", "ALLOW_ADVERTISE_MASTER",
        }  # fmt: skip
        own.add(schedds)
    assert everyone == own
    assert remote_pool.PILOT_AUTHZ == ("READ", "ADVERTISE_STARTD", "ADVERTISE_MASTER")


def collector_takes(ad: dict) -> bool:
    """The lease collector's COLLECTOR_REQUIREMENTS, evaluated by the ClassAd library
    against the update (the collector's TARGET)."""
    classad2 = pytest.importorskip("classad2")
    values = config_values(lease_module.lease_config(settings(LEASE)))
    # The update is TARGET at the collector; here the one ad is the scope of everything.
    expression = values["COLLECTOR_REQUIREMENTS"].replace("TARGET.", "")
    return bool(classad2.ExprTree(expression).eval(classad2.ClassAd(ad)))


@pytest.mark.parametrize(
    ("ad", "taken"),
    [
        ({"MyType": "Scheduler", "Name": "run-1@lumberjack-run-1"}, True),
        ({"MyType": "DaemonMaster", "Name": "run-1@lumberjack-run-1"}, True),
        ({"MyType": "Submitter", "ScheddName": "run-1@lumberjack-run-1"}, True),
        ({"MyType": "Scheduler", "Name": "run-2@lumberjack-run-2"}, False),  # another's
        ({"MyType": "Submitter", "ScheddName": "run-2@lumberjack-run-2"}, False),
        ({"MyType": "Machine", "Name": "slot1@node"}, False),  # not a schedd's ad
        ({"MyType": "Scheduler", "Name": "run-1@lumberjack-run-1x"}, False),
    ],
)
def test_a_joined_schedd_advertises_only_its_own_ads(ad: dict, taken: bool) -> None:
    assert (
        collector_takes({**ad, "AuthenticatedIdentity": "schedd-run-1@lumberjack-lease-calib"})
        is taken
    )


def test_the_leases_own_daemons_and_pilots_advertise_as_before() -> None:
    for identity in ("pilot@lumberjack-lease-calib", "condor@lumberjack-lease-calib", None):
        ad = {"MyType": "Machine", "Name": "slot1@node"}
        assert collector_takes(ad | ({"AuthenticatedIdentity": identity} if identity else {}))


def test_a_joined_exports_plan_names_its_lease_and_binds_it(ledger: Ledger) -> None:
    profile = find_profile("testbed")
    request = build_request(profile)
    ledger.create("run-1", site="testbed", bundle_dir=Path("/b"), remote_spool="/s",
                  owner="alice", clusters=[7], jobs=["7.0"],
                  info={"remote_dir": EXPORT.root, "request": plans.request_info(request),
                        "lease": "calib", "lease_dir": LEASE.root})  # fmt: skip
    plan = plans.launch_plan(ledger.get("run-1"), profile, EXPORT)
    assert plan.lease == LEASE.root
    assert plan.binds == (*profile.container.bind, LEASE.root)
    lease_plan = plans.pool_plan(request, profile, LEASE)
    assert lease_plan.lease is None


# ---- create, shutdown and sync against the in-memory site ------------------------------


def _fake_site():  # -> module
    from conftest import load_fixture_module

    return load_fixture_module("fake_site")


fake = _fake_site()


class LeaseSite(fake.FakeSite):
    """The fake site with the agent's lease commands: a lease's pool and pilots. Seam:
    the pool's daemons and the batch system (a lease has nothing else); the answers
    are the agent's own types, decoded by the access point as the real ones are."""

    def __init__(self) -> None:
        super().__init__(None, "/nonexistent")
        self.lease_pool = False

    def _agent_lease_start(self, root: str) -> LeaseStarted:
        fake.read_plan(self.connection.files, root)  # as strictly as the agent reads it
        started, self.lease_pool = not self.lease_pool, True
        submitted = []
        if not any(state in fake.ALIVE for state in self.pilots.values()):
            submitted = [str(2000 + len(self.pilots))]
            self.pilots[submitted[0]] = "queued"
        return LeaseStarted(PoolStarted(started), PilotsSubmitted(submitted))

    def _agent_lease_status(self, root: str) -> LeaseStatus:
        alive = any(state in fake.ALIVE for state in self.pilots.values())
        return LeaseStatus(self.lease_pool, dict(self.pilots), alive)

    def _agent_lease_stop(self, root: str) -> LeaseStopped:
        cancelled = [p for p, state in self.pilots.items() if state in fake.ALIVE]
        for pilot in cancelled:
            self.pilots[pilot] = "cancelled"
        self.lease_pool = False
        return LeaseStopped(cancelled, pool_stopped=True)


LEASE_DIR = "/home/hpcuser/lumberjack/lease-calib"


class Queue(fake.FakeSchedd):
    """The local schedd's queue as `query` answers it: the ads given, filtered by the
    one constraint sync asks (LumberjackLease == "NAME")."""

    def __init__(self, *jobs: dict) -> None:
        super().__init__()
        self.jobs = list(jobs)
        self.asked: list[str] = []

    def query(self, constraint: str, projection: list[str]) -> list[dict]:
        self.asked.append(constraint)
        attr, _, value = constraint.partition(" == ")
        return [j for j in self.jobs if json.dumps(j.get(attr)) == value]


def job(cluster: int, proc: int, lease: str | None = "calib", status: int = 1, **more) -> dict:
    return {"ClusterId": cluster, "ProcId": proc, "JobStatus": status, "Owner": "alice",
            **({leases.OPT_IN_ATTR: lease} if lease else {}), **more}  # fmt: skip


def test_only_whole_idle_clusters_that_opted_in_are_ready() -> None:
    queue = Queue(
        job(5, 0), job(5, 1),  # ready
        job(6, 0), job(6, 1, status=2),  # one job runs: not yet
        job(7, 0, lease="other"),  # another lease's
        job(8, 0, lease=None),  # not opted in
        job(9, 0, Managed="External"),  # already exported
    )  # fmt: skip
    assert leases.opted_in(queue, "calib") == {"alice": [5]}
    assert queue.asked == ['LumberjackLease == "calib"']
    assert leases.opted_in(queue, "other") == {"alice": [7]}


def test_an_opted_in_job_that_asks_for_a_channel_is_held_and_keeps_no_one_waiting() -> None:
    """Cron's path: the job is held with export's reason (condor_q -hold shows it), its
    cluster waits, the owner's other clusters go."""
    held: list[tuple[list[str], str]] = []
    queue = Queue(job(5, 0), job(6, 0), job(6, 1, WantIOProxy=True), job(7, 0, TransferOutput="/x"))
    queue.hold = lambda ids, reason: held.append((ids, reason))  # type: ignore[method-assign]
    assert leases.opted_in(queue, "calib") == {"alice": [5]}
    assert [ids for ids, _ in held] == [["6.1"], ["7.0"]]
    assert all(reason.startswith("condor_lumberjack: ") for _, reason in held)
    assert "WantIOProxy" in held[0][1] and "'/x'" in held[1][1]


def test_opted_in_clusters_are_grouped_by_owner() -> None:
    queue = Queue(job(5, 0), job(6, 0, Owner="bob"), job(7, 0), job(8, 0, Owner="carol"))
    assert leases.opted_in(queue, "calib") == {"alice": [5, 7], "bob": [6], "carol": [8]}


def create(ledger: Ledger, site: LeaseSite) -> dict:
    return leases.create(ledger, site, "calib", build_request(site.profile, nodes=2))


def test_create_then_shutdown_leaves_nothing(ledger: Ledger) -> None:
    site = LeaseSite()
    answer = create(ledger, site)
    assert answer["pilots"]["submitted"] == ["2000"]  # the agent answers no "nodes"
    record = ledger.get_lease("calib")
    assert record.phase == LeasePhase.ACTIVE and record.info["remote_dir"] == LEASE_DIR
    agent = ExportLayout(LEASE_DIR).agent_file(shipped_agent().sha256)
    assert agent == "/home/hpcuser/lumberjack/.lumberjack/" + Path(agent).name  # beside it
    assert agent in site.connection.files and f"{LEASE_DIR}/agent.pyz" not in site.connection.files
    plan = fake.read_plan(site.connection.files, LEASE_DIR)  # as the agent reads it
    assert plan.spec.nodes == 2 and plan.lease is None
    with pytest.raises(BadInput, match="a lease named 'calib' already exists"):
        create(ledger, site)
    ended = leases.shutdown(ledger, site, ledger.get_lease("calib"))
    assert ended["stop"]["cancelled_pilots"] == ["2000"]
    assert ledger.get_lease("calib").phase == LeasePhase.ENDED
    assert not site.lease_pool and not [p for p in site.connection.files if "lease-" in p]


def test_create_refuses_a_lease_beside_another_owners_uncontained_export(
    ledger: Ledger,
) -> None:
    """bob's export came by testbed-nocontainer (same account, other name): its jobs
    could read the new lease's key; nothing is recorded, nothing sent."""
    facts = {"site_account": "hpcuser@10.251.0.2", "isolation": "one-owner"}
    ledger.create("bob-calib", site="testbed-nocontainer", bundle_dir=Path("/nonexistent"),
                  remote_spool="/s", owner="bob", clusters=[7], jobs=["7.0"],
                  info=facts)  # fmt: skip
    ledger.set_phase("bob-calib", "running")
    site = LeaseSite()
    with pytest.raises(BadInput, match="export bob-calib of bob is there .running. on the "
                       "same site account hpcuser@10.251.0.2"):  # fmt: skip
        leases.create(ledger, site, "calib", build_request(site.profile, nodes=2),
                      {"owner": "alice", "share_with": []})  # fmt: skip
    assert ledger.find_lease("calib") is None
    assert not [p for p in site.connection.files if "lease-" in p]
    ledger.set_phase("bob-calib", "cleaned")
    create(ledger, site)
    info = ledger.get_lease("calib").info
    assert (info["site_account"], info["isolation"]) == ("hpcuser@10.251.0.2", "contained")


def test_sync_finishes_a_create_that_failed_half_way(ledger: Ledger) -> None:
    site = LeaseSite()
    site.agent_error["lease-start"] = "apptainer: cannot start the instance"
    with pytest.raises(LumberjackError, match="cannot start the instance"):
        create(ledger, site)
    assert ledger.get_lease("calib").phase == LeasePhase.CREATING
    del site.agent_error["lease-start"]
    queue = Queue()  # nothing opted in
    results = sync.sync(ledger, sites={"testbed": site}, schedd=queue)
    assert queue.asked == ['LumberjackLease == "calib"']
    assert [(r["lease"], r["steps"], r["phase"]) for r in results] == [
        ("calib", ["created"], "active")
    ]
    assert list(site.pilots) == ["2000"]  # one round, not two


def test_sync_ends_an_idle_lease_only_when_no_export_needs_it(ledger: Ledger) -> None:
    site = LeaseSite()
    create(ledger, site)
    add_export(ledger, "a", Phase.RUNNING, "calib")
    # Pilots alive: nothing to do.
    results = leases.sync(ledger, {"testbed": site})
    assert results[0]["steps"] == [] and results[0]["phase"] == "active"
    site.pilots_end()  # idle shutdown: the pilots are gone
    results = leases.sync(ledger, {"testbed": site})
    assert results[0]["phase"] == "active"  # export a still needs the lease
    ledger.set_phase("a", Phase.FETCHED)
    results = leases.sync(ledger, {"testbed": site})
    assert (results[0]["steps"], results[0]["phase"]) == (["idle: ended"], "ended")
    assert leases.sync(ledger, {"testbed": site}) == []  # ended leases are left alone


def test_sync_finishes_a_shutdown_that_failed_half_way(ledger: Ledger) -> None:
    site = LeaseSite()
    create(ledger, site)
    site.agent_error["remove"] = "the pool of lease-calib still runs; stop it first"
    with pytest.raises(LumberjackError, match="still runs"):
        leases.shutdown(ledger, site, ledger.get_lease("calib"))
    assert ledger.get_lease("calib").phase == LeasePhase.STOPPING
    del site.agent_error["remove"]
    results = leases.sync(ledger, {"testbed": site})
    assert (results[0]["steps"], results[0]["phase"]) == (["ended"], "ended")
    assert not [p for p in site.connection.files if "lease-" in p]


def test_the_agent_looks_for_daemons_by_names_proc_can_hold() -> None:
    """/proc/PID/comm keeps 15 characters: "condor_collector" would never be found."""
    import re

    from lumberjack.site import pools

    package = Path(pools.__file__).parent
    source = "".join(path.read_text() for path in sorted(package.glob("*.py")))
    names = re.findall(r'pool_processes\([^,()]+, "([^"]+)"\)', source)
    assert "condor_master" in names and "condor_schedd" in names
    assert [n for n in names if len(n) > 15] == []


# ---- owners and sharing --------------------------------------------------------------


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Local accounts alice, bob, carol; this process runs as root (uid 0)."""
    known = {"root": 0, "alice": 4242, "bob": 4444, "carol": 4545}

    def getpwnam(name: str):
        if name not in known:
            raise KeyError(name)
        return type("Entry", (), {"pw_name": name, "pw_uid": known[name]})

    def getpwuid(uid: int):
        return getpwnam(next(n for n, u in known.items() if u == uid))

    monkeypatch.setattr(leases.pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(leases.pwd, "getpwuid", getpwuid)
    monkeypatch.setattr(leases.os, "geteuid", lambda: 0)
    return known


def shared_lease(ledger: Ledger, owner: str | None, share_with: list[str]) -> None:
    add_lease(ledger)
    if owner is not None:
        ledger.update_lease_info("calib", owner=owner, share_with=share_with)


def test_a_lease_is_its_creators_or_roots_choice(users, monkeypatch) -> None:
    assert leases.sharing(None, None) == {"owner": "root", "share_with": []}
    assert leases.sharing("alice", "bob, carol,alice,bob") == {
        "owner": "alice", "share_with": ["bob", "carol"],
    }  # fmt: skip
    with pytest.raises(BadInput, match="--share-with: no local user mallory"):
        leases.sharing("alice", "bob,mallory")
    with pytest.raises(BadInput, match="--owner: no local user mallory"):
        leases.sharing("mallory", None)
    monkeypatch.setattr(leases.os, "geteuid", lambda: users["bob"])
    assert leases.sharing(None, "alice")["owner"] == "bob"
    with pytest.raises(BadInput, match="only root creates a lease for another user"):
        leases.sharing("alice", None)


def test_only_the_owners_and_shared_users_jobs_join(ledger: Ledger) -> None:
    shared_lease(ledger, "alice", ["bob"])
    record = ledger.get_lease("calib")
    record.check_may_join(["alice"])
    record.check_may_join(["bob"])
    with pytest.raises(BadInput) as refused:
        record.check_may_join(["carol"])
    message = str(refused.value)
    assert "\n" not in message and "carol may not join" in message
    assert "alice's, shared with bob" in message and "lease share calib --add carol" in message
    assert record.to_json()["owner"] == "alice" and record.to_json()["share_with"] == ["bob"]


def test_a_lease_recorded_before_owners_takes_anyones_jobs(ledger: Ledger) -> None:
    shared_lease(ledger, None, [])
    record = ledger.get_lease("calib")
    assert record.owner is None
    record.check_may_join(["carol"])


def test_the_owner_or_root_changes_the_share_list(ledger: Ledger, users, monkeypatch) -> None:
    shared_lease(ledger, "alice", ["bob"])
    assert leases.share(ledger, "calib", "carol", None) == {
        "owner": "alice", "share_with": ["bob", "carol"],
    }  # fmt: skip
    assert leases.share(ledger, "calib", None, "bob,alice")["share_with"] == ["carol"]
    monkeypatch.setattr(leases.os, "geteuid", lambda: users["bob"])
    with pytest.raises(BadInput, match="only its owner or root shares it"):
        leases.share(ledger, "calib", "bob", None)
    assert ledger.get_lease("calib").share_with == ["carol"]  # nothing changed
    monkeypatch.setattr(leases.os, "geteuid", lambda: users["alice"])
    assert leases.share(ledger, "calib", "bob", None)["share_with"] == ["bob", "carol"]


def test_lease_share_and_create_refuse_in_one_line(ledger: Ledger, users) -> None:
    shared_lease(ledger, "alice", [])
    refused(invoke("lease", "share", "calib"), "give --add USER or --remove USER")
    refused(invoke("lease", "share", "calib", "--add", "mallory"), "--add: no local user mallory")
    assert ledger.get_lease("calib").share_with == []
    result = invoke("lease", "create", "other", "--site", "testbed", "--share-with", "mallory")
    refused(result, "--share-with: no local user mallory")
    assert ledger.find_lease("other") is None
    shared = json.loads(invoke("lease", "share", "calib", "--add", "bob", "--json").output)
    assert (shared["owner"], shared["share_with"]) == ("alice", ["bob"])


def test_lease_status_keeps_only_numbers_of_known_exports(ledger: Ledger) -> None:
    shared_lease(ledger, "alice", ["bob"])
    add_export(ledger, "a", Phase.RUNNING, "calib")
    add_export(ledger, "b", Phase.RUNNING, "calib")
    site_says = {
        "a": Accounting(idle=1, running=3, usage_s=120.5, weighted_usage_s=241, slots_in_use=3),
        "b": Accounting(idle=0, running=-4, usage_s=float("nan")),
        "ghost": Accounting(idle=9),
    }
    joined = leases._joined(ledger, "calib", site_says)
    assert joined == [
        {"name": "a", "phase": "running", "owner": "alice", "accounting": {
            "idle": 1, "running": 3, "usage_s": 120.5, "weighted_usage_s": 241,
            "slots_in_use": 3}},
        {"name": "b", "phase": "running", "owner": "alice", "accounting": {
            "idle": 0, "running": 0, "usage_s": 0, "weighted_usage_s": 0, "slots_in_use": 0}},
    ]  # fmt: skip
    assert leases._joined(ledger, "calib")[0] == {
        "name": "a", "phase": "running", "owner": "alice",
    }  # fmt: skip
    # a field the contract does not know, or a word for a number: the answer is refused
    for entry in ({"idle": 1, "extra": "dropped"}, {"idle": "lots"}):
        text = json.dumps({"version": 1, "pool_running": True, "pilots": {},
                           "pilots_alive": True, "accounting": {"a": entry}})  # fmt: skip
        with pytest.raises(ContractError, match="accounting"):
            read_answer("lease-status", text, "lease-status")


def test_the_lease_pool_accounts_per_joined_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """What lease-status reports per export from the collector's schedd ads and the
    accountant's records (words, "undefined" where none yet)."""
    from lumberjack.site.pools import lease as lease_pool
    from lumberjack.site.pools.pool import Pool

    accounting = [
        {"name": "hpcuser@lumberjack-run-1", "usage": "120.5", "weighted": "241",
         "in_use": "2"},
        {"name": "hpcuser@lumberjack-gone", "usage": "60", "weighted": "undefined",
         "in_use": "0"},
        {"name": "<none>hpcuser@hpc-login", "usage": "9", "weighted": "9", "in_use": "9"},
    ]  # fmt: skip
    pool = lease_pool.Lease(Pool(LEASE, None))
    monkeypatch.setattr(pool, "usage", lambda: accounting)
    schedds = [Ad("run-1@lumberjack-run-1", idle="3", running="2"),
               Ad("odd", idle="1", running="1")]  # fmt: skip
    assert pool.accounting(schedds) == {
        "run-1": Accounting(idle=3, running=2, usage_s=120.5, weighted_usage_s=241,
                            slots_in_use=2),
        "gone": Accounting(idle=0, running=0, usage_s=60, weighted_usage_s=0, slots_in_use=0),
    }  # fmt: skip
    assert lease_pool.export_of("hpcuser@lumberjack-run-1") == "run-1"
    assert lease_pool.export_of("slot1@pilot-4-c1@hpc-login") == ""


def test_sync_exports_no_opted_in_jobs_of_an_owner_not_on_the_list(ledger: Ledger) -> None:
    """One entry per owner; carol's clusters stay in the queue with a one-line error,
    and nothing is exported or recorded for her."""
    shared_lease(ledger, "alice", ["bob"])
    ledger.move_lease("calib", "create")
    queue = Queue(job(5, 0, Owner="carol"), job(6, 0, Owner="carol"))
    results = leases.export_opted_in(ledger, queue, sites={})
    assert [(r["owner"], r["exit_code"]) for r in results] == [("carol", 2)]
    assert "carol may not join" in results[0]["error"] and "\n" not in results[0]["error"]
    assert "export" not in results[0] and ledger.list() == []


def test_the_accountants_records_are_read_one_ad_each(monkeypatch: pytest.MonkeyPatch) -> None:
    from lumberjack.site.pools import lease as lease_pool
    from lumberjack.site.pools.pool import Pool

    # As HTCondor 25 prints it (some attributes left out).
    long_form = (
        'AccountingGroup = "<none>"\nAccumulatedUsage = 86.0\nIsAccountingGroup = false\n'
        'Name = "hpcuser@lumberjack-run-1"\nPriority = 500.172\nResourcesUsed = 1\n'
        "WeightedAccumulatedUsage = 88.0\n\n"
        'AccumulatedUsage = 104.0\nIsAccountingGroup = true\nName = "<none>"\n\n'
    )
    holder = Pool(LEASE, None)
    pool = lease_pool.Lease(holder)
    monkeypatch.setattr(holder, "in_pool", lambda *command: long_form)
    assert pool.usage() == [
        {"name": "hpcuser@lumberjack-run-1", "usage": "86.0", "weighted": "88.0", "in_use": "1"},
        {"name": "<none>", "usage": "104.0", "weighted": "", "in_use": ""},
    ]


def test_lease_status_text_names_owners_and_usage() -> None:
    from lumberjack.cli import lease_cmd

    assert lease_cmd._members({"owner": "alice", "share_with": ["bob"]}) == (
        "alice, shared with bob"
    )
    assert lease_cmd._members({"owner": None}).startswith("anyone")
    used = {"idle": 1, "running": 2, "usage_s": 120.5, "weighted_usage_s": 241,
            "slots_in_use": 2}  # fmt: skip
    assert lease_cmd._accounting_lines([
        {"name": "a", "phase": "running", "owner": "alice", "accounting": used},
        {"name": "b", "phase": "shipped", "owner": "bob"},
    ]) == [
        "a (running, alice): 2 running, 1 idle, 120.5 slot-s used (241 core-s)",
        "b (shipped, bob)",
    ]  # fmt: skip
