"""`python -m lumberjack` is `condor_lumberjack`."""

from lumberjack.cli import main

main()
