#!/bin/sh
# Every path the inputs made in the sandbox, one a line.
for p in dirA dirB sub a.txt g.txt; do
  if [ -e "$p" ]; then find "$p" | sort; fi
done
