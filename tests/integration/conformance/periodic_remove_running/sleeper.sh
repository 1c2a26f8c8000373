#!/bin/sh
# Runs until its periodic_remove removes it.
sleep "$1"
