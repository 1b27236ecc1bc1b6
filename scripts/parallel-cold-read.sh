#!/bin/bash
# What the disk gives every file of DIR read at once, cold: a recovery's
# ceiling (scripts/many-cores*.sh). Drops the page cache first (as root).
#
#   scripts/parallel-cold-read.sh DIR
#
# Prints "parallel cold read: BYTES bytes in MS ms". Waits on the readers'
# pids only: a bare `wait` in a script whose output goes through `tee`
# would wait for the `tee` too, forever.
set -uo pipefail
dir=$1
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(could not drop caches)"
t0=$(date +%s%N); pids=()
for f in "$dir"/*; do dd if="$f" of=/dev/null bs=1M 2>/dev/null & pids+=($!); done
wait "${pids[@]}"; t1=$(date +%s%N)
echo "parallel cold read: $(du -sb "$dir" | cut -f1) bytes in $(( (t1 - t0) / 1000000 )) ms"
