"""The phase table: every phase reachable, sync's steps, the way home, the refusals."""

from __future__ import annotations

import pytest

from lumberjack.errors import BadInput
from lumberjack.state import phases
from lumberjack.state.phases import Phase


def test_every_phase_is_reachable_from_selected() -> None:
    seen, frontier = {Phase.SELECTED}, [Phase.SELECTED]
    while frontier:
        here = frontier.pop()
        for move in phases.TABLE:
            if move.start is here and move.end not in seen:
                seen.add(move.end)
                frontier.append(move.end)
    assert seen == set(Phase)


def test_the_words_of_the_design_are_the_phases() -> None:
    words = "selected exported shipped launched running finished fetched imported cleaned"
    assert set(words.split()) | {"failed", "unexported", "exporting"} == {p.value for p in Phase}


def test_sync_moves_on_until_fetched_and_leaves_the_rest_to_a_person() -> None:
    assert [p.value for p in phases.sync_phases()] == [
        "exporting", "exported", "shipped", "launched", "running", "finished", "fetched",
    ]  # fmt: skip
    assert [phases.sync_step(p) for p in phases.sync_phases()] == [
        "rollback", "ship", "launch", "status", "status", "fetch", "import",
    ]  # fmt: skip
    for waits in ("selected", "imported", "cleaned", "failed", "unexported"):
        assert phases.sync_step(waits) is None


def test_status_decides_among_several_ends() -> None:
    assert phases.ends("status", "launched") == (Phase.LAUNCHED, Phase.RUNNING, Phase.FINISHED)
    assert phases.ends("status", "running") == (Phase.RUNNING, Phase.FINISHED)
    assert phases.ends("status", "exported") == ()


def test_the_way_home() -> None:
    assert phases.way_home("launched") == ["fetch", "import"]
    assert phases.way_home("fetched") == ["import"]
    assert phases.way_home("imported") == []
    assert phases.way_home("cleaned") is None and phases.way_home("failed") is None


def test_check_names_the_phases_a_step_needs() -> None:
    phases.check("shipped", "launch", "calib")
    with pytest.raises(
        BadInput, match="^export 'calib' is cleaned; ship needs phase exported or shipped$"
    ):
        phases.check("cleaned", "ship", "calib")
    with pytest.raises(ValueError, match="unknown step"):
        phases.starts("teleport")


def test_a_phase_prints_as_its_word() -> None:
    assert f"{Phase.RUNNING:9}|" == "running  |" and str(Phase.RUNNING) == "running"


def test_from_every_phase_the_jobs_come_back_unrun_and_everything_is_cleaned() -> None:
    """Whatever the site returned (or did not), a person can hand the jobs back and
    clean site and bundle with the ways out alone, never import."""
    ways_out = {"unexport", "unexport --discard", "rollback", "cleanup", "cleanup --site"}
    home = {Phase.UNEXPORTED, Phase.FAILED, Phase.IMPORTED}  # the local schedd has the jobs

    def reaches_clean(start: Phase) -> bool:
        seen, todo = {start}, [(start, start in home)]
        while todo:
            phase, jobs_home = todo.pop()
            if phase is Phase.CLEANED and jobs_home:
                return True
            for move in phases.TABLE:
                if move.start is phase and move.step in ways_out:
                    if move.end not in seen:
                        seen.add(move.end)
                        todo.append((move.end, jobs_home or move.end in home))
        return False

    stuck = [p for p in Phase if p is not Phase.CLEANED and not reaches_clean(p)]
    assert stuck == []
