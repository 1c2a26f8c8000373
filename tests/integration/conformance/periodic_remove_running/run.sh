#!/bin/sh
# Runs until the schedd's periodic_remove ends it (it never ends on its own in time).
echo "started"
echo "running for at most $1 s"
sleep "$1"
