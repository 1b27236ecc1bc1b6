//! Why this exists: a server on a network meets broken and malicious
//! clients. Malformed input must get a protocol error and a closed
//! connection, never a panic; stalled, slow and non-reading clients must be
//! dropped or cost only what they sent; and through all of it the server
//! must keep answering everyone else within bounded memory.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{in_memory, resident_bytes, start, Client, Reply};
use epochdb_server::Settings;
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn assert_alive(addr: std::net::SocketAddr) {
    let mut c = Client::connect(addr);
    assert_eq!(
        c.run("PING"),
        Reply::Simple("PONG".into()),
        "the server must still answer"
    );
}

#[test]
fn malformed_frames_get_a_protocol_error_and_a_closed_connection() {
    let server = start(in_memory());
    let addr = server.local_addr();
    let cases: &[(&[u8], &str)] = &[
        (b"*abc\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n$-7\r\n", "ERR Protocol error: invalid bulk length"),
        (
            b"*1\r\n$999999999999\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (
            b"*1\r\n:12\r\n",
            "ERR Protocol error: expected '$', got ':'",
        ),
        (
            b"*2\r\n$3\r\nGET\r\n$1\r\nabc\r\n",
            "ERR Protocol error: bulk string not terminated by CRLF",
        ),
        (
            b"*99999999\r\n",
            "ERR Protocol error: invalid multibulk length",
        ),
        (
            b"SET \"unbalanced\r\n",
            "ERR Protocol error: unbalanced quotes in request",
        ),
    ];
    for (input, expected) in cases {
        let mut c = Client::connect(addr);
        c.send_raw(input).unwrap();
        match c.read().unwrap() {
            Reply::Error(e) => assert_eq!(&e, expected, "{input:?}"),
            other => panic!("{input:?}: {other:?}"),
        }
        assert!(c.is_closed(), "{input:?} must close the connection");
    }
    // A truncated frame followed by a hang-up costs nothing.
    let mut c = Client::connect(addr);
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk").unwrap();
    drop(c);
    assert_alive(addr);
    assert!(
        server
            .state()
            .stats
            .protocol_errors
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 7
    );
}

#[test]
fn binary_garbage_never_brings_the_server_down() {
    let server = start(in_memory());
    let addr = server.local_addr();
    let mut rng = SmallRng::seed_from_u64(0xBAD5EED);
    for round in 0..200 {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let len = rng.gen_range(1..4096);
        let mut garbage: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        // Half the rounds look like RESP at first.
        if round % 2 == 0 {
            garbage.splice(0..0, b"*2\r\n$".iter().copied());
        }
        let _ = stream.write_all(&garbage);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stream, &mut sink);
    }
    assert_alive(addr);
}

#[test]
fn a_stalled_half_request_is_dropped_after_the_request_timeout() {
    let server = start(Settings {
        request_timeout: Duration::from_secs(1),
        ..in_memory()
    });
    let mut slow = Client::connect(server.local_addr());
    slow.send_raw(b"*2\r\n$3\r\nGET\r\n$5\r\nab").unwrap();
    let begun = Instant::now();
    assert!(slow.is_closed(), "slowloris must be cut off");
    assert!(begun.elapsed() < Duration::from_secs(4));
    assert!(
        server
            .state()
            .stats
            .timeouts
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    assert_alive(server.local_addr());
}

#[test]
fn a_client_that_never_reads_is_disconnected_at_the_output_limit() {
    let server = start(Settings {
        client_output_buffer_limit: 4 * 1024 * 1024,
        ..in_memory()
    });
    let addr = server.local_addr();
    let mut c = Client::connect(addr);
    let value = vec![b'v'; 64 * 1024];
    c.cmd(&[b"SET", b"big", &value]);
    // Ask for the 64 KiB value 2,000 times (128 MiB of replies) and read
    // none of them.
    let request = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(2000);
    let stream = TcpStream::connect(addr).unwrap();
    let mut writer = stream.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = writer.write_all(&request);
    let deadline = Instant::now() + Duration::from_secs(10);
    let disconnects = || {
        server
            .state()
            .stats
            .output_limit_disconnects
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    while disconnects() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(disconnects(), 1, "the non-reading client must be dropped");
    drop(stream);
    assert_alive(addr);
}

/// Raises this process's open-file limit to its hard limit.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[test]
fn a_thousand_stalled_clients_declaring_huge_bulks_cost_only_what_they_sent() {
    raise_fd_limit();
    let server = start(in_memory());
    let addr = server.local_addr();
    let before = resident_bytes();
    let sent_each = 16 * 1024;
    let mut stalled = Vec::new();
    for _ in 0..1000 {
        let mut s = TcpStream::connect(addr).unwrap();
        // A 512 MiB bulk is declared; 16 KiB of it arrives; then nothing.
        s.write_all(b"*2\r\n$3\r\nSET\r\n$536870912\r\n").unwrap();
        s.write_all(&vec![b'x'; sent_each]).unwrap();
        stalled.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_alive(addr);
    let grown = resident_bytes().saturating_sub(before);
    println!(
        "1000 stalled clients: resident memory grew by {} MiB",
        grown >> 20
    );
    assert!(
        grown < 256 << 20,
        "1000 stalled clients that sent {} MiB in all grew memory by {} MiB",
        (1000 * sent_each) >> 20,
        grown >> 20
    );
    assert!(
        server
            .state()
            .clients
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1000
    );
}
