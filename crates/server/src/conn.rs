//! One client connection: parses and executes the pipeline and sends the
//! replies in request order.
//!
//! The connection never blocks on durability. Each command runs as an
//! engine transaction on the thread's worker; its reply, if the commit is
//! not yet durable, is held in the connection's [`Output`] with a receiver
//! that the durability mode's ticket callback completes (ELEDA-style
//! latency hiding, §3.3), while the connection goes on reading and
//! executing. A reply goes out once it and every reply before it may, so
//! thousands of connections' commits wait on one group commit and no
//! thread blocks per request.

use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use epochdb_engine::{DurabilityError, OpenError, Ticket, Tid, TxError};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::command::{self, Cmd};
use crate::config::Ack;
use crate::data::{self, wrong_arity, TxContext};
use crate::keyspace::{self, GenKeys};
use crate::output::Output;
use crate::resp::{parse_i64, Args, Limits, Out, Parser, Request};
use crate::server::State;
use crate::{admin, engine_thread, value};

/// Bytes the reader asks the socket for at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// Replies accumulate in the batch up to this size before they are queued.
const BATCH_BYTES: usize = 64 * 1024;

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
    multi: Option<Vec<(Cmd, Vec<Bytes>)>>,
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

/// Why a connection ends.
#[derive(PartialEq, Eq, Debug)]
enum End {
    /// The client hung up, quit, or the server is stopping: send what is
    /// queued (for a while), then close.
    Graceful,
    /// The client broke the protocol: send the error, then close.
    ProtocolError,
    /// The client reads nothing and its replies passed the limit: close now.
    OutputOverflow,
    /// The socket failed: close now.
    Broken,
}

/// Serves one client until it leaves, misbehaves or the server stops.
///
/// One task does everything for the connection: it reads and executes what
/// has arrived, writes ready replies straight to the socket (no hand-off to
/// another task on the common path), and waits on whichever comes first —
/// more input, room in the socket, the durability of the oldest held
/// reply, a timeout or shutdown.
pub(crate) async fn serve_connection(state: &Arc<State>, stream: TcpStream, peer: SocketAddr) {
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
    let mut request = Request::default();
    let mut batch = Vec::new();
    let mut scratch = Vec::new();
    let mut output = Output::default();
    let shutdown = state.shutdown.notified();
    tokio::pin!(shutdown);
    let mut input_open = true;
    let mut shutting_down = false;
    let mut stalled_since: Option<Instant> = None;
    let end = 'connection: loop {
        if input_open && state.stopping.load(Ordering::Relaxed) {
            // Shutdown began before this connection listened for it.
            shutting_down = true;
            input_open = false;
        }
        if input_open {
            let (limits, ack) = {
                let settings = state.settings.read();
                let limits = if client.authenticated {
                    Limits::authenticated(settings.proto_max_bulk_len)
                } else {
                    Limits::UNAUTHENTICATED
                };
                (limits, settings.ack)
            };
            let mut turn = Turn {
                now_ms: value::now_ms(),
                ack,
            };
            let mut commands = 0u64;
            loop {
                match parser.next(&mut buf, &limits, &mut request) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        state.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                        Out::new(&mut batch, client.resp3).error(&e.0);
                        output.push_ready(&batch);
                        break 'connection End::ProtocolError;
                    }
                };
                commands += 1;
                let args = request.args(&buf);
                let next = execute(
                    state,
                    &mut client,
                    &mut turn,
                    &args,
                    &mut batch,
                    &mut scratch,
                    &mut output,
                )
                .await;
                if batch.len() >= BATCH_BYTES || next == Next::Close {
                    output.push_ready(&batch);
                    batch.clear();
                }
                if next == Next::Close {
                    input_open = false;
                    break;
                }
            }
            output.push_ready(&batch);
            batch.clear();
            state
                .stats
                .commands_processed
                .fetch_add(commands, Ordering::Relaxed);
        }
        output.release();
        // Write what is ready now, without waiting.
        while !output.unwritten().is_empty() {
            match stream.try_write(output.unwritten()) {
                Ok(n) => output.advance(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => break 'connection End::Broken,
            }
        }
        if output.queued_bytes() > state.settings.read().client_output_buffer_limit {
            break End::OutputOverflow;
        }
        if !input_open && output.is_empty() {
            break End::Graceful;
        }
        // How long the next wait may last: a half-sent request at most
        // `request_timeout` in all; an idle client `timeout` (0: forever).
        let deadline = {
            let s = state.settings.read();
            if !buf.is_empty() && input_open {
                Some(*stalled_since.get_or_insert_with(Instant::now) + s.request_timeout)
            } else {
                stalled_since = None;
                (!s.timeout.is_zero() && input_open).then(|| Instant::now() + s.timeout)
            }
        };
        let mut signal = output.take_head_signal();
        let waiting_on_durability = signal.is_some();
        let has_unwritten = !output.unwritten().is_empty();
        let mut resolved = None;
        let mut event = Event::Progress;
        tokio::select! {
            _ = &mut shutdown, if !shutting_down => event = Event::Shutdown,
            outcome = async { signal.as_mut().expect("enabled only with a signal").await }, if waiting_on_durability => {
                resolved = Some(outcome.unwrap_or_else(|_| Err(DurabilityError::Stopped("the durability mode stopped".into()))));
            }
            ready = stream.writable(), if has_unwritten => {
                if ready.is_err() {
                    event = Event::Broken;
                }
            }
            ready = stream.readable(), if input_open => {
                if ready.is_err() {
                    event = Event::Broken;
                } else {
                    buf.reserve(READ_CHUNK_BYTES);
                    match stream.try_read_buf(&mut buf) {
                        Ok(0) => input_open = false,
                        Ok(_) => {
                            // Progress on a half-sent request resets nothing:
                            // the whole request gets `request_timeout`.
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => event = Event::Broken,
                    }
                }
            }
            _ = sleep_until_deadline(deadline), if deadline.is_some() => event = Event::Timeout,
        }
        output.restore_signal(signal, resolved);
        match event {
            Event::Progress => {}
            Event::Shutdown => {
                shutting_down = true;
                input_open = false;
                if output.is_empty() {
                    break End::Graceful;
                }
            }
            Event::Broken => break End::Broken,
            Event::Timeout => {
                state.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                break End::Graceful;
            }
        }
    };
    match end {
        End::OutputOverflow => {
            // The client reads nothing: drop its replies and the socket now.
            state
                .stats
                .output_limit_disconnects
                .fetch_add(1, Ordering::Relaxed);
        }
        End::Broken => {}
        End::Graceful | End::ProtocolError => {
            // Deliver what is queued (held replies once durable), but not
            // forever.
            let _ =
                tokio::time::timeout(Duration::from_secs(10), drain(&stream, &mut output)).await;
        }
    }
}

/// What the commands of one turn of the connection's loop (one read's
/// worth of requests) share, read once per turn rather than per command:
/// under pipelined GETs the clock and the settings lock cost more than the
/// command's lookup. A turn lasts microseconds, so expiry sees the clock
/// that late at most; SAVE, which waits, reads the clock again.
struct Turn {
    /// The clock for expiry, in Unix milliseconds.
    now_ms: u64,
    /// When replies go out (`CONFIG SET ack` refreshes it mid-turn).
    ack: Ack,
}

/// What woke the connection.
enum Event {
    Progress,
    Shutdown,
    Broken,
    Timeout,
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Writes every queued reply, waiting for held ones to become durable.
async fn drain(stream: &TcpStream, output: &mut Output) {
    loop {
        output.release();
        if output.is_empty() {
            return;
        }
        if output.unwritten().is_empty() {
            let signal = output.take_head_signal();
            let outcome = match signal {
                Some(signal) => signal.await.unwrap_or_else(|_| {
                    Err(DurabilityError::Stopped(
                        "the durability mode stopped".into(),
                    ))
                }),
                None => return,
            };
            output.restore_signal(None, Some(outcome));
            continue;
        }
        if stream.writable().await.is_err() {
            return;
        }
        match stream.try_write(output.unwritten()) {
            Ok(n) => output.advance(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Executes one request, appending its reply to `batch` (or handing a
/// reply that must wait for durability to the writer).
async fn execute(
    state: &Arc<State>,
    client: &mut Client,
    turn: &mut Turn,
    args: &[&[u8]],
    batch: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    output: &mut Output,
) -> Next {
    let resp3 = client.resp3;
    let Some(spec) = command::lookup(args[0]) else {
        if client.multi.is_some() {
            client.multi_dirty = true;
        }
        Out::new(batch, resp3).error(&unknown_command(args));
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
                let owned = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
                queue.push((spec.cmd, owned));
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
            run_exec(state, turn, resp3, &queue, &watched, batch, scratch, output);
        }
        Cmd::Watch => {
            if client.multi.is_some() {
                out.error("ERR WATCH inside MULTI is not allowed");
                return Next::Continue;
            }
            let keys = &args[1..];
            let keyspace = state.keyspace;
            // The stored keys carry the generation read here: EXEC fails if
            // a FLUSHDB moved it on (Redis's FLUSHDB touches every key).
            let versions = engine_thread::with_worker(state.id, &state.db, |w| {
                w.run(|tx| {
                    let mut gen_keys = GenKeys::begin(tx, keyspace)?;
                    keys.iter()
                        .map(|k| {
                            let stored = gen_keys.stored_key(k);
                            let version = gen_keys.version(tx, &stored)?;
                            Ok((stored, version))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            });
            match versions {
                Ok(Ok((versions, _ticket))) => {
                    client.watched.extend(versions);
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
        Cmd::Scan => scan(state, args, &mut out),
        Cmd::FlushDb | Cmd::FlushAll => {
            let reply_at = batch.len();
            match flush_db(state, args) {
                Ok(ticket) => {
                    Out::new(batch, resp3).ok();
                    reply(state, turn.ack, resp3, ticket, batch, reply_at, output);
                }
                Err(e) => Out::new(batch, resp3).error(&e),
            }
        }
        Cmd::Ping => match args.get(1) {
            Some(message) => out.bulk(message),
            None => out.simple("PONG"),
        },
        Cmd::Echo => out.bulk(args[1]),
        Cmd::Select => match parse_i64(args[1]) {
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
        Cmd::Auth => admin::auth(state, client, args, &mut out),
        Cmd::Hello => admin::hello(state, client, args, &mut out),
        Cmd::Client => admin::client(client, args, &mut out),
        Cmd::Command => admin::command(args, &mut out),
        Cmd::Config => {
            admin::config(state, args, &mut out);
            // CONFIG SET may have changed it.
            turn.ack = state.settings.read().ack;
        }
        Cmd::Info => admin::info(state, args, &mut out),
        Cmd::LastSave => out.int(state.last_save_unix.load(Ordering::Relaxed) as i64),
        Cmd::Save => {
            let reply = admin::save(state).await;
            turn.now_ms = value::now_ms();
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
            let keyspace = state.keyspace;
            let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
                w.run(|tx| {
                    batch.truncate(reply_at);
                    let mut cx = TxContext {
                        keys: GenKeys::begin(tx, keyspace)?,
                        now_ms: turn.now_ms,
                        scratch: &mut *scratch,
                    };
                    data::execute(
                        data_cmd,
                        args,
                        tx,
                        &mut cx,
                        &mut Out::new(&mut *batch, resp3),
                    )
                })
            });
            conclude(state, turn.ack, resp3, outcome, batch, reply_at, output);
        }
    }
    Next::Continue
}

/// Leaves the reply at `batch[reply_at..]` in the batch if it may go out
/// now, or hands it to the writer to hold until `ticket` is durable.
fn reply(
    state: &State,
    ack: Ack,
    resp3: bool,
    ticket: Ticket,
    batch: &mut Vec<u8>,
    reply_at: usize,
    output: &mut Output,
) {
    if ack == Ack::Memory {
        return;
    }
    match ticket.is_durable() {
        Ok(true) => {}
        Ok(false) => {
            state.stats.durable_acks.fetch_add(1, Ordering::Relaxed);
            let held = batch.split_off(reply_at);
            output.push_ready(batch);
            batch.clear();
            // A reply is waiting: end the epoch now (at most once per
            // `epoch-min-us`) rather than at the end of its period.
            state.db.end_epoch_soon();
            let (done, durable) = oneshot::channel();
            ticket.on_durable(move |outcome| {
                let _ = done.send(outcome);
            });
            output.push_durable(held, durable);
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
#[allow(clippy::too_many_arguments)]
fn run_exec(
    state: &Arc<State>,
    turn: &Turn,
    resp3: bool,
    queue: &[(Cmd, Vec<Bytes>)],
    watched: &[(Bytes, Option<Tid>)],
    batch: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    output: &mut Output,
) {
    let reply_at = batch.len();
    let keyspace = state.keyspace;
    let now_ms = turn.now_ms;
    let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
        w.run(|tx| {
            batch.truncate(reply_at);
            let keys = GenKeys::begin(tx, keyspace)?;
            for (stored, version) in watched {
                if !keys.is_current(stored) || keys.version(tx, stored)? != *version {
                    Out::new(&mut *batch, resp3).nil_array();
                    return Ok(());
                }
            }
            let mut out = Out::new(&mut *batch, resp3);
            out.array(queue.len());
            let mut cx = TxContext {
                keys,
                now_ms,
                scratch: &mut *scratch,
            };
            for (cmd, owned) in queue {
                let args: Args = owned.iter().map(|a| &a[..]).collect();
                match cmd {
                    Cmd::Ping => match args.get(1) {
                        Some(message) => out.bulk(message),
                        None => out.simple("PONG"),
                    },
                    Cmd::Echo => out.bulk(args[1]),
                    _ => data::execute(*cmd, &args, tx, &mut cx, &mut out)?,
                }
            }
            Ok(())
        })
    });
    conclude(state, turn.ack, resp3, outcome, batch, reply_at, output);
}

/// Finishes a command run as a transaction: its reply (at
/// `batch[reply_at..]`) goes out or is held for durability; a transaction
/// that could not commit is answered with an error instead.
fn conclude(
    state: &State,
    ack: Ack,
    resp3: bool,
    outcome: Result<Result<((), Ticket), TxError>, OpenError>,
    batch: &mut Vec<u8>,
    reply_at: usize,
    output: &mut Output,
) {
    match outcome {
        Ok(Ok(((), ticket))) => reply(state, ack, resp3, ticket, batch, reply_at, output),
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
fn scan(state: &Arc<State>, args: &[&[u8]], out: &mut Out<'_>) {
    let Some(cursor) = std::str::from_utf8(args[1])
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
    let keyspace = state.keyspace;
    let now_ms = value::now_ms();
    let mut scratch = Vec::new();
    let mut keys = Vec::new();
    let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
        w.run(|tx| {
            keys.clear();
            let mut cx = TxContext {
                keys: GenKeys::begin(tx, keyspace)?,
                now_ms,
                scratch: &mut scratch,
            };
            let from = resume.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            data::scan_live(tx, &mut cx, from, pattern, count, |key| {
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

/// FLUSHDB [ASYNC|SYNC]: one transaction makes every key invisible (see
/// `keyspace`); the old keys are then purged before the reply, or in the
/// background with ASYNC (as Redis's lazy free). The reply waits for the
/// flush's ticket either way.
fn flush_db(state: &Arc<State>, args: &[&[u8]]) -> Result<Ticket, String> {
    let asynchronous = match args.get(1) {
        None => false,
        Some(mode) if mode.eq_ignore_ascii_case(b"async") => true,
        Some(mode) if mode.eq_ignore_ascii_case(b"sync") && args.len() == 2 => false,
        Some(_) => return Err(data::SYNTAX_ERROR.to_string()),
    };
    if args.len() > 2 {
        return Err(data::SYNTAX_ERROR.to_string());
    }
    let keyspace = state.keyspace;
    let (_, ticket) =
        engine_thread::with_worker(state.id, &state.db, |w| w.run(|tx| keyspace.flush(tx)))
            .map_err(|e| format!("ERR {e}"))?
            .map_err(|e| tx_error(&e))?;
    if asynchronous {
        tokio::spawn(purge_in_background(state.clone()));
        return Ok(ticket);
    }
    let purged = purge_old_keys(state)?;
    Ok(if purged.position() > ticket.position() {
        purged
    } else {
        ticket
    })
}

/// Deletes the keys of old generations, a chunk per transaction; returns
/// the last chunk's ticket.
fn purge_old_keys(state: &Arc<State>) -> Result<Ticket, String> {
    let mut last = Ticket::resolved();
    loop {
        let (n, ticket) = engine_thread::with_worker(state.id, &state.db, |w| {
            w.run(|tx| keyspace::purge_chunk(tx, state.keyspace))
        })
        .map_err(|e| format!("ERR {e}"))?
        .map_err(|e| tx_error(&e))?;
        if ticket.position() >= last.position() {
            last = ticket;
        }
        if n == 0 {
            return Ok(last);
        }
    }
}

/// [`purge_old_keys`] as a background task that lets other tasks run
/// between chunks; also run at start-up, for a purge a crash cut short.
pub(crate) async fn purge_in_background(state: Arc<State>) {
    loop {
        let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
            w.run(|tx| keyspace::purge_chunk(tx, state.keyspace))
        });
        match outcome {
            Ok(Ok((0, _))) => return,
            Ok(Ok(_)) => tokio::task::yield_now().await,
            // A failed mode fails every write; a conflict storm gives up
            // until the next FLUSHDB or start.
            _ => return,
        }
        if state.stopping.load(Ordering::Relaxed) {
            return;
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
fn unknown_command(args: &[&[u8]]) -> String {
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
