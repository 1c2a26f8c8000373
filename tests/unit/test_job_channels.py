"""Every channel through which a job could make the site's daemons act for it outside its
container: refused at export in one line naming the channel (ap/job_channels.py), never
started by a pilot's startd (site/job_container.py), and turned off in every pool's
configuration (templates/security.config.tmpl)."""

from __future__ import annotations

import classad2
import pytest

from lumberjack.ap.export import preflight
from lumberjack.ap.job_channels import channel_problem, environment_names, parse_v2
from lumberjack.core.job_channels import ACTING_ATTRS, EDITABLE_ATTRS, SWITCH_ATTRS
from lumberjack.errors import BadInput
from lumberjack.site.job_container import JOB_GUARD
from lumberjack.site.remote_pool import pilot_config, pool_config

PLAIN = {"ClusterId": 7, "ProcId": 0, "JobStatus": 1, "JobUniverse": 5, "Owner": "alice",
         "TransferInput": "in.txt,data/", "TransferOutput": "out.txt,results/a.txt",
         "Environment": "A=1 B='x y'"}  # fmt: skip

#: (what the job sets, a word the refusal must say): one per channel member.
REFUSED = [
    ({"WantIOProxy": True}, "WantIOProxy"),
    ({"WantRemoteIO": True}, "WantRemoteIO"),
    ({"WantRemoteSyscalls": True}, "WantRemoteSyscalls"),
    ({"PreCmd": "setup.sh"}, "PreCmd"),
    ({"PostCmd": "/bin/cleanup"}, "PostCmd"),
    ({"CheckpointDestination": "file:///x"}, "CheckpointDestination"),
    ({"ManifestDir": "/somewhere"}, "ManifestDir"),
    ({"TransferInput": "a.txt, file:///home/site/other/pool/POOL"}, "URL"),
    ({"TransferInput": "osdf:///ospool/x"}, "URL"),
    ({"In": "http://example.invalid/in"}, "URL"),
    ({"x509userproxy": "https://example.invalid/proxy"}, "URL"),
    ({"TransferOutput": "out.txt,/home/site/other/pool/local/passwords.d/POOL"}, "sandbox"),
    ({"TransferOutput": "../../other/POOL"}, "sandbox"),
    ({"TransferOutput": "a/../../b"}, "sandbox"),
    ({"TransferOutput": "file:///etc/passwd"}, "sandbox"),
    ({"TransferCheckpoint": "/home/site/.ssh/authorized_keys"}, "sandbox"),
    # Only a job in an image of its own: Apptainer carries its environment, not the site
    # image's python (site/job_wrapper.py).
    ({"ContainerImage": "x.sif", "Environment": "HOME=/home/alice A=1"}, "HOME"),
    ({"SingularityImage": "x.sif", "Environment": "UID=1000"}, "UID"),
    ({"ContainerImage": "x.sif", "Environment": "PROMPT_COMMAND=date"}, "PROMPT_COMMAND"),
    ({"ContainerImage": "x.sif", "Environment": "A=1 pkg.version=2"}, "pkg.version"),
    (
        {"ContainerImage": "x.sif", "Environment": None, "Env": "A=1;BASH_FUNC_f%%=x"},
        "BASH_FUNC_f%%",
    ),
]


@pytest.mark.parametrize(("attrs", "word"), REFUSED, ids=[w for _, w in REFUSED])
def test_each_channel_is_refused_at_export_in_one_line(attrs: dict, word: str) -> None:
    job = {**PLAIN, **attrs}
    problem = channel_problem(job)
    assert problem is not None and word in problem
    with pytest.raises(BadInput) as caught:
        preflight([job])
    message = str(caught.value)
    assert "\n" not in message and "7.0" in message and word in message


@pytest.mark.parametrize("universe", [7, 12, 9, 10, 11, 13])
def test_jobs_of_other_universes_are_refused_whatever_their_status(universe: int) -> None:
    """Scheduler (7) and local (12) jobs run in the schedd itself; grid, java, parallel
    and vm jobs have no place at the site either."""
    for status in (1, 5):
        with pytest.raises(BadInput, match=f"universe {universe}"):
            preflight([{**PLAIN, "JobUniverse": universe, "JobStatus": status}])


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"WantIOProxy": False},
        {"TransferOutput": "results/, a b.txt"},
        {"Environment": "PATH=/usr/local/bin:/usr/bin HOME_DIR=/x XLD_PRELOAD=1"},
        {"Environment": "MESSAGE='LD_PRELOAD=x is only text'"},
        {"TransferInput": "/abs/local/input.txt, rel/dir/"},
        # Any value HTCondor allows passes: the job's container carries it byte for byte.
        {"Environment": "Q='say \"hi\" it''s' D='$HOME `id` $(x)' E='a=b=c' U=\u00e9 T='x\\'"},
        {"Env": "V1=a b;W=$x"},
        # What a plain pool runs, in the site image: nothing outside the job's container
        # reads the job's environment (site/job_wrapper.py), so no name is refused.
        {"Environment": "LD_PRELOAD=./evil.so LD_LIBRARY_PATH=/opt/lib MALLOC_CHECK_=3"},
        {"Environment": "GCONV_PATH=. GLIBC_TUNABLES=x TMPDIR=/x TZDIR=/z LOCPATH=."},
        {"Environment": "APPTAINER_BIND=/home APPTAINERENV_X=1 SINGULARITY_BINDPATH=/"},
        {"Environment": "PATH=.:/usr/bin::bin PYTHONPATH=. PYTHONHOME=/x PYTHONUSERBASE=."},
        {"Environment": "HOME=/home/alice UID=1000 PROMPT_COMMAND=date pkg.version=2"},
        {"Environment": "'BASH_FUNC_module%%=() {  eval x\n}'"},
        {"Env": "A=1;LD_AUDIT=./a.so"},
        {"ContainerImage": "x.sif", "Environment": "LD_PRELOAD=./in-its-image.so PATH=."},
    ],
)
def test_jobs_that_use_no_channel_pass(attrs: dict) -> None:
    assert channel_problem({**PLAIN, **attrs}) is None
    preflight([{**PLAIN, **attrs}])


def test_the_environment_is_read_as_htcondor_reads_it() -> None:
    assert parse_v2("A=1 B='x y' C='it''s' D=") == {"A": "1", "B": "x y", "C": "it's", "D": ""}
    assert environment_names({"Env": "A=1;B=2"}) == {"A": "1", "B": "2"}
    # Environment (V2) wins over Env (V1), as condor_submit and the starter do.
    assert environment_names({"Environment": "A=2", "Env": "LD_PRELOAD=x"}) == {"A": "2"}


def _starts(job: dict) -> bool:
    """The pilot's START guard, evaluated on a job ad as the startd does."""
    lines = [f"{k} = {classad2.quote(v) if isinstance(v, str) else str(v).lower()}"
             for k, v in job.items() if v is not None]  # fmt: skip
    ad = classad2.parseOne("\n".join(lines))
    return classad2.ExprTree(JOB_GUARD.replace("TARGET.", "MY.")).eval(ad) is True


@pytest.mark.parametrize(
    ("attrs", "word"),
    [r for r in REFUSED if r[1] in ("WantIOProxy", "WantRemoteIO", "WantRemoteSyscalls")],
)
def test_the_pilots_never_start_a_job_export_would_refuse(attrs: dict, word: str) -> None:
    """Defence in depth: a job that reached the site anyway (an export of an older
    version, a queue edited at the site) does not start."""
    assert _starts(PLAIN)
    assert not _starts({**PLAIN, **attrs}), word


def _settings():  # -> PoolSettings
    from test_remote_pool import make_settings

    return make_settings("/scratch/exports/calib")


@pytest.mark.parametrize("render", [pool_config, pilot_config])
def test_every_pool_turns_the_daemon_side_of_each_channel_off(render) -> None:
    text = render(_settings())
    lines = {line.split("=")[0].strip(): line.split("=", 1)[1].strip()
             for line in text.splitlines() if "=" in line and not line.startswith("#")}  # fmt: skip
    for knob in ("ENABLE_CHIRP", "ENABLE_CHIRP_IO", "ENABLE_CHIRP_UPDATES",
                 "ENABLE_CHIRP_DELAYED", "ENABLE_URL_TRANSFERS", "ENABLE_SSH_TO_JOB",
                 "SCHEDD_ENABLE_SSH_TO_JOB", "STARTER_ALLOW_JOB_PRE_AND_POST_CMD",
                 "ENABLE_HTTP_PUBLIC_FILES"):  # fmt: skip
        assert lines.get(knob) == "FALSE", knob
    assert lines.get("FORBID_COMMON_FILE_TRANSFER") == "TRUE"


#: What HTCondor 25's starter, shadow and file transfer do outside the job's container
#: for a job attribute (docs/security-model.md names the source of each): a tool daemon
#: beside the job (issue 42), pre and post commands, logs and manifests written at a
#: path or in a directory the job can swap for a link, plugins of the job's, input
#: remaps, common and public files, the launcher's -S, Chirp and remote I/O.
MUST_ACT = {
    "ToolDaemonCmd", "ToolDaemonArgs", "ToolDaemonArguments", "ToolDaemonInput",
    "ToolDaemonOutput", "ToolDaemonError", "StarterUserLog", "JobStarterLog",
    "JobStarterDebug", "PreCmd", "PreArgs", "PreArguments", "PreEnv", "PreEnvironment",
    "PostCmd", "PostArgs", "PostArguments", "PostEnv", "PostEnvironment", "ManifestDir",
    "ManifestDesired", "CheckpointDestination", "OutputDestination", "TransferPlugins",
    "TransferInputRemaps", "PublicInputFiles", "CommonInputFiles", "CommonInputCatalogs",
    "MountUnderScratch", "WantIOProxy", "WantRemoteIO", "WantRemoteSyscalls",
    "WantRemoteUpdates",
}  # fmt: skip

#: A plain vanilla job as condor_submit 25 writes it, with the attributes near the
#: channels that it writes by default (false or empty): none may keep it from running.
SUBMITTED = {
    **PLAIN, "Cmd": "/home/alice/run.sh", "Iwd": "/home/alice", "Args": "", "In": "/dev/null",
    "Out": "out.txt", "Err": "err.txt", "UserLog": "/home/alice/job.log",
    "StreamOut": False, "StreamErr": False, "TransferIn": False, "WantCheckpoint": False,
    "ShouldTransferFiles": "YES", "WhenToTransferOutput": "ON_EXIT", "JobPrio": 0,
    "CoreSize": 0, "OnExitRemove": True, "PeriodicHold": False, "RequestMemory": 64,
    "Environment": "",
}  # fmt: skip


def _asking(attr: str, name: str | None = None) -> dict:
    """A plain job that asks for ACTING_ATTRS' `attr` (spelled `name`)."""
    return {**SUBMITTED, (name or attr): True if attr in SWITCH_ATTRS else "payload.sh"}


def test_the_table_holds_every_attribute_the_daemons_act_on() -> None:
    assert MUST_ACT <= set(ACTING_ATTRS)
    # An allow-listed edit is never one the daemons act on, in any case.
    assert not {a.lower() for a in EDITABLE_ATTRS} & {a.lower() for a in ACTING_ATTRS}
    assert SWITCH_ATTRS <= set(ACTING_ATTRS)


@pytest.mark.parametrize("attr", sorted(ACTING_ATTRS))
def test_each_attribute_the_daemons_act_on_is_refused_at_export(attr: str) -> None:
    for name in (attr, attr.lower()):  # ClassAd names are case-insensitive
        problem = channel_problem(_asking(attr, name))
        assert problem is not None and f"it sets {name}: " in problem, problem
        assert "outside the job's container" in problem
        with pytest.raises(BadInput) as caught:
            preflight([_asking(attr, name)])
        message = str(caught.value)
        assert "\n" not in message and "7.0" in message and name in message


@pytest.mark.parametrize("attr", sorted(ACTING_ATTRS))
def test_the_pilots_never_start_a_job_that_sets_one(attr: str) -> None:
    clause = f"(TARGET.{attr} =!= true)" if attr in SWITCH_ATTRS else (
        f'(TARGET.{attr} =?= undefined || TARGET.{attr} =?= "")')  # fmt: skip
    assert clause in JOB_GUARD
    assert not _starts(_asking(attr))
    assert not _starts(_asking(attr, attr.upper()))


def test_what_condor_submit_writes_by_default_passes_both() -> None:
    """Switches false and values empty, as condor_submit may leave them, ask for nothing."""
    assert channel_problem(SUBMITTED) is None and _starts(SUBMITTED)
    quiet = {a: False if a in SWITCH_ATTRS else "" for a in ACTING_ATTRS}
    assert channel_problem({**SUBMITTED, **quiet}) is None
    assert _starts({**SUBMITTED, **quiet})
