#!/bin/sh
# Each variable between brackets, byte for byte; "unset" when the job did not get it.
for name in LJ_QUOTES LJ_DOLLAR LJ_SPACES LJ_EQUALS LJ_UNICODE LJ_BACKSLASH LJ_EMPTY; do
  if printenv "$name" > /dev/null; then
    printf '%s=[%s]\n' "$name" "$(printenv "$name")"
  else
    printf '%s unset\n' "$name"
  fi
done
