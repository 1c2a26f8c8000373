#!/bin/sh
echo b exits 3
exit 3
