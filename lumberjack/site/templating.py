"""The one template engine of the site side: the scripts and configs the agent writes are
template files (package data beside the modules that fill them), with `@{name}`
placeholders filled by `render`. A shell script or an HTCondor config is full of `$`
(`${VAR}`, `$ENV(X)`, `$(MACRO)`), and never holds `@{`, so nothing in them needs escaping;
every placeholder must be given a value and every value given must have a placeholder.

Stdlib only: templates are read with pkgutil, from a directory and from the agent's
zipapp alike.
"""

from __future__ import annotations

import pkgutil
import string
from functools import cache


class _Template(string.Template):
    """`@{name}` placeholders (lower case and "_"); any other `@` is text."""

    delimiter = "@"
    pattern = r"""@\{(?P<braced>[a-z_]+)\}(?P<named>(?!))?(?P<escaped>(?!))?(?P<invalid>(?!))?"""


@cache
def _load(package: str, name: str) -> tuple[_Template, frozenset[str]]:
    data = pkgutil.get_data(package, name)
    if data is None:  # pragma: no cover - only with an exotic loader
        raise FileNotFoundError(name)
    template = _Template(data.decode())
    names = {m.group("braced") for m in template.pattern.finditer(template.template)}
    return template, frozenset(names)


def render(package: str, path: str, /, **values: object) -> str:
    """The template file `path` of `package` (relative to the package's directory),
    every placeholder filled from `values`."""
    template, names = _load(package, path)
    unused = set(values) - names
    if unused:
        raise KeyError(f"{path} has no placeholder {', '.join(sorted(unused))}")
    return template.substitute(values)
