//! A minimal blocking RESP2 client for the server's integration tests, and
//! helpers to start a server on a free port.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use epochdb_server::{RunningServer, Settings};

/// A decoded reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(Some(bytes.to_vec()))
    }
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }
}

/// Starts a server with `settings` on a free loopback port.
pub fn start(mut settings: Settings) -> RunningServer {
    settings.port = 0;
    RunningServer::start(settings).expect("server starts")
}

/// Settings for an in-memory server.
pub fn in_memory() -> Settings {
    Settings {
        durability: epochdb_engine::DurabilityKind::None,
        threads: 2,
        ..Settings::default()
    }
}

pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut wire = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            wire.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            wire.extend_from_slice(a);
            wire.extend_from_slice(b"\r\n");
        }
        self.send_raw(&wire).expect("send");
    }

    pub fn cmd(&mut self, args: &[&[u8]]) -> Reply {
        self.send(args);
        self.read().expect("reply")
    }

    /// Runs a command given as one space-separated string.
    pub fn run(&mut self, line: &str) -> Reply {
        let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
        self.cmd(&args)
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end_matches("\r\n").to_string())
    }

    pub fn read(&mut self) -> std::io::Result<Reply> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(1);
        Ok(match kind {
            "+" => Reply::Simple(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let len: i64 = rest.parse().unwrap();
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut data = vec![0; len as usize + 2];
                    self.reader.read_exact(&mut data)?;
                    data.truncate(len as usize);
                    Reply::Bulk(Some(data))
                }
            }
            "*" => {
                let len: i64 = rest.parse().unwrap();
                if len < 0 {
                    Reply::Array(None)
                } else {
                    let mut items = Vec::new();
                    for _ in 0..len {
                        items.push(self.read()?);
                    }
                    Reply::Array(Some(items))
                }
            }
            other => panic!("bad reply type {other:?} in {line:?}"),
        })
    }

    /// Whether the server closed the connection (reads EOF within 5 s).
    pub fn is_closed(&mut self) -> bool {
        self.writer
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

/// Resident memory of this process in bytes (the server runs in it).
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}
