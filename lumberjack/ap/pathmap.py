"""The export-side path rewrite: a reversible map from the access point's paths to the site's.

A job is a cluster ad plus a proc ad, each ``{attribute name: ClassAd expression text}`` as
in job_queue.log. The proc's value wins over the cluster's, so every change is written as
an override in the PROC ad (``JobRewrite.proc_overrides``) and the cluster ad is never
touched: that is how procs of one cluster get their own remote directories even though
condor_submit puts Iwd, Cmd, UserLog... in the cluster ad. Attribute names are matched
case-insensitively; an override keeps the proc ad's own spelling when it has one.

Remote layout, all under the site's SPOOL directory ``remote_spool``:

- ``{remote_spool}/{C}/{P}/clusterC.procP.subproc0``: the proc's Iwd (``proc_spool_dir``),
  where the remote schedd's shadow puts stdout, stderr, the output files and the user log.
- ``{remote_spool}/lumberjack-inputs/<absolute local path>``: every input file or directory,
  mirrored by its absolute local path. Basenames stay what they were (HTCondor puts a
  TransferInput entry into the sandbox under its basename; a directory keeps its name), and
  an executable shared by 10,000 procs is shipped once. In the bundle the same file lives at
  ``inputs/<absolute local path without the leading slash>``.

Attributes (canonical spelling) and what happens to them:

- Iwd -> ``proc_spool_dir``. The original local Iwd comes from the ads, or from the
  caller's ``local_iwd`` when the native export has already rewritten the proc's Iwd.
- Inputs (``INPUT_ATTRS``), each mirrored and shipped:
  Cmd (unless TransferExecutable is false: then left as it is, nothing shipped; it must
  exist at the site), TransferInput (comma-separated list; URL entries stay; a trailing
  ``/`` on a directory, "copy the contents", is kept), In (stdin; /dev/null stays),
  x509userproxy, ContainerImage and SingularityImage when they are local paths (not URLs,
  not ``docker:``; not under ``/cvmfs/``, which the site provides; ContainerImage also
  not when TransferContainer is false). Given ``image_digest`` (export, reading as the
  owner), an image goes to ``{remote_spool}/lumberjack-images/<sha256>.sif`` instead,
  once per content however many jobs or paths name it (lumberjack/core/images.py), and
  a TransferInput entry naming it (condor_submit adds one for container_image) is
  dropped: the startd runs the job in the shipped copy, nothing is copied per job.
- Outputs (``OUTPUT_ATTRS``): Out -> ``_condor_stdout``, Err -> ``_condor_stderr`` (relative
  names, written in the remote Iwd); both ``_condor_stdout`` when Out and Err name the same
  file; /dev/null stays. TransferOutputRemaps -> ``undefined`` (remotely every output
  lands in the remote Iwd under its own name; placement applies the parsed remaps on
  import).
- Logs (``LOG_ATTRS``): UserLog -> ``{remote Iwd}/lumberjack-user.log`` for EVERY proc,
  even one without a log (import appends its events to the user's UserLog and
  DAGManNodesLog). DAGManNodesLog -> ``undefined``: the remote shadow must never write to a
  local path, and pointing it at the same per-proc log would record every event twice.
- ShouldTransferFiles: ``"IF_NEEDED"`` -> ``"YES"`` (the inputs live in the mirror, not in
  the remote Iwd, so the job needs file transfer even on a shared file system);
  ``"NO"`` is refused: such a job reads the access point's file system directly.
- Refused (``REFUSED_ATTRS``): OutputDestination (output to a URL) and TransferPlugins
  (plugins at local paths). A TransferOutputRemaps destination that is a URL is refused.
- Read, never changed: TransferExecutable, TransferContainer, PreserveRelativePaths,
  TransferOutput. ``SUBMIT_*`` attributes (SUBMIT_Iwd, SUBMIT_Cmd, ...) are never
  rewritten.

Every original text that was changed is kept (``original``; ``unset`` lists attributes that
had no value before) so the import side can put the job back as it was.

A path attribute whose value is an expression rather than a string literal (``Iwd =
strcat(...)``) is refused: lumberjack cannot know what it will evaluate to. Relative paths
resolve against the local Iwd. ``..`` is allowed (``../data/x`` is common) and resolved
lexically (``posixpath.normpath`` of the join, no symlinks followed); the resolved absolute
path is what gets mirrored.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from lumberjack.core.classad_text import is_undefined, literal_bool, quote_string, unquote_string
from lumberjack.core.images import image_path, is_digest
from lumberjack.core.records import JsonRecord, RecordError, from_json, to_json
from lumberjack.errors import BadInput

DEVNULL = "/dev/null"
INPUTS_DIRNAME = "lumberjack-inputs"
BUNDLE_INPUTS_DIR = "inputs"
REMOTE_STDOUT = "_condor_stdout"
REMOTE_STDERR = "_condor_stderr"
REMOTE_USERLOG_NAME = "lumberjack-user.log"
# Names lumberjack itself creates in a remote Iwd start with this; never outputs.
RESERVED_PREFIX = "lumberjack-"
# Paths the site provides itself; an image there is used in place, never shipped.
SITE_PROVIDED_PREFIXES = ("/cvmfs/",)
# HTCondor aborts a remap chain after this many steps (MAX_REMAP_RECURSIONS).
MAX_REMAP_DEPTH = 128

IWD = "Iwd"
CMD = "Cmd"
TRANSFER_INPUT = "TransferInput"
STDIN = "In"
X509_PROXY = "x509userproxy"
CONTAINER_IMAGE = "ContainerImage"
SINGULARITY_IMAGE = "SingularityImage"
CONTAINER_IMAGE_FULL_PATH = "ContainerImageFullPath"
STDOUT = "Out"
STDERR = "Err"
TRANSFER_OUTPUT = "TransferOutput"
TRANSFER_OUTPUT_REMAPS = "TransferOutputRemaps"
USER_LOG = "UserLog"
DAGMAN_NODES_LOG = "DAGManNodesLog"
OUTPUT_DESTINATION = "OutputDestination"
TRANSFER_PLUGINS = "TransferPlugins"
TRANSFER_EXECUTABLE = "TransferExecutable"
TRANSFER_CONTAINER = "TransferContainer"
PRESERVE_RELATIVE_PATHS = "PreserveRelativePaths"
SHOULD_TRANSFER_FILES = "ShouldTransferFiles"

INPUT_ATTRS = (CMD, TRANSFER_INPUT, STDIN, X509_PROXY, CONTAINER_IMAGE, SINGULARITY_IMAGE)
OUTPUT_ATTRS = (STDOUT, STDERR, TRANSFER_OUTPUT_REMAPS)
LOG_ATTRS = (USER_LOG, DAGMAN_NODES_LOG)
REFUSED_ATTRS = (OUTPUT_DESTINATION, TRANSFER_PLUGINS)
# Attributes rewrite_job may set in a proc ad.
REWRITTEN_ATTRS = (IWD,) + INPUT_ATTRS + OUTPUT_ATTRS + LOG_ATTRS + (SHOULD_TRANSFER_FILES,)
# Attributes only read, to decide what to do.
CONTROL_ATTRS = (
    TRANSFER_EXECUTABLE,
    TRANSFER_CONTAINER,
    PRESERVE_RELATIVE_PATHS,
    TRANSFER_OUTPUT,
)

_UNDEFINED = "undefined"
_ASCII_SPACE = " \t\n\r\f\v"  # what HTCondor (C isspace) trims around list entries
_MAX_SHOWN = 80  # characters of a bad value quoted in an error message
# The procs of a cluster name the same few paths over and over (Cmd, inputs, logs):
# remembering the last few thousand answers saves most of the work at 100,000 jobs.
_CACHE = 4096


def proc_spool_dir(remote_spool: str, cluster: int, proc: int) -> str:
    """The proc's working directory at the site (the native export's Iwd layout)."""
    spool = _norm_spool(remote_spool)
    return f"{spool}/{cluster}/{proc}/cluster{cluster}.proc{proc}.subproc0"


def inputs_root(remote_spool: str) -> str:
    """The directory under which inputs are mirrored by their absolute local path."""
    return _norm_spool(remote_spool) + "/" + INPUTS_DIRNAME


@functools.lru_cache(maxsize=_CACHE)
def mirror_path(remote_spool: str, local_path: str) -> str:
    """Where the absolute local path ``local_path`` lives at the site."""
    local = _norm_abs(local_path, "local path")
    root = inputs_root(remote_spool)
    return root if local == "/" else root + local


@functools.lru_cache(maxsize=_CACHE)
def bundle_path(local_path: str) -> str:
    """Where the absolute local path ``local_path`` lives inside the bundle."""
    local = _norm_abs(local_path, "local path")
    return BUNDLE_INPUTS_DIR if local == "/" else BUNDLE_INPUTS_DIR + local


def split_file_list(text: str) -> list[str]:
    """Entries of an HTCondor file list (TransferInput, TransferOutput).

    Comma separated, no quoting; ASCII whitespace around an entry is dropped, spaces
    inside are kept.
    """
    entries = (e.strip(_ASCII_SPACE) for e in text.split(","))
    return [e for e in entries if e]


def parse_remaps(text: str) -> list[tuple[str, str]]:
    """Parse TransferOutputRemaps ``"src1 = dst1; src2=dst2"`` into (src, dst) pairs.

    As HTCondor does: tabs and newlines are dropped, spaces around names trimmed, a
    backslash makes a following ``;`` or ``=`` part of the name (the manual's escapes);
    any other backslash is an ordinary character. A field without ``=`` is skipped.
    """
    text = text.replace("\t", "").replace("\n", "")
    pairs: list[tuple[str, str]] = []
    for field_text in _split_escaped(text, ";"):
        parts = _split_escaped(field_text, "=", maxsplit=1)
        if len(parts) != 2:
            continue
        src, dst = (_unescape_remap(p).strip(_ASCII_SPACE) for p in parts)
        if src:
            pairs.append((src, dst))
    return pairs


def remap_name(remaps: list[tuple[str, str]], name: str, _depth: int = 0) -> Optional[str]:
    """Apply remaps to an output name as HTCondor's ``filename_remap_find`` does.

    The first rule whose source equals ``name`` wins and its destination is remapped again
    (chains); without an exact rule the parent directory is remapped and the last component
    appended (``results = /data/r`` sends ``results/a.txt`` to ``/data/r/a.txt``). None when
    no rule applies. A loop raises BadInput.
    """
    if _depth > MAX_REMAP_DEPTH:
        raise BadInput(f"output remaps loop on {_shown(name)}")
    for src, dst in remaps:
        if src == name:
            further = remap_name(remaps, dst, _depth + 1)
            return dst if further is None else further
    parent, _, entry = name.rpartition("/")
    if parent:
        new_parent = remap_name(remaps, parent, _depth + 1)
        if new_parent is not None:
            return new_parent.rstrip("/") + "/" + entry
    return None


@dataclass(frozen=True)
class InputFile(JsonRecord):
    """One input to ship: the local file or directory, its place at the site and in the bundle.

    ``is_dir`` is True when some job named it with a trailing ``/``; False does not prove
    it is a file (this module never looks at the disk).
    """

    local_path: str
    remote_path: str
    bundle_path: str
    is_dir: bool = False
    sha256: str = ""  # a container image shipped by content (remote_path: its image_path)


@dataclass
class JobPaths(JsonRecord):
    """What the import side needs to know about one job's paths (stored in the manifest).

    Paths are absolute local paths, lexically normalised, or ``/dev/null``; None when the
    job did not set the attribute.
    """

    cluster: int
    proc: int
    local_iwd: str
    remote_iwd: str
    # canonical attribute name -> original effective expression text, for every change
    original: dict[str, str] = field(default_factory=dict)
    # attributes set at the site that had no value locally (delete them to reverse)
    unset: list[str] = field(default_factory=list)
    out: Optional[str] = None
    err: Optional[str] = None
    user_log: Optional[str] = None
    dagman_nodes_log: Optional[str] = None
    remaps: list[tuple[str, str]] = field(default_factory=list)
    # original TransferOutput expression text (not rewritten; the site's copy is not trusted)
    transfer_output: Optional[str] = None
    preserve_relative_paths: bool = False
    # names the job's inputs take in the sandbox (never mistaken for outputs)
    input_names: list[str] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return f"{self.cluster}.{self.proc}"

    def reverse_overrides(self) -> tuple[dict[str, str], list[str]]:
        """(attributes to set back in the proc ad, attributes to delete from it)."""
        return dict(self.original), list(self.unset)

    @classmethod
    def from_json(cls, data: Any, where: str = "job") -> JobPaths:
        try:
            job = from_json(cls, data, where)
        except RecordError as exc:
            raise _malformed(str(exc)) from None
        if job.cluster < 0 or job.proc < 0:
            raise _malformed(f"job {job.job_id}: cluster and proc must not be negative")
        for what, path in (
            ("local_iwd", job.local_iwd),
            ("out", job.out),
            ("err", job.err),
            ("user_log", job.user_log),
            ("dagman_nodes_log", job.dagman_nodes_log),
        ):
            if path is not None and (not path.startswith("/") or _norm_abs(path, what) != path):
                raise _malformed(f"job {job.job_id}: {what} {_shown(path)} is not normalised")
        return job


@dataclass
class JobRewrite:
    """The result of ``rewrite_job`` for one proc."""

    cluster: int
    proc: int
    proc_overrides: dict[str, str]
    inputs: list[InputFile]
    original: dict[str, str]
    unset: list[str]
    local_iwd: str
    remote_iwd: str
    paths: JobPaths


class _Ads:
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


class _Rewriter:
    def __init__(
        self,
        cluster: int,
        proc: int,
        ads: _Ads,
        remote_spool: str,
    ) -> None:
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
                f"{self.ctx}: {name} is not a plain string ({_shown(text)}); "
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
            raise BadInput(f"{self.ctx}: {name} is not a literal true or false ({_shown(text)})")
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
        joined = path if path.startswith("/") else iwd + "/" + path
        return _norm_abs(joined, f"{self.ctx} path")

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


def rewrite_job(
    cluster: int,
    proc: int,
    cluster_ad: Mapping[str, str],
    proc_ad: Mapping[str, str],
    remote_spool: str,
    local_iwd: Optional[str] = None,
    image_digest: Optional[Callable[[str], str]] = None,
) -> JobRewrite:
    """Compute the proc-ad overrides that make one job runnable from the site's spool.

    ``local_iwd`` overrides what the ads say about the job's original Iwd (needed when the
    native export has already rewritten the proc ad's Iwd to a spool path); ``image_digest``
    gives an image's sha256. Raises BadInput for jobs lumberjack cannot move; changes nothing.
    """
    spool = _norm_spool(remote_spool)
    ads = _Ads(cluster_ad, proc_ad)
    rw = _Rewriter(cluster, proc, ads, spool)
    ctx = rw.ctx

    for name in REFUSED_ATTRS:
        if rw.string(name):
            raise BadInput(f"{ctx}: {name} is set; lumberjack does not support it")

    stf = rw.string(SHOULD_TRANSFER_FILES)
    if stf is not None and stf.upper() == "NO":
        raise BadInput(
            f"{ctx}: should_transfer_files = NO needs the access point's file system; "
            "use YES or IF_NEEDED"
        )

    # --- Iwd
    iwd_raw = local_iwd if local_iwd is not None else rw.string(IWD)
    if not iwd_raw:
        raise BadInput(f"{ctx}: has no Iwd")
    if not iwd_raw.startswith("/"):
        raise BadInput(f"{ctx}: Iwd {_shown(iwd_raw)} is not an absolute path")
    iwd = _norm_abs(iwd_raw, f"{ctx} Iwd")
    remote_iwd = proc_spool_dir(spool, cluster, proc)
    rw.overrides[ads.override_key(IWD)] = rw.quote(IWD, remote_iwd)
    # Record the true local Iwd, not a spool path the native export may have written.
    rw.original[IWD] = rw.quote(IWD, iwd)

    preserve = rw.flag(PRESERVE_RELATIVE_PATHS, False)
    images = _local_images(rw, iwd)
    shipped_images = _image_files(rw, images) if image_digest else set()

    # --- Cmd
    cmd = rw.string(CMD)
    if cmd and rw.flag(TRANSFER_EXECUTABLE, True) and "://" not in cmd:
        item = rw.add_input(rw.resolve(cmd, iwd))
        rw.set_string(CMD, item.remote_path)

    # --- TransferInput
    tin = rw.string(TRANSFER_INPUT)
    if tin:
        new_entries: list[str] = []
        for entry in split_file_list(tin):
            if "://" in entry:
                new_entries.append(entry)
                rw.input_names.append(_url_basename(entry))
                continue
            copy_contents = entry.endswith("/")
            if not copy_contents and rw.resolve(entry, iwd) in shipped_images:
                continue  # the image: shipped by content, never copied per job
            if preserve and not entry.startswith("/") and "/" in entry.rstrip("/"):
                raise BadInput(
                    f"{ctx}: preserve_relative_paths with input {_shown(entry)} is not supported"
                )
            item = rw.add_input(rw.resolve(entry, iwd), is_dir=copy_contents)
            remote = item.remote_path + ("/" if copy_contents else "")
            if "," in remote:
                raise BadInput(
                    f"{ctx}: input path {_shown(remote)} contains a comma, "
                    "which cannot appear in a TransferInput list"
                )
            new_entries.append(remote)
            if not copy_contents:
                rw.input_names.append(posixpath.basename(item.local_path))
        new_text = ",".join(new_entries)
        if new_text != tin:
            rw.set_string(TRANSFER_INPUT, new_text)

    # --- stdin and the proxy: single local files
    for name in (STDIN, X509_PROXY):
        value = rw.string(name)
        if not value or value == DEVNULL or "://" in value:
            continue
        item = rw.add_input(rw.resolve(value, iwd))
        rw.set_string(name, item.remote_path)
        if name == X509_PROXY:
            rw.input_names.append(posixpath.basename(item.local_path))

    # --- container images given as local paths
    for name, local in images.items():
        if image_digest is not None and local in shipped_images:
            item = rw.add_image(local, image_digest(local))
        else:
            item = rw.add_input(local, is_dir=rw.string(name).endswith("/"))
            rw.input_names.append(posixpath.basename(item.local_path))
        _set_image(rw, name, item.remote_path)

    # --- stdout / stderr
    out = rw.string(STDOUT)
    err = rw.string(STDERR)
    out_local = _local_output(rw, out, iwd)
    err_local = _local_output(rw, err, iwd)
    if out_local not in (None, DEVNULL):
        rw.set_string(STDOUT, REMOTE_STDOUT)
    if err_local not in (None, DEVNULL):
        rw.set_string(STDERR, REMOTE_STDOUT if err_local == out_local else REMOTE_STDERR)

    # --- logs
    user_log = rw.string(USER_LOG)
    user_log_local = rw.resolve(user_log, iwd) if user_log else None
    rw.set_string(USER_LOG, remote_iwd + "/" + REMOTE_USERLOG_NAME)
    dag_log = rw.string(DAGMAN_NODES_LOG)
    dag_log_local = rw.resolve(dag_log, iwd) if dag_log else None
    if dag_log is not None:
        rw.set(DAGMAN_NODES_LOG, _UNDEFINED)

    # --- remaps
    remaps_text = rw.string(TRANSFER_OUTPUT_REMAPS)
    remaps = parse_remaps(remaps_text) if remaps_text else []
    for _src, dst in remaps:
        if "://" in dst:
            raise BadInput(f"{ctx}: output remap to URL {_shown(dst)} is not supported")
    try:
        for src, _dst in remaps:
            remap_name(remaps, src)
    except BadInput as exc:
        raise BadInput(f"{ctx}: {exc}") from None
    if remaps_text is not None:
        rw.set(TRANSFER_OUTPUT_REMAPS, _UNDEFINED)

    if stf is not None and stf.upper() == "IF_NEEDED":
        rw.set_string(SHOULD_TRANSFER_FILES, "YES")

    transfer_output = ads.text(TRANSFER_OUTPUT)
    paths = JobPaths(
        cluster=cluster,
        proc=proc,
        local_iwd=iwd,
        remote_iwd=remote_iwd,
        original=dict(rw.original),
        unset=list(rw.unset),
        out=out_local,
        err=err_local,
        user_log=user_log_local,
        dagman_nodes_log=dag_log_local,
        remaps=remaps,
        transfer_output=transfer_output,
        preserve_relative_paths=preserve,
        input_names=_dedup(rw.input_names),
    )
    return JobRewrite(
        cluster=cluster,
        proc=proc,
        proc_overrides=rw.overrides,
        inputs=list(rw.inputs.values()),
        original=dict(rw.original),
        unset=list(rw.unset),
        local_iwd=iwd,
        remote_iwd=remote_iwd,
        paths=paths,
    )


@dataclass
class PathMap:
    """All jobs' rewrites of one export; stored in the bundle's manifest.json."""

    remote_spool: str
    jobs: dict[str, JobPaths] = field(default_factory=dict)
    # every input to ship, once, by local path
    inputs: dict[str, InputFile] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.remote_spool = _norm_spool(self.remote_spool)

    @property
    def inputs_root(self) -> str:
        return inputs_root(self.remote_spool)

    def add(self, rewrite: JobRewrite) -> None:
        """Record one job's rewrite (again: replaces the earlier record)."""
        expected = proc_spool_dir(self.remote_spool, rewrite.cluster, rewrite.proc)
        if rewrite.remote_iwd != expected:
            raise BadInput(
                f"job {rewrite.cluster}.{rewrite.proc} was rewritten for another remote spool"
            )
        self.jobs[rewrite.paths.job_id] = rewrite.paths
        for item in rewrite.inputs:
            known = self.inputs.get(item.local_path)
            if known is not None and known.is_dir and not item.is_dir:
                item = known
            self.inputs[item.local_path] = item

    def job(self, cluster: int, proc: int) -> JobPaths:
        try:
            return self.jobs[f"{cluster}.{proc}"]
        except KeyError:
            raise BadInput(f"job {cluster}.{proc} is not in this export's path map") from None

    def local_to_remote(self, path: str, job: Optional[tuple[int, int]] = None) -> str:
        """The site's path for an absolute local path.

        Without ``job``: its place in the inputs mirror. With ``job=(cluster, proc)``: a path
        inside that job's local Iwd maps into its remote Iwd.
        """
        local = _norm_abs(path, "local path")
        if job is not None:
            paths = self.job(*job)
            rel = _relative_to(local, paths.local_iwd)
            if rel is None:
                raise BadInput(f"{_shown(local)} is not inside job {paths.job_id}'s Iwd")
            return _join(paths.remote_iwd, rel)
        return mirror_path(self.remote_spool, local)

    def remote_to_local(self, path: str) -> str:
        """The local path for a path in the inputs mirror or in a job's remote Iwd."""
        remote = _norm_abs(path, "remote path")
        rel = _relative_to(remote, self.inputs_root)
        if rel is not None:
            return "/" + rel
        rel = _relative_to(remote, self.remote_spool)
        if rel:
            parts = rel.split("/", 3)
            if len(parts) >= 3:
                c, p, leaf = parts[0], parts[1], parts[2]
                if leaf == f"cluster{c}.proc{p}.subproc0" and f"{c}.{p}" in self.jobs:
                    paths = self.jobs[f"{c}.{p}"]
                    rest = parts[3] if len(parts) == 4 else ""
                    return _join(paths.local_iwd, rest)
        raise BadInput(f"{_shown(remote)} is not a path this export maps")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": 1,
            "remote_spool": self.remote_spool,
            "inputs": [to_json(self.inputs[k]) for k in sorted(self.inputs)],
            "jobs": {k: to_json(self.jobs[k]) for k in sorted(self.jobs, key=_job_sort_key)},
        }

    @classmethod
    def from_json(cls, data: Any) -> PathMap:
        d = _as_dict(data, "path map")
        if d.get("format") != 1:
            raise _malformed(f"unknown format {d.get('format')!r}")
        pm = cls(remote_spool=_get_str(d, "remote_spool"))
        inputs_raw = d.get("inputs", [])
        if not isinstance(inputs_raw, list):
            raise _malformed("inputs is not a list")
        for raw in inputs_raw:
            try:
                item = from_json(InputFile, raw, "input")
            except RecordError as exc:
                raise _malformed(str(exc)) from None
            if item.sha256 and not is_digest(item.sha256):
                raise _malformed(f"input {_shown(item.local_path)} has a malformed sha256")
            expected = (
                image_path(pm.remote_spool, item.sha256)
                if item.sha256
                else mirror_path(pm.remote_spool, item.local_path)
            )
            if item.remote_path != expected:
                raise _malformed(f"input {_shown(item.local_path)} is not mirrored as expected")
            if item.bundle_path != bundle_path(item.local_path):
                raise _malformed(f"input {_shown(item.local_path)} has a wrong bundle path")
            pm.inputs[item.local_path] = item
        jobs_raw = _as_dict(d.get("jobs", {}), "jobs")
        for key, raw in jobs_raw.items():
            job = JobPaths.from_json(raw)
            if key != job.job_id:
                raise _malformed(f"job key {key!r} does not match {job.job_id}")
            if job.remote_iwd != proc_spool_dir(pm.remote_spool, job.cluster, job.proc):
                raise _malformed(f"job {job.job_id} has an unexpected remote Iwd")
            pm.jobs[key] = job
        return pm


# --- helpers -------------------------------------------------------------------------


def _norm_abs(path: str, what: str) -> str:
    """Lexically normalised absolute POSIX path; BadInput when not absolute."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise BadInput(f"{what} {_shown(str(path))} is not an absolute path")
    if "\x00" in path:
        raise BadInput(f"{what} contains a NUL character")
    return _normpath(path)


@functools.lru_cache(maxsize=_CACHE)
def _normpath(path: str) -> str:
    norm = posixpath.normpath(path)
    # normpath keeps a leading "//" (POSIX leaves it implementation-defined); Linux does not.
    return "/" + norm.lstrip("/")


def _norm_spool(remote_spool: str) -> str:
    spool = _norm_abs(remote_spool, "remote spool")
    if spool == "/":
        raise BadInput("the remote spool cannot be / itself")
    return spool


def _relative_to(path: str, root: str) -> Optional[str]:
    """``path`` relative to ``root`` ('' when equal), or None when outside it."""
    if path == root:
        return ""
    prefix = root if root.endswith("/") else root + "/"
    if path.startswith(prefix):
        return path[len(prefix) :]
    return None


def _join(base: str, rel: str) -> str:
    """``base`` + ``/rel``; ``base`` alone when ``rel`` is empty; no "//" after a root "/"."""
    return base.rstrip("/") + "/" + rel if rel else base


def _local_images(rw: _Rewriter, iwd: str) -> dict[str, str]:
    """{attribute: local path} of the container images to ship: local paths only (not
    URLs, ``docker:``, what the site provides, or ContainerImage with TransferContainer
    false)."""
    found = {}
    for name in (CONTAINER_IMAGE, SINGULARITY_IMAGE):
        value = rw.string(name)
        if not value or "://" in value or value.startswith("docker:"):
            continue
        if name == CONTAINER_IMAGE and not rw.flag(TRANSFER_CONTAINER, True):
            continue
        local = rw.resolve(value, iwd)
        if not any(local.startswith(p) for p in SITE_PROVIDED_PREFIXES):
            found[name] = local
    return found


def _set_image(rw: _Rewriter, name: str, remote: str) -> None:
    rw.set_string(name, remote)
    # condor_submit also records the image's full local path; the site gets its own.
    if name == CONTAINER_IMAGE and rw.string(CONTAINER_IMAGE_FULL_PATH) is not None:
        rw.set_string(CONTAINER_IMAGE_FULL_PATH, remote)


def _image_files(rw: _Rewriter, images: dict[str, str]) -> set[str]:
    """The images shipped by content: all but sandbox directories ("dir/"), which are
    mirrored like any input."""
    return {local for name, local in images.items() if not (rw.string(name) or "").endswith("/")}


def _local_output(rw: _Rewriter, value: Optional[str], iwd: str) -> Optional[str]:
    if not value:
        return None
    if value == DEVNULL:
        return DEVNULL
    return rw.resolve(value, iwd)


def _split_escaped(text: str, delim: str, maxsplit: int = -1) -> list[str]:
    """Split on ``delim`` not preceded by a backslash; escapes are left in place."""
    if "\\" not in text:  # no escapes: the plain split says the same
        return text.split(delim, maxsplit)
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in ";=":
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == delim and (maxsplit < 0 or len(parts) < maxsplit):
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape_remap(text: str) -> str:
    return text.replace("\\;", ";").replace("\\=", "=")


def _url_basename(url: str) -> str:
    path = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    return posixpath.basename(path.rstrip("/"))


def _dedup(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x and x not in seen:
            seen.add(x)
            out.append(x)
    return out


def _job_sort_key(key: str) -> tuple[int, int]:
    c, _, p = key.partition(".")
    try:
        return int(c), int(p)
    except ValueError:
        return (0, 0)


def _shown(text: str) -> str:
    """A value for a one-line message: repr-quoted (no raw newlines), shortened."""
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return repr(text)


def _malformed(why: str) -> BadInput:
    return BadInput(f"path map is malformed: {why}")


def _as_dict(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _malformed(f"{what} is not an object")
    return data


def _get_str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise _malformed(f"{key} is missing or not a string")
    return v
