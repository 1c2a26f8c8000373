#!/bin/sh
echo e exits 2
exit 2
