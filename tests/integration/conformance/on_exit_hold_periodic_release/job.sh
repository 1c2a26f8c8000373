#!/bin/sh
echo "a run of the released job"
exit 0
