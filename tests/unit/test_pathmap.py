"""The export-side path rewrite (lumberjack.ap.pathmap), on concrete jobs."""

from __future__ import annotations

import json
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lumberjack.ap.file_lists import parse_remaps, remap_name, split_file_list
from lumberjack.ap.job_attrs import INPUT_ATTRS, LOG_ATTRS, OUTPUT_ATTRS
from lumberjack.ap.job_paths import InputFile, JobPaths
from lumberjack.ap.pathmap import PathMap, rewrite_job
from lumberjack.ap.remote_layout import bundle_path, mirror_path, proc_spool_dir
from lumberjack.core.classad_text import quote_string, unquote_string
from lumberjack.errors import BadInput

SPOOL = "/scratch/alice/lj/calib/spool"
IWD = "/home/alice/run 1"
MIRROR = SPOOL + "/lumberjack-inputs"


def q(s: str) -> str:
    return quote_string(s)


def submit(**attrs: str) -> dict[str, str]:
    """A cluster ad as condor_submit writes it: string attributes quoted."""
    ad = {"Iwd": q(IWD), "Cmd": q(IWD + "/sim.sh"), "JobUniverse": "5", "Owner": q("alice")}
    for name, value in attrs.items():
        if value is None:
            ad.pop(name, None)
        else:
            ad[name] = value
    return ad


def proc_ad(proc: int = 0, **attrs: str) -> dict[str, str]:
    return {"ProcId": str(proc), "JobStatus": "1", **attrs}


def values(rewrite) -> dict[str, str | None]:
    """The overrides as plain values (None for non-string texts such as undefined)."""
    return {k: unquote_string(v) for k, v in rewrite.proc_overrides.items()}


# --- layout -------------------------------------------------------------------------


def test_proc_spool_dir_layout() -> None:
    assert proc_spool_dir(SPOOL, 12, 3) == SPOOL + "/12/3/cluster12.proc3.subproc0"
    assert proc_spool_dir(SPOOL + "/", 12, 3) == SPOOL + "/12/3/cluster12.proc3.subproc0"


def test_mirror_and_bundle_paths() -> None:
    local = "/home/alice/run 1/data/in.txt"
    assert mirror_path(SPOOL, local) == MIRROR + "/home/alice/run 1/data/in.txt"
    assert bundle_path(local) == "inputs/home/alice/run 1/data/in.txt"


@pytest.mark.parametrize("spool", ["relative/spool", "/", ""])
def test_bad_remote_spool(spool: str) -> None:
    with pytest.raises(BadInput):
        rewrite_job(1, 0, submit(), proc_ad(), spool)


def test_attribute_lists_are_documented() -> None:
    assert "Cmd" in INPUT_ATTRS and "TransferInput" in INPUT_ATTRS and "In" in INPUT_ATTRS
    assert set(OUTPUT_ATTRS) == {"Out", "Err", "TransferOutputRemaps"}
    assert set(LOG_ATTRS) == {"UserLog", "DAGManNodesLog"}


# --- an ordinary condor_submit job --------------------------------------------------


def test_ordinary_job_with_spaces_and_subdirectory_input() -> None:
    cluster = submit(
        TransferInput=q("data/in.txt, extra file.txt"),
        Out=q("out.txt"),
        Err=q("err.txt"),
        UserLog=q(IWD + "/job.log"),
    )
    before = dict(cluster)
    rw = rewrite_job(7, 2, cluster, proc_ad(2), SPOOL)
    remote_iwd = SPOOL + "/7/2/cluster7.proc2.subproc0"

    assert cluster == before  # the cluster ad is never modified
    assert rw.local_iwd == IWD and rw.remote_iwd == remote_iwd
    assert values(rw) == {
        "Iwd": remote_iwd,
        "Cmd": MIRROR + IWD + "/sim.sh",
        "TransferInput": f"{MIRROR}{IWD}/data/in.txt,{MIRROR}{IWD}/extra file.txt",
        "Out": "_condor_stdout",
        "Err": "_condor_stderr",
        "UserLog": remote_iwd + "/lumberjack-user.log",
    }
    assert {i.local_path for i in rw.inputs} == {
        IWD + "/sim.sh",
        IWD + "/data/in.txt",
        IWD + "/extra file.txt",
    }
    for item in rw.inputs:
        assert item.remote_path == MIRROR + item.local_path
        assert item.bundle_path == "inputs" + item.local_path
        # basenames survive, so HTCondor names the sandbox copies as before
        assert posixpath.basename(item.remote_path) == posixpath.basename(item.local_path)
    assert rw.original == {
        "Iwd": q(IWD),
        "Cmd": q(IWD + "/sim.sh"),
        "TransferInput": q("data/in.txt, extra file.txt"),
        "Out": q("out.txt"),
        "Err": q("err.txt"),
        "UserLog": q(IWD + "/job.log"),
    }
    assert rw.unset == []
    paths = rw.paths
    assert paths.out == IWD + "/out.txt" and paths.err == IWD + "/err.txt"
    assert paths.user_log == IWD + "/job.log"
    assert set(paths.input_names) == {"in.txt", "extra file.txt"}


def test_every_override_is_valid_old_classad_text() -> None:
    classad2 = pytest.importorskip("classad2")
    cluster = submit(
        TransferInput=q('we"ird\\name.txt'),
        TransferOutputRemaps=q("a = b"),
        DAGManNodesLog=q("dag.nodes.log"),
        Out=q("o"),
    )
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    text = "".join(f"{k} = {v}\n" for k, v in rw.proc_overrides.items())
    ad = classad2.parseOne(text, parser=classad2.ParserType.Old)
    assert ad["TransferInput"] == MIRROR + IWD + '/we"ird\\name.txt'
    assert ad["Out"] == "_condor_stdout"


def test_relative_cmd_and_dotdot_inputs_resolve_lexically() -> None:
    cluster = submit(Cmd=q("bin/sim.sh"), TransferInput=q("../shared/x.dat,./y.dat"))
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    v = values(rw)
    assert v["Cmd"] == MIRROR + IWD + "/bin/sim.sh"
    assert v["TransferInput"] == f"{MIRROR}/home/alice/shared/x.dat,{MIRROR}{IWD}/y.dat"


def test_transfer_executable_false_leaves_cmd_and_ships_nothing() -> None:
    cluster = submit(Cmd=q("/opt/site/bin/app"), TransferExecutable="false")
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    assert "Cmd" not in rw.proc_overrides and "Cmd" not in rw.original
    assert rw.inputs == []


def test_url_inputs_untouched_and_directory_slash_kept() -> None:
    cluster = submit(
        TransferInput=q("https://example.org/data/big.tar?x=1, datadir/, /abs/dir, osdf:///o/f")
    )
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    entries = split_file_list(values(rw)["TransferInput"])
    assert entries == [
        "https://example.org/data/big.tar?x=1",
        MIRROR + IWD + "/datadir/",
        MIRROR + "/abs/dir",
        "osdf:///o/f",
    ]
    by_local = {i.local_path: i for i in rw.inputs}
    assert by_local[IWD + "/datadir"].is_dir
    assert not by_local["/abs/dir"].is_dir
    assert "big.tar" in rw.paths.input_names and "dir" in rw.paths.input_names


def test_only_urls_means_no_transfer_input_override() -> None:
    cluster = submit(TransferInput=q("https://example.org/a"))
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    assert "TransferInput" not in rw.proc_overrides


def test_out_equal_err_share_condor_stdout() -> None:
    cluster = submit(Out=q("both.txt"), Err=q(IWD + "/both.txt"))
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    v = values(rw)
    assert v["Out"] == "_condor_stdout" and v["Err"] == "_condor_stdout"
    assert rw.paths.out == rw.paths.err == IWD + "/both.txt"


def test_dev_null_stays() -> None:
    cluster = submit(In=q("/dev/null"), Out=q("/dev/null"), Err=q("/dev/null"))
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    for name in ("In", "Out", "Err"):
        assert name not in rw.proc_overrides
    assert rw.paths.out == "/dev/null" and rw.paths.err == "/dev/null"


def test_stdin_and_proxy_are_shipped() -> None:
    cluster = submit(In=q("input.txt"), x509userproxy=q("/tmp/x509up_u1000"))
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    v = values(rw)
    assert v["In"] == MIRROR + IWD + "/input.txt"
    assert v["x509userproxy"] == MIRROR + "/tmp/x509up_u1000"
    assert "x509up_u1000" in rw.paths.input_names


@pytest.mark.parametrize(
    ("attrs", "shipped"),
    [
        ({"ContainerImage": q("images/app.sif")}, True),
        ({"SingularityImage": q("/home/alice/img.sif")}, True),
        ({"ContainerImage": q("docker://debian:12")}, False),
        ({"ContainerImage": q("docker:debian")}, False),
        ({"SingularityImage": q("/cvmfs/singularity.example.org/el9:latest")}, False),
        ({"ContainerImage": q("app.sif"), "TransferContainer": "false"}, False),
    ],
)
def test_container_images(attrs: dict[str, str], shipped: bool) -> None:
    rw = rewrite_job(1, 0, submit(**attrs), proc_ad(), SPOOL)
    (name,) = [k for k in attrs if k.endswith("Image")]
    assert (name in rw.proc_overrides) == shipped
    assert any(i.local_path.endswith(("sif", "latest")) for i in rw.inputs) == shipped


# --- logs and remaps ----------------------------------------------------------------


def test_user_log_and_dagman_nodes_log() -> None:
    cluster = submit(UserLog=q("logs/job.log"), DAGManNodesLog=q("/home/alice/dag/x.nodes.log"))
    rw = rewrite_job(3, 1, cluster, proc_ad(1), SPOOL)
    assert values(rw)["UserLog"] == proc_spool_dir(SPOOL, 3, 1) + "/lumberjack-user.log"
    assert rw.proc_overrides["DAGManNodesLog"] == "undefined"
    assert rw.original["DAGManNodesLog"] == q("/home/alice/dag/x.nodes.log")
    assert rw.paths.user_log == IWD + "/logs/job.log"
    assert rw.paths.dagman_nodes_log == "/home/alice/dag/x.nodes.log"


def test_job_without_user_log_still_gets_a_remote_log() -> None:
    rw = rewrite_job(1, 0, submit(), proc_ad(), SPOOL)
    assert values(rw)["UserLog"].endswith("/lumberjack-user.log")
    assert rw.unset == ["UserLog"]
    assert rw.paths.user_log is None
    to_set, to_delete = rw.paths.reverse_overrides()
    assert to_delete == ["UserLog"] and "UserLog" not in to_set


def test_remaps_removed_remotely_and_parsed_for_placement() -> None:
    text = "out.dat = results/out.dat; a\\;b.txt=/home/alice/x\\=y.txt ;log.txt=logs/"
    rw = rewrite_job(1, 0, submit(TransferOutputRemaps=q(text)), proc_ad(), SPOOL)
    assert rw.proc_overrides["TransferOutputRemaps"] == "undefined"
    assert rw.original["TransferOutputRemaps"] == q(text)
    assert rw.paths.remaps == [
        ("out.dat", "results/out.dat"),
        ("a;b.txt", "/home/alice/x=y.txt"),
        ("log.txt", "logs/"),
    ]


def test_remap_to_url_is_refused() -> None:
    cluster = submit(TransferOutputRemaps=q("out.dat = osdf:///store/out.dat"))
    with pytest.raises(BadInput, match=r"job 4\.0: output remap to URL"):
        rewrite_job(4, 0, cluster, proc_ad(), SPOOL)


def test_remap_loop_is_refused_at_export() -> None:
    cluster = submit(TransferOutputRemaps=q("a = b; b = a"))
    with pytest.raises(BadInput, match="loop"):
        rewrite_job(4, 0, cluster, proc_ad(), SPOOL)


def test_parse_remaps_details() -> None:
    assert parse_remaps("") == []
    assert parse_remaps("\ta = b\n") == [("a", "b")]
    assert parse_remaps("noequals; x=y") == [("x", "y")]
    assert parse_remaps("s p a c e . t x t = d e s t") == [("s p a c e . t x t", "d e s t")]
    assert parse_remaps("c:\\dir\\f = g") == [("c:\\dir\\f", "g")]


def test_remap_name_chains_and_parent_directories() -> None:
    remaps = [("out.dat", "results/out.dat"), ("results", "/data/r"), ("x", "y")]
    assert remap_name(remaps, "out.dat") == "/data/r/out.dat"
    assert remap_name(remaps, "results/sub/a.txt") == "/data/r/sub/a.txt"
    assert remap_name(remaps, "x") == "y"
    assert remap_name(remaps, "other") is None


# --- refusals -------------------------------------------------------------------------


def test_output_destination_is_refused() -> None:
    cluster = submit(OutputDestination=q("osdf:///store/alice/"))
    with pytest.raises(BadInput, match=r"job 5\.0: OutputDestination"):
        rewrite_job(5, 0, cluster, proc_ad(), SPOOL)


def test_transfer_plugins_are_refused() -> None:
    cluster = submit(TransferPlugins=q("mine=/home/alice/plugin.py"))
    with pytest.raises(BadInput, match="TransferPlugins"):
        rewrite_job(5, 0, cluster, proc_ad(), SPOOL)


@pytest.mark.parametrize("attr", ["Iwd", "Cmd", "TransferInput", "Out", "UserLog"])
def test_expression_instead_of_string_is_refused(attr: str) -> None:
    cluster = submit(**{attr: 'strcat("/home/alice/", Owner)'})
    with pytest.raises(BadInput, match=rf"job 6\.1: {attr} is not a plain string") as exc:
        rewrite_job(6, 1, cluster, proc_ad(1), SPOOL)
    assert "\n" not in str(exc.value)


def test_should_transfer_files() -> None:
    rw = rewrite_job(1, 0, submit(ShouldTransferFiles=q("IF_NEEDED")), proc_ad(), SPOOL)
    assert values(rw)["ShouldTransferFiles"] == "YES"
    rw = rewrite_job(1, 0, submit(ShouldTransferFiles=q("YES")), proc_ad(), SPOOL)
    assert "ShouldTransferFiles" not in rw.proc_overrides
    with pytest.raises(BadInput, match="should_transfer_files = NO"):
        rewrite_job(1, 0, submit(ShouldTransferFiles=q("NO")), proc_ad(), SPOOL)


def test_comma_in_mirrored_input_path_is_refused() -> None:
    cluster = submit(Iwd=q("/home/alice/a,b"), TransferInput=q("in.txt"))
    with pytest.raises(BadInput, match="comma"):
        rewrite_job(1, 0, cluster, proc_ad(), SPOOL)


def test_preserve_relative_paths_with_subdirectory_input_is_refused() -> None:
    cluster = submit(PreserveRelativePaths="true", TransferInput=q("data/in.txt"))
    with pytest.raises(BadInput, match="preserve_relative_paths"):
        rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    ok = submit(PreserveRelativePaths="true", TransferInput=q("in.txt"))
    assert rewrite_job(1, 0, ok, proc_ad(), SPOOL).paths.preserve_relative_paths


def test_relative_iwd_and_missing_iwd_are_refused() -> None:
    with pytest.raises(BadInput, match="not an absolute path"):
        rewrite_job(1, 0, submit(Iwd=q("run1")), proc_ad(), SPOOL)
    with pytest.raises(BadInput, match="has no Iwd"):
        rewrite_job(1, 0, submit(Iwd=None), proc_ad(), SPOOL)


# --- ads: proc over cluster, case, SUBMIT_*, native export -----------------------------


def test_proc_values_win_and_names_are_case_insensitive() -> None:
    cluster = submit(cmd=q("/home/alice/other.sh"), Cmd=None, Out=q("cluster.out"))
    proc = proc_ad(0, out=q("proc.out"), IWD=q("/home/alice/p"))
    rw = rewrite_job(1, 0, cluster, proc, SPOOL)
    # the proc ad's own spellings are overwritten, the canonical one used otherwise
    assert set(rw.proc_overrides) >= {"IWD", "out", "Cmd"}
    assert "Iwd" not in rw.proc_overrides and "Out" not in rw.proc_overrides
    assert rw.paths.out == "/home/alice/p/proc.out"
    assert rw.original["Out"] == q("proc.out")
    assert values(rw)["Cmd"] == MIRROR + "/home/alice/other.sh"


def test_submit_attributes_are_never_rewritten() -> None:
    cluster = submit(
        SUBMIT_Iwd=q("/home/alice/orig"),
        SUBMIT_Cmd=q("/home/alice/orig/sim.sh"),
        SUBMIT_TransferOutputRemaps=q("a = /x/a"),
    )
    rw = rewrite_job(1, 0, cluster, proc_ad(), SPOOL)
    assert not any(k.upper().startswith("SUBMIT_") for k in rw.proc_overrides)
    assert not any(k.upper().startswith("SUBMIT_") for k in rw.original)


def test_local_iwd_overrides_native_export_spool_path() -> None:
    # The native export rewrote the proc ad's Iwd to its own spool layout.
    proc = proc_ad(0, Iwd=q("/other/spool/1/0/cluster1.proc0.subproc0"))
    cluster = submit(Out=q("o.txt"))
    rw = rewrite_job(1, 0, cluster, proc, SPOOL, local_iwd=IWD)
    assert rw.local_iwd == IWD
    assert rw.original["Iwd"] == q(IWD)
    assert rw.paths.out == IWD + "/o.txt"
    assert values(rw)["Iwd"] == proc_spool_dir(SPOOL, 1, 0)


# --- the aggregated map ---------------------------------------------------------------


def test_shared_executable_is_shipped_once() -> None:
    cluster = submit(TransferInput=q("common.dat"))
    pm = PathMap(SPOOL)
    for p in range(3):
        pm.add(rewrite_job(9, p, cluster, proc_ad(p), SPOOL))
    assert sorted(pm.inputs) == [IWD + "/common.dat", IWD + "/sim.sh"]
    assert sorted(pm.jobs) == ["9.0", "9.1", "9.2"]
    assert pm.job(9, 1).remote_iwd == proc_spool_dir(SPOOL, 9, 1)
    with pytest.raises(BadInput):
        pm.job(9, 7)


def test_add_refuses_a_rewrite_for_another_spool() -> None:
    pm = PathMap(SPOOL)
    with pytest.raises(BadInput):
        pm.add(rewrite_job(1, 0, submit(), proc_ad(), "/elsewhere/spool"))


def test_json_roundtrip() -> None:
    cluster = submit(
        TransferInput=q("data/, in put.txt"),
        TransferOutputRemaps=q("o = sub/o"),
        Out=q("out"),
        DAGManNodesLog=q("dag.log"),
        TransferOutput=q("o,res"),
    )
    pm = PathMap(SPOOL)
    pm.add(rewrite_job(2, 0, cluster, proc_ad(), SPOOL))
    pm.add(rewrite_job(10, 5, submit(), proc_ad(5), SPOOL))
    data = json.loads(json.dumps(pm.to_json()))
    back = PathMap.from_json(data)
    assert back == pm
    assert list(data["jobs"]) == ["2.0", "10.5"]
    assert back.job(2, 0).remaps == [("o", "sub/o")]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(format=99),
        lambda d: d.update(remote_spool="relative"),
        lambda d: d["jobs"]["1.0"].update(cluster="1"),
        lambda d: d["jobs"]["1.0"].update(remote_iwd="/etc"),
        lambda d: d["jobs"]["1.0"].update(out="../x"),
        lambda d: d["jobs"]["1.0"].update(remaps=[["a"]]),
        lambda d: d["jobs"].update({"2.0": d["jobs"]["1.0"]}),
        lambda d: d["inputs"][0].update(remote_path="/etc/passwd"),
        lambda d: d.update(jobs=[]),
    ],
)
def test_from_json_refuses_malformed(mutate) -> None:
    pm = PathMap(SPOOL)
    pm.add(rewrite_job(1, 0, submit(Out=q("o")), proc_ad(), SPOOL))
    data = json.loads(json.dumps(pm.to_json()))
    mutate(data)
    with pytest.raises(BadInput):
        PathMap.from_json(data)


def test_input_file_json() -> None:
    item = InputFile("/a/b", MIRROR + "/a/b", "inputs/a/b", True)
    assert InputFile.from_json(item.to_json()) == item


def test_jobpaths_json() -> None:
    jp = JobPaths(1, 2, "/a", proc_spool_dir(SPOOL, 1, 2), remaps=[("x", "y")])
    assert JobPaths.from_json(json.loads(json.dumps(jp.to_json()))) == jp


def test_remote_to_local_for_iwds_and_mirror() -> None:
    pm = PathMap(SPOOL)
    pm.add(rewrite_job(12, 3, submit(), proc_ad(3), SPOOL))
    remote_iwd = proc_spool_dir(SPOOL, 12, 3)
    assert pm.remote_to_local(remote_iwd) == IWD
    assert pm.remote_to_local(remote_iwd + "/sub/out.txt") == IWD + "/sub/out.txt"
    assert pm.local_to_remote(IWD + "/sub/out.txt", job=(12, 3)) == remote_iwd + "/sub/out.txt"
    assert pm.remote_to_local(MIRROR + "/home/alice/x") == "/home/alice/x"
    assert pm.remote_to_local(MIRROR) == "/"
    for bad in (SPOOL, SPOOL + "/12/3", proc_spool_dir(SPOOL, 99, 0), "/etc/passwd"):
        with pytest.raises(BadInput):
            pm.remote_to_local(bad)
    with pytest.raises(BadInput):
        pm.local_to_remote("/elsewhere/x", job=(12, 3))
    with pytest.raises(BadInput):
        pm.local_to_remote("relative/x")


# --- property tests -------------------------------------------------------------------

segment = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
abs_path = st.lists(segment, min_size=0, max_size=6).map(lambda parts: "/" + "/".join(parts))
# Paths that can also be written into job_queue.log (no newline or carriage return).
log_segment = segment.filter(lambda s: "\n" not in s and "\r" not in s)
log_abs_path = st.lists(log_segment, min_size=0, max_size=6).map(
    lambda parts: "/" + "/".join(parts)
)


@given(abs_path)
def test_mirror_map_is_reversible(path: str) -> None:
    pm = PathMap(SPOOL)
    remote = pm.local_to_remote(path)
    assert remote.startswith(MIRROR)
    assert pm.remote_to_local(remote) == path


@given(log_abs_path, st.lists(segment, max_size=4), st.integers(0, 10**6), st.integers(0, 10**5))
def test_iwd_map_is_reversible(iwd: str, rel: list[str], cluster: int, proc: int) -> None:
    pm = PathMap(SPOOL)
    pm.add(rewrite_job(cluster, proc, submit(), proc_ad(proc), SPOOL, local_iwd=iwd))
    local = posixpath.join(iwd, *rel) if rel else iwd
    remote = pm.local_to_remote(local, job=(cluster, proc))
    assert pm.remote_to_local(remote) == local


@given(st.lists(log_abs_path, min_size=1, max_size=4))
def test_rewritten_transfer_input_maps_back(paths: list[str]) -> None:
    # Commas cannot appear in a list entry, and spaces at an entry's ends are trimmed.
    paths = [p for p in paths if "," not in p and p == p.strip(" \t\f\v") and p != "/"]
    if not paths:
        return
    rw = rewrite_job(1, 0, submit(TransferInput=q(",".join(paths))), proc_ad(), SPOOL)
    pm = PathMap(SPOOL)
    pm.add(rw)
    entries = split_file_list(unquote_string(rw.proc_overrides["TransferInput"]))
    assert [pm.remote_to_local(e) for e in entries] == paths
