"""Directory inputs keep their directories, empty ones too: HTCondor transfers `dir` as
the directory itself and `dir/` as its contents, each with its empty subdirectories, so
export lists every directory below a directory input in the manifest (and makes it in
the bundle); the site makes them in its spool."""

from __future__ import annotations

from pathlib import Path

from lumberjack.ap.export import copy_inputs, input_dirs
from lumberjack.ap.pathmap import PathMap, rewrite_job
from lumberjack.core.classad_text import quote_string

SPOOL = "/scratch/lumberjack/calib/spool"


def test_every_directory_of_a_directory_input_is_listed_empty_ones_too(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    for d in ("dirA/empty", "dirA/n1/n2", "dirB/e", "dirC"):
        (iwd / d).mkdir(parents=True)
    (iwd / "dirA" / "f.txt").write_text("f")
    (iwd / "dirB" / "g.txt").write_text("g")
    (iwd / "plain.txt").write_text("p")
    path_map = PathMap(SPOOL)
    ad = {"Iwd": quote_string(str(iwd)), "Cmd": quote_string("/bin/true"),
          "TransferInput": quote_string("dirA, dirB/, dirC, plain.txt")}  # fmt: skip
    path_map.add(rewrite_job(1, 0, ad, {}, SPOOL))
    spool = tmp_path / "bundle" / "spool"
    files = {e.path for e in copy_inputs(path_map, spool)}

    dirs = input_dirs(path_map, spool)

    # The files alone make no empty directory; the list makes each, at its remote place.
    # The job's inputs directory in the spool: where its plain file went.
    base = str(Path(next(f for f in files if f.endswith("plain.txt"))).parent)
    expected = {f"{base}/{d}" for d in ("dirA", "dirA/empty", "dirA/n1", "dirA/n1/n2",
                                        "dirB", "dirB/e", "dirC")}  # fmt: skip
    assert set(dirs) == expected, dirs
    assert all((spool / d).is_dir() for d in dirs)
    assert not any(d.endswith("plain.txt") for d in dirs)
