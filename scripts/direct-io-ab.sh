#!/bin/bash
# Direct (O_DIRECT, the default) against buffered (--buffered-io) writes,
# alternated run by run, each run after both cores were 90% idle for a
# second (BENCHMARKS.md, "Writing past the page cache").
#
#   scripts/direct-io-ab.sh hybridlog KEYS ROUNDS OUT [extra bench args]
#   scripts/direct-io-ab.sh tpcc ROUNDS OUT
#   scripts/direct-io-ab.sh ycsb ROUNDS OUT
#
# Writes OUT/<direct|buffered>-<round>.json and prints each run's summary.
# EPOCHDB overrides the binary (default target/release/epochdb).
set -euo pipefail
bin=${EPOCHDB:-target/release/epochdb}

# shellcheck source=scripts/quiet.sh
source "$(dirname "$0")/quiet.sh"

what=$1; shift
if [ "$what" = hybridlog ]; then keys=$1; shift; fi
rounds=$1; out=$2; shift 2
mkdir -p "$out"
for r in $(seq "$rounds"); do
  # Rotate the order each round so neither mode always runs first.
  order="direct buffered"; [ $((r % 2)) = 0 ] && order="buffered direct"
  for mode in $order; do
    flag=(); [ "$mode" = buffered ] && flag=(--buffered-io)
    quiet
    echo "== round $r $mode $(date +%T)"
    case $what in
      hybridlog)
        scratch=$(mktemp -d)
        timeout 300 "$bin" bench hybridlog --keys "$keys" --mix 50:50 --threads 1 \
          --duration 10 --checkpoint-at 3,6 --recover --dir "$scratch/run" "${flag[@]}" "$@" \
          --json "$out/$mode-$r.json" 2>&1 | grep -E "checkpoint v|ratio|recovery of|disk:" || true
        rm -rf "$scratch" ;;
      tpcc)
        timeout 300 "$bin" bench tpcc --warehouses 1 --threads 1 --duration 10 --load-threads 2 \
          --compare none,silor,silor,none "${flag[@]}" --json "$out/$mode-$r.json" 2>&1 | tail -6 ;;
      ycsb)
        timeout 300 "$bin" bench ycsb --variant silor --threads 1 --duration 10 \
          --checkpoint-interval 3 --compare none,silor,silor,none "${flag[@]}" \
          --json "$out/$mode-$r.json" 2>&1 | tail -6 ;;
      *) echo "unknown: $what" >&2; exit 2 ;;
    esac
  done
done
