#!/bin/sh
echo "exiting with 1"
exit 1
