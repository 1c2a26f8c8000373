#!/usr/bin/env bash
# Build the testbed's Debian sid root filesystem into DIR (must not exist yet).
# HTCondor, Apptainer and Slurm need sid's glibc, so everything runs from this tree
# (entered with pivot_root, see enter.sh).  The mirror comes from the host's own apt
# sources unless LUMBERJACK_DEBIAN_MIRROR is set.
set -euo pipefail
dest=${1:?usage: build-rootfs.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)

mirror=${LUMBERJACK_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -v security | head -n1 | awk '{print $2}' || true)
fi
[ -n "$mirror" ] || { echo "build-rootfs: no Debian mirror found; set LUMBERJACK_DEBIAN_MIRROR" >&2; exit 2; }

command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

work="$dest.partial"
rm -rf "$work"
debootstrap --variant=minbase sid "$work" "$mirror" >"$work.log" 2>&1 || { tail -n 20 "$work.log" >&2; exit 1; }

# sid's Release can look expired to apt here; never let package scripts start daemons.
echo 'Acquire::Check-Valid-Until "false";' >"$work/etc/apt/apt.conf.d/99no-valid-until"
printf '#!/bin/sh\nexit 101\n' >"$work/usr/sbin/policy-rc.d"
chmod 755 "$work/usr/sbin/policy-rc.d"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$work/etc/hosts"
cp /etc/resolv.conf "$work/etc/resolv.conf" 2>/dev/null || true

# apt inside a plain chroot is fine (no daemons run); proc is needed by some postinst scripts.
mount -t proc proc "$work/proc"
trap 'umount "$work/proc" 2>/dev/null || true' EXIT
chroot "$work" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
chroot "$work" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    $(grep -v '^#' "$here/packages.txt") >>"$work.log" 2>&1 || { tail -n 30 "$work.log" >&2; exit 1; }
chroot "$work" apt-get clean
umount "$work/proc"; trap - EXIT

# Accounts: the access point's submitter and the site's account are different people
# with fixed uids, because host and rootfs meet on files by number.
chroot "$work" groupadd -g 4242 alice
chroot "$work" useradd -m -u 4242 -g 4242 -s /bin/bash alice
chroot "$work" groupadd -g 4343 hpcuser
chroot "$work" useradd -m -u 4343 -g 4343 -s /bin/bash hpcuser
# sshd refuses an account whose password field is "!" even with a valid key.
chroot "$work" usermod -p '*' hpcuser
printf 'hpcuser:100000:65536\nalice:200000:65536\n' >"$work/etc/subuid"
cp "$work/etc/subuid" "$work/etc/subgid"
# Apptainer as root here lacks CAP_SYS_RESOURCE.
sed -i 's/^root default capabilities.*/root default capabilities = file/' "$work/etc/apptainer/apptainer.conf"

# Record what was installed: sid moves daily and tests print these.
chroot "$work" dpkg-query -W -f '${Package} ${Version}\n' condor apptainer slurm-wlm munge openssh-server \
    >"$work/etc/lumberjack-testbed-versions"
mv "$work" "$dest"
echo "rootfs ready: $dest"
