#!/bin/sh
echo "about to exit 3"
exit 3
