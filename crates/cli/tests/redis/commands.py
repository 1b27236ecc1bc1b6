"""redis-py drives every command epochdb serve implements and compares the
replies with Redis's documented ones. Run by crates/cli/tests/redis_clients.rs
with EPOCHDB_BIN set; exits non-zero on the first difference."""

import sys
import tempfile
import time

import redis

from server import Server, check


def expect(got, want, what):
    check(got == want, f"{what}: got {got!r}, want {want!r}")


def expect_error(call, fragment, what):
    try:
        call()
    except redis.ResponseError as e:
        check(fragment in str(e), f"{what}: error {e!r} lacks {fragment!r}")
        return
    check(False, f"{what}: no error raised")


def run(r):
    expect(r.ping(), True, "PING")
    expect(r.echo("hi"), b"hi", "ECHO")
    expect(r.set("k", "v"), True, "SET")
    expect(r.get("k"), b"v", "GET")
    expect(r.get("missing"), None, "GET missing")
    expect(r.set("k", "w", nx=True), None, "SET NX on a present key")
    expect(r.set("new", "1", nx=True), True, "SET NX on a missing key")
    expect(r.set("absent", "1", xx=True), None, "SET XX on a missing key")
    expect(r.set("k", "x", xx=True, get=True), b"v", "SET XX GET")
    expect(r.getset("k", "y"), b"x", "GETSET")
    expect(r.setnx("k", "z"), False, "SETNX present")
    expect(r.setnx("k2", "z"), True, "SETNX missing")
    expect(r.delete("k", "k2", "nope"), 2, "DEL")
    expect(r.unlink("new"), 1, "UNLINK")
    expect(r.exists("k", "new"), 0, "EXISTS none")
    expect(r.mset({"a": "1", "b": "2"}), True, "MSET")
    expect(r.mget("a", "b", "c"), [b"1", b"2", None], "MGET")
    expect(r.msetnx({"b": "9", "c": "3"}), False, "MSETNX with a present key")
    expect(r.msetnx({"c": "3", "d": "4"}), True, "MSETNX all missing")
    expect(r.exists("a", "b", "c", "d", "a"), 5, "EXISTS counts repeats")
    expect(r.incr("n"), 1, "INCR missing")
    expect(r.incrby("n", 41), 42, "INCRBY")
    expect(r.decr("n"), 41, "DECR")
    expect(r.decrby("n", 40), 1, "DECRBY")
    r.set("s", "text")
    expect_error(lambda: r.incr("s"), "not an integer", "INCR on text")
    expect(r.append("s", "++"), 6, "APPEND")
    expect(r.append("fresh", "abc"), 3, "APPEND missing")
    expect(r.strlen("s"), 6, "STRLEN")
    expect(r.strlen("nope"), 0, "STRLEN missing")
    expect(r.getdel("fresh"), b"abc", "GETDEL")
    expect(r.type("s"), b"string", "TYPE string")
    expect(r.type("nope"), b"none", "TYPE none")

    # Expiry.
    expect(r.ttl("s"), -1, "TTL without expiry")
    expect(r.ttl("nope"), -2, "TTL missing")
    expect(r.expire("s", 100), True, "EXPIRE")
    check(98 <= r.ttl("s") <= 100, "TTL after EXPIRE")
    check(99_000 <= r.pttl("s") <= 100_000, "PTTL after EXPIRE")
    expect(r.persist("s"), True, "PERSIST")
    expect(r.ttl("s"), -1, "TTL after PERSIST")
    expect(r.pexpire("s", 100_000), True, "PEXPIRE")
    expect(r.expire("nope", 10), False, "EXPIRE missing")
    expect(r.set("t", "v", px=100), True, "SET PX")
    expect(r.set("t2", "v", ex=100), True, "SET EX")
    check(r.ttl("t2") == 100, "SET EX sets the TTL")
    expect(r.set("t2", "w", keepttl=True), True, "SET KEEPTTL")
    check(r.ttl("t2") == 100, "KEEPTTL keeps it")
    expect(r.execute_command("SETEX", "t3", 50, "v"), True, "SETEX")
    expect(r.execute_command("PSETEX", "t4", 50_000, "v"), True, "PSETEX")
    time.sleep(0.2)
    expect(r.get("t"), None, "expired key reads as missing")
    expect(r.exists("t"), 0, "expired key does not exist")
    expect(r.expire("t2", -1), True, "EXPIRE in the past deletes")
    expect(r.get("t2"), None, "deleted by a past expiry")
    expect(r.expireat("t3", int(time.time()) + 1000), True, "EXPIREAT")
    expect(r.pexpireat("t4", int(time.time() * 1000) + 1_000_000), True, "PEXPIREAT")

    # Keys, SCAN, DBSIZE, FLUSHDB.
    r.flushdb()
    expect(r.dbsize(), 0, "DBSIZE after FLUSHDB")
    for i in range(300):
        r.set(f"user:{i:03}", i)
        r.set(f"item:{i:03}", i)
    expect(r.dbsize(), 600, "DBSIZE")
    expect(sorted(r.keys("user:1?0")), [f"user:1{d}0".encode() for d in range(10)], "KEYS glob")
    expect(len(r.keys("*")), 600, "KEYS *")
    seen = list(r.scan_iter(match="item:*", count=25))
    expect(len(seen), 300, "SCAN MATCH visits every key")
    expect(len(set(seen)), 300, "SCAN returns no duplicates here")
    cursor, batch = r.scan(0, count=10)
    check(cursor != 0 and len(batch) == 10, "SCAN COUNT bounds a call")
    expect(r.flushall(), True, "FLUSHALL")
    expect(r.dbsize(), 0, "empty")

    # MULTI/EXEC, WATCH.
    r.set("acct:a", 100)
    r.set("acct:b", 0)
    with r.pipeline(transaction=True) as p:
        p.decrby("acct:a", 30).incrby("acct:b", 30).get("acct:a")
        expect(p.execute(), [70, 30, b"70"], "MULTI/EXEC")
    kwargs = r.connection_pool.connection_kwargs
    other = redis.Redis(port=kwargs["port"], password=kwargs.get("password"))
    with r.pipeline(transaction=True) as p:
        p.watch("acct:a")
        other.set("acct:a", 70)  # a write, even of the same value
        p.multi()
        p.set("acct:a", 0)
        try:
            p.execute()
            check(False, "EXEC after a WATCHed change must fail")
        except redis.WatchError:
            pass
    expect(r.get("acct:a"), b"70", "the aborted EXEC wrote nothing")

    def transfer(pipe):
        a = int(pipe.get("acct:a"))
        pipe.multi()
        pipe.set("acct:a", a - 10)
        pipe.incrby("acct:b", 10)

    r.transaction(transfer, "acct:a")
    expect(r.mget("acct:a", "acct:b"), [b"60", b"40"], "WATCH transaction helper")
    expect_error(lambda: r.execute_command("EXEC"), "EXEC without MULTI", "EXEC alone")
    expect_error(lambda: r.execute_command("DISCARD"), "DISCARD without MULTI", "DISCARD alone")

    # Connection and server commands.
    expect(r.execute_command("SELECT", 0), True, "SELECT 0")
    expect_error(lambda: r.execute_command("SELECT", 1), "out of range", "SELECT 1")
    expect(r.client_setname("tester"), True, "CLIENT SETNAME")
    check(r.client_getname() in ("tester", b"tester"), "CLIENT GETNAME")
    check(isinstance(r.client_id(), int), "CLIENT ID")
    check(r.command_count() > 40, "COMMAND COUNT")
    commands = r.command()
    check(commands["get"]["arity"] == 2 and commands["mset"]["step_count"] == 2, "COMMAND metadata")
    expect(r.config_get("appendonly"), {"appendonly": "yes"}, "CONFIG GET appendonly")
    expect(r.config_get("save"), {"save": ""}, "CONFIG GET save")
    expect(r.config_set("maxclients", 500), True, "CONFIG SET maxclients")
    expect(r.config_get("maxclients"), {"maxclients": "500"}, "CONFIG GET after SET")
    expect_error(lambda: r.config_set("port", 1), "cannot be changed", "CONFIG SET port")
    info = r.info()
    check(info["durability"] == "silor", "INFO persistence names the mode")
    check("persistent_epoch" in info and "connected_clients" in info, "INFO sections")
    before = r.lastsave()
    expect(r.save(), True, "SAVE")
    check(r.lastsave() >= before, "LASTSAVE")
    info = r.info("persistence")
    check(info["checkpoints"] >= 1 and info["checkpoint_last_time"] >= before.timestamp() - 1,
          "INFO: the last checkpoint and when")
    check("checkpoint_last_seconds" in info and "durable_lsn" in info, "INFO: checkpoint duration, LSN")
    expect(r.bgsave(), True, "BGSAVE")
    expect_error(lambda: r.execute_command("NOSUCHCMD", "x"), "unknown command 'NOSUCHCMD'", "unknown command")
    expect_error(lambda: r.execute_command("GET"), "wrong number of arguments for 'get' command", "arity")
    proto = r.connection_pool.connection_kwargs.get("protocol") or 3
    hello = r.execute_command("HELLO", proto)
    if isinstance(hello, list):  # RESP2: a flat list of pairs
        hello = dict(zip(hello[::2], hello[1::2]))
    check(hello.get(b"proto", hello.get("proto")) == proto, f"HELLO {proto}: {hello!r}")


def main():
    with tempfile.TemporaryDirectory() as d:
        with Server("--dir", d, "--epoch-ms", "2", "--requirepass", "pw") as s:
            r = redis.Redis(port=s.port, password="pw")
            try:
                redis.Redis(port=s.port).get("x")
                check(False, "a client without the password must be refused")
            except redis.AuthenticationError:
                pass
            run(r)  # RESP3: redis-py's default protocol
            r.flushdb()
            run(redis.Redis(port=s.port, password="pw", protocol=2))
            check(s.stop() == 0, "SIGTERM is a clean shutdown")
        # Reopen: the data written above is still there.
        with Server("--dir", d, "--epoch-ms", "2") as s:
            r = redis.Redis(port=s.port)
            expect(r.mget("acct:a", "acct:b"), [b"60", b"40"], "state after restart")
            try:
                r.shutdown()
            except redis.ConnectionError:
                pass
            check(s.proc.wait(timeout=30) == 0, "SHUTDOWN exits cleanly")
    print("redis-py: every command answered as documented")


if __name__ == "__main__":
    main()
