"""Container images of the jobs: shipped once per sha256, run only from the export's own
images directory (lumberjack.core.images, ap.pathmap, ap.export, site.job_container)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import classad2
import pytest
from conftest import load_fixture_module

from lumberjack.ap.export import ImageDigests, copy_inputs
from lumberjack.ap.pathmap import PathMap, rewrite_job
from lumberjack.core import images
from lumberjack.core.classad_text import quote_string, unquote_string
from lumberjack.core.contract import ExportLayout, lease_dir_name
from lumberjack.errors import BadInput
from lumberjack.site import remote_pool
from lumberjack.site.remote_pool import PoolSettings

SITE_IMAGE = "/images/lumberjack-site.sif"
ROOT = "/scratch/lj/calib"
SPOOL = ROOT + "/spool"
DIGEST = "ab" * 32
values = load_fixture_module("condor_config").config_values


def q(text: str) -> str:
    return quote_string(text)


def settings(root: str = ROOT) -> PoolSettings:
    return PoolSettings(
        layout=ExportLayout(root), site_user="hpcuser", address="10.0.0.5", port=40123,
        image=SITE_IMAGE,
    )  # fmt: skip


def startd(root: str = ROOT) -> dict[str, str]:
    return values(remote_pool.pilot_config(settings(root)))


def evaluate(expr_text: str, job: dict) -> object:
    # The startd evaluates both with the slot as MY and the job as TARGET.
    return classad2.ExprTree(expr_text).eval(classad2.ClassAd({}), classad2.ClassAd(job))


def start_part(config: dict[str, str]) -> str:
    return config["START"].split(" && ", 1)[1]  # without $(START): the slot's own policy


SHIPPED = images.image_path(SPOOL, DIGEST)


@pytest.mark.parametrize(
    ("job", "image"),
    [
        ({"JobUniverse": 5}, SITE_IMAGE),
        ({"JobUniverse": 5, "WantContainer": True, "WantSIF": True, "ContainerImage": SHIPPED},
         SHIPPED),
        ({"JobUniverse": 5, "SingularityImage": SHIPPED}, SHIPPED),
    ],
)  # fmt: skip
def test_a_job_runs_in_its_shipped_image_or_the_site_image(job: dict, image: str) -> None:
    config = startd()
    assert evaluate(start_part(config), job) is True
    assert evaluate(config["SINGULARITY_IMAGE_EXPR"], job) == image


@pytest.mark.parametrize(
    "named",
    [
        "/scratch/lj/bob/spool/lumberjack-images/" + DIGEST + ".sif",  # another export's
        SPOOL + "/lumberjack-images/../../bob/x.sif",
        SPOOL + "/lumberjack-images/" + DIGEST + ".sif/../x.sif",
        SPOOL + "/lumberjack-images/" + "AB" * 32 + ".sif",
        SPOOL + "/lumberjack-inputs/home/alice/img.sif",
        "/home/hpcuser/.ssh/id_ed25519",
        "docker://debian:12",
        "x.sif",
    ],
)
def test_any_other_image_never_starts(named: str) -> None:
    config = startd()
    for attr in ("ContainerImage", "SingularityImage"):
        job = {"JobUniverse": 5, attr: named}
        assert evaluate(start_part(config), job) is False, (attr, named)
    both = {"JobUniverse": 5, "ContainerImage": SHIPPED, "SingularityImage": named}
    assert evaluate(start_part(config), both) is False


def test_a_spool_with_regex_characters_is_matched_literally() -> None:
    root = "/scratch/a.b+c[1]/calib"
    config = startd(root)
    mine = images.image_path(root + "/spool", DIGEST)
    assert evaluate(start_part(config), {"JobUniverse": 5, "ContainerImage": mine}) is True
    lookalike = mine.replace("a.b+c[1]", "aXb+c[1]")
    assert evaluate(start_part(config), {"JobUniverse": 5, "ContainerImage": lookalike}) is False


def test_a_lease_pilot_runs_no_job_image() -> None:
    config = startd("/scratch/lj/" + lease_dir_name("big"))
    image = images.image_path("/scratch/lj/lease-big/spool", DIGEST)
    assert evaluate(start_part(config), {"JobUniverse": 5, "ContainerImage": image}) is False
    assert evaluate(start_part(config), {"JobUniverse": 5}) is True
    assert config["SINGULARITY_IMAGE_EXPR"] == f'"{SITE_IMAGE}"'


# --- export: one copy per content ----------------------------------------------------


def container_job(image: str, iwd: str) -> dict[str, str]:
    """The ad condor_submit 25 writes for `universe = container`: the image's name, its
    full path in TransferInput, WantContainer and WantSIF, JobUniverse 5."""
    return {
        "Iwd": q(iwd), "Cmd": q("/bin/cat"), "JobUniverse": "5", "WantContainer": "true",
        "WantSIF": "true", "ContainerImage": q(Path(image).name),
        "ContainerImageFullPath": q(image), "TransferInput": q(f"{image},data.txt"),
    }  # fmt: skip


def test_one_image_ships_once_for_many_jobs_and_paths(tmp_path: Path) -> None:
    iwd = tmp_path / "run"
    iwd.mkdir()
    (iwd / "data.txt").write_text("data\n")
    image = iwd / "app.sif"
    image.write_bytes(b"SIF" * 1000)
    same = tmp_path / "copy.sif"
    same.write_bytes(image.read_bytes())
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    digests = ImageDigests()
    path_map = PathMap(SPOOL)
    rewrites = [rewrite_job(1, p, container_job(str(image), str(iwd)), {}, SPOOL,
                            image_digest=digests) for p in range(1000)]  # fmt: skip
    rewrites.append(rewrite_job(2, 0, {"Iwd": q(str(iwd)), "Cmd": q("/bin/cat"),
                                       "SingularityImage": q(str(same))}, {}, SPOOL,
                                image_digest=digests))  # fmt: skip
    for rw in rewrites:
        path_map.add(rw)
    shipped = images.image_path(SPOOL, digest)
    named = {
        unquote_string(rw.proc_overrides.get("ContainerImage") or
                       rw.proc_overrides["SingularityImage"])
        for rw in rewrites
    }  # fmt: skip
    assert named == {shipped}
    # The image left TransferInput (no copy per job at the site); the data stayed.
    tin = unquote_string(rewrites[0].proc_overrides["TransferInput"])
    assert tin == f"{SPOOL}/lumberjack-inputs{iwd}/data.txt"
    # Import puts the job's own attributes back.
    assert unquote_string(rewrites[0].proc_overrides["ContainerImageFullPath"]) == shipped
    restore, _ = rewrites[0].paths.reverse_overrides()
    assert restore["ContainerImage"] == q("app.sif")
    assert restore["ContainerImageFullPath"] == q(str(image))
    assert restore["TransferInput"] == q(f"{image},data.txt")
    assert rewrites[-1].paths.reverse_overrides()[0]["SingularityImage"] == q(str(same))
    entries = copy_inputs(path_map, tmp_path / "bundle" / "spool")
    sifs = [e for e in entries if e.path.startswith(images.IMAGES_DIRNAME + "/")]
    assert [(e.path, e.sha256) for e in sifs] == [(f"lumberjack-images/{digest}.sif", digest)]
    on_disk = list((tmp_path / "bundle" / "spool" / images.IMAGES_DIRNAME).iterdir())
    assert [p.name for p in on_disk] == [f"{digest}.sif"]
    # The manifest's path map reads back, images and all.
    again = PathMap.from_json(path_map.to_json())
    assert again.inputs[str(image)].sha256 == digest


def test_an_image_changed_after_hashing_is_refused(tmp_path: Path) -> None:
    image = tmp_path / "app.sif"
    image.write_bytes(b"one")
    path_map = PathMap(SPOOL)
    path_map.add(rewrite_job(1, 0, {"Iwd": q(str(tmp_path)), "Cmd": q("/bin/cat"),
                                    "SingularityImage": q(str(image))}, {}, SPOOL,
                             image_digest=ImageDigests()))  # fmt: skip
    image.write_bytes(b"two")
    with pytest.raises(BadInput, match="changed while it was exported"):
        copy_inputs(path_map, tmp_path / "bundle")


def test_a_forged_image_entry_in_a_path_map_is_refused() -> None:
    data = PathMap(SPOOL).to_json()
    data["inputs"] = [{"local_path": "/home/a/x.sif", "remote_path": "/etc/passwd",
                       "bundle_path": "inputs/home/a/x.sif", "sha256": DIGEST}]  # fmt: skip
    with pytest.raises(BadInput, match="not mirrored as expected"):
        PathMap.from_json(data)
    data["inputs"][0]["sha256"] = "../x"
    with pytest.raises(BadInput, match="malformed sha256"):
        PathMap.from_json(data)


def test_image_path_takes_only_a_digest() -> None:
    with pytest.raises(ValueError):
        images.image_path(SPOOL, "../../etc")
