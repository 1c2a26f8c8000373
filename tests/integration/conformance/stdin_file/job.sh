#!/bin/sh
echo "stdin says:"
cat
