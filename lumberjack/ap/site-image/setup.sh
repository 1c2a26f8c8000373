#!/bin/sh
# The site image's setup, run as root inside the image being built, with the packages
# to install as arguments: the one setup for every build (the Apptainer definition's
# %post, the Containerfile's RUN, the project's testbed build).
set -eu
export DEBIAN_FRONTEND=noninteractive
# A sid Release file can look expired; package scripts must never start daemons.
echo 'Acquire::Check-Valid-Until "false";' >/etc/apt/apt.conf.d/99no-valid-until
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@"
apt-get clean
rm -rf /var/lib/apt/lists/*
# lumberjack is written against HTCondor 25.x: fail the build on anything else.
# shellcheck disable=SC2016 # a literal $ in the pattern
condor_version | grep -q '^\$CondorVersion: 25\.' || {
    echo "lumberjack-site: HTCondor 25.x expected, got: $(condor_version | head -n1)" >&2
    exit 1
}
dpkg-query -W -f '${Package} ${Version}\n' condor >/etc/lumberjack-site-versions
condor_version | head -n1 >>/etc/lumberjack-site-versions
