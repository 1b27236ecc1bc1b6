#!/bin/bash
# One sitting on a machine with many cores (BENCHMARKS.md, "Sixteen
# cores"): the measurements the 2-core development machine cannot make,
# in priority order so that a sitting cut short loses the least:
#
#   1. ELEDA's pipeline on the null device over 1..N-2 pinned database
#      threads and oversubscribed (issue 4's scaling claims);
#   2. the engine's durability modes side by side on YCSB at 1 worker
#      (cores left for loggers and checkpointers, as SiloR's 4 of 32) and
#      at more workers (issue 3's targets);
#   3. parallel recovery of a 10 M-key silor database with every core,
#      beside the disk's speed reading all its files at once;
#   4. the disk: dd's sequential write and read, then the wal flusher's
#      write speed with 4 KiB records;
#   5. TPC-C side by side at 1 and many warehouses, and the wal mode's
#      flusher I/O unit there;
#   6. the hybridlog store over threads.
#
#   scripts/many-cores.sh OUT [SCRATCH]
#
# Writes OUT/log.txt (everything printed) and OUT/json.tgz (each run's
# JSON). SCRATCH (default /tmp/epochdb-many) holds the databases and
# logs; it is removed at the end. EPOCHDB overrides the binary (default
# target/release/epochdb). SMOKE=1 shrinks every run to check the script:
# run it so before spending device time. About 4.5 minutes on 16 cores
# (session 24's first sitting ran sections 1-6 without 2's pairs, 3's
# parallel read and 5b in 227 s).
set -uo pipefail
bin=${EPOCHDB:-target/release/epochdb}
out=$1
scratch=${2:-/tmp/epochdb-many}
mkdir -p "$out/json" "$scratch"
exec > >(tee -a "$out/log.txt") 2>&1

cores=$(nproc)
if [ "${SMOKE:-0}" = 1 ]; then
  short=1; long=1; keys_big=200000; wal_threads=1,2; many=2; gib=64
else
  short=1; long=4; keys_big=10000000; wal_threads=1,2,4,8,$((cores - 2)); many=$((cores - 4)); gib=2048
fi

section() { echo; echo "=== $* ($(date +%T), ${SECONDS}s)"; }
save() { tar -czf "$out/json.tgz" -C "$out" json; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(could not drop caches)"; }

section machine
nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2
df -h "$scratch" | tail -1; findmnt -T "$scratch" -o SOURCE,FSTYPE,OPTIONS | tail -1
"$bin" --version

section "1. wal pipeline, null device, pinned threads $wal_threads"
"$bin" bench wal --device null --threads "$wal_threads" --log-size 128,4096 --io-unit 65536 \
  --impl grasshopper,mutex,scan --records appended,staged --duration "$short" --pin-threads --json "$out/json/wal-null.json"
section "1b. wal pipeline, one thread, five rounds"
for r in 1 2 3 4 5; do
  "$bin" bench wal --device null --threads 1 --log-size 128 --io-unit 65536 \
    --impl grasshopper,mutex --records appended,staged --duration "$short" --pin-threads --json "$out/json/wal-null-1t-$r.json"
done
section "1c. wal pipeline oversubscribed: $((cores * 2)) threads, not pinned"
"$bin" bench wal --device null --threads $((cores * 2)) --log-size 128 --io-unit 65536 \
  --impl grasshopper,mutex,scan --records appended,staged --duration "$short" --json "$out/json/wal-null-over.json"
save

section "2. YCSB, 1 worker, none/log/silor/wal, then none/silor alternated"
rm -rf "${scratch:?}/ycsb"
"$bin" bench ycsb --threads 1 --duration "$long" --checkpoint-interval 3 --pin-threads \
  --compare none,log,silor,wal --dir "$scratch/ycsb" --json "$out/json/ycsb-1w-modes.json"
rm -rf "${scratch:?}/ycsb"
"$bin" bench ycsb --threads 1 --duration "$long" --checkpoint-interval 3 --pin-threads \
  --compare none,silor,none,silor,none,silor --dir "$scratch/ycsb" --json "$out/json/ycsb-1w-pairs.json"
section "2b. YCSB, $many workers, none/log/silor/wal"
rm -rf "${scratch:?}/ycsb"
"$bin" bench ycsb --threads "$many" --duration "$long" --checkpoint-interval 3 --pin-threads \
  --compare none,log,silor,wal --dir "$scratch/ycsb" --json "$out/json/ycsb-many.json"
rm -rf "${scratch:?}/ycsb"
save

section "3. recovery of a $keys_big-key silor database"
"$bin" bench ycsb --keys "$keys_big" --threads "$many" --duration "$long" --checkpoint-interval 1 \
  --durability silor --pin-threads --no-point-index --dir "$scratch/rec" --json "$out/json/rec-build.json"
du -sh "$scratch/rec"/*
echo "log files: $(ls "$scratch/rec/silor-1" | grep -c data), checkpoint files: $(ls "$scratch/rec/silor-1" | grep -c '^ckpt')"
"$(dirname "$0")/parallel-cold-read.sh" "$scratch/rec/silor-1"
for t in "$cores" 4 "$cores"; do
  drop_caches
  "$bin" recover --dir "$scratch/rec/silor-1" --threads "$t" --no-point-index --json "$out/json/recover-$t-$SECONDS.json"
done
rm -rf "${scratch:?}/rec"
save

section "4. the disk: dd, then the wal flusher with 4 KiB records"
dd if=/dev/zero of="$scratch/dd" bs=1M count="$gib" oflag=direct conv=fdatasync 2>&1 | tail -1
drop_caches
dd if="$scratch/dd" of=/dev/null bs=1M 2>&1 | tail -1
rm -f "$scratch/dd"
"$bin" bench wal --device file --dir "$scratch/wal" --threads 1,4,"$many" --log-size 4096 \
  --io-unit 65536,524288 --impl grasshopper,mutex --duration 2 --pin-threads --json "$out/json/wal-file.json"
rm -rf "${scratch:?}/wal"
save

section "5. TPC-C, 1 and $many warehouses, none/log/silor/wal"
for w in 1 "$many"; do
  rm -rf "${scratch:?}/tpcc"
  "$bin" bench tpcc --threads "$w" --duration "$long" --checkpoint-interval 3 --pin-threads \
    --compare none,log,silor,wal --dir "$scratch/tpcc" --json "$out/json/tpcc-$w.json"
done
section "5b. the wal mode's flusher I/O unit at $many warehouses"
for unit in 524288 4194304; do
  rm -rf "${scratch:?}/tpcc"
  "$bin" bench tpcc --threads "$many" --duration "$long" --checkpoint-interval 3 --pin-threads \
    --compare wal --wal-io-unit "$unit" --dir "$scratch/tpcc" --json "$out/json/tpcc-wal-$unit.json"
done
rm -rf "${scratch:?}/tpcc"
save

section "6. hybridlog, 1 M keys, RMW and 50:50 over threads"
for t in 1 2 4 8 "$cores"; do
  "$bin" bench hybridlog --keys 1000000 --mix rmw --threads "$t" --duration "$short" \
    --dir "$scratch/hl" --json "$out/json/hl-rmw-$t.json"
  rm -rf "${scratch:?}/hl"
done
for t in 1 "$cores"; do
  "$bin" bench hybridlog --keys 1000000 --mix 50:50 --threads "$t" --duration "$short" \
    --dir "$scratch/hl" --json "$out/json/hl-5050-$t.json"
  rm -rf "${scratch:?}/hl"
done
save
rm -rf "${scratch:?}"
section done
