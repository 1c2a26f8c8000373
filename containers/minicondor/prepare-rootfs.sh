#!/usr/bin/env bash
# Turn DIR, a copy of the testbed's Debian sid rootfs, into the MiniCondor image's tree:
# the `minicondor` package, the submitter account, no apt caches.  The testbed's own
# rootfs is never changed; image.py copies it first.
set -euo pipefail
root=${1:?usage: prepare-rootfs.sh DIR}

chroot_run() { chroot "$root" env PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

if ! chroot_run dpkg-query -W -f '${Status}' minicondor 2>/dev/null | grep -q 'install ok installed'; then
    chroot_run apt-get update -qq
    chroot_run apt-get install -y -qq --no-install-recommends minicondor
fi
chroot_run apt-get clean

# Root cannot own jobs: an ordinary submitter, with the uid the host's job directories
# (bind-mounted at the same path) belong to.
if ! chroot_run getent passwd alice >/dev/null; then
    chroot_run groupadd -g 4242 alice
    chroot_run useradd -m -u 4242 -g 4242 -s /bin/bash alice
fi

# A container gets its own /etc/hosts, /etc/hostname and /etc/resolv.conf.
rm -f "$root/etc/hostname"
chroot_run dpkg-query -W -f '${Package} ${Version}\n' condor minicondor >"$root/etc/lumberjack-minicondor-versions"
