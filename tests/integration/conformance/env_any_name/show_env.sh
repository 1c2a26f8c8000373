#!/bin/sh
# Each variable between brackets, byte for byte; "unset" when the job did not get it.
# HOME is the starter's, whatever the job asks: its owner's home directory in a plain
# pool, the job's scratch directory in a container; each pool's own, so only "set" here.
[ -n "$HOME" ] && echo "HOME set"
for name in LD_LIBRARY_PATH PYTHONPATH PYTHONHOME pkg.version PATH TMPDIR_NOT \
    MALLOC_ARENA_MAX LJ_NEWLINE; do
  if printenv "$name" > /dev/null; then
    printf '%s=[%s]\n' "$name" "$(printenv "$name")"
  else
    printf '%s unset\n' "$name"
  fi
done
