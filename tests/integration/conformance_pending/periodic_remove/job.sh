#!/bin/sh
echo "running until removed"
sleep 300
