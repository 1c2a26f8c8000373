#!/bin/sh
echo "file $1:"
cat "$1"
