#!/bin/sh
tr a-z A-Z < data.txt > result.txt
echo "read $(wc -l < data.txt) lines"
