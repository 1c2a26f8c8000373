"""A ClassAd's Requirements as clauses: parsed with HTCondor's own functions, split at
their top-level `&&`, each evaluated by HTCondor's matchmaking (classad2) against another
ad. Shared by the preflight (matchmaking.py) and its GPU judgement (gpu_match.py).
"""

from __future__ import annotations

from typing import Any


def parse_ad(text: str) -> Any:
    """A ClassAd from its text, with HTCondor's own functions (split(), stringListMember()
    ... which condor_submit's Requirements use): importing htcondor2 registers them, and
    an expression parsed before that calls an unknown function forever."""
    import classad2
    import htcondor2  # noqa: F401

    return classad2.ClassAd(text)


def evaluate(clause: Any, scope: Any, target: Any) -> bool | None:
    """A clause of `scope`'s Requirements, evaluated by matchmaking itself (as the
    Requirements of `scope` against `target`): True, False, or None (undefined or an
    error)."""
    import classad2

    # Put back as text: the ExprTree lookup() gave does not outlive its replacement.
    saved = str(scope.lookup("Requirements"))
    try:
        for outcome in (True, False):
            scope["Requirements"] = classad2.ExprTree(f"({clause}) =?= {str(outcome).lower()}")
            if target.matches(scope):  # evaluates scope's Requirements
                return outcome
        return None
    finally:
        scope["Requirements"] = classad2.ExprTree(saved)


def split_and(text: str) -> list[str]:
    """The top-level `&&` clauses of an expression, each with its outer parentheses
    removed (and split again when they held a conjunction)."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith("&&", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:])
    out = []
    for part in (p.strip() for p in parts):
        inner = unwrap(part)
        if inner != part and len(split_and(inner)) > 1:
            out += split_and(inner)
        elif part:
            out.append(part)
    return out


def unwrap(text: str) -> str:
    """`((x))` -> `x` while the parentheses enclose the whole text."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, char in enumerate(text):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text
