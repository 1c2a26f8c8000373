"""Site profiles: the shipped files, strict checking with useful messages, lookup."""

from __future__ import annotations

import json
import textwrap
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

import lumberjack.profiles
from lumberjack.cli import cli
from lumberjack.errors import BadInput, SetupError
from lumberjack.profiles.sites import (
    check_not_retired,
    find_profile,
    list_profiles,
    load_profile,
    load_profiles,
    profile_dirs,
    profile_files,
    shipped_profile_dir,
)
from lumberjack.state import leases

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "site-profiles"
PACKAGED = Path(lumberjack.profiles.__file__).parent / "site-profiles"
REAL_SITES = [
    "perlmutter", "polaris", "frontier", "anvil", "expanse", "delta", "bridges2", "theta",
    "aurora", "stampede3",
]  # fmt: skip
#: Profiles checked on 2026-11-27 and 2026-11-28: Grace-Hopper (aarch64) and European
#: machines (issue 37); their own tests are in test_sites_new_machines.py.
NEW_SITES = [
    "vista", "alps", "lumi", "leonardo", "deltaai", "jupiter", "juwels-booster", "marenostrum5",
]  # fmt: skip
TESTBED_SITES = [
    "testbed", "testbed-aarch64", "testbed-alloc", "testbed-mfa", "testbed-mfa-nosharing",
    "testbed-nocontainer",
]  # fmt: skip


@pytest.fixture(autouse=True)
def isolated_profile_dirs(tmp_path, monkeypatch):
    """Only the shipped profiles: no $LUMBERJACK_SITE_PROFILES, an empty home."""
    monkeypatch.delenv("LUMBERJACK_SITE_PROFILES", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


MINIMAL = """
[site]
name = "{name}"
system = "Example HPC"
login_host = "login.example.org"
base_dir = "$SCRATCH/lumberjack"
batch_system = "slurm"

[container]
image = "$SCRATCH/lumberjack/image/lumberjack-site.sif"

[[queues]]
name = "debug"
max_nodes = 8
cores_per_node = 64
memory_per_node = "256GB"
max_walltime = "00:30:00"
"""


def write_profile(directory: Path, name: str = "foo", text: str | None = None, **edits) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    body = (text if text is not None else MINIMAL).format(name=name)
    for old, new in edits.items():
        old = old.replace("__", " ")
        assert old in body, old
        body = body.replace(old, new)
    path = directory / f"{name}.toml"
    path.write_text(textwrap.dedent(body))
    return path


def error_of(path: Path, code: int = SetupError.exit_code) -> str:
    """The one line a profile that does not load gives (exit 7: a setup mistake; a
    missing file named on the command line is bad input, exit 2)."""
    with pytest.raises(BadInput) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message
    assert info.value.exit_code == code
    return message


# ---- the shipped profiles ---------------------------------------------------------------


def test_every_shipped_profile_loads():
    names = [profile.name for profile in list_profiles()]
    assert names == sorted([*TESTBED_SITES, *REAL_SITES, *NEW_SITES])


def test_profiles_are_found_through_the_package():
    shipped = resources.files("lumberjack.profiles") / "site-profiles"
    names = sorted(item.name for item in shipped.iterdir() if item.name.endswith(".toml"))
    assert names == sorted(f"{name}.toml" for name in [*TESTBED_SITES, *REAL_SITES, *NEW_SITES])
    assert (shipped / "README.md").is_file()
    assert shipped_profile_dir() == Path(str(shipped)) == PACKAGED
    assert profile_files()["perlmutter"] == PACKAGED / "perlmutter.toml"


@pytest.mark.parametrize("name", ["testbed", *REAL_SITES, *NEW_SITES])
def test_shipped_profiles_name_their_source_and_date(name):
    head = (SHIPPED / f"{name}.toml").read_text().split("\n[site]")[0]
    assert "Source:" in head
    assert "Knowledge as of:" in head
    profile = find_profile(name)
    assert profile.source
    assert profile.checked


def test_testbed_profile():
    p = find_profile("testbed")
    assert (p.login_host, p.port, p.user) == ("10.251.0.2", 2222, "hpcuser")
    assert p.base_dir == "/home/hpcuser/lumberjack"
    assert p.batch_system == "slurm"
    assert not p.allocation_required
    assert p.container.runtime == "apptainer"
    assert p.container.image == "/home/hpcuser/lumberjack/image/lumberjack-site.sif"
    assert p.known_hosts == "${LUMBERJACK_TESTBED_DIR}/site/known_hosts"
    assert p.identity_file == "${LUMBERJACK_TESTBED_DIR}/site/id_ed25519"
    queue, gpu = p.queues  # the GPU queue: see test_gpus.py
    assert (queue.name, queue.max_nodes, queue.cores_per_node) == ("debug", 3, 2)
    assert (gpu.name, gpu.max_nodes, gpu.cores_per_node, gpu.gpus_per_node) == ("gpu", 1, 4, 2)
    assert (queue.memory_per_node_mb, queue.max_walltime_s) == (2048, 3600)
    assert p.default_queue is queue


def test_testbed_key_paths_come_from_the_environment(monkeypatch):
    p = find_profile("testbed")
    monkeypatch.delenv("LUMBERJACK_TESTBED_DIR", raising=False)
    with pytest.raises(BadInput, match=r"known_hosts needs \$LUMBERJACK_TESTBED_DIR"):
        p.known_hosts_path()
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", "/srv/tb")
    assert p.known_hosts_path() == Path("/srv/tb/site/known_hosts")
    assert p.identity_file_path() == Path("/srv/tb/site/id_ed25519")


def test_real_sites_facts():
    perlmutter = find_profile("perlmutter")
    assert perlmutter.login_host == "perlmutter.nersc.gov"
    assert not perlmutter.allocation_required  # NERSC charges the default project
    assert perlmutter.default_queue.name == "regular-cpu"
    assert "#SBATCH --constraint=gpu" in perlmutter.queue("regular-gpu").directives
    assert perlmutter.queue("debug-cpu").batch_queue == ""
    polaris = find_profile("polaris")
    assert polaris.batch_system == "pbs"
    assert {"debug", "preemptable"} <= {q.name for q in polaris.queues}
    assert {q.batch_queue for q in polaris.queues if q.name.startswith("prod")} == {"prod"}
    assert find_profile("frontier").queue("batch-small").batch_queue == "batch"
    theta = find_profile("theta")
    assert theta.retired and theta.batch_system == "cobalt"
    assert not any(find_profile(name).retired for name in REAL_SITES if name != "theta")


def test_readme_lists_every_shipped_profile():
    readme = (SHIPPED / "README.md").read_text()
    for profile in list_profiles():
        assert f"| `{profile.name}` |" in readme
        assert profile.source in readme or profile.name == "testbed"


def test_to_dict_is_plain_data():
    data = find_profile("perlmutter").to_dict()
    assert data["queues"][0]["max_walltime"] == "48:00:00"
    assert data["queues"][0]["default"] is True
    assert data["defaults"]["queue"] == "regular-cpu"


# ---- checking -----------------------------------------------------------------------------


def test_minimal_profile_and_its_defaults(tmp_path):
    p = load_profile(write_profile(tmp_path))
    assert p.port == 22 and p.user is None and p.scratch == p.base_dir
    assert p.container.runtime == "apptainer" and p.container.bind == ()
    assert p.schedd.placement == "login" and p.schedd.port == 0
    assert p.queues[0].batch_queue == "debug" and p.queues[0].gpus_per_node == 0
    assert p.default_queue.name == "debug"


def test_walltime_not_hhmmss_names_file_key_and_fix(tmp_path):
    path = write_profile(tmp_path, **{'max_walltime = "00:30:00"': 'max_walltime = "48h"'})
    assert error_of(path) == (
        'foo.toml: [[queues]][1].max_walltime "48h" is not HH:MM:SS; write e.g. "48:00:00"'
    )


def test_unknown_key_suggests_the_right_one(tmp_path):
    path = write_profile(tmp_path, **{"login_host =": "login_hots ="})
    assert error_of(path) == 'foo.toml: unknown key [site].login_hots; did you mean "login_host"?'


def test_unknown_section(tmp_path):
    path = write_profile(tmp_path, text=MINIMAL + "\n[sechd]\nport = 1\n")
    assert 'unknown key profile.sechd; did you mean "schedd"?' in error_of(path)


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        ({'"256GB"': '"256"'},
         '[[queues]][1].memory_per_node "256" has no unit; write e.g. "512GB"'),
        ({'"256GB"': '"lots"'}, '[[queues]][1].memory_per_node "lots" is not a memory size'),
        ({"max_nodes = 8": "max_nodes = 0"}, "[[queues]][1].max_nodes 0 must be at least 1"),
        ({"max_nodes = 8": 'max_nodes = "8"'}, '[[queues]][1].max_nodes "8" is not a whole number'),
        ({'batch_system = "slurm"': 'batch_system = "lsf"'},
         '[site].batch_system "lsf" is not one of the choices; write "slurm" or "pbs" or "cobalt"'),
        ({'name = "foo"': 'name = "bar"'},
         '[site].name "bar" must match the file name; rename the file to "bar.toml"'),
        ({'login_host = "login.example.org"\n': ""},
         "[site].login_host is missing; add e.g. login_host = "),
        ({'base_dir = "$SCRATCH/lumberjack"': 'base_dir = "lumberjack"'},
         '[site].base_dir "lumberjack" is not a path at the site'),
        ({'base_dir = "$SCRATCH/lumberjack"': 'base_dir = "/x; rm -rf /"'},
         "[site].base_dir"),
        ({'image = "$SCRATCH': 'image = "ftp://x/$SCRATCH'}, "[container].image"),
        ({"[container]": "[container]\nruntime = \"docker\""},
         '[container].runtime "docker" is not one of the choices'),
        ({"[site]": "[site]\nallocation_required = 1"},
         "[site].allocation_required 1 is not true or false"),
        ({"[site]": "[site]\nport = 70000"}, "[site].port 70000 is above 65535"),
    ],
)  # fmt: skip
def test_field_errors(tmp_path, edits, expected):
    message = error_of(write_profile(tmp_path, **edits))
    assert message.startswith("foo.toml: ")
    assert expected in message


def test_queue_rules(tmp_path):
    second = MINIMAL + '\n[[queues]]\nname = "debug"\nmax_nodes = 1\ncores_per_node = 1\n'
    second += 'memory_per_node = "1GB"\nmax_walltime = "01:00:00"\n'
    assert '[[queues]][2].name "debug" is used by an earlier queue' in error_of(
        write_profile(tmp_path, text=second)
    )
    two = second.replace('name = "debug"\nmax_nodes = 1', 'name = "long"\nmax_nodes = 1')
    assert "[[queues]] has no default queue; add default = true" in error_of(
        write_profile(tmp_path, text=two)
    )
    both = two.replace("max_nodes = 8", "max_nodes = 8\ndefault = true").replace(
        "max_nodes = 1", "max_nodes = 1\ndefault = true"
    )
    assert 'marks "debug", "long" as default' in error_of(write_profile(tmp_path, text=both))
    named = two + '\n[defaults]\nqueue = "long"\n'
    assert load_profile(write_profile(tmp_path, text=named)).default_queue.name == "long"
    wrong = two + '\n[defaults]\nqueue = "short"\n'
    assert '[defaults].queue "short" names no [[queues]] entry' in error_of(
        write_profile(tmp_path, text=wrong)
    )
    assert "min_nodes 9 is above max_nodes (8)" in error_of(
        write_profile(tmp_path, **{"max_nodes = 8": "max_nodes = 8\nmin_nodes = 9"})
    )


def test_defaults_must_fit_the_default_queue(tmp_path):
    text = MINIMAL + '\n[defaults]\nnodes = 2\nwalltime = "02:00:00"\n'
    assert error_of(write_profile(tmp_path, text=text)) == (
        'foo.toml: [defaults].walltime "02:00:00" exceeds the max_walltime (00:30:00) '
        'of the default queue "debug"; lower it'
    )
    text = MINIMAL + '\n[defaults]\nmemory = "300GB"\n'
    assert '[defaults].memory "300GB" exceeds the memory_per_node (256GB)' in error_of(
        write_profile(tmp_path, text=text)
    )


def test_directives_must_carry_the_batch_systems_prefix(tmp_path):
    text = MINIMAL + '\n[batch]\nextra_directives = ["#PBS -l filesystems=home"]\n'
    assert (
        "[batch].extra_directives \"#PBS -l filesystems=home\" does not start with '#SBATCH'"
        in (error_of(write_profile(tmp_path, text=text)))
    )
    text = MINIMAL.replace('max_walltime = "00:30:00"', 'max_walltime = "00:30:00"\n'
                          'directives = ["--qos=debug"]')  # fmt: skip
    assert '[[queues]][1].directives "--qos=debug" does not start with' in error_of(
        write_profile(tmp_path, text=text)
    )
    text = MINIMAL + '\n[batch]\nchunk_resources = ["system=x"]\n'
    assert "chunk_resources" in error_of(write_profile(tmp_path, text=text))
    text = MINIMAL + '\n[batch]\nlauncher = "mpiexec"\n'
    assert '[batch].launcher "mpiexec" is not one of the choices; write "srun"' in error_of(
        write_profile(tmp_path, text=text)
    )
    text = MINIMAL + '\n[batch]\nsetup = "module load apptainer"\n'
    assert '[batch].setup "module load apptainer" is not a list of strings' in error_of(
        write_profile(tmp_path, text=text)
    )


def test_not_toml_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[site\nname = 1\n")
    assert error_of(bad).startswith("bad.toml: not valid TOML: ")
    assert error_of(tmp_path / "none.toml", code=2) == "none.toml: no such profile file"
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert error_of(empty) == "empty.toml: [site] is missing; see site-profiles/README.md"


def test_local_paths_expand_and_resolve_against_the_profile(tmp_path, monkeypatch):
    text = MINIMAL.replace(
        'batch_system = "slurm"',
        'batch_system = "slurm"\nknown_hosts = "keys/known_hosts"\nidentity_file = "~/.ssh/k"',
    )
    profile = load_profile(write_profile(tmp_path / "profiles", text=text))
    assert profile.known_hosts_path() == tmp_path / "profiles" / "keys" / "known_hosts"
    assert profile.identity_file_path() == tmp_path / "home" / ".ssh" / "k"
    assert load_profile(write_profile(tmp_path, "bar")).known_hosts_path() is None


# ---- finding profiles -----------------------------------------------------------------------


def test_profile_dirs_order(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    dirs = profile_dirs()
    assert SHIPPED.resolve() == PACKAGED.resolve()  # the checkout's site-profiles/ links to it
    assert dirs == [
        tmp_path / "a",
        tmp_path / "b",
        tmp_path / "home" / ".config" / "condor-lumberjack" / "sites",
        PACKAGED,
    ]


def test_first_directory_wins_as_the_readme_says(tmp_path, monkeypatch):
    """$LUMBERJACK_SITE_PROFILES (in its order), then ~/.config/..., then the shipped ones."""
    user_dir = tmp_path / "home" / ".config" / "condor-lumberjack" / "sites"
    write_profile(user_dir, "perlmutter", text=MINIMAL.replace("Example HPC", "user copy"))
    write_profile(user_dir, "polaris", text=MINIMAL.replace("Example HPC", "user polaris"))
    write_profile(tmp_path / "a", "perlmutter", text=MINIMAL.replace("Example HPC", "env a"))
    write_profile(tmp_path / "b", "perlmutter", text=MINIMAL.replace("Example HPC", "env b"))
    write_profile(tmp_path / "b", "mysite")
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    files = profile_files()
    assert files["perlmutter"] == tmp_path / "a" / "perlmutter.toml"
    assert files["polaris"] == user_dir / "polaris.toml"
    assert files["mysite"] == tmp_path / "b" / "mysite.toml"
    assert files["frontier"] == PACKAGED / "frontier.toml"
    assert find_profile("perlmutter").system == "env a"
    assert find_profile("polaris").system == "user polaris"
    for doc in (SHIPPED / "README.md", REPO / "README.md"):
        text = " ".join(doc.read_text().split())
        assert "`$LUMBERJACK_SITE_PROFILES` (each directory in the order given" in text, doc


def test_a_broken_profile_is_reported_and_skipped(tmp_path, monkeypatch):
    write_profile(tmp_path / "extra", "mysite")
    (tmp_path / "extra" / "broken.toml").write_text("[site\nname = 1\n")
    write_profile(tmp_path / "extra", "wrongkey", text=MINIMAL + "colour = 1\n")
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(tmp_path / "extra"))
    loaded, broken = load_profiles()
    names = [profile.name for profile in loaded]
    assert names == sorted([*TESTBED_SITES, *REAL_SITES, *NEW_SITES, "mysite"])
    assert [line.split(":")[0] for line in broken] == [
        "skipped extra/broken.toml",  # shown relative to the current directory
        "skipped extra/wrongkey.toml",
    ]
    assert "not valid TOML" in broken[0]
    assert [p.name for p in list_profiles()] == names
    with pytest.raises(BadInput, match="broken.toml: not valid TOML"):
        find_profile("broken")  # naming it still says what is wrong


def test_sites_list_names_a_broken_profile_and_lists_the_rest(tmp_path, monkeypatch):
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "broken.toml").write_text("not toml at all [")
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(tmp_path / "extra"))
    result = CliRunner().invoke(cli, ["sites", "list"])
    assert result.exit_code == 0, result.output
    assert "skipped " in result.stderr and "broken.toml: not valid TOML" in result.stderr
    assert "perlmutter" in result.stdout and "polaris" in result.stdout


def test_a_retired_site_is_refused_with_its_successor():
    theta = find_profile("theta")
    assert theta.retired and theta.successor == "polaris"
    with pytest.raises(BadInput) as info:
        check_not_retired(theta)
    assert str(info.value) == (
        'site theta (ALCF Theta (retired)) is retired; use its successor "polaris"'
    )
    assert info.value.exit_code == 2
    check_not_retired(find_profile("polaris"))  # a live site passes
    with pytest.raises(BadInput, match="is retired"):
        leases.check_site(theta)  # lease create and export --lease
    result = CliRunner().invoke(cli, ["sites", "show", "theta"])
    assert "[RETIRED; use polaris]" in result.stdout
    # export names it before any schedd is asked (none runs in the unit tests)
    result = CliRunner().invoke(cli, ["export", "--ids", "1", "--site", "theta", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"].endswith('is retired; use its successor "polaris"')
    # sites check says so too (it exited 0 without a word): a request there is never used
    result = CliRunner().invoke(cli, ["sites", "check", "theta"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        'error: site theta (ALCF Theta (retired)) is retired; use its successor "polaris"'
    )


def test_unknown_site_names_the_known_ones():
    with pytest.raises(BadInput) as info:
        find_profile("perlmuter")
    message = str(info.value)
    assert message.startswith(
        "unknown site 'perlmuter'; known sites: "
        + ", ".join(sorted([*REAL_SITES, *NEW_SITES, *TESTBED_SITES]))
    )
    assert message.endswith('did you mean "perlmutter"?')


# ---- login, placement, caps and runtimes (issues 9 and 10) -------------------------------


def test_login_placement_and_runtime_defaults_keep_todays_behaviour(tmp_path):
    p = load_profile(write_profile(tmp_path))
    assert (p.auth, p.connection_sharing) == ("key", True)
    assert (p.schedd.placement, p.schedd.max_running_jobs) == ("login", None)
    assert p.container.runtime == "apptainer"
    data = p.to_dict()
    assert (data["auth"], data["connection_sharing"]) == ("key", True)
    assert data["schedd"]["max_running_jobs"] is None


@pytest.mark.parametrize(
    ("edits", "check"),
    [
        ({"[site]": '[site]\nauth = "mfa"'}, lambda p: p.auth == "mfa"),
        ({"[site]": "[site]\nconnection_sharing = false"}, lambda p: not p.connection_sharing),
        ({"[container]": '[schedd]\nplacement = "allocation"\n\n[container]'},
         lambda p: p.schedd.placement == "allocation"),
        ({"[container]": "[schedd]\nmax_running_jobs = 64\n\n[container]"},
         lambda p: p.schedd.max_running_jobs == 64),
        ({"[container]": '[container]\nruntime = "singularity"'},
         lambda p: p.container.runtime == "singularity"),
    ],
)  # fmt: skip
def test_login_placement_and_runtime_good_values(tmp_path, edits, check):
    assert check(load_profile(write_profile(tmp_path, **edits)))


def test_runtime_none_ships_a_tarball(tmp_path, monkeypatch):
    (tmp_path / "release.tar.gz").write_bytes(b"tar")
    none = '[container]\nruntime = "none"\ncondor_tarball = "release.tar.gz"'
    p = load_profile(write_profile(tmp_path, **{"[container]": none}))
    assert p.container.runtime == "none"
    assert p.condor_tarball_path() == tmp_path / "release.tar.gz"  # next to the profile
    text = MINIMAL.replace('image = "$SCRATCH/lumberjack/image/lumberjack-site.sif"\n', "")
    variable = '[container]\nruntime = "none"\ncondor_tarball = "${LJ_TARBALLS}/r.tar.gz"'
    p = load_profile(write_profile(tmp_path, "bar", text, **{"[container]": variable}))
    assert p.container.image is None  # no image without a container
    monkeypatch.delenv("LJ_TARBALLS", raising=False)
    with pytest.raises(BadInput, match=r"\[container\].condor_tarball needs \$LJ_TARBALLS"):
        p.condor_tarball_path()
    monkeypatch.setenv("LJ_TARBALLS", str(tmp_path / "none-here"))
    with pytest.raises(BadInput, match=r"condor_tarball .*none-here/r.tar.gz is not a file"):
        p.condor_tarball_path()
    pod = '[container]\nruntime = "podman-hpc"'
    p = load_profile(write_profile(tmp_path, "pod", text.replace(
        "[container]", '[container]\nimage = "registry.nersc.gov/lj/lumberjack-site:25.14"'),
        **{"[container]": pod}))  # fmt: skip
    assert p.container.runtime == "podman-hpc"
    assert p.container.image == "registry.nersc.gov/lj/lumberjack-site:25.14"


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        ({"[site]": '[site]\nauth = "otp"'},
         'foo.toml: [site].auth "otp" is not one of the choices; write "key" or "mfa"'),
        ({"[site]": '[site]\nauth = 1'},
         "foo.toml: [site].auth 1 is not a string; write e.g. auth = \"key\""),
        ({"[site]": '[site]\nconnection_sharing = "no"'},
         'foo.toml: [site].connection_sharing "no" is not true or false; '
         "write connection_sharing = true or connection_sharing = false"),
        ({"[container]": '[schedd]\nplacement = "batch"\n\n[container]'},
         'foo.toml: [schedd].placement "batch" is not one of the choices; '
         'write "login" or "allocation"'),
        ({"[container]": "[schedd]\nmax_running_jobs = 0\n\n[container]"},
         "foo.toml: [schedd].max_running_jobs 0 must be at least 1"),
        ({"[container]": '[schedd]\nmax_running_jobs = "64"\n\n[container]'},
         'foo.toml: [schedd].max_running_jobs "64" is not a whole number; '
         "write e.g. max_running_jobs = 64"),
        ({"[container]": '[container]\nruntime = "shifter"'},
         'foo.toml: [container].runtime "shifter" is not one of the choices; '
         'write "apptainer" or "singularity" or "apptainer-emulated" or "podman-hpc" or '
         '"container-engine" or "none"'),
        ({"[container]": '[container]\nruntime = "none"'},
         'foo.toml: [container] runtime "none" needs the HTCondor release tarball lumberjack '
         'ships to the site; add e.g. condor_tarball = "~/htcondor/condor-25.0.0-x86_64_x.tar.gz"'),
        ({"[container]": '[container]\nruntime = "none"\ncondor_tarball = "/no/such.tar.gz"'},
         'foo.toml: [container].condor_tarball "/no/such.tar.gz" is not a file (/no/such.tar.gz)'),
        ({"[container]": '[container]\ncondor_tarball = "/no/such.tar.gz"'},
         'foo.toml: [container].condor_tarball "/no/such.tar.gz" is only for runtime = "none" '
         "(this profile runs apptainer); remove it"),
        ({"[container]": '[container]\nruntime = "podman-hpc"'},
         'foo.toml: [container].image "$SCRATCH/lumberjack/image/lumberjack-site.sif" is not '
         "an OCI image name (podman-hpc runs images pulled or migrated beforehand); write e.g. "
         '"lumberjack-site:25.14"'),
        ({"[site]": '[site]\nauht = "mfa"'},
         'foo.toml: unknown key [site].auht; did you mean "auth"?'),
    ],
)  # fmt: skip
def test_login_placement_and_runtime_bad_values(tmp_path, edits, expected):
    assert error_of(write_profile(tmp_path, **edits)) == expected


def test_real_sites_login_and_placement():
    """What each centre's documentation says (see each profile's header for the source)."""
    facts = {
        name: (p.auth, p.connection_sharing, p.schedd.placement, p.container.runtime)
        for name in REAL_SITES
        for p in [find_profile(name)]
    }
    assert facts == {
        "perlmutter": ("key", True, "allocation", "podman-hpc"),
        "polaris": ("mfa", True, "login", "apptainer"),
        "frontier": ("mfa", False, "allocation", "apptainer"),
        "anvil": ("key", True, "login", "apptainer"),
        "expanse": ("mfa", True, "allocation", "singularity"),
        "delta": ("mfa", True, "login", "apptainer"),
        "bridges2": ("key", True, "login", "singularity"),
        "theta": ("mfa", True, "login", "singularity"),
        "aurora": ("mfa", True, "allocation", "apptainer"),
        "stampede3": ("mfa", True, "allocation", "apptainer"),
    }
    assert find_profile("polaris").schedd.max_running_jobs == 64  # 128 login-node tasks
    assert find_profile("testbed").auth == "key"
    checked = {name: find_profile(name).checked for name in REAL_SITES}
    assert {name for name, date in checked.items() if date == "2026-11-25"} == {
        "aurora", "stampede3", "anvil", "expanse", "polaris", "bridges2",
    }  # fmt: skip
    assert set(checked.values()) == {"2026-11-23", "2026-11-25"}


def test_real_sites_limits_fixed_from_the_docs():
    expanse = find_profile("expanse")  # SDSC: --mem=249208M / 377308M, partitions table
    assert expanse.queue("compute").memory_per_node_mb == 243 * 1024
    assert expanse.queue("gpu").memory_per_node_mb == 368 * 1024
    assert expanse.queue("gpu-shared").gpus_per_node == 3  # "fewer than 4 GPUs"
    assert expanse.queue("shared").cores_per_node == 127  # "fewer than 128 cores"
    assert find_profile("aurora").queue("debug").memory_per_node_mb == 960 * 1024
    anvil = find_profile("anvil")  # RCAC: sfeatures 257400 MB / 515400 MB, 12 GPUs a user
    assert anvil.queue("wholenode").memory_per_node_mb == 251 * 1024
    assert (anvil.queue("gpu").memory_per_node_mb, anvil.queue("gpu").max_nodes) == (503 * 1024, 3)
    assert find_profile("stampede3").batch.memory_request is False
    assert find_profile("frontier").queue("batch-large").max_nodes == 9472
    delta = find_profile("delta")
    assert delta.queue("cpu-interactive").max_walltime_s == 30 * 60
    assert delta.queue("cpu").memory_per_node_mb == 230 * 1024
    assert find_profile("polaris").queue("capacity").max_walltime_s == 168 * 3600
    theta = find_profile("theta")
    assert max(q.max_nodes for q in theta.queues) == 4100
    assert {q.batch_queue for q in theta.queues if q.name.startswith("default")} == {"default"}


def test_aurora_jobs_name_their_filesystems_project_and_modules():
    aurora = find_profile("aurora")
    assert (aurora.batch_system, aurora.auth, aurora.allocation_required) == ("pbs", "mfa", True)
    assert "#PBS -l filesystems=home:flare" in aurora.batch.extra_directives
    assert aurora.batch.setup[0] == "module use /soft/modulefiles"
    assert [q.name for q in aurora.queues if q.batch_queue == "prod"] == [
        "prod-small", "prod-medium", "prod-large",
    ]  # fmt: skip
    assert aurora.checked == "2026-11-25"


def test_stampede3_pilots_ask_for_no_memory():
    from lumberjack.profiles.request import build_request, pilot_request
    from lumberjack.site.batch import PilotSpec, get_batch_system

    scripts = {}
    for name in ("stampede3", "frontier"):
        profile = find_profile(name)
        spec = PilotSpec.of(
            pilot_request(build_request(profile, allocation="proj1"), profile),
            name="lj-p0", node_command="run-startd", retire_command="retire", output_dir="/o",
        )  # fmt: skip
        scripts[name] = get_batch_system(profile.batch_system).render_pilot_script(spec)
    assert "#SBATCH --exclusive" in scripts["stampede3"]
    assert "#SBATCH --mem" not in scripts["stampede3"]
    assert "#SBATCH --mem=0" in scripts["frontier"]  # other whole-node sites keep it


def test_launch_refuses_a_retired_site_before_touching_it(tmp_path):
    """`launch` (and so `sync`) at a site retired since the export: one line, exit 2,
    before any command reaches the site (the stand-in site has no connection)."""
    from types import SimpleNamespace

    from lumberjack.state import lifecycle
    from lumberjack.state.ledger import ExportRecord
    from lumberjack.state.phases import Phase

    record = ExportRecord(
        name="calib", site="theta", phase=Phase.SHIPPED, created=0.0, updated=0.0,
        bundle_dir=tmp_path, remote_spool="/x/spool", owner=None, clusters=[1], jobs=["1.0"],
    )  # fmt: skip
    site = SimpleNamespace(profile=find_profile("theta"))  # no .conn: touching it would fail
    with pytest.raises(BadInput, match='is retired; use its successor "polaris"'):
        lifecycle.launch(ledger=None, site=site, record=record)
