#!/bin/sh
echo d dies by SIGTERM
kill -TERM $$
