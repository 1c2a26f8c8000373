#!/bin/sh
echo "hello from exit_0"
echo "a line on stderr" >&2
exit 0
