#!/bin/sh
# Dies by the signal (a number) it is given, or exits with the code after "exit".
echo "job $1 about to end with $2"
case "$2" in
  exit*) exit "${2#exit}" ;;
  *) kill "-$2" $$ ;;
esac
