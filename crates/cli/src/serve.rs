//! `epochdb serve`: the Redis-protocol server (crates/server). Settings come
//! from the defaults, then `--config FILE` (redis.conf style: `name value`
//! per line), then the flags; `CONFIG GET` shows the result.

use std::path::PathBuf;

use clap::Args;
use epochdb_server::Settings;

/// `serve` flags; each is also a config-file setting of the same name.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// A config file of `name value` lines (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory of the durable files (needed by log and silor).
    #[arg(long)]
    dir: Option<String>,
    /// TCP port (0: any free port, printed at start).
    #[arg(long)]
    port: Option<String>,
    /// Addresses to listen on, separated by spaces [default: 127.0.0.1].
    #[arg(long)]
    bind: Option<String>,
    /// Durability mode: none, log, silor, wal or cpr [default: silor].
    #[arg(long)]
    durability: Option<String>,
    /// When writes are answered: durable (after the commit is durable) or
    /// memory [default: durable].
    #[arg(long)]
    ack: Option<String>,
    /// Password clients must send with AUTH.
    #[arg(long)]
    requirepass: Option<String>,
    /// Refuse non-loopback clients while no password is set: yes or no.
    #[arg(long)]
    protected_mode: Option<String>,
    /// Most simultaneous clients [default: 10000].
    #[arg(long)]
    maxclients: Option<String>,
    /// Close clients idle this many seconds (0: never) [default: 0].
    #[arg(long)]
    timeout: Option<String>,
    /// Close a client whose request stalls half-sent this many seconds
    /// [default: 30].
    #[arg(long)]
    request_timeout: Option<String>,
    /// Largest bulk string in a request, e.g. 512mb [default: 512mb].
    #[arg(long)]
    proto_max_bulk_len: Option<String>,
    /// Reply bytes queued for a client that reads nothing before it is
    /// dropped, e.g. 256mb [default: 256mb].
    #[arg(long)]
    client_output_buffer_limit: Option<String>,
    /// Epoch length in milliseconds; a durable reply waits for its epoch
    /// to end [default: 1].
    #[arg(long)]
    epoch_ms: Option<String>,
    /// End an epoch early for a waiting durable reply once this many
    /// microseconds have passed since the last boundary (0: fixed epochs;
    /// experimental) [default: 0].
    #[arg(long)]
    epoch_min_us: Option<String>,
    /// Seconds between automatic checkpoints (silor) [default: 60].
    #[arg(long)]
    checkpoint_interval: Option<String>,
    /// Engine threads (0: one per core but one, at least one) [default: 0].
    #[arg(long)]
    threads: Option<String>,
}

impl ServeArgs {
    fn flags(&self) -> [(&'static str, &Option<String>); 16] {
        [
            ("dir", &self.dir),
            ("port", &self.port),
            ("bind", &self.bind),
            ("durability", &self.durability),
            ("ack", &self.ack),
            ("requirepass", &self.requirepass),
            ("protected-mode", &self.protected_mode),
            ("maxclients", &self.maxclients),
            ("timeout", &self.timeout),
            ("request-timeout", &self.request_timeout),
            ("proto-max-bulk-len", &self.proto_max_bulk_len),
            (
                "client-output-buffer-limit",
                &self.client_output_buffer_limit,
            ),
            ("epoch-ms", &self.epoch_ms),
            ("epoch-min-us", &self.epoch_min_us),
            ("checkpoint-interval", &self.checkpoint_interval),
            ("threads", &self.threads),
        ]
    }
}

/// Runs the server until SIGINT, SIGTERM or SHUTDOWN.
pub(crate) fn run(args: ServeArgs) -> Result<(), String> {
    let mut settings = Settings::default();
    if let Some(path) = &args.config {
        settings.load_file(path).map_err(|e| e.to_string())?;
    }
    for (name, value) in args.flags() {
        if let Some(value) = value {
            settings
                .set(name, value, false)
                .map_err(|e| format!("--{name}: {e}"))?;
        }
    }
    epochdb_server::serve(settings).map_err(|e| e.to_string())
}
