#!/bin/sh
# Start one pool of the docker tier in this container (any HTCondor image): the
# submitter account, the directories lumberjack.conf names, then condor_master.
set -eu
uid=${LUMBERJACK_SUBMITTER_UID:-4242}
if ! getent passwd alice >/dev/null; then
    groupadd -g "$uid" alice
    useradd -m -u "$uid" -g "$uid" -s /bin/sh alice
fi
for dir in /var/lib/condor/spool /var/lib/condor/execute /var/lib/condor/sockets \
    "$(condor_config_val LOG)" "$(condor_config_val LOCK)" "$(condor_config_val RUN)"; do
    mkdir -p "$dir"
    chown condor:condor "$dir"
done
chmod 755 /var/lib/condor/execute
mkdir -p -m 700 /etc/condor/passwords.d /etc/condor/tokens.d
exec condor_master -f
