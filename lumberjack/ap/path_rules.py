"""The rewrite rule of each path attribute, and the jobs the path map refuses.

- Iwd -> the proc's Iwd at the site (remote_layout.proc_spool_dir). The original local Iwd
  comes from the ads, or from the caller's ``local_iwd`` when the native export has
  already rewritten the proc's Iwd.
- Inputs, each mirrored and shipped: Cmd (unless TransferExecutable is false: then left
  as it is, nothing shipped; it must exist at the site), TransferInput (comma-separated
  list; URL entries stay; a trailing ``/`` on a directory, "copy the contents", is kept;
  an entry naming an image shipped by content is dropped), In (stdin; /dev/null stays),
  x509userproxy. Container images: image_paths.py.
- Out -> ``_condor_stdout``, Err -> ``_condor_stderr`` (relative names, written in the
  remote Iwd); both ``_condor_stdout`` when Out and Err name the same file; /dev/null
  stays. TransferOutputRemaps -> ``undefined`` (remotely every output lands in the remote
  Iwd under its own name; placement applies the parsed remaps on import).
- UserLog -> ``{remote Iwd}/lumberjack-user.log`` for EVERY proc, even one without a log
  (import appends its events to the user's UserLog and DAGManNodesLog). DAGManNodesLog ->
  ``undefined``: the remote shadow must never write to a local path, and pointing it at
  the same per-proc log would record every event twice.
- ShouldTransferFiles: ``"IF_NEEDED"`` -> ``"YES"`` (the inputs live in the mirror, not in
  the remote Iwd, so the job needs file transfer even on a shared file system).
- Refused: OutputDestination (output to a URL), TransferPlugins (plugins at local paths),
  ShouldTransferFiles ``"NO"`` (the job reads the access point's file system directly),
  a remap to a URL, and a path attribute that is an expression rather than a string
  literal (``Iwd = strcat(...)``): lumberjack cannot know what it will evaluate to.
- Read, never changed: TransferExecutable, TransferContainer, PreserveRelativePaths,
  TransferOutput. ``SUBMIT_*`` attributes (SUBMIT_Iwd, SUBMIT_Cmd, ...) are never
  rewritten.

Relative paths resolve against the local Iwd, lexically (path_text.resolve).
"""

from __future__ import annotations

import posixpath
from typing import Optional

from lumberjack.ap.file_lists import parse_remaps, remap_name, split_file_list
from lumberjack.ap.job_attrs import (
    CMD,
    DAGMAN_NODES_LOG,
    DAGMAN_NODES_MASK,
    IWD,
    REFUSED_ATTRS,
    SHOULD_TRANSFER_FILES,
    STDERR,
    STDIN,
    STDOUT,
    TRANSFER_EXECUTABLE,
    TRANSFER_INPUT,
    TRANSFER_OUTPUT_REMAPS,
    USER_LOG,
    X509_PROXY,
)
from lumberjack.ap.path_text import norm_abs
from lumberjack.ap.proc_rewriter import ProcRewriter
from lumberjack.ap.remote_layout import (
    DEVNULL,
    REMOTE_STDERR,
    REMOTE_STDOUT,
    REMOTE_USERLOG_NAME,
    proc_spool_dir,
)
from lumberjack.core.message_text import shown
from lumberjack.errors import BadInput

_UNDEFINED = "undefined"


def refuse_unsupported(rw: ProcRewriter) -> None:
    """BadInput for a job whose files cannot be moved to a site at all."""
    for name in REFUSED_ATTRS:
        if rw.string(name):
            raise BadInput(f"{rw.ctx}: {name} is set; lumberjack does not support it")
    stf = rw.string(SHOULD_TRANSFER_FILES)
    if stf is not None and stf.upper() == "NO":
        raise BadInput(
            f"{rw.ctx}: should_transfer_files = NO needs the access point's file system; "
            "use YES or IF_NEEDED"
        )


def rewrite_iwd(
    rw: ProcRewriter, cluster: int, proc: int, local_iwd: Optional[str]
) -> tuple[str, str]:
    """(the job's local Iwd, its Iwd at the site); the proc ad gets the latter."""
    iwd_raw = local_iwd if local_iwd is not None else rw.string(IWD)
    if not iwd_raw:
        raise BadInput(f"{rw.ctx}: has no Iwd")
    if not iwd_raw.startswith("/"):
        raise BadInput(f"{rw.ctx}: Iwd {shown(iwd_raw)} is not an absolute path")
    iwd = norm_abs(iwd_raw, f"{rw.ctx} Iwd")
    remote_iwd = proc_spool_dir(rw.spool, cluster, proc)
    rw.overrides[rw.ads.override_key(IWD)] = rw.quote(IWD, remote_iwd)
    # Record the true local Iwd, not a spool path the native export may have written.
    rw.original[IWD] = rw.quote(IWD, iwd)
    return iwd, remote_iwd


def rewrite_cmd(rw: ProcRewriter, iwd: str) -> None:
    cmd = rw.string(CMD)
    if cmd and rw.flag(TRANSFER_EXECUTABLE, True) and "://" not in cmd:
        item = rw.add_input(rw.resolve(cmd, iwd))
        rw.set_string(CMD, item.remote_path)


def rewrite_transfer_input(
    rw: ProcRewriter, iwd: str, preserve: bool, images_by_content: set[str]
) -> None:
    tin = rw.string(TRANSFER_INPUT)
    if not tin:
        return
    new_entries: list[str] = []
    for entry in split_file_list(tin):
        if "://" in entry:
            new_entries.append(entry)
            rw.input_names.append(_url_basename(entry))
            continue
        copy_contents = entry.endswith("/")
        if not copy_contents and rw.resolve(entry, iwd) in images_by_content:
            continue  # the image: shipped by content, never copied per job
        if preserve and not entry.startswith("/") and "/" in entry.rstrip("/"):
            raise BadInput(
                f"{rw.ctx}: preserve_relative_paths with input {shown(entry)} is not supported"
            )
        item = rw.add_input(rw.resolve(entry, iwd), is_dir=copy_contents)
        remote = item.remote_path + ("/" if copy_contents else "")
        if "," in remote:
            raise BadInput(
                f"{rw.ctx}: input path {shown(remote)} contains a comma, "
                "which cannot appear in a TransferInput list"
            )
        new_entries.append(remote)
        if not copy_contents:
            rw.input_names.append(posixpath.basename(item.local_path))
    new_text = ",".join(new_entries)
    if new_text != tin:
        rw.set_string(TRANSFER_INPUT, new_text)


def rewrite_single_inputs(rw: ProcRewriter, iwd: str) -> None:
    """stdin and the proxy: single local files."""
    for name in (STDIN, X509_PROXY):
        value = rw.string(name)
        if not value or value == DEVNULL or "://" in value:
            continue
        item = rw.add_input(rw.resolve(value, iwd))
        rw.set_string(name, item.remote_path)
        if name == X509_PROXY:
            rw.input_names.append(posixpath.basename(item.local_path))


def rewrite_std_streams(rw: ProcRewriter, iwd: str) -> tuple[Optional[str], Optional[str]]:
    """(stdout, stderr) as local paths, None when unset; the site writes them in its Iwd."""
    out_local = _local_output(rw, rw.string(STDOUT), iwd)
    err_local = _local_output(rw, rw.string(STDERR), iwd)
    if out_local not in (None, DEVNULL):
        rw.set_string(STDOUT, REMOTE_STDOUT)
    if err_local not in (None, DEVNULL):
        rw.set_string(STDERR, REMOTE_STDOUT if err_local == out_local else REMOTE_STDERR)
    return out_local, err_local


def rewrite_logs(
    rw: ProcRewriter, iwd: str, remote_iwd: str
) -> tuple[Optional[str], Optional[str]]:
    """(UserLog, DAGManNodesLog) as local paths, None when unset."""
    user_log = rw.string(USER_LOG)
    user_log_local = rw.resolve(user_log, iwd) if user_log else None
    rw.set_string(USER_LOG, remote_iwd + "/" + REMOTE_USERLOG_NAME)
    dag_log = rw.string(DAGMAN_NODES_LOG)
    dag_log_local = rw.resolve(dag_log, iwd) if dag_log else None
    if dag_log is not None:
        rw.set(DAGMAN_NODES_LOG, _UNDEFINED)
    return user_log_local, dag_log_local


def nodes_mask(rw: ProcRewriter) -> Optional[list[int]]:
    """The event numbers DAGMan asked for in its nodes log (DAGManNodesMask, "0,1,2,..."),
    None when unset or not a list of numbers (then every event goes there, as before)."""
    text = rw.string(DAGMAN_NODES_MASK)
    if not text:
        return None
    numbers = [part.strip() for part in text.split(",")]
    if not all(n.isdigit() and len(n) <= 3 for n in numbers):
        return None
    return sorted({int(n) for n in numbers})


def rewrite_remaps(rw: ProcRewriter) -> list[tuple[str, str]]:
    """The parsed remaps, checked (no URL, no loop); the site gets none."""
    remaps_text = rw.string(TRANSFER_OUTPUT_REMAPS)
    remaps = parse_remaps(remaps_text) if remaps_text else []
    for _src, dst in remaps:
        if "://" in dst:
            raise BadInput(f"{rw.ctx}: output remap to URL {shown(dst)} is not supported")
    try:
        for src, _dst in remaps:
            remap_name(remaps, src)
    except BadInput as exc:
        raise BadInput(f"{rw.ctx}: {exc}") from None
    if remaps_text is not None:
        rw.set(TRANSFER_OUTPUT_REMAPS, _UNDEFINED)
    return remaps


def rewrite_should_transfer(rw: ProcRewriter) -> None:
    stf = rw.string(SHOULD_TRANSFER_FILES)
    if stf is not None and stf.upper() == "IF_NEEDED":
        rw.set_string(SHOULD_TRANSFER_FILES, "YES")


def _local_output(rw: ProcRewriter, value: Optional[str], iwd: str) -> Optional[str]:
    if not value:
        return None
    if value == DEVNULL:
        return DEVNULL
    return rw.resolve(value, iwd)


def _url_basename(url: str) -> str:
    path = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    return posixpath.basename(path.rstrip("/"))
