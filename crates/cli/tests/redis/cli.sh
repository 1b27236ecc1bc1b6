#!/usr/bin/env bash
# redis-cli and redis-benchmark against `epochdb serve`: commands through
# redis-cli's own argument handling (also inline and piped), then a short
# redis-benchmark run that must report no errors. Run by
# crates/cli/tests/redis_clients.rs with EPOCHDB_BIN set.
set -euo pipefail
EPOCHDB_BIN=${EPOCHDB_BIN:-epochdb}
dir=$(mktemp -d)
log="$dir/serve.log"
"$EPOCHDB_BIN" serve --dir "$dir/db" --port 0 --epoch-ms 2 2>"$log" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's/.*ready to accept connections on [^ ]*:\([0-9]*\)$/\1/p' "$log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAILED: server did not start"; cat "$log"; exit 1; }
cli() { redis-cli -p "$port" "$@"; }
expect() {
  local want=$1; shift
  local got
  got=$(cli "$@")
  if [ "$got" != "$want" ]; then
    echo "FAILED: redis-cli $* -> '$got', want '$want'"
    exit 1
  fi
}
expect PONG ping
expect OK set greeting "hello world"
expect "hello world" get greeting
expect 1 exists greeting
expect 3 incrby counter 3
expect "" get missing
expect 12 append greeting "!"
expect OK mset a 1 b 2
expect $'1\n2' mget a b
expect 2 del a b
expect OK select 0
# Pipe mode: many commands on stdin, answered in order.
got=$(printf 'SET p1 x\nGET p1\nINCR n\nINCR n\n' | cli)
[ "$got" = $'OK\nx\n1\n2' ] || { echo "FAILED: piped commands -> $got"; exit 1; }
# --pipe: the raw protocol mass-insert path.
printf '*3\r\n$3\r\nSET\r\n$2\r\nm1\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$2\r\nm2\r\n$1\r\n2\r\n' | cli --pipe | grep -q "errors: 0, replies: 2" \
  || { echo "FAILED: redis-cli --pipe"; exit 1; }
expect 2 get m2
cli info server | grep -q "redis_version" || { echo "FAILED: INFO"; exit 1; }
cli --scan --pattern 'm*' | sort | tr '\n' ' ' | grep -q "^m1 m2 $" || { echo "FAILED: --scan"; exit 1; }
err=$(cli nosuchcommand foo)
[[ "$err" == "ERR unknown command 'nosuchcommand', with args beginning with: 'foo' "* ]] || { echo "FAILED: unknown command -> $err"; exit 1; }

# redis-benchmark: a short run of the issue's commands, durable, with and
# without pipelining; it must finish without errors.
for pipeline in 1 16; do
  out=$(redis-benchmark -p "$port" -c 20 -n 2000 -P "$pipeline" -t set,get,incr,mset -q 2>&1)
  echo "$out" | tr '\r' '\n' | grep "requests per second" | sed "s/^/  -P $pipeline /"
  if echo "$out" | grep -qi "error"; then
    echo "FAILED: redis-benchmark reported errors: $out"
    exit 1
  fi
  [ "$(echo "$out" | tr '\r' '\n' | grep -c 'requests per second')" -eq 4 ] || { echo "FAILED: redis-benchmark -P $pipeline: $out"; exit 1; }
done
cli shutdown >/dev/null 2>&1 || true
wait $pid
echo "redis-cli and redis-benchmark: all answers as expected, no errors"
