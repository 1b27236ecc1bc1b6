#!/usr/bin/env bash
# The fcc benchmark sitting behind BENCHMARKS.md's "Frequently-consistent
# checkpoints" section (fc-checkpoint-sigmod11 §5): writes JSON into OUT
# (default docs/figures/fcc) and then draws the figures with
# scripts/plot-fcc.py. Usage: scripts/fcc-sitting.sh [OUT] [REPEAT]
set -euo pipefail
OUT=${1:-docs/figures/fcc}
REPEAT=${2:-5}
BIN=${EPOCHDB:-target/release/epochdb}
mkdir -p "$OUT"
RATES=10000,20000,40000,80000,160000,320000,640000,1280000,2560000,5120000

# Figures 3, 4, 5, 8, 9: 25,000 objects of 8 KiB (204.8 MB), alpha 0.5,
# 0.1 s intervals, a checkpoint every 4 s, 12 s simulated per run, writer
# and logger off as in §5.1. (With the writer off, Copy and Merge differ
# only in the writer, so one of each family runs here.)
$BIN bench fcc --objects 25000 --updates-per-sec $RATES --algo ns,cou,nzz,bazz,npp,ipp \
    --duration 12 --checkpoint-period 4 --repeat "$REPEAT" --json "$OUT/zipf-rates.json"

# The same with each algorithm's own writer running between intervals
# (off the clock): Copy against Merge, and the writer's cache footprint.
$BIN bench fcc --objects 25000 --updates-per-sec 320000,1280000 \
    --algo ns,cou,nzz,bazz,npp,npp-merge,ipp,ipp-merge --writer between \
    --duration 12 --checkpoint-period 4 --repeat 3 --json "$OUT/zipf-writer.json"

# Figure 14 (§5.6): huge pages off and on, back to back per rate.
$BIN bench fcc --objects 25000 --updates-per-sec 80000,320000,1280000,5120000 \
    --algo ns,cou,nzz,bazz,npp,ipp --huge-pages off,on \
    --duration 12 --checkpoint-period 4 --repeat 3 --json "$OUT/zipf-hugepages.json"

# Figures 10, 11: the MMO workload (2,000 players of 100 KiB).
$BIN bench fcc --workload mmo --algo ns,cou,bazz,ipp \
    --duration 12 --checkpoint-period 4 --repeat "$REPEAT" --json "$OUT/mmo.json"

# §5.4 recovery time: 12.5 s of paced ticks, a checkpoint every 4.2 s.
$BIN bench fcc --workload mmo --recovery --algo ns,cou,bazz,ipp \
    --duration 12.5 --checkpoint-period 4.2 --json "$OUT/mmo-recovery.json"

# Config::overlap_log_sync against waiting for each sync, ticks unpaced.
$BIN bench fcc --workload mmo --recovery --algo ipp,ns --tick-s 0 \
    --overlap-log-sync off,on,off,on --duration 12.5 --checkpoint-period 4.2 \
    --json "$OUT/mmo-overlap.json"

# Figures 6, 7: 12,500 to 200,000 objects (102 MB to 1.6 GB), updates per
# second at 0.08% and 2.56% of the state's 4-byte words.
$BIN bench fcc --objects 12500,25000,50000,100000,200000 --update-percent 0.08,2.56 \
    --algo ns,cou,bazz,ipp --duration 12 --checkpoint-period 4 --repeat 3 \
    --json "$OUT/zipf-sizes.json"

python3 scripts/plot-fcc.py "$OUT"
