#!/bin/sh
echo "failing run"
exit 1
