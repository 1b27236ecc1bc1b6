//! The server: opens (and recovers) the database, listens, accepts clients
//! within the limits, and shuts down cleanly on SIGINT, SIGTERM or
//! `SHUTDOWN`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use epochdb_engine::{Config, Database, OpenError, SilorOptions, WalOptions};
use parking_lot::{Mutex, RwLock};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::config::{SettingError, Settings};
use crate::cursor::Cursors;
use crate::keyspace::Keyspace;
use crate::{conn, engine_thread, value};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A setting is wrong.
    #[error(transparent)]
    Settings(#[from] SettingError),
    /// The database could not be opened (or recovered).
    #[error("opening the database: {0}")]
    Open(#[from] OpenError),
    /// The keyspace table could not be created.
    #[error("creating the keyspace: {0}")]
    Durability(#[from] epochdb_engine::DurabilityError),
    /// A socket or the runtime failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Counters `INFO stats` reports.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted.
    pub connections_received: AtomicU64,
    /// Connections refused (maxclients, protected mode).
    pub rejected_connections: AtomicU64,
    /// Commands executed.
    pub commands_processed: AtomicU64,
    /// Clients disconnected for a protocol error.
    pub protocol_errors: AtomicU64,
    /// Clients disconnected for exceeding the output-buffer limit.
    pub output_limit_disconnects: AtomicU64,
    /// Clients disconnected by the idle or request timeout.
    pub timeouts: AtomicU64,
    /// Commits acknowledged only after they became durable.
    pub durable_acks: AtomicU64,
    /// Expired keys deleted by the background sweep.
    pub expired_keys: AtomicU64,
}

/// What every connection shares.
pub struct State {
    /// Distinguishes this server's engine workers from another's on the same
    /// thread (tests run several servers in one process).
    pub id: u64,
    /// The database.
    pub db: Database,
    /// The keyspace's tables (`SELECT 0`).
    pub(crate) keyspace: Keyspace,
    /// The settings (`CONFIG SET` changes some).
    pub settings: RwLock<Settings>,
    /// Counters.
    pub stats: Stats,
    /// Clients connected now.
    pub clients: AtomicUsize,
    /// The next client id.
    pub next_client_id: AtomicU64,
    /// Open SCAN cursors.
    pub(crate) cursors: Mutex<Cursors>,
    /// Set once shutdown has begun.
    pub stopping: AtomicBool,
    /// Wakes the accept loop and every connection at shutdown.
    pub shutdown: Notify,
    /// When the server started.
    pub started: Instant,
    /// Unix time of the last successful SAVE (or the start).
    pub last_save_unix: AtomicU64,
    /// Whether a checkpoint started by BGSAVE is running.
    pub bgsave_running: AtomicBool,
    /// Duration of the last SAVE/BGSAVE checkpoint, in milliseconds.
    pub last_save_ms: AtomicU64,
    /// The addresses actually bound.
    pub local_addrs: Mutex<Vec<SocketAddr>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("id", &self.id)
            .field("db", &self.db)
            .finish()
    }
}

impl State {
    /// Begins a clean shutdown: stops accepting and closes every client.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
    }
}

static NEXT_SERVER_ID: AtomicU64 = AtomicU64::new(1);

/// Engine threads when `--threads` is 0: one per core but one, so that a
/// core is left to the durability threads (loggers, checkpointers, the
/// epoch ticker) and to the kernel's network work, as SiloR reserves cores
/// for its loggers (silor-osdi14 §6). On this project's 2-core machine one
/// engine thread served unpipelined GETs 1.17× and SETs 1.26× faster than
/// two (BENCHMARKS.md, "The server against Redis").
fn default_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// Opens the database the settings describe, recovering its directory,
/// and logs how long recovery took.
fn open_database(settings: &Settings) -> Result<(Database, Keyspace), ServeError> {
    settings.validate()?;
    let threads = if settings.threads == 0 {
        default_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
    } else {
        settings.threads
    };
    let config = Config {
        durability: settings.durability,
        dirs: settings.dir.iter().cloned().collect(),
        workers: threads,
        epoch_interval: settings.epoch_interval,
        early_epoch_min_gap: (!settings.epoch_min_gap.is_zero()).then_some(settings.epoch_min_gap),
        max_attempts: 10_000,
        silor: SilorOptions {
            checkpoint_interval: settings.checkpoint_interval,
            // SiloR renames data.log every 100 epochs (4 s at its 40 ms);
            // with a server's short epochs keep the same ~4 s per file.
            rotate_epochs: (4_000 / settings.epoch_interval.as_millis().max(1) as u64).max(100),
            // Through the page cache: at a server's 1 ms epochs each logger
            // writes a few small buffers per epoch, and direct writes wait
            // on the disk one by one; durable SETs ran at about 0.65× of
            // buffered here (BENCHMARKS.md, "The server against Redis").
            direct_io: false,
            ..SilorOptions::default()
        },
        // The same for the `wal` flusher: a server's flushes are small, and
        // unpipelined durable SETs of 50 clients ran at 14.0 and 12.8 k/s
        // with direct writes against 18.5 and 18.3 k/s through the page
        // cache (pipelined they were 218/178 k against 162/172 k;
        // BENCHMARKS.md, the wal section of session 12).
        wal: WalOptions {
            direct_io: false,
            ..WalOptions::default()
        },
        ..Config::default()
    };
    let begun = Instant::now();
    let db = Database::open_reporting(config, |line| eprintln!("epochdb: recovering: {line}"))?;
    let keyspace = Keyspace::open(&db)?;
    let keys = db.approximate_len(keyspace.keys);
    match db.recovery_report() {
        Some(report) => eprintln!(
            "epochdb: recovered {} ({} keys) in {:.3} s: checkpoint {} B in {:.3} s, log {} B ({} entries) in {:.3} s, persistent epoch {}",
            settings.dir.as_ref().map_or(String::new(), |d| d.display().to_string()),
            keys,
            report.seconds,
            report.checkpoint_bytes,
            report.checkpoint_seconds,
            report.log_bytes,
            report.log_entries,
            report.log_seconds,
            report.persistent_epoch
        ),
        None => eprintln!(
            "epochdb: opened an in-memory database (durability {}) in {:.3} s",
            settings.durability,
            begun.elapsed().as_secs_f64()
        ),
    }
    Ok((db, keyspace))
}

/// A server running on its own runtime, for tests and embedding.
#[derive(Debug)]
pub struct RunningServer {
    state: Arc<State>,
    thread: Option<std::thread::JoinHandle<Result<(), ServeError>>>,
}

impl RunningServer {
    /// Opens the database and starts serving on a background thread;
    /// returns once the listeners are bound.
    pub fn start(settings: Settings) -> Result<Self, ServeError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("epochdb-serve".into())
            .spawn(move || serve_inner(settings, false, Some(ready_tx)))?;
        match ready_rx.recv() {
            Ok(state) => Ok(RunningServer {
                state,
                thread: Some(thread),
            }),
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(ServeError::Io(std::io::Error::other(
                    "the server thread ended before it was ready",
                ))),
            },
        }
    }

    /// The first address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.state.local_addrs.lock()[0]
    }

    /// The shared state (counters, database).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Shuts the server down and waits for it.
    pub fn stop(mut self) -> Result<(), ServeError> {
        self.state.begin_shutdown();
        self.join()
    }

    fn join(&mut self) -> Result<(), ServeError> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ServeError::Io(std::io::Error::other(
                "the server thread panicked",
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.state.begin_shutdown();
        let _ = self.join();
    }
}

/// Serves until SIGINT, SIGTERM or `SHUTDOWN`, then flushes and stops the
/// durability mode. This is `epochdb serve`.
pub fn serve(settings: Settings) -> Result<(), ServeError> {
    serve_inner(settings, true, None)
}

fn serve_inner(
    settings: Settings,
    handle_signals: bool,
    ready: Option<std::sync::mpsc::Sender<Arc<State>>>,
) -> Result<(), ServeError> {
    let (db, keyspace) = open_database(&settings)?;
    let threads = db.config().workers.max(1);
    let id = NEXT_SERVER_ID.fetch_add(1, Ordering::Relaxed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(format!("epochdb-serve-{id}"))
        .enable_all()
        .on_thread_park(engine_thread::quiesce)
        .on_thread_stop(engine_thread::release)
        .build()?;
    let state = Arc::new(State {
        id,
        db: db.clone(),
        keyspace,
        settings: RwLock::new(settings),
        stats: Stats::default(),
        clients: AtomicUsize::new(0),
        next_client_id: AtomicU64::new(1),
        cursors: Mutex::new(Cursors::default()),
        stopping: AtomicBool::new(false),
        shutdown: Notify::new(),
        started: Instant::now(),
        last_save_unix: AtomicU64::new(value::now_ms() / 1000),
        bgsave_running: AtomicBool::new(false),
        last_save_ms: AtomicU64::new(0),
        local_addrs: Mutex::new(Vec::new()),
    });
    let result = runtime.block_on(accept_all(state.clone(), handle_signals, ready));
    // Connections end at shutdown; give their writers a moment to flush.
    runtime.shutdown_timeout(Duration::from_secs(5));
    let flushed = db.shutdown();
    eprintln!(
        "epochdb: shut down ({})",
        match &flushed {
            Ok(()) => "durable state flushed".to_string(),
            Err(e) => format!("flush failed: {e}"),
        }
    );
    result?;
    flushed?;
    Ok(())
}

async fn accept_all(
    state: Arc<State>,
    handle_signals: bool,
    ready: Option<std::sync::mpsc::Sender<Arc<State>>>,
) -> Result<(), ServeError> {
    let (bind, port) = {
        let s = state.settings.read();
        (s.bind.clone(), s.port)
    };
    let mut listeners = Vec::new();
    for addr in bind {
        let listener = TcpListener::bind(SocketAddr::new(addr, port)).await?;
        let local = listener.local_addr()?;
        state.local_addrs.lock().push(local);
        eprintln!("epochdb: ready to accept connections on {local}");
        listeners.push(listener);
    }
    if let Some(ready) = ready {
        let _ = ready.send(state.clone());
    }
    if handle_signals {
        let state = state.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            eprintln!("epochdb: signal received, shutting down");
            state.begin_shutdown();
        });
    }
    tokio::spawn(crate::expire::sweep(state.clone()));
    tokio::spawn(conn::purge_in_background(state.clone()));
    let mut accepts = Vec::new();
    for listener in listeners {
        accepts.push(tokio::spawn(accept_loop(state.clone(), listener)));
    }
    for accept in accepts {
        let _ = accept.await;
    }
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

async fn accept_loop(state: Arc<State>, listener: TcpListener) {
    loop {
        let shutdown = state.shutdown.notified();
        if state.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (stream, peer) = tokio::select! {
            _ = shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("epochdb: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        state
            .stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        if let Some(refusal) = refusal(&state, &peer) {
            state
                .stats
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            tokio::spawn(refuse(stream, refusal));
            continue;
        }
        let _ = stream.set_nodelay(true);
        state.clients.fetch_add(1, Ordering::SeqCst);
        let state = state.clone();
        tokio::spawn(async move {
            conn::serve_connection(&state, stream, peer).await;
            state.clients.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Why a new client must be turned away, as the error Redis sends then.
fn refusal(state: &State, peer: &SocketAddr) -> Option<&'static str> {
    let settings = state.settings.read();
    if state.clients.load(Ordering::SeqCst) >= settings.maxclients {
        return Some("-ERR max number of clients reached\r\n");
    }
    if settings.protected_mode && settings.requirepass.is_none() && !peer.ip().is_loopback() {
        return Some(
            "-DENIED epochdb is running in protected mode because protected mode is enabled and no password is set for the default user. \
             Only connections from the loopback interface are accepted. Set a password with --requirepass, \
             or disable protected mode with --protected-mode no if you are sure the network is trusted.\r\n",
        );
    }
    None
}

async fn refuse(mut stream: TcpStream, reply: &'static str) {
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
}

#[cfg(test)]
mod tests {
    use super::default_threads;

    #[test]
    fn the_default_leaves_a_core_but_keeps_one_thread() {
        assert_eq!(default_threads(1), 1);
        assert_eq!(default_threads(2), 1);
        assert_eq!(default_threads(16), 15);
    }
}
