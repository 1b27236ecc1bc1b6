//! One client connection: a reader that parses and executes the pipeline,
//! and a writer that sends replies in request order.
//!
//! The reader never waits for durability. Each command runs as an engine
//! transaction on the thread's worker; its reply, if the commit is not yet
//! durable, goes to the writer with a receiver that the durability mode's
//! ticket callback completes (ELEDA-style latency hiding, §3.3). The writer
//! holds a reply until it and every reply before it may go out, so
//! thousands of connections' commits wait on one group commit and no thread
//! blocks per request.

use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use epochdb_engine::{DurabilityError, Ticket, Tid, TxError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::command::{self, Cmd};
use crate::config::Ack;
use crate::data::{self, wrong_arity, TxContext};
use crate::resp::{parse_i64, Args, Limits, Out, Parser};
use crate::server::State;
use crate::{admin, engine_thread, value};

/// Bytes the reader asks the socket for at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// What a queued reply costs besides its bytes, for the output limit.
const REPLY_OVERHEAD_BYTES: usize = 64;
/// A batch of ready replies is handed to the writer once it is this big.
const BATCH_BYTES: usize = 64 * 1024;

/// A reply (or a run of replies) on its way to the writer.
struct Outgoing {
    bytes: Vec<u8>,
    /// Completed when the commit behind the reply is durable.
    durable: Option<oneshot::Receiver<Result<(), DurabilityError>>>,
}

/// Where a connection's replies go: the writer's queue and its byte count.
struct Replies<'a> {
    sender: &'a mpsc::UnboundedSender<Outgoing>,
    queued_bytes: &'a AtomicUsize,
}

impl Replies<'_> {
    fn send(
        &self,
        bytes: Vec<u8>,
        durable: Option<oneshot::Receiver<Result<(), DurabilityError>>>,
    ) {
        send(self.sender, self.queued_bytes, bytes, durable);
    }
}

/// Per-connection state.
pub(crate) struct Client {
    /// CLIENT ID.
    pub(crate) id: u64,
    /// CLIENT SETNAME.
    pub(crate) name: Option<Bytes>,
    /// The peer.
    pub(crate) peer: SocketAddr,
    /// Whether AUTH succeeded (or no password is set).
    pub(crate) authenticated: bool,
    /// Whether the client switched to RESP3 with `HELLO 3`.
    pub(crate) resp3: bool,
    /// Commands queued by MULTI, if in one.
    multi: Option<Vec<(Cmd, Args)>>,
    /// A command failed to queue: EXEC must abort.
    multi_dirty: bool,
    /// WATCHed keys and the version each had.
    watched: Vec<(Bytes, Option<Tid>)>,
}

/// What the connection does after a command.
#[derive(PartialEq, Eq)]
enum Next {
    Continue,
    /// Send what is queued, then close.
    Close,
}

/// Serves one client until it leaves, misbehaves or the server stops.
pub(crate) async fn serve_connection(state: &Arc<State>, stream: TcpStream, peer: SocketAddr) {
    let (mut reader, writer) = stream.into_split();
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let (sender, receiver) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_replies(writer, receiver, queued_bytes.clone()));
    let mut client = Client {
        id: state.next_client_id.fetch_add(1, Ordering::Relaxed),
        name: None,
        peer,
        authenticated: state.settings.read().requirepass.is_none(),
        resp3: false,
        multi: None,
        multi_dirty: false,
        watched: Vec::new(),
    };
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut parser = Parser::default();
    let mut batch = Vec::new();
    let mut scratch = Vec::new();
    let mut output_overflow = false;
    'connection: loop {
        let (limits, wait) = {
            let s = state.settings.read();
            let limits = if client.authenticated {
                Limits::authenticated(s.proto_max_bulk_len)
            } else {
                Limits::UNAUTHENTICATED
            };
            // A half-sent request may stall at most `request_timeout`; an
            // idle client `timeout` (zero: forever).
            let wait = if !buf.is_empty() {
                Some(s.request_timeout)
            } else if !s.timeout.is_zero() {
                Some(s.timeout)
            } else {
                None
            };
            (limits, wait)
        };
        loop {
            let args = match parser.next(&mut buf, &limits) {
                Ok(Some(args)) => args,
                Ok(None) => break,
                Err(e) => {
                    state.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                    Out::new(&mut batch, client.resp3).error(&e.0);
                    break 'connection;
                }
            };
            state
                .stats
                .commands_processed
                .fetch_add(1, Ordering::Relaxed);
            let replies = Replies {
                sender: &sender,
                queued_bytes: &queued_bytes,
            };
            let next = execute(state, &mut client, args, &mut batch, &mut scratch, &replies).await;
            if batch.len() >= BATCH_BYTES {
                send(&sender, &queued_bytes, std::mem::take(&mut batch), None);
            }
            if next == Next::Close {
                break 'connection;
            }
            if queued_bytes.load(Ordering::Relaxed)
                > state.settings.read().client_output_buffer_limit
            {
                output_overflow = true;
                break 'connection;
            }
        }
        if !batch.is_empty() {
            send(&sender, &queued_bytes, std::mem::take(&mut batch), None);
        }
        if queued_bytes.load(Ordering::Relaxed) > state.settings.read().client_output_buffer_limit {
            output_overflow = true;
            break;
        }
        buf.reserve(READ_CHUNK_BYTES);
        let shutdown = state.shutdown.notified();
        if state.stopping.load(Ordering::SeqCst) {
            break;
        }
        let read = async {
            match wait {
                Some(limit) => tokio::time::timeout(limit, reader.read_buf(&mut buf))
                    .await
                    .ok(),
                None => Some(reader.read_buf(&mut buf).await),
            }
        };
        tokio::select! {
            _ = shutdown => break,
            outcome = read => match outcome {
                None => {
                    state.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Some(Ok(0)) | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    if output_overflow {
        // The client reads nothing: drop its replies and the socket now.
        state
            .stats
            .output_limit_disconnects
            .fetch_add(1, Ordering::Relaxed);
        writer.abort();
        return;
    }
    if !batch.is_empty() {
        send(&sender, &queued_bytes, std::mem::take(&mut batch), None);
    }
    drop(sender);
    // Let the writer deliver what is queued, but not forever.
    let _ = tokio::time::timeout(Duration::from_secs(10), writer).await;
}

fn send(
    sender: &mpsc::UnboundedSender<Outgoing>,
    queued_bytes: &AtomicUsize,
    bytes: Vec<u8>,
    durable: Option<oneshot::Receiver<Result<(), DurabilityError>>>,
) {
    queued_bytes.fetch_add(bytes.len() + REPLY_OVERHEAD_BYTES, Ordering::Relaxed);
    let _ = sender.send(Outgoing { bytes, durable });
}

/// Writes replies in order, holding each until its commit is durable.
async fn write_replies(
    mut socket: OwnedWriteHalf,
    mut receiver: mpsc::UnboundedReceiver<Outgoing>,
    queued_bytes: Arc<AtomicUsize>,
) {
    let mut out: Vec<u8> = Vec::with_capacity(BATCH_BYTES);
    let mut accounted = 0usize;
    while let Some(first) = receiver.recv().await {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            accounted += item.bytes.len() + REPLY_OVERHEAD_BYTES;
            match item.durable {
                None => out.extend_from_slice(&item.bytes),
                Some(mut durable) => {
                    let outcome = match durable.try_recv() {
                        Ok(outcome) => outcome,
                        Err(oneshot::error::TryRecvError::Empty) => {
                            // Send what is ready before waiting.
                            if flush(&mut socket, &mut out, &queued_bytes, &mut accounted)
                                .await
                                .is_err()
                            {
                                return;
                            }
                            durable.await.unwrap_or_else(|_| {
                                Err(DurabilityError::Stopped(
                                    "the durability mode stopped".into(),
                                ))
                            })
                        }
                        Err(oneshot::error::TryRecvError::Closed) => Err(DurabilityError::Stopped(
                            "the durability mode stopped".into(),
                        )),
                    };
                    match outcome {
                        Ok(()) => out.extend_from_slice(&item.bytes),
                        Err(e) => {
                            Out::new(&mut out, false).error(&format!("ERR commit not durable: {e}"))
                        }
                    }
                }
            }
            if out.len() < BATCH_BYTES {
                next = receiver.try_recv().ok();
            }
        }
        if flush(&mut socket, &mut out, &queued_bytes, &mut accounted)
            .await
            .is_err()
        {
            return;
        }
    }
    let _ = socket.shutdown().await;
}

async fn flush(
    socket: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    queued_bytes: &AtomicUsize,
    accounted: &mut usize,
) -> std::io::Result<()> {
    if !out.is_empty() {
        socket.write_all(out).await?;
        out.clear();
    }
    queued_bytes.fetch_sub(std::mem::take(accounted), Ordering::Relaxed);
    Ok(())
}

/// Executes one request, appending its reply to `batch` (or handing a
/// reply that must wait for durability to the writer).
async fn execute(
    state: &Arc<State>,
    client: &mut Client,
    args: Args,
    batch: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    replies: &Replies<'_>,
) -> Next {
    let resp3 = client.resp3;
    let Some(spec) = command::lookup(&args[0]) else {
        if client.multi.is_some() {
            client.multi_dirty = true;
        }
        Out::new(batch, resp3).error(&unknown_command(&args));
        return Next::Continue;
    };
    if !client.authenticated && !spec.flags.contains(&"no_auth") {
        Out::new(batch, resp3).error("NOAUTH Authentication required.");
        return Next::Continue;
    }
    if !spec.arity_ok(args.len()) {
        if client.multi.is_some() {
            client.multi_dirty = true;
        }
        Out::new(batch, resp3).error(&wrong_arity(spec.name));
        return Next::Continue;
    }
    if let Some(queue) = client.multi.as_mut() {
        if !matches!(
            spec.cmd,
            Cmd::Exec | Cmd::Discard | Cmd::Multi | Cmd::Watch | Cmd::Quit | Cmd::Reset
        ) {
            if spec.is_queueable() {
                queue.push((spec.cmd, args));
                Out::new(batch, resp3).simple("QUEUED");
            } else {
                client.multi_dirty = true;
                Out::new(batch, resp3).error(&format!(
                    "ERR Command '{}' is not allowed inside MULTI on epochdb",
                    spec.name
                ));
            }
            return Next::Continue;
        }
    }
    let mut out = Out::new(batch, resp3);
    match spec.cmd {
        Cmd::Multi => {
            if client.multi.is_some() {
                out.error("ERR MULTI calls can not be nested");
            } else {
                client.multi = Some(Vec::new());
                client.multi_dirty = false;
                out.ok();
            }
        }
        Cmd::Discard => {
            if client.multi.take().is_some() {
                client.watched.clear();
                out.ok();
            } else {
                out.error("ERR DISCARD without MULTI");
            }
        }
        Cmd::Exec => {
            let Some(queue) = client.multi.take() else {
                out.error("ERR EXEC without MULTI");
                return Next::Continue;
            };
            let watched = std::mem::take(&mut client.watched);
            if client.multi_dirty {
                out.error("EXECABORT Transaction discarded because of previous errors.");
                return Next::Continue;
            }
            run_exec(state, resp3, &queue, &watched, batch, scratch, replies);
        }
        Cmd::Watch => {
            if client.multi.is_some() {
                out.error("ERR WATCH inside MULTI is not allowed");
                return Next::Continue;
            }
            let keys = &args[1..];
            let table = state.table;
            let versions = engine_thread::with_worker(state.id, &state.db, |w| {
                w.run(|tx| {
                    keys.iter()
                        .map(|k| tx.version(table, k))
                        .collect::<Result<Vec<_>, _>>()
                })
            });
            match versions {
                Ok(Ok((versions, _ticket))) => {
                    client.watched.extend(keys.iter().cloned().zip(versions));
                    out.ok();
                }
                Ok(Err(e)) => out.error(&tx_error(&e)),
                Err(e) => out.error(&format!("ERR {e}")),
            }
        }
        Cmd::Unwatch => {
            client.watched.clear();
            out.ok();
        }
        Cmd::Scan => scan(state, &args, &mut out),
        Cmd::FlushDb | Cmd::FlushAll => {
            let reply_at = batch.len();
            match flush_all(state, scratch) {
                Ok(ticket) => {
                    Out::new(batch, resp3).ok();
                    reply(state, resp3, ticket, batch, reply_at, replies);
                }
                Err(e) => Out::new(batch, resp3).error(&e),
            }
        }
        Cmd::Ping => match args.get(1) {
            Some(message) => out.bulk(message),
            None => out.simple("PONG"),
        },
        Cmd::Echo => out.bulk(&args[1]),
        Cmd::Select => match parse_i64(&args[1]) {
            Some(0) => out.ok(),
            Some(_) => out.error("ERR DB index is out of range"),
            None => out.error(data::NOT_AN_INTEGER),
        },
        Cmd::Quit => {
            out.ok();
            return Next::Close;
        }
        Cmd::Reset => {
            client.multi = None;
            client.watched.clear();
            client.name = None;
            client.authenticated = state.settings.read().requirepass.is_none();
            client.resp3 = false;
            out.simple("RESET");
        }
        Cmd::Auth => admin::auth(state, client, &args, &mut out),
        Cmd::Hello => admin::hello(state, client, &args, &mut out),
        Cmd::Client => admin::client(client, &args, &mut out),
        Cmd::Command => admin::command(&args, &mut out),
        Cmd::Config => admin::config(state, &args, &mut out),
        Cmd::Info => admin::info(state, &args, &mut out),
        Cmd::LastSave => out.int(state.last_save_unix.load(Ordering::Relaxed) as i64),
        Cmd::Save => {
            let reply = admin::save(state).await;
            match reply {
                Ok(()) => Out::new(batch, resp3).ok(),
                Err(e) => Out::new(batch, resp3).error(&e),
            }
        }
        Cmd::BgSave => match admin::bgsave(state) {
            Ok(()) => out.simple("Background saving started"),
            Err(e) => out.error(&e),
        },
        Cmd::Shutdown => {
            let abort = args
                .get(1)
                .is_some_and(|a| a.eq_ignore_ascii_case(b"abort"));
            if abort {
                out.error("ERR There is no shutdown in progress.");
            } else {
                eprintln!(
                    "epochdb: SHUTDOWN requested by client {} ({})",
                    client.id, client.peer
                );
                state.begin_shutdown();
                return Next::Close;
            }
        }
        data_cmd => {
            let reply_at = batch.len();
            let table = state.table;
            let now_ms = value::now_ms();
            let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
                w.run(|tx| {
                    batch.truncate(reply_at);
                    let mut cx = TxContext {
                        table,
                        now_ms,
                        scratch: &mut *scratch,
                    };
                    data::execute(
                        data_cmd,
                        &args,
                        tx,
                        &mut cx,
                        &mut Out::new(&mut *batch, resp3),
                    )
                })
            });
            match outcome {
                Ok(Ok(((), ticket))) => reply(state, resp3, ticket, batch, reply_at, replies),
                Ok(Err(e)) => {
                    batch.truncate(reply_at);
                    Out::new(batch, resp3).error(&tx_error(&e));
                }
                Err(e) => {
                    batch.truncate(reply_at);
                    Out::new(batch, resp3).error(&format!("ERR {e}"));
                }
            }
        }
    }
    Next::Continue
}

/// Leaves the reply at `batch[reply_at..]` in the batch if it may go out
/// now, or hands it to the writer to hold until `ticket` is durable.
fn reply(
    state: &State,
    resp3: bool,
    ticket: Ticket,
    batch: &mut Vec<u8>,
    reply_at: usize,
    replies: &Replies<'_>,
) {
    if state.settings.read().ack == Ack::Memory {
        return;
    }
    match ticket.is_durable() {
        Ok(true) => {}
        Ok(false) => {
            state.stats.durable_acks.fetch_add(1, Ordering::Relaxed);
            let held = batch.split_off(reply_at);
            if !batch.is_empty() {
                replies.send(std::mem::take(batch), None);
            }
            let (done, durable) = oneshot::channel();
            ticket.on_durable(move |outcome| {
                let _ = done.send(outcome);
            });
            replies.send(held, Some(durable));
        }
        Err(e) => {
            batch.truncate(reply_at);
            Out::new(batch, resp3).error(&format!("ERR commit not durable: {e}"));
        }
    }
}

/// EXEC: the queued commands as one engine transaction, after checking
/// that no WATCHed key changed (each watched key joins the read set, so a
/// change before commit aborts and retries the whole body).
fn run_exec(
    state: &Arc<State>,
    resp3: bool,
    queue: &[(Cmd, Args)],
    watched: &[(Bytes, Option<Tid>)],
    batch: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    replies: &Replies<'_>,
) {
    let reply_at = batch.len();
    let table = state.table;
    let now_ms = value::now_ms();
    let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
        w.run(|tx| {
            batch.truncate(reply_at);
            for (key, version) in watched {
                if tx.version(table, key)? != *version {
                    Out::new(&mut *batch, resp3).nil_array();
                    return Ok(());
                }
            }
            let mut out = Out::new(&mut *batch, resp3);
            out.array(queue.len());
            let mut cx = TxContext {
                table,
                now_ms,
                scratch: &mut *scratch,
            };
            for (cmd, args) in queue {
                match cmd {
                    Cmd::Ping => match args.get(1) {
                        Some(message) => out.bulk(message),
                        None => out.simple("PONG"),
                    },
                    Cmd::Echo => out.bulk(&args[1]),
                    _ => data::execute(*cmd, args, tx, &mut cx, &mut out)?,
                }
            }
            Ok(())
        })
    });
    match outcome {
        Ok(Ok(((), ticket))) => reply(state, resp3, ticket, batch, reply_at, replies),
        Ok(Err(e)) => {
            batch.truncate(reply_at);
            Out::new(batch, resp3).error(&tx_error(&e));
        }
        Err(e) => {
            batch.truncate(reply_at);
            Out::new(batch, resp3).error(&format!("ERR {e}"));
        }
    }
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type], over the ordered
/// index from the key the cursor remembers.
fn scan(state: &Arc<State>, args: &[Bytes], out: &mut Out<'_>) {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        out.error("ERR invalid cursor");
        return;
    };
    let mut pattern: &[u8] = b"*";
    let mut count = 10usize;
    let mut only_strings = true;
    let mut i = 2;
    while i < args.len() {
        let option = args[i].to_ascii_uppercase();
        let Some(value) = args.get(i + 1) else {
            out.error(data::SYNTAX_ERROR);
            return;
        };
        match option.as_slice() {
            b"MATCH" => pattern = value,
            b"COUNT" => match parse_i64(value) {
                Some(n) if n >= 1 => count = (n as usize).min(100_000),
                Some(_) => {
                    out.error(data::SYNTAX_ERROR);
                    return;
                }
                None => {
                    out.error(data::NOT_AN_INTEGER);
                    return;
                }
            },
            b"TYPE" => only_strings = value.eq_ignore_ascii_case(b"string"),
            _ => {
                out.error(data::SYNTAX_ERROR);
                return;
            }
        }
        i += 2;
    }
    let resume = if cursor == 0 {
        None
    } else {
        match state.cursors.lock().resume_after(cursor) {
            Some(key) => Some(key.to_vec()),
            None => {
                out.error(
                    "ERR invalid cursor (unknown, or forgotten: epochdb keeps the newest 100000)",
                );
                return;
            }
        }
    };
    let table = state.table;
    let now_ms = value::now_ms();
    let mut scratch = Vec::new();
    let mut keys = Vec::new();
    let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
        w.run(|tx| {
            keys.clear();
            let cx = TxContext {
                table,
                now_ms,
                scratch: &mut scratch,
            };
            let from = resume.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            data::scan_live(tx, &cx, from, pattern, count, |key| {
                if only_strings {
                    keys.push(key.to_vec());
                }
            })
        })
    });
    match outcome {
        Ok(Ok(((last, exhausted), _ticket))) => {
            let next = match (exhausted, last) {
                (false, Some(last)) => state.cursors.lock().open(last),
                _ => 0,
            };
            out.array(2);
            out.bulk(itoa::Buffer::new().format(next).as_bytes());
            out.array(keys.len());
            for key in &keys {
                out.bulk(key);
            }
        }
        Ok(Err(e)) => out.error(&tx_error(&e)),
        Err(e) => out.error(&format!("ERR {e}")),
    }
}

/// FLUSHDB: deletes every key, in transactions of a bounded size (so a
/// large keyspace does not make one huge write set). Not atomic with
/// respect to concurrent writers, unlike Redis's.
fn flush_all(state: &Arc<State>, scratch: &mut Vec<u8>) -> Result<Ticket, String> {
    const CHUNK_KEYS: usize = 1024;
    let table = state.table;
    let mut last_ticket = Ticket::resolved();
    loop {
        let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
            w.run(|tx| {
                let cx = TxContext {
                    table,
                    now_ms: 0,
                    scratch: &mut *scratch,
                };
                let mut keys = Vec::new();
                data::scan_live(tx, &cx, Bound::Unbounded, b"*", CHUNK_KEYS, |key| {
                    keys.push(key.to_vec())
                })?;
                for key in &keys {
                    tx.delete(table, key)?;
                }
                Ok(keys.len())
            })
        })
        .map_err(|e| format!("ERR {e}"))?;
        match outcome {
            Ok((0, ticket)) => {
                return Ok(if ticket.position() >= last_ticket.position() {
                    ticket
                } else {
                    last_ticket
                })
            }
            Ok((_, ticket)) => last_ticket = ticket,
            Err(e) => return Err(tx_error(&e)),
        }
    }
}

/// The reply for a transaction that could not commit.
fn tx_error(e: &TxError) -> String {
    match e {
        TxError::TooManyConflicts { attempts } => {
            format!("ERR transaction conflicted {attempts} times; try again")
        }
        TxError::Durability(d) => format!("ERR durability failure (restart the server): {d}"),
        other => format!("ERR {other}"),
    }
}

/// Redis's reply to an unknown command.
fn unknown_command(args: &[Bytes]) -> String {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&args[0][..args[0].len().min(128)])
    );
    let mut budget = 128usize;
    for arg in &args[1..] {
        if budget == 0 {
            break;
        }
        let take = arg.len().min(budget);
        budget -= take;
        text.push('\'');
        text.push_str(&String::from_utf8_lossy(&arg[..take]));
        text.push_str("' ");
    }
    text
}
