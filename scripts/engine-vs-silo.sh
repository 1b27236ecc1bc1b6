#!/bin/bash
# The engine against Silo (BENCHMARKS.md, issue 9): epochdb with its point
# index, epochdb with the B+-tree alone (--no-point-index) and Silo's
# dbtest, alternated (the order reversed every other round), each run after
# both cores were 90% idle for a second.
#
#   SILO=/path/to/dbtest scripts/engine-vs-silo.sh THREADS ROUNDS [WHAT...]
#
# WHAT: ycsb10m ycsb1m tpcc (default: all three); TPC-C runs THREADS
# warehouses. Silo is built outside the repository (BENCHMARKS.md says how).
# Prints one line per run: system, time, throughput.
set -euo pipefail
bin=${EPOCHDB:-target/release/epochdb}
silo=${SILO:?set SILO to Silo\'s dbtest binary}
threads=$1; rounds=$2; shift 2
whats=("$@"); [ ${#whats[@]} = 0 ] && whats=(ycsb10m ycsb1m tpcc)

# shellcheck source=scripts/quiet.sh
source "$(dirname "$0")/quiet.sh"
ours() {
  local label=$1; shift
  quiet
  echo "epochdb-$label $(date +%T) $(timeout 600 "$bin" bench "$@" --duration 10 --load-threads 2 2>&1 \
    | awk '$1 == "none" {print $4, $5}')"
}
silo_run() {
  quiet
  # The last line of dbtest's stdout: throughput, per-core throughput, ...
  echo "silo $(date +%T) $(timeout 600 "$silo" "$@" --runtime 10 2>/dev/null | tail -1 | awk '{print $1}')"
}
for r in $(seq "$rounds"); do
  for what in "${whats[@]}"; do
    case $what in
      ycsb10m) a=(ycsb --keys 10000000); b=(--bench ycsb --scale-factor 10000 --bench-opts "--workload-mix 70,30,0,0");;
      ycsb1m) a=(ycsb --keys 1000000); b=(--bench ycsb --scale-factor 1000 --bench-opts "--workload-mix 70,30,0,0");;
      tpcc) a=(tpcc --warehouses "$threads"); b=(--bench tpcc --scale-factor "$threads");;
      *) echo "unknown: $what" >&2; exit 2 ;;
    esac
    echo "== round $r $what, $threads threads"
    if [ $((r % 2)) = 1 ]; then
      ours point "${a[@]}" --threads "$threads"
      ours tree "${a[@]}" --threads "$threads" --no-point-index
      silo_run "${b[@]}" --num-threads "$threads"
    else
      silo_run "${b[@]}" --num-threads "$threads"
      ours tree "${a[@]}" --threads "$threads" --no-point-index
      ours point "${a[@]}" --threads "$threads"
    fi
  done
done
