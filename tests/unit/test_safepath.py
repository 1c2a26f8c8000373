"""The one safe-relative-path rule, and the words each of its users puts around it."""

from __future__ import annotations

import pytest

from lumberjack.ap.placement import check_safe_relative
from lumberjack.core.safepath import MAX_LENGTH, why_unsafe
from lumberjack.errors import BadInput, RemoteError
from lumberjack.host.input_paths import check_relative
from lumberjack.site import transfer_helper
from lumberjack.transport.states import check_site_path


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty"),
        (None, "empty"),
        ("a\x00b", "contains NUL"),
        ("/etc/passwd", "is absolute"),
        ("a/../../b", "contains '..'"),
        ("..", "contains '..'"),
        ("a//b", "is not normalised"),
        ("./a", "is not normalised"),
        ("a/", "is not normalised"),
        (".", "is not normalised"),
    ],
)
def test_structural_reasons(path: object, reason: str) -> None:
    assert why_unsafe(path) == reason
    assert why_unsafe(path, printable=True) == reason


@pytest.mark.parametrize("path", ["a", "sub dir/file name.txt", ".hidden", "a..b", "unié/中"])
def test_ordinary_names_are_safe(path: str) -> None:
    assert why_unsafe(path) is None
    assert why_unsafe(path, printable=True) is None


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("new\nline", "contains a control character"),
        ("esc\x1b[2J", "contains a control character"),
        ("del\x7f", "contains a control character"),
        ("bad\udcff", "is not UTF-8"),
        ("x" * (MAX_LENGTH + 1), "is too long"),
    ],
)
def test_printable_refuses_what_a_terminal_or_log_should_not_get(path: str, reason: str) -> None:
    assert why_unsafe(path) is None  # a local name may hold them
    assert why_unsafe(path, printable=True) == reason


def test_each_user_keeps_its_message() -> None:
    with pytest.raises(BadInput, match=r"^manifest: unsafe path '\.\./x'$"):
        check_relative("../x", "manifest")
    with pytest.raises(BadInput, match=r"^job 1\.0: file name '/x' from the site is absolute$"):
        check_safe_relative("/x", "job 1.0")
    with pytest.raises(BadInput, match=r"^empty file name from the site$"):
        check_safe_relative("")
    with pytest.raises(BadInput, match=r"from the site is not normalised$"):
        check_safe_relative("a//b")
    with pytest.raises(transfer_helper.Bad, match=r"^unsafe path 'a\\nb'$"):
        transfer_helper.check("a\nb")
    with pytest.raises(transfer_helper.Bad, match=r"\(not UTF-8\)$"):
        transfer_helper.check("bad\udcff")
    with pytest.raises(RemoteError, match=r"^site: refusing unsafe file name 'a\\nb'$"):
        check_site_path("a\nb", "site")
