#!/usr/bin/env bash
# Build the testbed's copy of the site image (lumberjack-site.def) without any registry
# pull: debootstrap a minimal Debian sid tree, install packages.txt into it, then let
# the testbed rootfs's Apptainer turn that sandbox into a SIF.
#
#   build-testbed-image.sh ROOTFS OUT.sif
#
# ROOTFS is the testbed root filesystem (containers/testbed/build-rootfs.sh). Writes
# OUT.sif and OUT.versions (the HTCondor package inside). Run as root. The mirror comes
# from the host's own apt sources unless LUMBERJACK_DEBIAN_MIRROR is set.
set -euo pipefail
rootfs=${1:?usage: build-testbed-image.sh ROOTFS OUT.sif}
out=${2:?usage: build-testbed-image.sh ROOTFS OUT.sif}
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

# The .def cannot read packages.txt at build time: refuse to build if they drifted.
packages=$(grep -v '^#' "$here/packages.txt" | grep -v '^ *$')
in_def=$(sed -n '/# packages: begin/,/# packages: end/p' "$here/lumberjack-site.def" \
    | grep -v '#' | sed 's/apt-get install.*//; s/\\//' | tr -s ' \n' '\n' | grep -v '^$')
if [ "$(sort <<<"$packages")" != "$(sort <<<"$in_def")" ]; then
    echo "build-testbed-image: lumberjack-site.def and packages.txt list different packages" >&2
    exit 2
fi

mirror=${LUMBERJACK_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -v security | head -n1 | awk '{print $2}' || true)
fi
[ -n "$mirror" ] || { echo "build-testbed-image: no Debian mirror found; set LUMBERJACK_DEBIAN_MIRROR" >&2; exit 2; }
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

base=${out%.sif}
sandbox=$base.sandbox
logfile=$base.log
rm -rf "$sandbox" "$base.tmp"
cleanup() {
    umount "$sandbox/proc" 2>/dev/null || true
    rm -rf "$sandbox" "$base.tmp"
}
trap cleanup EXIT

debootstrap --variant=minbase sid "$sandbox" "$mirror" >"$logfile" 2>&1 || { tail -n 20 "$logfile" >&2; exit 1; }
echo "== debootstrap done after ${SECONDS}s" >>"$logfile"

# What the .def's %post does, in a chroot (apt needs no daemons; proc for postinst).
echo 'Acquire::Check-Valid-Until "false";' >"$sandbox/etc/apt/apt.conf.d/99no-valid-until"
printf '#!/bin/sh\nexit 101\n' >"$sandbox/usr/sbin/policy-rc.d"
chmod 755 "$sandbox/usr/sbin/policy-rc.d"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$sandbox/etc/hosts"
cp /etc/resolv.conf "$sandbox/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$sandbox/proc"
chroot "$sandbox" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$logfile" 2>&1
# shellcheck disable=SC2086
chroot "$sandbox" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    $packages >>"$logfile" 2>&1 || { tail -n 30 "$logfile" >&2; exit 1; }
chroot "$sandbox" apt-get clean
rm -rf "$sandbox"/var/lib/apt/lists/*
chroot "$sandbox" condor_version | grep -q '^\$CondorVersion: 25\.' || {
    echo "build-testbed-image: HTCondor 25.x expected, got: $(chroot "$sandbox" condor_version | head -n1)" >&2
    exit 1
}
chroot "$sandbox" dpkg-query -W -f '${Package} ${Version}\n' condor >"$sandbox/etc/lumberjack-site-versions"
chroot "$sandbox" condor_version | head -n1 >>"$sandbox/etc/lumberjack-site-versions"
umount "$sandbox/proc"
: >"$sandbox/etc/resolv.conf"
echo "== packages installed after ${SECONDS}s" >>"$logfile"

# SIF from the sandbox, as root in the testbed rootfs (its Apptainer + mksquashfs);
# a sandbox source needs no %post, so no fakeroot.
mkdir -p "$base.tmp"
unshare --mount --propagation private "$here/../testbed/enter.sh" "$rootfs" "" "$(dirname "$out")" -- \
    env APPTAINER_TMPDIR="$base.tmp" apptainer -s build --force "$out.partial" "$sandbox" \
    >>"$logfile" 2>&1 || { tail -n 20 "$logfile" >&2; exit 1; }
echo "== SIF built after ${SECONDS}s" >>"$logfile"
cp "$sandbox/etc/lumberjack-site-versions" "$base.versions"
chmod 644 "$out.partial" "$base.versions"
mv "$out.partial" "$out"
echo "site image ready: $out ($(cat "$base.versions" | head -n1))"
