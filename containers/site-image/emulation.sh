#!/usr/bin/env bash
# Let this machine run another architecture's binaries: Debian's qemu-user-static and a
# binfmt_misc entry for the architecture with the F (fix-binary) flag, so that the kernel
# holds the emulator open and it works inside chroots and mount namespaces (the testbed's
# site runs Apptainer in those), where the emulator's path does not exist.
#
#   emulation.sh ARCH        (aarch64; run as root)
#
# Idempotent. What it changes on the host, once: installs the qemu-user-static package
# (apt-get), mounts binfmt_misc at /proc/sys/fs/binfmt_misc if it is not mounted, and
# registers (or re-registers, if present without the F flag) the entry qemu-ARCH there.
# The entry lasts until reboot; `echo -1 >/proc/sys/fs/binfmt_misc/qemu-ARCH` removes it.
set -euo pipefail
arch=${1:?usage: emulation.sh aarch64}
[ "$arch" = aarch64 ] || { echo "emulation.sh: only aarch64 is known, not $arch" >&2; exit 2; }
binfmt=/proc/sys/fs/binfmt_misc
entry=$binfmt/qemu-$arch
# ELF header of an aarch64 executable (EM_AARCH64 = 0xb7), as Debian's qemu-user registers it.
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
interpreter=/usr/libexec/qemu-binfmt/$arch-binfmt-P

if [ ! -x "$interpreter" ]; then
    echo "emulation.sh: installing qemu-user-static"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
fi
[ -x "$interpreter" ] || { echo "emulation.sh: qemu-user-static has no $interpreter" >&2; exit 1; }
if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" \
        || { echo "emulation.sh: cannot mount binfmt_misc at $binfmt" >&2; exit 1; }
fi
if [ -e "$entry" ] && ! grep -q '^flags: .*F' "$entry"; then
    echo "emulation.sh: re-registering $entry with the F flag"
    echo -1 >"$entry"
fi
if [ ! -e "$entry" ]; then
    # P: argv[0] kept (the -P wrapper expects it); F: the emulator opened now. As
    # Debian's own registration: no C, so setuid aarch64 binaries get no privileges.
    printf ':qemu-%s:M::%s:%s:%s:PF\n' "$arch" "$magic" "$mask" "$interpreter" >"$binfmt/register"
fi
grep -q '^enabled' "$entry" || { echo "emulation.sh: $entry is not enabled" >&2; exit 1; }
echo "emulation.sh: $arch binaries run through $(sed -n 's/^interpreter //p' "$entry") ($(sed -n 's/^flags: //p' "$entry"))"
