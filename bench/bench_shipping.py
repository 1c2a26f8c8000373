"""Shipping a bundle to the site: lumberjack's transport vs `tar -c | ssh site tar -x`.

On the testbed's emulated site, over the same link, with the same key and pinned
known_hosts (the baseline uses the OpenSSH client), lumberjack over both its carriers:
paramiko (`FabricCarrier`, a site that takes a key) and the OpenSSH client riding a
login's master (`OpenSshCarrier`, what an MFA or `connection_sharing` site uses):

  (a) a few large files (5 x 40 MiB: a 50% cut lands inside a file);
  (b) 10,000 small files (1 KiB each, in 100 directories);
  (c) resume: an upload cut at about 50% (the connection closed under it), then rerun:
      bytes sent again on resume vs the total.

Lumberjack's time includes what tar | ssh does not do: the listing before (sizes and
sha256 at the site) and the sha256 check of every file after. One more OpenSSH upload
of each case runs under cProfile; its top lines go into the report. Run alone with
`python bench/bench_shipping.py` (testbed up), or by `make bench`.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "containers" / "testbed"))

import testbed  # noqa: E402

from lumberjack.ap.bundle import FileEntry, entry_for  # noqa: E402
from lumberjack.errors import RemoteError  # noqa: E402
from lumberjack.profiles.sites import SiteProfile, find_profile  # noqa: E402
from lumberjack.transport import Progress, SiteConnection, login  # noqa: E402
from lumberjack.transport.fabric_carrier import FabricCarrier  # noqa: E402
from lumberjack.transport.openssh_carrier import OpenSshCarrier  # noqa: E402

MIB = 1 << 20
REPEATS = 2
CARRIERS = ("paramiko", "openssh")
PROFILE_LINES = 12


def make_large(root: Path, count: int = 5, size: int = 40 * MIB) -> list[FileEntry]:
    root.mkdir(parents=True)
    for n in range(count):
        (root / f"input-{n}.dat").write_bytes(os.urandom(size))
    return [entry_for(root, f"input-{n}.dat") for n in range(count)]


def make_small(root: Path, count: int = 10_000, size: int = 1024) -> list[FileEntry]:
    files = []
    for n in range(count):
        rel = f"d{n % 100:02d}/job-{n:05d}.in"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        path.write_bytes(data)
        files.append(entry_for(root, rel))
    return files


def ssh_command(profile: SiteProfile) -> list[str]:
    return [
        "ssh", "-i", str(profile.identity_file_path()),
        "-o", f"UserKnownHostsFile={profile.known_hosts_path()}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-p", str(profile.port), f"{profile.user}@{profile.login_host}",
    ]  # fmt: skip


def tar_ssh(profile: SiteProfile, local: Path, remote: str) -> float:
    """The baseline: one tar stream through the OpenSSH client into tar -x at the site."""
    quoted = shlex.quote(remote)
    remote_cmd = f"mkdir -p {quoted} && tar -C {quoted} -xf -"
    started = time.perf_counter()
    tar = subprocess.Popen(["tar", "-C", str(local), "-cf", "-", "."], stdout=subprocess.PIPE)
    subprocess.run([*ssh_command(profile), remote_cmd], stdin=tar.stdout, check=True)
    assert tar.stdout is not None
    tar.stdout.close()
    if tar.wait() != 0:
        raise RuntimeError("tar -c failed")
    return time.perf_counter() - started


def carrier(profile: SiteProfile, kind: str):
    if kind == "openssh":
        return OpenSshCarrier(profile)  # rides the login `openssh_login` opened
    return FabricCarrier(profile)


def lumberjack_upload(profile: SiteProfile, local: Path, remote: str, files, kind: str) -> float:
    started = time.perf_counter()
    # connecting is part of the cost, as for ssh (for OpenSSH: checking the master)
    with SiteConnection(profile, carrier=carrier(profile, kind)) as conn:
        report = conn.upload(local, remote, files)
    assert report.sent_files == len(files), report
    return time.perf_counter() - started


@contextlib.contextmanager
def openssh_login(profile: SiteProfile, state: Path):
    """A login to the site as `condor_lumberjack login` opens one (an OpenSSH master),
    in a state directory of its own; the key answers, so ssh never runs the askpass
    program that stands in for a terminal here. Yields the seconds the login took."""
    keys = ("LUMBERJACK_STATE_DIR", "SSH_ASKPASS", "SSH_ASKPASS_REQUIRE")
    saved = {key: os.environ.get(key) for key in keys}
    state.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        LUMBERJACK_STATE_DIR=str(state), SSH_ASKPASS="/bin/false", SSH_ASKPASS_REQUIRE="force"
    )
    try:
        started = time.perf_counter()
        login.open_login(profile, persist_s=3600)
        yield time.perf_counter() - started
    finally:
        login.close_login(profile)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def profiled_upload(profile: SiteProfile, local: Path, remote: str, files, kind: str) -> str:
    """cProfile of one upload, every thread of this process (the OpenSSH carrier feeds
    the stream from a thread of its own): the top lines by own time. The ssh client
    that encrypts and the helper at the site that writes and hashes are other
    processes, not in it."""
    profilers = [cProfile.Profile()]
    original = threading.Thread.run

    def profiled_run(thread: threading.Thread) -> None:
        mine = cProfile.Profile()
        profilers.append(mine)
        mine.enable()
        try:
            original(thread)
        finally:
            mine.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    try:
        profilers[0].enable()
        seconds = lumberjack_upload(profile, local, remote, files, kind)
        profilers[0].disable()
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]
    out = io.StringIO()
    stats = pstats.Stats(profilers[0], stream=out)
    for other in profilers[1:]:
        stats.add(other)
    # File names without their directories: the table says what, not where on this machine.
    stats.strip_dirs().sort_stats("tottime").print_stats(PROFILE_LINES)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    table = lines[start:]
    return f"{kind}, {seconds:.2f} s under cProfile (all threads):\n" + "\n".join(table)


def compare(profile, conn, local: Path, files, base: str, name: str) -> dict:
    total = sum(f.size for f in files)
    baseline = float("inf")
    ours = dict.fromkeys(CARRIERS, float("inf"))
    for _ in range(REPEATS):  # side by side, best of each: the machine is shared
        baseline = min(baseline, tar_ssh(profile, local, f"{base}/{name}-tar"))
        for kind in CARRIERS:
            seconds = lumberjack_upload(profile, local, f"{base}/{name}-{kind}", files, kind)
            ours[kind] = min(ours[kind], seconds)
        conn.run(f"rm -rf {base}/{name}-*")
    profiled = profiled_upload(profile, local, f"{base}/{name}-profiled", files, "openssh")
    conn.run(f"rm -rf {base}/{name}-profiled")
    return {
        "case": name,
        "files": len(files),
        "mib": round(total / MIB, 1),
        "tar_ssh_s": round(baseline, 2),
        "tar_ssh_mb_s": round(total / 1e6 / baseline, 1),
        **{f"{kind}_s": round(ours[kind], 2) for kind in CARRIERS},
        **{f"{kind}_mb_s": round(total / 1e6 / ours[kind], 1) for kind in CARRIERS},
        **{f"{kind}_ratio": round(ours[kind] / baseline, 2) for kind in CARRIERS},
        "openssh_profile": profiled,
    }


def resume(profile: SiteProfile, local: Path, files, remote: str) -> dict:
    total = sum(f.size for f in files)
    conn = SiteConnection(profile, carrier=FabricCarrier(profile))
    conn.open()

    class Cut(Progress):
        sent = 0

        def advance(self, n: int) -> None:
            self.sent += n
            if self.sent >= total // 2:
                conn.close()

    cut = Cut()
    try:
        conn.upload(local, remote, files, progress=cut)
        raise RuntimeError("the upload was not interrupted")
    except RemoteError:
        pass
    with SiteConnection(profile, carrier=FabricCarrier(profile)) as again:
        started = time.perf_counter()
        report = again.upload(local, remote, files)
        seconds = time.perf_counter() - started
        again.run(f"rm -rf {remote}")
    return {
        "mib": round(total / MIB, 1),
        "cut_after_mib": round(cut.sent / MIB, 1),
        "resent_mib": round(report.sent_bytes / MIB, 1),
        "resent_fraction": round(report.sent_bytes / total, 3),
        "kept_mib": round(report.skipped_bytes / MIB, 1),
        "resumed_files": report.resumed_files,
        "resume_s": round(seconds, 2),
    }


def run(work: Path) -> dict:
    """All three cases; `work` is a local scratch directory (removed afterwards)."""
    os.environ.setdefault("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))
    profile = find_profile("testbed")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    large = make_large(work / "large")
    small = make_small(work / "small")
    base = f"~/bench-shipping-{os.getpid()}"
    with SiteConnection(profile, carrier=FabricCarrier(profile)) as conn:
        base = conn.expand(base)
        try:
            with openssh_login(profile, work / "state") as login_s:
                uploads = [
                    compare(profile, conn, work / "large", large, base, "large"),
                    compare(profile, conn, work / "small", small, base, "small"),
                ]
            results = {
                "uploads": uploads,
                "openssh_login_s": round(login_s, 2),
                "resume": resume(profile, work / "large", large, f"{base}/resume"),
            }
        finally:
            conn.run(f"rm -rf {base}", check=False)
            subprocess.run(["rm", "-rf", str(work)], check=False)
    return results


def markdown(results: dict) -> str:
    rows = "\n".join(
        f"| {u['case']}: {u['files']:,} files, {u['mib']} MiB | {u['tar_ssh_s']} s "
        f"({u['tar_ssh_mb_s']} MB/s) | {u['paramiko_s']} s ({u['paramiko_mb_s']} MB/s) "
        f"| **{u['paramiko_ratio']}x** | {u['openssh_s']} s ({u['openssh_mb_s']} MB/s) "
        f"| **{u['openssh_ratio']}x** |"
        for u in results["uploads"]
    )
    profiles = "\n\n".join(
        f"{u['case']}:\n\n```\n{u['openssh_profile']}\n```" for u in results["uploads"]
    )
    r = results["resume"]
    return f"""## Shipping to the site: lumberjack upload vs `tar -c | ssh site tar -x`

Same link (the testbed's emulated site, over a veth pair), same key and pinned known_hosts;
the baseline uses the OpenSSH client. Lumberjack runs over both its carriers: paramiko
(a site that takes a key) and the OpenSSH client riding a login's master (`ssh -S`: an
MFA site, or any site with a login open; the login itself took
{results["openssh_login_s"]} s, once, outside the timings). Lumberjack's time includes
connecting, listing what the site already holds (sizes + sha256), and checking the sha256
of every file at the site afterwards; tar | ssh checks nothing. Best of {REPEATS} runs each,
side by side (bench/bench_shipping.py).

| upload | tar \\| ssh | lumberjack, paramiko | ratio | lumberjack, OpenSSH | ratio |
|---|---:|---:|---:|---:|---:|
{rows}

Goal (issue P3): at most 1.1x (large) and 1.0x (small).

Where the OpenSSH upload's time goes in this process (cProfile of every thread, top lines
by own time; the ssh client that encrypts, and the helper at the site that writes and
hashes, are other processes):

{profiles}

Reading the profiles: this process mostly waits. The feeder thread's `write` blocks on
the pipe into ssh (ssh encrypts as fast as it can take the stream: the same work as
tar | ssh), the main thread's `read`/`read1` wait for the site's answers; sha256 of the
200 MiB (`update`) runs in the feeder thread between writes, overlapped with ssh's
encryption, not after it. For 10,000 small files the per-file cost here is an open,
a stat and a JSON header each (pathlib's parsing shows under cProfile, a few hundredths
of a second without it); every file goes in one stream, no round trip per file. What is
left against tar | ssh is two helper processes at the site (listing what is there, then
receiving; each a python3 start and the helper's source compiled, about 0.1 s) and the
sha256 at both ends, which tar does not do. The upload's check at the end used to be a
third helper process reading every file again; the receiving helper now hashes what it
writes and lists it when the stream ends. What would move the small case below 1.0x:
one helper session for both the listing and the stream (the listing back on stdout
while the plan waits for it, then the stream on stdin), one process start fewer. On a
2-core machine ssh, sshd and both helpers share the cores, so the ratios move by a few
hundredths from run to run (the baseline itself moved from 1.1 s to 1.6 s between runs).

Resume: an upload of {r["mib"]} MiB cut after {r["cut_after_mib"]} MiB (connection closed
under it), then run again: {r["resent_mib"]} MiB sent again ({r["resent_fraction"]:.0%} of
the total; files continued where they stopped: {r["resumed_files"]}; {r["kept_mib"]} MiB kept),
in {r["resume_s"]} s. Data in flight when the link drops (SSH window, socket buffers) is lost
and sent again.
"""


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    import standalone

    sys.exit(standalone.main("shipping", run, markdown, client=False))
