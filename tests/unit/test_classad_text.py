"""classad_text against the real ClassAd library in the htcondor wheel (classad2).

job_queue.log uses the OLD ClassAd syntax, so the reference is classad2's old parser
(``parseOne(..., parser=ParserType.Old)``) and old printer (``ClassAd.printOld()``).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lumberjack.core.classad_text import (
    int_or_none,
    is_true,
    is_undefined,
    literal_bool,
    quote_string,
    site_string,
    site_text,
    unquote_string,
)

classad2 = pytest.importorskip("classad2")

# Any text a job_queue.log line can hold: no newline, CR or NUL, no lone surrogates.
log_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00")
)


def old_parse(value_text: str) -> object:
    ad = classad2.parseOne("A = " + value_text + "\n", parser=classad2.ParserType.Old)
    return ad["A"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", '"plain"'),
        ("/home/alice/run 1/sim.sh", '"/home/alice/run 1/sim.sh"'),
        ('x"y\\z', '"x\\"y\\z"'),
        ("ends with \\", '"ends with \\"'),
        ('ends with \\"', '"ends with \\\\""'),
        ('"', '"\\""'),
        ("", '""'),
        ("unié 中", '"unié 中"'),
        ("tab\there", '"tab\there"'),
    ],
)
def test_quote_string_matches_old_syntax(value: str, text: str) -> None:
    assert quote_string(value) == text
    assert unquote_string(text) == value
    assert old_parse(text) == value


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b"])
def test_quote_string_refuses_what_a_log_line_cannot_hold(bad: str) -> None:
    with pytest.raises(ValueError):
        quote_string(bad)


@pytest.mark.parametrize(
    "text",
    [
        'strcat("a", "b")',
        "undefined",
        "42",
        "true",
        '"a" "b"',
        '"a" + "b"',
        '"a"b',
        '"unterminated',
        '"a\\" ',  # backslash-quote then a space: the quote is literal, never closed
        "",
        "   ",
        '("a")',
    ],
)
def test_unquote_string_is_none_for_non_literals(text: str) -> None:
    assert unquote_string(text) is None


def test_unquote_string_allows_surrounding_whitespace() -> None:
    assert unquote_string('  "x"  ') == "x"
    assert unquote_string('"x"\n') == "x"
    assert unquote_string('"a\\"\n') == "a\\"


@given(log_text)
@example("\\")
@example('\\"')
@example('"\\')
@example('a\\"b\\')
def test_quote_unquote_roundtrip(s: str) -> None:
    assert unquote_string(quote_string(s)) == s


@given(log_text)
@example('x"y\\z')
@example("trailing\\")
def test_quote_string_is_read_back_by_classad2_old_parser(s: str) -> None:
    assert old_parse(quote_string(s)) == s


@given(log_text)
@example('x"y\\z')
def test_quote_string_matches_classad2_old_printer(s: str) -> None:
    printed = classad2.ClassAd({"A": s}).printOld()
    assert printed == "A = " + quote_string(s) + "\n"
    assert unquote_string(printed[len("A = ") :]) == s


@given(log_text.filter(lambda s: "\\" not in s))
def test_new_syntax_agrees_when_there_is_no_backslash(s: str) -> None:
    assert classad2.ExprTree(quote_string(s)).eval() == s


def test_new_syntax_differs_on_backslashes() -> None:
    # Why the old syntax: the new one would read a stored "\b" in a path as a backspace.
    assert classad2.ExprTree(quote_string("a\\b")).eval() != "a\\b"
    assert old_parse(quote_string("a\\b")) == "a\\b"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("-1", -1), (" 42 ", 42), ("+7", 7), ("1.0", None), ("x", None), ("", None)],
)
def test_int_or_none(text: str, expected: int | None) -> None:
    assert int_or_none(text) == expected


def test_int_or_none_of_none() -> None:
    assert int_or_none(None) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        (" False ", False),
        ("1", True),
        ("0", False),
        ("undefined", None),
        ("x == 1", None),
        (None, None),
    ],
)
def test_literal_bool_and_is_true(text: str | None, expected: bool | None) -> None:
    assert literal_bool(text) == expected
    assert is_true(text) == (expected is True)


def test_is_undefined() -> None:
    assert is_undefined("undefined")
    assert is_undefined(" UNDEFINED ")
    assert not is_undefined('"undefined"')
    assert not is_undefined(None)


@pytest.mark.parametrize(
    ("said", "literal"),
    [
        ('ifThenElse(Owner == "alice", 1, 2)', '"ifThenElse(Owner == \\"alice\\", 1, 2)"'),
        ("a\nb\r\tc", '"a b  c"'),  # one blank for each: text that needs none is kept
        ("nul\x00 esc\x1b[2J bell\x07 rtl\u202e", '"nul? esc?[2J bell? rtl?"'),
        ("lone \udc80 surrogate", '"lone ? surrogate"'),  # no UTF-8 for it
        ("ends with \\", '"ends with \\"'),
        ("x" * 70, '"' + "x" * 64 + '"'),
    ],
)
def test_site_string_is_always_one_bounded_literal(said: str, literal: str) -> None:
    assert site_string(said, 64) == literal
    assert old_parse(literal) == site_text(said, 64)


@given(st.text(st.characters(blacklist_categories=())), st.integers(min_value=0, max_value=80))
@example('a\\") || true || ("', 80)
@example("\\", 1)
def test_site_string_is_read_back_as_its_bounded_text(said: str, most: int) -> None:
    text = site_text(said, most)
    assert len(text) <= most and text.isprintable() and "\n" not in text
    text.encode("utf-8")  # valid UTF-8: no lone surrogate left
    assert old_parse(site_string(said, most)) == text
    assert unquote_string(site_string(said, most)) == text
