#!/usr/bin/env bash
# A Debian sid base image for podman with no registry pull: debootstrap a minimal tree and
# import it, so the site image's Containerfile (FROM ${BASE}) builds on the testbed.
#
#   podman-base.sh TAG
#
# Run as root, with podman's configuration in the environment (CONTAINERS_CONF,
# CONTAINERS_STORAGE_CONF). The mirror comes from the host's own apt sources unless
# LUMBERJACK_DEBIAN_MIRROR is set.
set -euo pipefail
tag=${1:?usage: podman-base.sh TAG}
mirror=${LUMBERJACK_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -v security | head -n1 | awk '{print $2}' || true)
fi
[ -n "$mirror" ] || { echo "podman-base: no Debian mirror found; set LUMBERJACK_DEBIAN_MIRROR" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase sid "$work/root" "$mirror" >"$work/log" 2>&1 || { tail -n 20 "$work/log" >&2; exit 1; }
# What an image's base has and minbase lacks: a hosts file (apt and HTCondor look names up).
printf '127.0.0.1 localhost\n::1 localhost\n' >"$work/root/etc/hosts"
tar --one-file-system -C "$work/root" -c . | podman import - "$tag" >/dev/null
echo "podman base ready: $tag"
