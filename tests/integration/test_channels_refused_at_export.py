"""A submitter's job that asks HTCondor's own machinery to act for it outside its sandbox
at the site is refused at export, on the real schedd, with one line naming the job and
the channel, and nothing changes: the job stays idle in the local queue, not exported.
Root runs the export for bob, as a facility's cron does. Written as condor_submit takes
them (the spellings of the manual); the unit tests cover every member of each class
(tests/unit/test_job_channels.py), the journey in test_owner_isolation.py what a job
that passes export can still try at the site."""

from __future__ import annotations

from pathlib import Path

import pytest
import testbed
from journey import as_submitter, lumberjack, make_job_dir, query, submit_as

pytestmark = pytest.mark.integration

VICTIM = "/home/hpcuser/lumberjack/some-export/pool/local/passwords.d/POOL"

#: (submit commands, a word the refusal names): each channel the issue names, and the
#: others of their classes that condor_submit writes into the job ad.
CHANNELS = [
    ({"want_io_proxy": "true"}, "WantIOProxy"),
    ({"+WantRemoteIO": "true"}, "WantRemoteIO"),
    # HTCondor's tool daemon and the starter's own user log (the job's environment is no
    # channel: nothing outside its container reads it, see test_owner_isolation.py).
    ({"+ToolDaemonCmd": '"payload.sh"'}, "ToolDaemonCmd"),
    ({"+StarterUserLog": '"/home/hpcuser/.ssh/authorized_keys"'}, "StarterUserLog"),
    ({"transfer_input_files": f"in put.txt, file://{VICTIM}"}, "URL"),
    ({"transfer_output_files": VICTIM}, "sandbox"),
    ({"transfer_output_files": "../../../other/pool/local/passwords.d/POOL"}, "sandbox"),
    (
        {
            "transfer_checkpoint_files": "/home/hpcuser/.ssh/authorized_keys",
            "checkpoint_exit_code": "85",
        },
        "sandbox",
    ),  # fmt: skip
    (
        {"checkpoint_destination": "file:///home/hpcuser/ckpt", "checkpoint_exit_code": "85"},
        "CheckpointDestination",
    ),  # fmt: skip
    ({"manifest": "true", "manifest_dir": "/home/hpcuser/.ssh"}, "ManifestDir"),
    ({"+PreCmd": '"setup.sh"'}, "PreCmd"),
    ({"+PostCmd": '"/bin/true"'}, "PostCmd"),
    # Run by the schedd itself, beside every export's daemons (held: the access point's
    # schedd would run them at once).
    ({"universe": "local", "hold": "true"}, "universe"),
    ({"universe": "scheduler", "hold": "true"}, "universe"),
]


@pytest.mark.parametrize("site", ["testbed", "testbed-nocontainer"])
def test_every_channel_is_refused_at_export_and_nothing_changes(
    workspace: Path, state_dir: Path, site: str
) -> None:
    """With job containers (Apptainer) and without (runtime none): the same refusals."""
    bob_home = workspace / "bob"
    bob_home.mkdir()
    job_dir = make_job_dir(bob_home, "job", uid=testbed.OTHER_SUBMITTER_UID)
    clusters = [
        submit_as(testbed.OTHER_SUBMITTER, job_dir, 1, **commands) for commands, _ in CHANNELS
    ]
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
    before = {
        j["ClusterId"]: j.get("JobStatus") for j in query(constraint, ["ClusterId", "JobStatus"])
    }
    with as_submitter(testbed.OTHER_SUBMITTER):
        for cluster, (commands, word) in zip(clusters, CHANNELS):
            for how in (("--dry-run",), ()):
                refused = lumberjack(
                    "export", "--ids", str(cluster), "--site", site, "--nodes", "1",
                    "--walltime", "10m", *how, check=False,
                )  # fmt: skip
                lines = [line for line in refused.stderr.splitlines() if line.strip()]
                assert refused.returncode == 2, (commands, refused.stdout, refused.stderr)
                assert len(lines) == 1 and f"{cluster}.0" in lines[0], (commands, lines)
                assert word in lines[0], (commands, lines)
    after = query(constraint, ["ClusterId", "JobStatus", "Managed"])
    assert {j["ClusterId"]: j.get("JobStatus") for j in after} == before
    assert len(after) == len(CHANNELS) and all(j.get("Managed") is None for j in after)
    assert not list(state_dir.glob("bundles/*/*")), "a bundle was written"
