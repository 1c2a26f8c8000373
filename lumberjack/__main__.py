"""`python -m lumberjack` and the installed `condor_lumberjack`: one entry point."""

import sys

from lumberjack.errors import exit_on_ctrl_c


def main() -> None:
    exit_on_ctrl_c()  # first: a Ctrl-C while the modules below load prints no traceback
    from lumberjack.ap.queue_log import quick_inspect_json

    # `inspect --json FILE` first without the command line's machinery (its start-up is a
    # good part of the time of a small log's answer); anything else, or any failure, is
    # the command line's.
    if not quick_inspect_json(sys.argv[1:]):
        from lumberjack.cli import main as command_line

        command_line()


if __name__ == "__main__":
    main()
