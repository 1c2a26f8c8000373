"""The import-side plan (lumberjack.ap.placement), on concrete jobs and hostile file lists."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lumberjack.ap import placement
from lumberjack.ap.job_paths import JobPaths
from lumberjack.ap.pathmap import rewrite_job
from lumberjack.ap.placement import (
    Placement,
    allowed_roots,
    check_safe_relative,
    is_schedd_file,
    plan_outputs,
)
from lumberjack.ap.remote_layout import proc_spool_dir
from lumberjack.core.classad_text import quote_string
from lumberjack.errors import BadInput

SPOOL = "/scratch/alice/lj/calib/spool"
IWD = "/home/alice/run 1"


def q(s: str) -> str:
    return quote_string(s)


def job(**attrs: str) -> JobPaths:
    """JobPaths for a job submitted from IWD with these (quoted) cluster attributes."""
    cluster = {"Iwd": q(IWD), "Cmd": q(IWD + "/sim.sh"), **attrs}
    return rewrite_job(3, 0, cluster, {"ProcId": "0"}, SPOOL).paths


def dests(plan: list[Placement]) -> dict[str, str]:
    return {p.source: p.dest for p in plan}


# --- stdout, stderr, user log -----------------------------------------------------------


def test_stdout_stderr_and_userlog() -> None:
    j = job(
        Out=q("out/out.3.0"),
        Err=q("err/err.3.0"),
        UserLog=q("/home/alice/logs/job.log"),
        DAGManNodesLog=q("/home/alice/dag/my.dag.nodes.log"),
    )
    plan = plan_outputs(j, ["_condor_stdout", "_condor_stderr", "lumberjack-user.log"], None)
    assert plan == [
        Placement("_condor_stdout", IWD + "/out/out.3.0", "stdout"),
        Placement("_condor_stderr", IWD + "/err/err.3.0", "stderr"),
        Placement("lumberjack-user.log", "/home/alice/logs/job.log", "userlog"),
        Placement("lumberjack-user.log", "/home/alice/dag/my.dag.nodes.log", "userlog"),
    ]


def test_out_equal_err_places_once() -> None:
    j = job(Out=q("both.txt"), Err=q("both.txt"))
    plan = plan_outputs(j, ["_condor_stdout"], None)
    assert plan == [Placement("_condor_stdout", IWD + "/both.txt", "stdout")]


def test_dev_null_and_unset_are_not_placed() -> None:
    j = job(Out=q("/dev/null"))
    plan = plan_outputs(j, ["_condor_stdout", "_condor_stderr", "lumberjack-user.log"], None)
    assert plan == []


# --- outputs with TransferOutput ----------------------------------------------------------


def test_transfer_output_lists_only_named_files_by_basename() -> None:
    j = job(TransferOutput=q("result.dat, sub/deep/hist.root, plots"))
    present = ["result.dat", "hist.root", "plots/a.png", "plots/b.png", "scratch.tmp"]
    plan = plan_outputs(j, present, j.transfer_output)
    assert dests(plan) == {
        "result.dat": IWD + "/result.dat",
        "hist.root": IWD + "/hist.root",
        "plots/a.png": IWD + "/plots/a.png",
        "plots/b.png": IWD + "/plots/b.png",
    }
    assert {p.kind for p in plan} == {"output"}


def test_transfer_output_with_spaces_in_names() -> None:
    j = job(TransferOutput=q("my result.dat ,  other file"))
    plan = plan_outputs(j, ["my result.dat", "other file"], j.transfer_output)
    assert dests(plan) == {
        "my result.dat": IWD + "/my result.dat",
        "other file": IWD + "/other file",
    }


def test_transfer_output_preserve_relative_paths() -> None:
    j = job(PreserveRelativePaths="true", TransferOutput=q("sub/deep/hist.root"))
    plan = plan_outputs(j, ["sub/deep/hist.root"], j.transfer_output)
    assert dests(plan) == {"sub/deep/hist.root": IWD + "/sub/deep/hist.root"}


def test_empty_transfer_output_means_no_files() -> None:
    j = job(Out=q("o"))
    plan = plan_outputs(j, ["_condor_stdout", "made.txt"], q(""))
    assert [p.kind for p in plan] == ["stdout"]


def test_transfer_output_expression_is_refused() -> None:
    j = job()
    with pytest.raises(BadInput, match="TransferOutput is not a plain string"):
        plan_outputs(j, [], 'strcat("a", "b")')


# --- outputs without TransferOutput -----------------------------------------------------------


def test_unset_transfer_output_takes_new_files_but_not_schedd_or_input_files() -> None:
    j = job(TransferInput=q("data/in.txt, params.json"), x509userproxy=q("/tmp/x509up_u1"))
    present = [
        "result.dat",
        "new dir/f.txt",
        ".job.ad",
        ".machine.ad",
        ".chirp.config",
        "_condor_creds/token",
        "_condor_stdin",
        ".docker_sock",
        "condor_exec.exe",
        "lumberjack-user.log",
        "lumberjack-other",
        "in.txt",  # an input the job changed: never written over the user's original
        "params.json",
        "x509up_u1",
    ]
    plan = plan_outputs(j, present, None)
    assert dests(plan) == {
        "result.dat": IWD + "/result.dat",
        "new dir/f.txt": IWD + "/new dir/f.txt",
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (".job.ad", True),
        (".update.ad.tmp", True),
        ("_condor_stdout", True),
        (".condor_ssh_to_job_1", True),
        ("docker_stderror", True),
        ("job.ad", False),
        ("condor_out.txt", False),
    ],
)
def test_is_schedd_file(name: str, expected: bool) -> None:
    assert is_schedd_file(name) == expected


# --- remaps ----------------------------------------------------------------------------------


def test_remaps_into_subdirectory_absolute_and_escaped() -> None:
    j = job(
        TransferOutputRemaps=q(
            "out.dat = results/out.dat; a\\;b.txt = /data/alice/x\\=y.txt; plots = /data/alice/p"
        )
    )
    present = ["out.dat", "a;b.txt", "plots/fig 1.png", "plain.txt"]
    plan = plan_outputs(j, present, None)
    assert dests(plan) == {
        "out.dat": IWD + "/results/out.dat",
        "a;b.txt": "/data/alice/x=y.txt",
        "plots/fig 1.png": "/data/alice/p/fig 1.png",
        "plain.txt": IWD + "/plain.txt",
    }


def test_remaps_apply_to_transfer_output_entries() -> None:
    j = job(
        TransferOutput=q("sub/out.dat"),
        TransferOutputRemaps=q("out.dat = ../collected/out.3.0.dat"),
    )
    plan = plan_outputs(j, ["out.dat"], j.transfer_output)
    assert dests(plan) == {"out.dat": "/home/alice/collected/out.3.0.dat"}


def test_two_files_remapped_to_one_destination_are_refused() -> None:
    j = job(TransferOutputRemaps=q("a.txt = c.txt; b.txt = c.txt"))
    with pytest.raises(BadInput, match="would both be placed"):
        plan_outputs(j, ["a.txt", "b.txt"], None)


def test_allowed_roots() -> None:
    j = job(
        Out=q("logs/o"),
        Err=q("/dev/null"),
        UserLog=q("/home/alice/l/job.log"),
        TransferOutputRemaps=q("a = /data/alice/a; b = sub/b"),
    )
    assert allowed_roots(j) == [
        IWD,
        IWD + "/logs",
        "/home/alice/l",
        "/data/alice",
        IWD + "/sub",
    ]


# --- hostile input from the site ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "a/../../b",
        "/etc/passwd",
        "./a",
        "a//b",
        "a/",
        ".",
        "",
        "a\x00b",
        "..",
    ],
)
def test_hostile_present_names_are_refused(name: str) -> None:
    j = job()
    with pytest.raises(BadInput, match=r"job 3\.0: ") as exc:
        plan_outputs(j, ["ok.txt", name], None)
    assert "\n" not in str(exc.value)


def test_hostile_transfer_output_from_the_site_is_refused() -> None:
    j = job(PreserveRelativePaths="true")
    with pytest.raises(BadInput):
        plan_outputs(j, ["x"], q("../../x"))


def test_destination_outside_original_directories_is_refused() -> None:
    j = job()
    plan = placement._Plan(j, "job 3.0")
    with pytest.raises(BadInput, match="outside the job's original directories"):
        plan.add("x", "/etc/passwd", "output")
    with pytest.raises(BadInput, match="outside"):
        plan.add("x", IWD + "/../../../etc/passwd", "output")


def test_a_remap_with_a_nul_is_refused_with_or_without_outputs() -> None:
    # The path map comes from the manifest: a remap no directory can be made of refuses
    # the job whether or not anything came back to be placed.
    j = job(TransferOutputRemaps=q("a.txt = out/a.txt"))
    j.remaps = [("a.txt", "out\x00/a.txt")]
    for present in ([], ["a.txt"]):
        with pytest.raises(BadInput, match=r"job 3\.0 remap contains a NUL character"):
            plan_outputs(j, present, None)


def test_check_safe_relative_accepts_ordinary_names() -> None:
    for name in ("a", "sub dir/file name.txt", ".hidden", "a..b", "unié/中"):
        assert check_safe_relative(name) == name


# --- property tests ------------------------------------------------------------------------------

segment = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=10,
).filter(lambda s: s not in (".", ".."))
safe_name = st.lists(segment, min_size=1, max_size=4).map("/".join)


@given(safe_name)
def test_safe_names_pass(name: str) -> None:
    assert check_safe_relative(name) == name


@given(st.lists(segment, max_size=3), st.lists(segment, max_size=3))
def test_dotdot_anywhere_is_refused(before: list[str], after: list[str]) -> None:
    with pytest.raises(BadInput):
        check_safe_relative("/".join([*before, "..", *after]))


@given(st.lists(safe_name, max_size=8, unique=True))
def test_every_destination_is_inside_the_iwd_without_remaps(names: list[str]) -> None:
    j = job()
    # A name and a directory of the same name cannot both exist in the Iwd.
    names = [n for n in names if not any(m.startswith(n + "/") for m in names)]
    for p in plan_outputs(j, names, None):
        assert p.dest == posixpath.normpath(p.dest)
        assert p.dest.startswith(IWD + "/")


def test_remote_iwd_is_where_the_sources_live() -> None:
    # Sources are relative to the job's remote Iwd, which the path map records.
    assert job().remote_iwd == proc_spool_dir(SPOOL, 3, 0)
