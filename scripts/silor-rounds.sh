#!/usr/bin/env bash
# silor against none at one worker, the way issue 3's targets ask for it:
# ROUNDS short `--compare` runs, the order alternating (none,silor then
# silor,none) so neither mode always runs first, and the median of the
# per-run ratios. Also splits the silor run's 0.5 s windows into those
# during a checkpoint and the rest, each over the run's `none`.
# Usage: scripts/silor-rounds.sh OUTDIR ROUNDS ycsb|tpcc [bench flags...]
# e.g.   scripts/silor-rounds.sh /tmp/r 10 ycsb --pin-threads
set -euo pipefail
out=${1:?usage: silor-rounds.sh OUTDIR ROUNDS ycsb|tpcc [flags]}
rounds=${2:?rounds}
workload=${3:?ycsb or tpcc}
shift 3
bin=${EPOCHDB:-target/release/epochdb}
mkdir -p "$out/d"
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) = 1 ]; then modes=none,silor; else modes=silor,none; fi
  "$bin" bench "$workload" --threads 1 --duration 8 --load-threads 2 \
    --checkpoint-interval 3 --compare "$modes" --dir "$out/d" \
    --json "$out/$i.json" "$@" >"$out/$i.log" 2>&1
  rm -rf "${out:?}/d/"*
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
whole, during, rest = [], [], []
for i in range(1, rounds + 1):
    runs = {r["mode"]: r for r in json.load(open(f"{out}/{i}.json"))["runs"]}
    none = runs["none"]["throughput_txn_s"]
    silor = runs["silor"]
    windows = silor["series"]
    ck = [w["txn_s"] for w in windows if w["checkpointing"]]
    other = [w["txn_s"] for w in windows if not w["checkpointing"]]
    whole.append(silor["throughput_txn_s"] / none)
    if ck:
        during.append(statistics.mean(ck) / none)
    rest.append(statistics.mean(other) / none)
    print(f"{i:3} none {none / 1e6:.3f} M  silor {silor['throughput_txn_s'] / 1e6:.3f} M"
          f"  silor/none {whole[-1]:.3f}  in checkpoints {during[-1] if ck else float('nan'):.3f}"
          f"  outside {rest[-1]:.3f}")
print(f"median silor/none {statistics.median(whole):.3f} (min {min(whole):.3f}, max {max(whole):.3f});"
      f" windows in checkpoints {statistics.median(during):.3f}, outside {statistics.median(rest):.3f}")
PY
