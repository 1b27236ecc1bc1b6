#!/bin/bash
# One sitting on a lent many-core machine, measuring the open targets of
# issues 3, 4 and 7 with cores to spare (BENCHMARKS.md, "Session 58").
# The older scripts/many-cores.sh is session 24's sitting, kept as it ran;
# session 58 ran this script's first version (appended records only, no
# 8-session snapshot, a 3 s silor build: see git log).
# Sections in priority order, so that a sitting cut short loses the least:
#
#   0. the machine and its disk (dd write and cold read);
#   1. SiloR at one worker, interleaved with `none` (issue 3: YCSB 0.95,
#      TPC-C 0.97), then YCSB at two workers;
#   2. GRASSHOPPER (appended and staged records) against the mutex log
#      on the null device, one pinned thread (worker and flusher on cores
#      of their own), two threads, many threads and oversubscribed
#      (issue 4);
#   3. the WAL flusher with 4 KiB records to the disk, depth 1 and 8;
#   4. the hybridlog store's throughput during checkpoints of either
#      capture, and its recovery with every core (issue 7);
#   5. parallel recovery of a silor database with every core (issue 3);
#   6. `bench ycsb --compare none,wal,silor` at 1 and many workers.
#
#   scripts/many-cores-targets.sh OUT [SCRATCH]
#
# Writes OUT/log.txt (everything printed, as it runs) and OUT/json.tgz
# (each run's JSON, refreshed after every section). SCRATCH (default
# /tmp/epochdb-many) holds the databases; it is removed at the end.
# EPOCHDB overrides the binary (default target/release/epochdb). SMOKE=1
# shrinks every run to check the script before spending device time.
set -uo pipefail
bin=${EPOCHDB:-target/release/epochdb}
out=$1
scratch=${2:-/tmp/epochdb-many}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/json" "$scratch"
exec > >(tee -a "$out/log.txt") 2>&1

cores=$(nproc)
if [ "${SMOKE:-0}" = 1 ]; then
  pairs=1; slices=2; slice_s=2.5; short=1; long=2; keys_big=200000; hl_keys=200000
  many=2; wal_threads=2; gib=64; wal_rounds=1; build_s=2
else
  pairs=2; slices=6; slice_s=3; short=1; long=3; keys_big=10000000; hl_keys=10000000
  many=$((cores - 4)); wal_threads=2,4,$((cores - 2)); gib=1024; wal_rounds=4
  # Session 58's 3 s build ended before the first checkpoint of 10 M
  # records installed, so its recovery read the log alone.
  build_s=6
fi

section() { echo; echo "=== $* ($(date +%T), ${SECONDS}s)"; }
save() { tar -czf "$out/json.tgz" -C "$out" json; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(could not drop caches)"; }
interleaved() {
  python3 "$here/interleaved.py" "$scratch/il" --bin "$bin" --pairs "$pairs" --slices "$slices" \
    --slice-s "$slice_s" "$@" -- --pin-threads 2>&1 | grep -v '^\[' 
  rm -rf "${scratch:?}/il"
}

section machine
nproc; grep -m1 'model name' /proc/cpuinfo; uname -r; free -g | head -2
df -h "$scratch" /tmp . | tail -3; findmnt -T "$scratch" -o SOURCE,FSTYPE,OPTIONS | tail -1; findmnt -T /tmp -o SOURCE,FSTYPE | tail -1
"$bin" --version
dd if=/dev/zero of="$scratch/dd" bs=1M count="$gib" oflag=direct conv=fdatasync 2>&1 | tail -1
drop_caches
dd if="$scratch/dd" of=/dev/null bs=1M 2>&1 | tail -1
dd if="$scratch/dd" of=/dev/null bs=1M iflag=direct 2>&1 | tail -1
rm -f "$scratch/dd"

section "1. silor / none at one worker, interleaved: YCSB"
interleaved --workload ycsb --modes none,silor
section "1b. TPC-C"
interleaved --workload tpcc --modes none,silor
section "1c. YCSB at two workers"
pairs=1 interleaved --workload ycsb --modes none,silor --threads 2

section "2. GRASSHOPPER / mutex, null device, 128 B, one pinned thread, $wal_rounds rounds"
for r in $(seq "$wal_rounds"); do
  if [ $((r % 2)) = 1 ]; then impls=grasshopper,mutex; else impls=mutex,grasshopper; fi
  "$bin" bench wal --device null --threads 1 --log-size 128 --io-unit 65536 --impl "$impls" \
    --records appended,staged --duration "$short" --pin-threads --json "$out/json/wal-null-1t-$r.json"
done
section "2b. $wal_threads pinned threads; $((cores * 2)) unpinned (GRASSHOPPER with and without its yield to a backlog)"
"$bin" bench wal --device null --threads "$wal_threads" --log-size 128,4096 --io-unit 65536 \
  --impl grasshopper,mutex --records appended --yield-backlog 4194304,0 --duration "$short" --pin-threads \
  --json "$out/json/wal-null-many.json"
"$bin" bench wal --device null --threads $((cores * 2)) --log-size 128 --io-unit 65536 \
  --impl grasshopper,mutex --records appended --yield-backlog 4194304,0 --duration "$short" \
  --json "$out/json/wal-null-over.json"
save

section "3. the WAL flusher, 4 KiB records to the disk, depth 1 and 8"
"$bin" bench wal --dir "$scratch/wal" --threads 1,4 --log-size 4096 --io-unit 65536,524288 \
  --io-depth 1,8 --impl grasshopper,mutex --records appended --duration "$short" --pin-threads \
  --json "$out/json/wal-file.json"
rm -rf "${scratch:?}/wal"
save

section "4. hybridlog: throughput during checkpoints, one pinned thread, both captures"
for capture in snapshot foldover; do
  "$bin" bench hybridlog --keys 1000000 --mix 50:50 --threads 1 --duration 7 \
    --checkpoint-at 1,2,3,4,5,6 --checkpoint "$capture" --pin-threads --record-layout fixed \
    --dir "$scratch/hl" --json "$out/json/hl-dip-$capture.json" 2>&1 | grep -v '^\['
  rm -rf "${scratch:?}/hl"
done
section "4a. hybridlog: the same with 8 sessions, snapshot capture"
"$bin" bench hybridlog --keys "$hl_keys" --value-size 8 --record-layout fixed --mix 50:50 \
  --threads 8 --duration "$long" --checkpoint-at 0.5,1.5 --checkpoint snapshot \
  --dir "$scratch/hl" --json "$out/json/hl-dip-snapshot-8.json" 2>&1 | grep -v '^\['
rm -rf "${scratch:?}/hl"
section "4b. hybridlog recovery of $hl_keys keys with every core, and with 2 threads"
for rt in 0 2; do
  "$bin" bench hybridlog --keys "$hl_keys" --value-size 8 --record-layout fixed --mix 50:50 \
    --threads 8 --duration "$long" --checkpoint-at 0.5,1.5 --checkpoint foldover --log-only \
    --recover --recovery-threads "$rt" --dir "$scratch/hl" --json "$out/json/hl-recover-$rt.json" 2>&1 | grep -v '^\['
  rm -rf "${scratch:?}/hl"
done
save

section "5. recovery of a $keys_big-key silor database"
"$bin" bench ycsb --keys "$keys_big" --threads "$many" --duration "$build_s" --checkpoint-interval 1 \
  --durability silor --pin-threads --no-point-index --dir "$scratch/rec" --json "$out/json/rec-build.json" \
  2>&1 | grep -v '^\['
du -sh "$scratch/rec"/*
echo "log files: $(ls "$scratch/rec/silor-1" | grep -c data), checkpoint files: $(ls "$scratch/rec/silor-1" | grep -c '^ckpt')"
"$(dirname "$0")/parallel-cold-read.sh" "$scratch/rec/silor-1"
for t in "$cores" 4; do
  drop_caches
  "$bin" recover --dir "$scratch/rec/silor-1" --threads "$t" --no-point-index --json "$out/json/recover-$t.json"
done
rm -rf "${scratch:?}/rec"
save

section "6. YCSB none / wal / silor at 1 and $many workers"
for w in 1 "$many"; do
  rm -rf "${scratch:?}/ycsb"
  "$bin" bench ycsb --threads "$w" --duration "$long" --checkpoint-interval 3 --pin-threads \
    --compare none,wal,silor --dir "$scratch/ycsb" --json "$out/json/ycsb-modes-$w.json" 2>&1 | grep -v '^\['
done
rm -rf "${scratch:?}"
save
section done
