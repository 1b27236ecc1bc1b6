"""Scale-out through an existing proxy: two `epochdb serve` shards behind
twemproxy (Debian's nutcracker) on loopback. redis-py and redis-benchmark
go through the proxy; every key must land on exactly one shard, both shards
must get keys, and reads through the proxy must see every write.

Run by crates/cli/tests/redis_clients.rs (needs `nutcracker`)."""

import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings

import redis

from server import Server, check


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    with tempfile.TemporaryDirectory() as d:
        shards = [Server("--dir", os.path.join(d, f"shard{i}"), "--epoch-ms", "2") for i in range(2)]
        for s in shards:
            s.start()
        proxy_port, stats_port = free_port(), free_port()
        conf = os.path.join(d, "nutcracker.yml")
        with open(conf, "w") as f:
            f.write(
                "epochdb:\n"
                f"  listen: 127.0.0.1:{proxy_port}\n"
                "  hash: fnv1a_64\n"
                "  distribution: ketama\n"
                "  redis: true\n"
                "  auto_eject_hosts: false\n"
                "  server_connections: 4\n"
                "  servers:\n"
                + "".join(f"    - 127.0.0.1:{s.port}:1 shard{i}\n" for i, s in enumerate(shards))
            )
        proxy = subprocess.Popen(
            ["nutcracker", "-c", conf, "-s", str(stats_port), "-o", os.path.join(d, "proxy.log"),
             "-p", os.path.join(d, "proxy.pid")]
        )
        try:
            # twemproxy speaks RESP2 and forwards only the data commands it
            # knows: no HELLO, no CLIENT SETINFO.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                r = redis.Redis(port=proxy_port, protocol=2, lib_name=None, lib_version=None)
            for _ in range(50):
                try:
                    r.get("probe")
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            n = 2000
            for i in range(n):
                check(r.set(f"key:{i}", i) is True, f"SET key:{i} through the proxy")
            for i in range(0, n, 100):
                got = r.mget([f"key:{j}" for j in range(i, i + 100)])
                check(got == [str(j).encode() for j in range(i, i + 100)], f"MGET through the proxy at {i}")
            check(r.incrby("key:0", 5) == 5, "INCRBY through the proxy")
            check(r.delete("key:1", "key:2") == 2, "multi-key DEL through the proxy")
            sizes = [redis.Redis(port=s.port, protocol=2).dbsize() for s in shards]
            check(all(size > n // 4 for size in sizes), f"both shards hold keys: {sizes}")
            check(sum(sizes) == n - 2, f"every key on exactly one shard: {sizes}")
            out = subprocess.run(
                ["redis-benchmark", "-p", str(proxy_port), "-c", "20", "-n", "4000", "-t", "set,get", "-q"],
                capture_output=True, text=True, timeout=120,
            ).stdout.replace("\r", "\n")
            rates = [line for line in out.splitlines() if "requests per second" in line]
            check(len(rates) == 2 and "error" not in out.lower(), f"redis-benchmark through the proxy: {out}")
            for line in rates:
                print("  through twemproxy:", line.strip())
            print(f"twemproxy: 2 shards hold {sizes} keys; every read through the proxy saw its write")
        finally:
            proxy.kill()
            proxy.wait()
            for s in shards:
                s.stop()


if __name__ == "__main__":
    main()
