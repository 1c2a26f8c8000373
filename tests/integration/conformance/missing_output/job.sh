#!/bin/sh
echo "writes nothing else"
