"""`python -m lumberjack` is `condor_lumberjack`."""

import sys

from lumberjack.ap.queue_log import quick_inspect_json

# `inspect --json FILE` first without the command line's machinery (its start-up is a
# good part of the time of a small log's answer); anything else, or any failure, is the
# command line's.
if not quick_inspect_json(sys.argv[1:]):
    from lumberjack.cli import main

    main()
