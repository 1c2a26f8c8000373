"""The working state of one proc's rewrite: its effective attributes, and every change.

A job is a cluster ad plus a proc ad, each ``{attribute name: ClassAd expression text}`` as
in job_queue.log. The proc's value wins over the cluster's, so every change is written as
an override in the PROC ad and the cluster ad is never touched: that is how procs of one
cluster get their own remote directories even though condor_submit puts Iwd, Cmd,
UserLog... in the cluster ad. An override keeps the proc ad's own spelling when it has one.
Every original text that was changed is kept (``original``; ``unset`` lists attributes
that had no value before) so the import side can put the job back as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from lumberjack.ap.job_paths import InputFile
from lumberjack.ap.path_text import resolve
from lumberjack.ap.remote_layout import bundle_path, mirror_path
from lumberjack.core.classad_text import is_undefined, literal_bool, quote_string, unquote_string
from lumberjack.core.images import image_path
from lumberjack.core.message_text import shown
from lumberjack.errors import BadInput


class ProcAds:
    """A proc's effective attributes: its own value if present, else the cluster's."""

    def __init__(self, cluster_ad: Mapping[str, str], proc_ad: Mapping[str, str]) -> None:
        self._cluster = _lowered(cluster_ad)
        self._proc_keys = {k.lower(): k for k in proc_ad}
        self._proc = proc_ad

    def text(self, name: str) -> Optional[str]:
        key = self._proc_keys.get(name.lower())
        if key is not None:
            return self._proc[key]
        return self._cluster.get(name.lower())

    def override_key(self, canonical: str) -> str:
        # Overwrite the proc ad's own spelling, so the ad never holds two spellings.
        return self._proc_keys.get(canonical.lower(), canonical)


# The last cluster ad seen, lower-cased: the procs of a cluster come one after another.
_last_cluster: list[tuple[Mapping[str, str], dict[str, str], dict[str, str]]] = []


def _lowered(ad: Mapping[str, str]) -> dict[str, str]:
    """``{name.lower(): value}``, reused while the same, unchanged, cluster ad comes back."""
    if _last_cluster:
        seen, copy, lowered = _last_cluster[0]
        if seen is ad and copy == ad:  # same object, same contents: the fold still holds
            return lowered
    lowered = {k.lower(): v for k, v in ad.items()}
    _last_cluster[:] = [(ad, dict(ad), lowered)]
    return lowered


class ProcRewriter:
    """Reads one proc's attributes as plain values and records each override with its
    original; collects the inputs to ship and the names they take in the sandbox."""

    def __init__(self, cluster: int, proc: int, ads: ProcAds, remote_spool: str) -> None:
        self.ctx = f"job {cluster}.{proc}"
        self.ads = ads
        self.spool = remote_spool
        self.overrides: dict[str, str] = {}
        self.original: dict[str, str] = {}
        self.unset: list[str] = []
        self.inputs: dict[str, InputFile] = {}
        self.input_names: list[str] = []

    def string(self, name: str) -> Optional[str]:
        """The attribute's string value; None when unset or undefined; BadInput otherwise."""
        text = self.ads.text(name)
        if text is None or is_undefined(text):
            return None
        value = unquote_string(text)
        if value is None:
            raise BadInput(
                f"{self.ctx}: {name} is not a plain string ({shown(text)}); "
                "lumberjack cannot rewrite an expression"
            )
        if "\x00" in value:
            raise BadInput(f"{self.ctx}: {name} contains a NUL character")
        return value

    def flag(self, name: str, default: bool) -> bool:
        text = self.ads.text(name)
        if text is None or is_undefined(text):
            return default
        value = literal_bool(text)
        if value is None:
            raise BadInput(f"{self.ctx}: {name} is not a literal true or false ({shown(text)})")
        return value

    def set(self, name: str, new_text: str) -> None:
        old = self.ads.text(name)
        if old is None:
            self.unset.append(name)
        else:
            self.original[name] = old
        self.overrides[self.ads.override_key(name)] = new_text

    def quote(self, name: str, value: str) -> str:
        try:
            return quote_string(value)
        except ValueError as exc:
            raise BadInput(f"{self.ctx}: {name}: {exc}") from None

    def set_string(self, name: str, value: str) -> None:
        self.set(name, self.quote(name, value))

    def resolve(self, path: str, iwd: str) -> str:
        return resolve(path, iwd, f"{self.ctx} path")

    def add_image(self, local: str, digest: str) -> InputFile:
        item = InputFile(local, image_path(self.spool, digest), bundle_path(local), sha256=digest)
        self.inputs[local] = item
        return item

    def add_input(self, local: str, is_dir: bool = False) -> InputFile:
        if local == "/":
            raise BadInput(f"{self.ctx}: refusing to ship the whole file system (/)")
        known = self.inputs.get(local)
        item = InputFile(
            local_path=local,
            remote_path=mirror_path(self.spool, local),
            bundle_path=bundle_path(local),
            is_dir=is_dir or (known.is_dir if known else False),
        )
        self.inputs[local] = item
        return item

    def sandbox_names(self) -> list[str]:
        """The names the inputs take in the sandbox, each once, in the order first seen."""
        return list(dict.fromkeys(name for name in self.input_names if name))
