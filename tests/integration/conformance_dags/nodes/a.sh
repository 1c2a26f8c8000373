#!/bin/sh
# One line per attempt in `tries`, which goes to the job and comes back with it
echo attempt >> tries
n=$(wc -l < tries)
echo "attempt $n"
[ "$n" -ge 2 ]
