#!/bin/bash
# Run a command inside the testbed root filesystem, as its own "host".
#
#   unshare --mount --uts --propagation private enter.sh ROOTFS HOSTNAME BINDS -- CMD...
#
# BINDS is a colon separated list of SRC=DEST pairs (DEST inside the rootfs; a bare
# SRC binds to the same path).  pivot_root, not chroot: HTCondor's starter and
# Apptainer both refuse a chrooted root.
set -euo pipefail
root=$1 host=$2 binds=$3
shift 3
[ "${1:-}" = "--" ] && shift

[ -n "$host" ] && hostname "$host"
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
# The host's binfmt_misc entries, seen from inside: Apptainer runs another architecture's
# image only where it sees a persistent (F) entry for it (the testbed-aarch64 profile).
mount -t binfmt_misc binfmt_misc "$root/proc/sys/fs/binfmt_misc" 2>/dev/null || true
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/run/lock"
IFS=: read -r -a pairs <<<"$binds"
for pair in "${pairs[@]}"; do
    [ -n "$pair" ] || continue
    src=${pair%%=*}
    dest=$src
    [[ $pair == *=* ]] && dest=${pair#*=}
    mkdir -p "$root$dest"
    mount --bind "$src" "$root$dest"
done
# A fuse node others can open keeps Apptainer from unpacking every SIF to a sandbox.
rm -f "$root/run/fuse" && mknod -m 0666 "$root/run/fuse" c 10 229 && mount --bind "$root/run/fuse" "$root/dev/fuse" || true
mkdir -p "$root/.oldroot"
cd "$root"
pivot_root . .oldroot
cd /
umount -l /.oldroot
exec "$@"
