"""kill -9 through a real client: redis-py writes keys and moves money
between accounts with MULTI/EXEC while the server is SIGKILLed at random
moments. After every restart, every write the server acknowledged must be
there with its value, and the accounts must still hold exactly the money
they started with.

    python3 killtest.py [--cycles N] [--seed S] [--durability silor|log|wal]

Run by crates/cli/tests/redis_clients.rs with a few cycles; set
EPOCHDB_KILL_CYCLES for a long run."""

import argparse
import random
import sys
import tempfile
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from server import Server, check

ACCOUNTS = 10
INITIAL = 1000
CLIENTS = 4


def client_loop(port, thread, cycle, rng, acked, stop, counts):
    # No retries: a killed server must end the loop at once.
    r = redis.Redis(port=port, socket_timeout=10, protocol=2, retry=Retry(NoBackoff(), 0))
    n = 0
    try:
        while not stop.is_set():
            n += 1
            if rng.random() < 0.5:
                key = f"w:{cycle}:{thread}:{n}"
                value = f"{cycle}.{thread}.{n}"
                if r.set(key, value) is True:
                    acked.append((key, value.encode()))
            else:
                a, b = rng.sample(range(ACCOUNTS), 2)
                amount = rng.randint(1, 50)
                with r.pipeline(transaction=True) as p:
                    p.decrby(f"acct:{a}", amount).incrby(f"acct:{b}", amount)
                    p.execute()
                counts["transfers"] += 1
            if n % 50 == 0 and thread == 0:
                try:
                    r.bgsave()  # checkpoints in flight when the kill comes
                except redis.ResponseError:
                    pass  # one already running, or a mode without them
    except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError, OSError):
        pass  # the server was killed


def verify(port, acked, cycle):
    r = redis.Redis(port=port, protocol=2)
    balances = r.mget([f"acct:{i}" for i in range(ACCOUNTS)])
    check(all(b is not None for b in balances), f"cycle {cycle}: an account vanished: {balances}")
    total = sum(int(b) for b in balances)
    check(total == ACCOUNTS * INITIAL, f"cycle {cycle}: money was created or lost: total {total}")
    for start in range(0, len(acked), 1000):
        chunk = acked[start:start + 1000]
        got = r.mget([k for k, _ in chunk])
        for (key, want), have in zip(chunk, got):
            check(have == want, f"cycle {cycle}: acknowledged write {key} = {want!r} reads {have!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--durability", default="silor")
    ap.add_argument("--epoch-ms", default="2")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"killtest: {args.cycles} cycles, durability {args.durability}, seed {args.seed}", flush=True)
    acked = []
    counts = {"transfers": 0}
    with tempfile.TemporaryDirectory() as d:
        serve_args = ("--dir", d, "--durability", args.durability, "--epoch-ms", args.epoch_ms,
                      "--checkpoint-interval", "1")
        with Server(*serve_args) as s:
            r = redis.Redis(port=s.port, protocol=2)
            with r.pipeline(transaction=True) as p:
                for i in range(ACCOUNTS):
                    p.set(f"acct:{i}", INITIAL)
                p.execute()
            s.kill9()
        begun = time.time()
        for cycle in range(1, args.cycles + 1):
            with Server(*serve_args) as s:
                verify(s.port, acked, cycle)
                stop = threading.Event()
                threads = [
                    threading.Thread(
                        target=client_loop,
                        args=(s.port, t, cycle, random.Random(rng.random()), acked, stop, counts),
                    )
                    for t in range(CLIENTS)
                ]
                for t in threads:
                    t.start()
                time.sleep(rng.uniform(0.05, 0.8))
                s.kill9()
                stop.set()
                for t in threads:
                    t.join()
            if cycle % 10 == 0 or cycle == args.cycles:
                print(f"killtest: {cycle}/{args.cycles} kills, {len(acked)} acknowledged writes and "
                      f"{counts['transfers']} transfers checked, {time.time() - begun:.0f} s", flush=True)
        with Server(*serve_args) as s:
            verify(s.port, acked, args.cycles + 1)
    print(f"killtest: 0 lost acknowledged writes, 0 conservation violations in {args.cycles} kills")


if __name__ == "__main__":
    main()
