#!/bin/sh
echo "word $1 number $2"
exit "$2"
