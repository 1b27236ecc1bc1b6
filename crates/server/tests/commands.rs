//! Why this exists: the server must answer like Redis for the commands it
//! implements, keep replies in request order under pipelining, and map
//! MULTI/EXEC/WATCH onto one OCC transaction. (redis-py drives the same
//! commands from Python in crates/cli/tests/redis_clients.rs.)

mod common;

use common::{in_memory, start, Client, Reply};
use epochdb_engine::DurabilityKind;
use epochdb_server::Settings;

fn bulk(s: &str) -> Reply {
    Reply::bulk(s.as_bytes())
}

#[test]
fn pipelined_replies_come_back_in_request_order() {
    let server = start(in_memory());
    let mut c = Client::connect(server.local_addr());
    let mut wire = Vec::new();
    for i in 0..500 {
        wire.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n$4\r\nk{i:03}\r\n$3\r\n{i:03}\r\n").as_bytes(),
        );
        wire.extend_from_slice(format!("*2\r\n$3\r\nGET\r\n$4\r\nk{i:03}\r\n").as_bytes());
    }
    c.send_raw(&wire).unwrap();
    for i in 0..500 {
        assert_eq!(c.read().unwrap(), Reply::ok());
        assert_eq!(c.read().unwrap(), bulk(&format!("{i:03}")));
    }
    assert_eq!(c.run("DBSIZE"), Reply::Int(500));
}

/// Arguments borrow the connection's read buffer until the next request
/// is parsed; what MULTI queues must outlive that, across reads that
/// reuse the buffer. The blocks below arrive in pieces that cut requests
/// at odd places, with inline requests mixed in.
#[test]
fn queued_commands_keep_their_arguments_across_reads() {
    let server = start(in_memory());
    let mut c = Client::connect(server.local_addr());
    let mut wire = Vec::new();
    for block in 0..40 {
        wire.extend_from_slice(b"MULTI\r\n");
        for i in 0..10 {
            let (key, value) = (format!("b{block}k{i}"), format!("{:0>300}", block * 10 + i));
            wire.extend_from_slice(
                format!(
                    "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
                    key.len(),
                    value.len()
                )
                .as_bytes(),
            );
        }
        wire.extend_from_slice(b"EXEC\r\n");
    }
    for piece in wire.chunks(777) {
        c.send_raw(piece).unwrap();
    }
    for _ in 0..40 {
        assert_eq!(c.read().unwrap(), Reply::ok());
        for _ in 0..10 {
            assert_eq!(c.read().unwrap(), Reply::Simple("QUEUED".into()));
        }
        assert_eq!(c.read().unwrap(), Reply::Array(Some(vec![Reply::ok(); 10])));
    }
    for block in 0..40 {
        for i in 0..10 {
            let value = format!("{:0>300}", block * 10 + i);
            assert_eq!(c.run(&format!("GET b{block}k{i}")), bulk(&value));
        }
    }
}

#[test]
fn strings_counters_and_expiry_answer_like_redis() {
    let server = start(in_memory());
    let mut c = Client::connect(server.local_addr());
    assert_eq!(c.run("SET a 1 NX"), Reply::ok());
    assert_eq!(c.run("SET a 2 NX"), Reply::Bulk(None));
    assert_eq!(c.run("SET a 3 XX GET"), bulk("1"));
    assert_eq!(c.run("SET b 3 XX"), Reply::Bulk(None));
    assert_eq!(c.run("GETSET a 4"), bulk("3"));
    assert_eq!(c.run("SETNX a 5"), Reply::Int(0));
    assert_eq!(c.run("INCR a"), Reply::Int(5));
    assert_eq!(c.run("INCRBY a -10"), Reply::Int(-5));
    assert_eq!(c.run("DECRBY a 5"), Reply::Int(-10));
    assert_eq!(c.run("DECR a"), Reply::Int(-11));
    assert_eq!(c.run("SET s hello"), Reply::ok());
    assert_eq!(
        c.run("INCR s"),
        Reply::Error("ERR value is not an integer or out of range".into())
    );
    assert_eq!(c.run("SET big 9223372036854775807"), Reply::ok());
    assert_eq!(
        c.run("INCR big"),
        Reply::Error("ERR increment or decrement would overflow".into())
    );
    assert_eq!(c.run("APPEND s _world"), Reply::Int(11));
    assert_eq!(c.run("STRLEN s"), Reply::Int(11));
    assert_eq!(c.run("MSET x 1 y 2"), Reply::ok());
    assert_eq!(c.run("MSETNX y 3 z 4"), Reply::Int(0));
    assert_eq!(
        c.run("MGET x y z"),
        Reply::Array(Some(vec![bulk("1"), bulk("2"), Reply::Bulk(None)]))
    );
    assert_eq!(c.run("EXISTS x y z x"), Reply::Int(3));
    assert_eq!(c.run("DEL x z"), Reply::Int(1));
    assert_eq!(c.run("UNLINK y"), Reply::Int(1));
    assert_eq!(c.run("TTL s"), Reply::Int(-1));
    assert_eq!(c.run("TTL nosuch"), Reply::Int(-2));
    assert_eq!(c.run("EXPIRE s 100"), Reply::Int(1));
    assert_eq!(c.run("TTL s"), Reply::Int(100));
    assert_eq!(c.run("PERSIST s"), Reply::Int(1));
    assert_eq!(c.run("PTTL s"), Reply::Int(-1));
    assert_eq!(c.run("SET e v PX 50"), Reply::ok());
    std::thread::sleep(std::time::Duration::from_millis(80));
    assert_eq!(
        c.run("GET e"),
        Reply::Bulk(None),
        "expired keys read as missing"
    );
    assert_eq!(c.run("EXISTS e"), Reply::Int(0));
    assert_eq!(
        c.run("SET e v EX 0"),
        Reply::Error("ERR invalid expire time in 'set' command".into())
    );
    assert_eq!(
        c.run("SET e v BOGUS"),
        Reply::Error("ERR syntax error".into())
    );
    assert_eq!(
        c.run("GET"),
        Reply::Error("ERR wrong number of arguments for 'get' command".into())
    );
    assert_eq!(
        c.run("NOSUCH a b"),
        Reply::Error("ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' ".into())
    );
    assert_eq!(c.run("SELECT 0"), Reply::ok());
    assert_eq!(
        c.run("SELECT 1"),
        Reply::Error("ERR DB index is out of range".into())
    );
    assert_eq!(c.run("PING"), Reply::Simple("PONG".into()));
    assert_eq!(c.run("ECHO hi"), bulk("hi"));
}

#[test]
fn expired_keys_nobody_touches_are_swept() {
    let server = start(in_memory());
    let mut c = Client::connect(server.local_addr());
    for i in 0..50 {
        assert_eq!(c.run(&format!("SET gone{i} v PX 20")), Reply::ok());
    }
    c.run("SET stays v");
    let expired = || {
        server
            .state()
            .stats
            .expired_keys
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while expired() < 50 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        expired(),
        50,
        "the sweep deletes every expired key, and only those"
    );
    assert_eq!(c.run("DBSIZE"), Reply::Int(1));
    assert_eq!(c.run("GET stays"), bulk("v"));
}

#[test]
fn scan_visits_every_key_once_across_cursors_and_keys_matches_globs() {
    let server = start(in_memory());
    let mut c = Client::connect(server.local_addr());
    for i in 0..250 {
        c.run(&format!("SET user:{i:04} x"));
        c.run(&format!("SET item:{i:04} y"));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        calls += 1;
        let Reply::Array(Some(parts)) = c.run(&format!("SCAN {cursor} MATCH user:* COUNT 40"))
        else {
            panic!()
        };
        let Reply::Bulk(Some(next)) = &parts[0] else {
            panic!()
        };
        let Reply::Array(Some(keys)) = &parts[1] else {
            panic!()
        };
        for k in keys {
            let Reply::Bulk(Some(k)) = k else { panic!() };
            assert!(k.starts_with(b"user:"));
            assert!(seen.insert(k.clone()), "SCAN returned a key twice");
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 250);
    assert!(calls >= 7, "COUNT bounds each call ({calls} calls)");
    let Reply::Array(Some(keys)) = c.run("KEYS item:00[0-4]?") else {
        panic!()
    };
    assert_eq!(keys.len(), 50);
    assert_eq!(c.run("FLUSHDB"), Reply::ok());
    assert_eq!(c.run("DBSIZE"), Reply::Int(0));
    assert!(
        matches!(c.run("SCAN 12345678"), Reply::Error(_)),
        "unknown cursors are errors"
    );
}

#[test]
fn multi_exec_is_one_transaction_and_watch_detects_changes() {
    let server = start(in_memory());
    let mut a = Client::connect(server.local_addr());
    let mut b = Client::connect(server.local_addr());
    a.run("SET balance 100");
    assert_eq!(a.run("MULTI"), Reply::ok());
    assert_eq!(a.run("DECRBY balance 30"), Reply::Simple("QUEUED".into()));
    assert_eq!(a.run("INCRBY other 30"), Reply::Simple("QUEUED".into()));
    assert_eq!(
        b.run("GET balance"),
        bulk("100"),
        "queued commands have not run"
    );
    assert_eq!(
        a.run("EXEC"),
        Reply::Array(Some(vec![Reply::Int(70), Reply::Int(30)]))
    );

    // WATCH: a change by another client between WATCH and EXEC aborts.
    assert_eq!(a.run("WATCH balance"), Reply::ok());
    assert_eq!(b.run("SET balance 70"), Reply::ok(), "even the same value");
    a.run("MULTI");
    a.run("SET balance 0");
    assert_eq!(a.run("EXEC"), Reply::Array(None));
    assert_eq!(b.run("GET balance"), bulk("70"));

    // No change: EXEC runs.
    a.run("WATCH balance");
    a.run("MULTI");
    a.run("SET balance 1");
    assert_eq!(a.run("EXEC"), Reply::Array(Some(vec![Reply::ok()])));

    // An error while queueing aborts the whole block.
    a.run("MULTI");
    assert!(matches!(a.run("NOSUCH"), Reply::Error(_)));
    a.run("SET balance 2");
    assert_eq!(
        a.run("EXEC"),
        Reply::Error("EXECABORT Transaction discarded because of previous errors.".into())
    );
    assert_eq!(a.run("GET balance"), bulk("1"));
    assert_eq!(a.run("EXEC"), Reply::Error("ERR EXEC without MULTI".into()));
    assert_eq!(
        a.run("DISCARD"),
        Reply::Error("ERR DISCARD without MULTI".into())
    );
    a.run("MULTI");
    assert_eq!(
        a.run("MULTI"),
        Reply::Error("ERR MULTI calls can not be nested".into())
    );
    assert_eq!(a.run("DISCARD"), Reply::ok());
}

#[test]
fn auth_gates_commands_and_maxclients_refuses_extra_clients() {
    let server = start(Settings {
        requirepass: Some("s3cret".into()),
        maxclients: 3,
        ..in_memory()
    });
    let mut c = Client::connect(server.local_addr());
    assert_eq!(
        c.run("GET a"),
        Reply::Error("NOAUTH Authentication required.".into())
    );
    assert_eq!(
        c.run("AUTH wrong"),
        Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
    );
    assert_eq!(c.run("AUTH default s3cret"), Reply::ok());
    assert_eq!(c.run("SET a 1"), Reply::ok());

    // Before AUTH, requests are held to ten small arguments.
    let mut u = Client::connect(server.local_addr());
    u.send_raw(format!("*2\r\n$3\r\nGET\r\n${}\r\n", 20_000).as_bytes())
        .unwrap();
    assert_eq!(
        u.read().unwrap(),
        Reply::Error("ERR Protocol error: invalid bulk length".into())
    );
    assert!(u.is_closed());
    // The server closes the socket before its connection task ends and
    // gives back its client slot: wait for that, or `_third` may be the
    // one turned away.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let Reply::Bulk(Some(info)) = c.run("INFO clients") else {
            panic!("INFO clients")
        };
        if String::from_utf8_lossy(&info).contains("connected_clients:1\r\n") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the closed client is still counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    let _second = Client::connect(server.local_addr());
    let _third = Client::connect(server.local_addr());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut fourth = Client::connect(server.local_addr());
    assert_eq!(
        fourth.read().unwrap(),
        Reply::Error("ERR max number of clients reached".into())
    );
}

#[test]
fn durable_writes_survive_a_restart_and_config_reports_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        durability: DurabilityKind::Silor,
        dir: Some(dir.path().to_path_buf()),
        threads: 2,
        epoch_interval: std::time::Duration::from_millis(2),
        ..Settings::default()
    };
    {
        let server = start(settings.clone());
        let mut c = Client::connect(server.local_addr());
        for i in 0..100 {
            assert_eq!(c.run(&format!("SET k{i} v{i}")), Reply::ok());
        }
        c.run("MULTI");
        c.run("SET m1 a");
        c.run("SET m2 b");
        c.run("EXEC");
        assert_eq!(c.run("SAVE"), Reply::ok());
        c.run("SET after-save yes");
        let Reply::Array(Some(cfg)) = c.run("CONFIG GET appendonly") else {
            panic!()
        };
        assert_eq!(cfg, vec![bulk("appendonly"), bulk("yes")]);
        let Reply::Bulk(Some(info)) = c.run("INFO persistence") else {
            panic!()
        };
        let info = String::from_utf8(info).unwrap();
        assert!(
            info.contains("durability:silor") && info.contains("checkpoints:1"),
            "{info}"
        );
        server.stop().unwrap();
    }
    let server = start(settings);
    let mut c = Client::connect(server.local_addr());
    assert_eq!(c.run("GET k99"), bulk("v99"));
    assert_eq!(
        c.run("MGET m1 m2 after-save"),
        Reply::Array(Some(vec![bulk("a"), bulk("b"), bulk("yes")]))
    );
    assert_eq!(c.run("DBSIZE"), Reply::Int(103));
}

/// Sets `k00000`… for `range` to `v` in one pipelined burst.
fn set_pipelined(c: &mut Client, range: std::ops::Range<u32>) {
    let mut wire = Vec::new();
    for i in range.clone() {
        wire.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n$6\r\nk{i:05}\r\n$1\r\nv\r\n").as_bytes(),
        );
    }
    c.send_raw(&wire).unwrap();
    for _ in range {
        assert_eq!(c.read().unwrap(), Reply::ok());
    }
}

/// FLUSHDB is one transaction: a reader never sees part of the keyspace
/// flushed. The two watched keys are thousands of keys apart, so a flush
/// that deleted in chunks (as epochdb's first one did) shows one without
/// the other.
#[test]
fn flushdb_is_atomic_under_concurrent_writers_and_readers() {
    let server = start(in_memory());
    let addr = server.local_addr();
    let mut setup = Client::connect(addr);
    set_pipelined(&mut setup, 0..5000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(addr);
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let v = n.to_string();
                let reply = c.cmd(&[b"MSET", b"k00000", v.as_bytes(), b"k04999", v.as_bytes()]);
                assert_eq!(reply, Reply::ok());
            }
        })
    };
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(addr);
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Reply::Array(Some(pair)) = c.run("MGET k00000 k04999") else {
                    panic!("MGET must answer an array")
                };
                assert!(
                    matches!(
                        (&pair[0], &pair[1]),
                        (Reply::Bulk(None), Reply::Bulk(None))
                            | (Reply::Bulk(Some(_)), Reply::Bulk(Some(_)))
                    ),
                    "a reader saw half a flush: {pair:?}"
                );
                reads += 1;
            }
            reads
        })
    };
    let mut flusher = Client::connect(addr);
    for round in 0..20 {
        let mode = if round % 2 == 0 {
            "FLUSHDB"
        } else {
            "FLUSHDB ASYNC"
        };
        assert_eq!(flusher.run(mode), Reply::ok());
        // Refill the middle so the next flush has thousands of keys again.
        set_pipelined(&mut flusher, 1..4999);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    assert_eq!(flusher.run("FLUSHDB SYNC"), Reply::ok());
    assert_eq!(flusher.run("DBSIZE"), Reply::Int(0));
    assert!(matches!(flusher.run("FLUSHDB LATER"), Reply::Error(_)));
}

/// A FLUSHDB between WATCH and EXEC fails the EXEC, as in Redis (it
/// touches every key), even for a key that did not exist.
#[test]
fn flushdb_touches_watched_keys() {
    let server = start(in_memory());
    let mut a = Client::connect(server.local_addr());
    let mut b = Client::connect(server.local_addr());
    for key in ["present", "absent"] {
        if key == "present" {
            a.run("SET present 1");
        }
        assert_eq!(a.run(&format!("WATCH {key}")), Reply::ok());
        assert_eq!(b.run("FLUSHDB"), Reply::ok());
        assert_eq!(a.run("MULTI"), Reply::ok());
        a.run("SET x 1");
        assert_eq!(a.run("EXEC"), Reply::Array(None), "WATCH {key}");
    }
    // Without a flush in between the same sequence commits.
    assert_eq!(a.run("WATCH absent"), Reply::ok());
    assert_eq!(a.run("MULTI"), Reply::ok());
    a.run("SET x 1");
    assert_eq!(a.run("EXEC"), Reply::Array(Some(vec![Reply::ok()])));
}
