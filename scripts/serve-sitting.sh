#!/usr/bin/env bash
# One benchmark sitting for `epochdb serve` (issue: the server), everything
# back to back on this machine:
#   1. the durable, unpipelined SET rate of 50 clients under each durability
#      mode and epoch length (what `serve`'s defaults are chosen from);
#   2. redis-benchmark (-c 50, -P 1 and -P 16; SET, GET, INCR, MSET) against
#      epochdb serve in each mode and against Debian's redis-server with
#      appendfsync always, everysec and no persistence, REPEATS times in a
#      rotating order.
# Without EPOCH_MS it runs part 1 (OUT/sweep.tsv); with it, part 2 with
# epochdb at that epoch length (OUT/compare.tsv); one line per run. Needs redis-server and redis-tools (apt-get install
# redis-server redis-tools) and a release build (cargo build --release).
#
#   scripts/serve-sitting.sh OUT [REPEATS] [EPOCH_MS]
set -euo pipefail
out=${1:?usage: serve-sitting.sh OUT [REPEATS] [EPOCH_MS]}
repeats=${2:-3}
default_epoch=${3:-}
bin=$(cd "$(dirname "$0")/.." && pwd)/target/release/epochdb
mkdir -p "$out"
scratch=$(mktemp -d /tmp/serve-sitting.XXXX)
trap 'pkill -f "epochdb serve --dir $scratch" 2>/dev/null || true; pkill -f "redis-server.*$scratch" 2>/dev/null || true; rm -rf "$scratch"' EXIT
port=6400

start_epochdb() { # mode epoch_ms [epoch_min_us [threads]]
  rm -rf "$scratch/db"
  "$bin" serve --dir "$scratch/db" --port $port --durability "$1" --epoch-ms "$2" --epoch-min-us "${3:-0}" \
    --threads "${4:-0}" 2>"$scratch/serve.log" &
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "epochdb did not start"; cat "$scratch/serve.log"; exit 1
}
start_redis() { # always|everysec|none
  rm -rf "$scratch/redis"; mkdir -p "$scratch/redis"
  if [ "$1" = none ]; then
    redis-server --port $port --dir "$scratch/redis" --save '' --appendonly no --daemonize yes >/dev/null
  else
    redis-server --port $port --dir "$scratch/redis" --save '' --appendonly yes --appendfsync "$1" --daemonize yes >/dev/null
  fi
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && return; sleep 0.1; done
}
stop_server() {
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 || return 0; sleep 0.1; done
}
# bench TEST PIPELINE REQUESTS -> "rps p50"
bench() {
  redis-benchmark -p $port -c 50 -P "$2" -n "$3" -t "$1" -q 2>/dev/null | tr '\r' '\n' \
    | grep "requests per second" | tail -1 \
    | sed -E 's/.*: ([0-9.]+) requests per second, p50=([0-9.]+) msec.*/\1 \2/'
}

echo "# sitting $(date -u +%FT%TZ) on $(nproc) cores" | tee "$out/sitting.txt"
if [ -z "$default_epoch" ]; then
echo -e "mode\tepoch_ms\trepeat\trps\tp50_ms" > "$out/sweep.tsv"
for r in $(seq "$repeats"); do
  for mode in silor log wal; do
    for e in 1 2 5 10 40; do
      n=$(( 200000 / e )); [ $n -lt 4000 ] && n=4000
      start_epochdb $mode $e
      read -r rps p50 < <(bench set 1 $n)
      stop_server
      echo -e "$mode\t$e\t$r\t$rps\t$p50" | tee -a "$out/sweep.tsv"
    done
  done
done
exit 0
fi
echo -e "target\ttest\tpipeline\trepeat\trps\tp50_ms" > "$out/compare.tsv"
# epochdb-* run serve's defaults (fixed epochs, one engine thread per
# core but one: one on 2 cores); epochdb-silor-kick adds the experimental
# --epoch-min-us 500 (a waiting reply ends its epoch early);
# epochdb-MODE-1t runs one engine thread (--threads 1), as Redis runs
# one. TARGETS (space-separated) overrides the list.
read -r -a targets <<< "${TARGETS:-epochdb-silor epochdb-silor-kick epochdb-silor-1t epochdb-log epochdb-wal epochdb-wal-1t epochdb-none redis-always redis-everysec redis-none}"
for r in $(seq "$repeats"); do
  # Rotate the order each repeat so no target always runs first or last.
  for i in $(seq 0 $(( ${#targets[@]} - 1 ))); do
    t=${targets[$(( (i + r - 1) % ${#targets[@]} ))]}
    for p in 1 16; do
      case $t in
        epochdb-silor-kick) start_epochdb silor "$default_epoch" 500 ;;
        epochdb-*-1t) m=${t#epochdb-}; start_epochdb "${m%-1t}" "$default_epoch" 0 1 ;;
        epochdb-*) start_epochdb "${t#epochdb-}" "$default_epoch" 0 ;;
        redis-*) start_redis "${t#redis-}" ;;
      esac
      for test in set get incr mset; do
        n=$(( p == 1 ? 100000 : 1000000 ))
        read -r rps p50 < <(bench $test $p $n)
        echo -e "$t\t$test\t$p\t$r\t$rps\t$p50" | tee -a "$out/compare.tsv"
      done
      stop_server
    done
  done
done
