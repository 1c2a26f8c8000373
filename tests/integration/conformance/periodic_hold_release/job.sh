#!/bin/sh
# Its first run ($1 = 0 starts before it) waits to be held; the second completes.
echo "run after $1 starts"
if [ "$1" = 0 ]; then sleep 300; fi
exit 0
