//! `epochdb serve`: the engine behind the Redis protocol (RESP2), so
//! redis-cli, redis-benchmark and Redis client libraries work unchanged.
//!
//! Every command is one engine transaction (MULTI/EXEC one for the whole
//! block, WATCH keys joining its read set). With `ack durable` a reply is
//! sent only once its commit is durable under the chosen mode; the
//! connection keeps executing its pipeline meanwhile, so many connections'
//! commits share one group commit and no thread blocks per request.
//!
//! Module map: [`resp`] parses requests and encodes replies; `command` is the
//! command table; `data` runs the data commands inside a transaction; `conn`
//! owns a connection (reader, writer, MULTI state); `admin` the server
//! commands; `server` the listener, limits and shutdown; [`config`] the
//! settings.

#![forbid(unsafe_code)]

mod admin;
mod command;
pub mod config;
mod conn;
mod cursor;
mod data;
mod engine_thread;
mod expire;
mod glob;
mod keyspace;
mod output;
pub mod resp;
mod server;
mod value;

pub use config::{Ack, SettingError, Settings};
pub use keyspace::{KEYSPACE_META_TABLE, KEYSPACE_TABLE};
pub use server::{serve, RunningServer, ServeError, State, Stats};
