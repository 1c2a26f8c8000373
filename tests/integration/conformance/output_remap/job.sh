#!/bin/sh
echo "the remapped result" > result.txt
