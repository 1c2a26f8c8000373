#!/bin/sh
head -c 2097152 /dev/zero > big.bin
echo "wrote 2 MiB"
