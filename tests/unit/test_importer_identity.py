"""Import gives the jobs back their owners: the site ran them as its own account (the
agent's place_queue), importer.import_ads restores Owner/User from the bundle's
spool/job_queue.log, the access point's own copy of the queue."""

from __future__ import annotations

import json
from pathlib import Path

from lumberjack.ap import import_queues, importer
from lumberjack.ap.pathmap import PathMap
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.contract import ExportLayout
from lumberjack.site import job_queue

FIXTURES = Path(__file__).parent / "fixtures"


def load_site_bundle():
    from conftest import load_fixture_module

    return load_fixture_module("site_bundle")


site_bundle = load_site_bundle()


def ran_at_site(tmp_path: Path) -> tuple[Path, dict[str, jql.Ad], PathMap]:
    """A bundle placed by the agent (jobs now the site account's), then 'run': job 0
    completed, job 1 still running when the pool was stopped."""
    root = tmp_path / "calib"
    bundle = site_bundle.build(root)
    layout = ExportLayout(str(root))
    job_queue.place_queue(layout, "hpcuser", "lumberjack-calib")
    queue = Path(layout.spool, "job_queue.log")
    ads = jql.read_log(queue)
    ads[f"{site_bundle.CLUSTER}.0"].set("JobStatus", "4")
    ads[f"{site_bundle.CLUSTER}.1"].set("JobStatus", "2")
    manifest = json.loads((bundle / "manifest.json").read_text())
    return bundle, ads, PathMap.from_json(manifest["path_map"])


def test_identity_attrs() -> None:
    assert importer.IDENTITY_ATTRS == ("Owner", "User")


def test_owner_and_user_come_back_from_the_bundle(tmp_path: Path) -> None:
    bundle, returned, path_map = ran_at_site(tmp_path)
    cluster = jql.cluster_key(site_bundle.CLUSTER)
    assert returned[cluster].get("Owner") == '"hpcuser"'
    original = import_queues._sent_queue(bundle)
    assert original is not None
    ads, completed, idle = importer.import_ads(returned, path_map, original)
    assert (completed, idle) == (1, 1)
    for key in (cluster, f"{site_bundle.CLUSTER}.0"):
        assert ads[key].get("Owner") == site_bundle.OWNER
        assert ads[key].get("User") == site_bundle.USER
    # a proc that inherited its owner from the cluster ad does not get one of its own
    proc1 = ads[f"{site_bundle.CLUSTER}.1"]
    assert proc1.get("Owner") is None and proc1.get("User") is None
    # paths back too, and the unfinished job is idle again
    assert proc1.get("Iwd") == json.dumps(site_bundle.LOCAL_IWD)
    assert proc1.get("JobStatus") == "1"
    assert "hpcuser" not in json.dumps({k: ad.attrs for k, ad in ads.items()})


def test_without_the_bundle_queue_identities_are_left_alone(tmp_path: Path) -> None:
    bundle, returned, path_map = ran_at_site(tmp_path)
    (bundle / "spool" / "job_queue.log").unlink()
    assert import_queues._sent_queue(bundle) is None
    ads, _, _ = importer.import_ads(returned, path_map, None)
    assert ads[jql.cluster_key(site_bundle.CLUSTER)].get("Owner") == '"hpcuser"'


def test_a_site_cannot_choose_the_owner(tmp_path: Path) -> None:
    """Whatever Owner/User the site sends back, the bundle's copy wins."""
    bundle, returned, path_map = ran_at_site(tmp_path)
    for ad in returned.values():
        if jql.key_kind(ad.key) in ("cluster", "proc") and ad.get("Owner") is not None:
            ad.set("Owner", '"root"')
            ad.set("User", '"root@elsewhere"')
    ads, _, _ = importer.import_ads(returned, path_map, import_queues._sent_queue(bundle))
    assert ads[jql.cluster_key(site_bundle.CLUSTER)].get("Owner") == site_bundle.OWNER
    assert ads[f"{site_bundle.CLUSTER}.0"].get("User") == site_bundle.USER


def test_a_site_cannot_add_an_owner_to_a_proc_that_inherits_it(tmp_path: Path) -> None:
    bundle, returned, path_map = ran_at_site(tmp_path)
    returned[f"{site_bundle.CLUSTER}.1"].set("Owner", '"hpcuser"')
    returned[f"{site_bundle.CLUSTER}.1"].set("User", '"hpcuser@lumberjack-calib"')
    ads, _, _ = importer.import_ads(returned, path_map, import_queues._sent_queue(bundle))
    proc1 = ads[f"{site_bundle.CLUSTER}.1"]
    assert proc1.get("Owner") is None and proc1.get("User") is None
