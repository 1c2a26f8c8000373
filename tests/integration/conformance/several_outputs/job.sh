#!/bin/sh
echo "output a" > a.txt
seq 1 100 > b.txt
echo "not transferred" > c.txt
echo done
