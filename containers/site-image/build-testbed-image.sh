#!/usr/bin/env bash
# Build the testbed's copy of the site image without any registry pull: debootstrap a
# minimal Debian sid tree, run the package's own recipe in it (lumberjack/ap/site-image/:
# setup.sh with the packages of packages.txt, as `sites image build` renders them), then
# let the testbed rootfs's Apptainer turn that sandbox into a SIF.
#
#   build-testbed-image.sh ROOTFS OUT.sif [ARCH]
#
# ROOTFS is the testbed root filesystem (containers/testbed/build-rootfs.sh). Writes
# OUT.sif and OUT.versions (the HTCondor package inside). Run as root. The mirror comes
# from the host's own apt sources unless LUMBERJACK_DEBIAN_MIRROR is set.
# ARCH (x86_64 or aarch64, default the host's) builds for another architecture: the
# same recipe, its binaries run by qemu-user through binfmt_misc (emulation.sh sets
# that up on the host; see README.md).
set -euo pipefail
usage="usage: build-testbed-image.sh ROOTFS OUT.sif [x86_64|aarch64]"
rootfs=${1:?$usage}
out=${2:?$usage}
arch=${3:-$(uname -m)}
case $arch in
x86_64) debarch=amd64 ;;
aarch64) debarch=arm64 ;;
*) echo "build-testbed-image: unknown architecture $arch; $usage" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
recipe=$here/../../lumberjack/ap/site-image
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
packages=$(grep -v '^#' "$recipe/packages.txt" | grep -v '^ *$')

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

if [ "$arch" = "$(uname -m)" ]; then
    debootstrap --variant=minbase sid "$sandbox" "$mirror" >"$logfile" 2>&1 || { tail -n 20 "$logfile" >&2; exit 1; }
else
    # Another architecture: unpack on the host, then the second stage (the packages'
    # own scripts) in the chroot, where binfmt_misc hands each binary to qemu-user.
    "$here/emulation.sh" "$arch" >"$logfile" 2>&1 || { tail -n 5 "$logfile" >&2; exit 1; }
    debootstrap --arch="$debarch" --foreign --variant=minbase sid "$sandbox" "$mirror" \
        >>"$logfile" 2>&1 || { tail -n 20 "$logfile" >&2; exit 1; }
    chroot "$sandbox" /debootstrap/debootstrap --second-stage >>"$logfile" 2>&1 \
        || { tail -n 20 "$logfile" >&2; exit 1; }
fi
echo "== debootstrap done after ${SECONDS}s" >>"$logfile"

# The recipe's setup in a chroot (apt needs no daemons; proc for postinst); the chroot
# needs the hosts and resolver files an image's base has.
printf '127.0.0.1 localhost\n::1 localhost\n' >"$sandbox/etc/hosts"
cp /etc/resolv.conf "$sandbox/etc/resolv.conf" 2>/dev/null || true
cp "$recipe/setup.sh" "$sandbox/tmp/lumberjack-setup.sh"
mount -t proc proc "$sandbox/proc"
# shellcheck disable=SC2086
chroot "$sandbox" sh /tmp/lumberjack-setup.sh $packages >>"$logfile" 2>&1 \
    || { tail -n 30 "$logfile" >&2; exit 1; }
rm "$sandbox/tmp/lumberjack-setup.sh"
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
