#!/usr/bin/env bash
# One sitting of the SiloR durability benchmarks (issue 3), as reported in
# BENCHMARKS.md: throughput/latency comparisons, recovery against size, and
# the disk's own speed. Needs root for dropping the page cache (cold reads).
# Usage: scripts/silor-sitting.sh OUTDIR [REPEATS]
set -euo pipefail
out=${1:?usage: silor-sitting.sh OUTDIR [REPEATS]}
repeats=${2:-3}
mkdir -p "$out"
bin=target/release/epochdb
cargo build --release >/dev/null

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# The disk beside it: sequential write with fdatasync, cold sequential read.
dd if=/dev/zero of="$out/dd.bin" bs=1M count=2048 conv=fdatasync 2>&1 | tail -1 | tee "$out/disk-write.txt"
drop_caches
dd if="$out/dd.bin" of=/dev/null bs=1M 2>&1 | tail -1 | tee "$out/disk-read.txt"
rm -f "$out/dd.bin"

# Throughput and latency: none, log, silor back to back and then in reverse
# (order-balanced: later runs in one process run slower), 1 and 2 workers.
for r in $(seq 1 "$repeats"); do
  for t in 1 2; do
    $bin bench ycsb --threads "$t" --duration 10 --compare none,log,silor,silor,log,none \
      --checkpoint-interval 3 --json "$out/ycsb-t$t-r$r.json" 2>"$out/ycsb-t$t-r$r.log"
  done
  $bin bench tpcc --warehouses 1 --threads 1 --duration 10 --compare none,log,silor,silor,log,none \
    --checkpoint-interval 3 --json "$out/tpcc-t1-r$r.json" 2>"$out/tpcc-t1-r$r.log"
done
$bin bench ycsb --threads 1 --duration 20 --compare log,silor --checkpoint-interval 3 \
  --json "$out/figure.json" --plot "$out/figure.svg" 2>"$out/figure.log"

# Recovery against database size: build with silor, then recover cold.
for keys in 2000000 4000000 8000000; do
  dir="$out/db-$keys"
  rm -rf "$dir"
  $bin bench ycsb --keys "$keys" --threads 1 --duration 8 --durability silor \
    --checkpoint-interval 1 --dir "$dir" 2>"$out/build-$keys.log"
  du -sb "$dir/silor-1" > "$out/size-$keys.txt"
  drop_caches
  $bin recover --dir "$dir/silor-1" --json "$out/recover-$keys.json" > "$out/recover-$keys.txt"
  rm -rf "$dir"
done
