#!/bin/sh
# Runs a command and then says how long it took (make bench states each benchmark's time).
start=$(date +%s)
"$@"
rc=$?
echo "took $(( $(date +%s) - start )) s: $*"
exit $rc
