#!/bin/sh
echo "exiting with 255"
exit 255
