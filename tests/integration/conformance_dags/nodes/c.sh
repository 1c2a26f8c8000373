#!/bin/sh
echo c exits 7
exit 7
