//! Connection and server commands: AUTH, HELLO, CLIENT, COMMAND, CONFIG,
//! INFO, SAVE and BGSAVE.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::command::{self, Spec, COMMANDS};
use crate::config::NAMES;
use crate::conn::Client;
use crate::resp::Out;
use crate::server::State;
use crate::{glob, value};

/// Compares two secrets in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xFF);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Checks a password against `requirepass`; returns the error reply when
/// it is refused.
fn check_password(state: &State, user: Option<&[u8]>, password: &[u8]) -> Result<(), &'static str> {
    let settings = state.settings.read();
    let Some(expected) = settings.requirepass.as_deref() else {
        return Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    };
    let user_ok = user.is_none_or(|u| u == b"default");
    if user_ok & constant_time_eq(expected.as_bytes(), password) {
        Ok(())
    } else {
        Err("WRONGPASS invalid username-password pair or user is disabled.")
    }
}

/// AUTH [username] password.
pub(crate) fn auth(state: &State, client: &mut Client, args: &[&[u8]], out: &mut Out<'_>) {
    let (user, password) = match args.len() {
        2 => (None, &args[1]),
        3 => (Some(args[1]), &args[2]),
        _ => {
            out.error("ERR syntax error");
            return;
        }
    };
    match check_password(state, user, password) {
        Ok(()) => {
            client.authenticated = true;
            out.ok();
        }
        Err(e) => out.error(e),
    }
}

/// HELLO [protover [AUTH username password] [SETNAME name]]. Only RESP2 is
/// spoken.
pub(crate) fn hello(state: &State, client: &mut Client, args: &[&[u8]], out: &mut Out<'_>) {
    if let Some(version) = args.get(1) {
        match std::str::from_utf8(version)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            Some(2) => client.resp3 = false,
            Some(3) => client.resp3 = true,
            Some(_) => {
                out.error("NOPROTO sorry, this protocol version is not supported.");
                return;
            }
            None => {
                out.error("ERR Protocol version is not an integer or out of range");
                return;
            }
        }
    }
    let mut i = 2;
    let mut name = None;
    while i < args.len() {
        let option = args[i].to_ascii_uppercase();
        match option.as_slice() {
            b"AUTH" if i + 2 < args.len() => {
                if let Err(e) = check_password(state, Some(args[i + 1]), args[i + 2]) {
                    out.error(e);
                    return;
                }
                client.authenticated = true;
                i += 3;
            }
            b"SETNAME" if i + 1 < args.len() => {
                name = Some(Bytes::copy_from_slice(args[i + 1]));
                i += 2;
            }
            _ => {
                out.error(&format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(args[i])
                ));
                return;
            }
        }
    }
    if !client.authenticated {
        out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        return;
    }
    if name.is_some() {
        client.name = name;
    }
    let proto = if client.resp3 { 3 } else { 2 };
    out.set_resp3(client.resp3);
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(b"7.0.15");
    out.bulk(b"proto");
    out.int(proto);
    out.bulk(b"id");
    out.int(client.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
}

/// CLIENT ID | SETNAME | GETNAME | SETINFO | INFO | LIST | NO-EVICT | NO-TOUCH.
pub(crate) fn client(client: &mut Client, args: &[&[u8]], out: &mut Out<'_>) {
    let sub = args[1].to_ascii_uppercase();
    match (sub.as_slice(), args.len()) {
        (b"ID", 2) => out.int(client.id as i64),
        (b"GETNAME", 2) => out.bulk_or_nil(client.name.as_deref()),
        (b"SETNAME", 3) => {
            if args[2].iter().any(|b| *b <= b' ' || *b > b'~') {
                out.error(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            } else {
                client.name = (!args[2].is_empty()).then(|| Bytes::copy_from_slice(args[2]));
                out.ok();
            }
        }
        (b"SETINFO", 4) | (b"NO-EVICT", 3) | (b"NO-TOUCH", 3) => out.ok(),
        (b"INFO", 2) | (b"LIST", _) => {
            let name = client
                .name
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            out.bulk(
                format!("id={} addr={} name={} db=0\n", client.id, client.peer, name).as_bytes(),
            );
        }
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(args[1])
        )),
    }
}

fn command_info(spec: &Spec, out: &mut Out<'_>) {
    out.array(6);
    out.bulk(spec.name.as_bytes());
    out.int(i64::from(spec.arity));
    out.array(spec.flags.len());
    for flag in spec.flags {
        out.simple(flag);
    }
    out.int(i64::from(spec.first_key));
    out.int(i64::from(spec.last_key));
    out.int(i64::from(spec.key_step));
}

/// COMMAND [COUNT | INFO name… | DOCS [name…] | LIST].
pub(crate) fn command(args: &[&[u8]], out: &mut Out<'_>) {
    let sub = args.get(1).map(|a| a.to_ascii_uppercase());
    match sub.as_deref() {
        None => {
            out.array(COMMANDS.len());
            for spec in COMMANDS {
                command_info(spec, out);
            }
        }
        Some(b"COUNT") => out.int(COMMANDS.len() as i64),
        Some(b"LIST") => {
            out.array(COMMANDS.len());
            for spec in COMMANDS {
                out.bulk(spec.name.as_bytes());
            }
        }
        Some(b"INFO") => {
            out.array(args.len() - 2);
            for name in &args[2..] {
                match command::lookup(name) {
                    Some(spec) => command_info(spec, out),
                    None => out.nil_array(),
                }
            }
        }
        // Documentation maps are optional for clients (redis-cli falls back
        // to its built-in hints): an empty map.
        Some(b"DOCS") => out.map(0),
        Some(_) => out.error(&format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(args[1])
        )),
    }
}

/// CONFIG GET pattern… | SET name value… | RESETSTAT.
pub(crate) fn config(state: &State, args: &[&[u8]], out: &mut Out<'_>) {
    let sub = args[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"GET" if args.len() >= 3 => {
            let settings = state.settings.read();
            let mut pairs = Vec::new();
            for name in NAMES {
                if args[2..]
                    .iter()
                    .any(|p| glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
                {
                    pairs.push((*name, settings.get(name).unwrap_or_default()));
                }
            }
            out.map(pairs.len());
            for (name, value) in pairs {
                out.bulk(name.as_bytes());
                out.bulk(value.as_bytes());
            }
        }
        b"SET" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            let mut settings = state.settings.write();
            let mut updated = settings.clone();
            for pair in args[2..].chunks(2) {
                let name = String::from_utf8_lossy(pair[0]);
                let value = String::from_utf8_lossy(pair[1]);
                if let Err(e) = updated.set(&name, &value, true) {
                    out.error(&format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - {e}"
                    ));
                    return;
                }
            }
            *settings = updated;
            out.ok();
        }
        b"RESETSTAT" if args.len() == 2 => out.ok(),
        b"REWRITE" if args.len() == 2 => {
            out.error("ERR CONFIG REWRITE is not supported: edit the config file")
        }
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(args[1])
        )),
    }
}

/// Resident memory of the process in bytes (Linux; 0 elsewhere).
pub(crate) fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// INFO [section…]: server, clients, memory, persistence, stats, keyspace.
pub(crate) fn info(state: &State, args: &[&[u8]], out: &mut Out<'_>) {
    let wanted: Vec<String> = args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| w == "all" || w == "everything" || w == "default");
    let show = |section: &str| all || wanted.iter().any(|w| w == section);
    let settings = state.settings.read().clone();
    let mut text = String::new();
    if show("server") {
        let uptime = state.started.elapsed().as_secs();
        let _ = write!(
            text,
            "# Server\r\nredis_version:7.0.15\r\nepochdb_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nexecutor_threads:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::process::id(),
            state.local_addrs.lock().first().map_or(settings.port, |a| a.port()),
            uptime / 86_400,
            state.db.config().workers,
        );
    }
    if show("clients") {
        let _ = write!(
            text,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            state.clients.load(Ordering::Relaxed),
            settings.maxclients
        );
    }
    if show("memory") {
        let rss = resident_bytes();
        let _ = write!(text, "# Memory\r\nused_memory:{rss}\r\nused_memory_rss:{rss}\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n\r\n");
    }
    if show("persistence") {
        let stats = state.db.durability_stats();
        let avg_checkpoint_s = if stats.checkpoints > 0 {
            stats.checkpoint_seconds / stats.checkpoints as f64
        } else {
            0.0
        };
        let _ = write!(
            text,
            "# Persistence\r\nloading:0\r\ndurability:{}\r\nack:{}\r\nepoch_ms:{}\r\ncurrent_epoch:{}\r\npersistent_epoch:{}\r\ndurable_lsn:{}\r\naof_enabled:{}\r\nlog_bytes:{}\r\nlog_syncs:{}\r\nlog_buffer_waits:{}\r\nlog_buffers_allocated:{}\r\nlog_buffers_peak:{}\r\ncheckpoints:{}\r\ncheckpoint_in_progress:{}\r\ncheckpoint_bytes:{}\r\ncheckpoint_avg_seconds:{avg_checkpoint_s:.3}\r\ncheckpoint_last_seconds:{:.3}\r\ncheckpoint_last_time:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_time_ms:{}\r\n",
            state.db.durability_name(),
            settings.ack,
            settings.epoch_interval.as_millis(),
            state.db.current_epoch(),
            stats.persistent_epoch.map_or("none".to_string(), |e| e.to_string()),
            stats.durable_lsn.map_or("none".to_string(), |l| l.to_string()),
            u8::from(settings.durability.is_durable()),
            stats.log_bytes,
            stats.log_syncs,
            stats.buffer_waits,
            stats.log_buffers_allocated,
            stats.log_buffers_peak,
            stats.checkpoints,
            u8::from(state.db.is_checkpointing()),
            stats.checkpoint_bytes,
            stats.last_checkpoint_seconds,
            stats.last_checkpoint_unix,
            u8::from(state.bgsave_running.load(Ordering::Relaxed)),
            state.last_save_unix.load(Ordering::Relaxed),
            state.last_save_ms.load(Ordering::Relaxed),
        );
        if let Some(report) = state.db.recovery_report() {
            let _ = write!(text, "recovery_seconds:{:.3}\r\n", report.seconds);
        }
        text.push_str("\r\n");
    }
    if show("stats") {
        let s = &state.stats;
        let _ = write!(
            text,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nprotocol_errors:{}\r\noutput_limit_disconnects:{}\r\ntimeout_disconnects:{}\r\ndurable_acks:{}\r\nexpired_keys:{}\r\n\r\n",
            s.connections_received.load(Ordering::Relaxed),
            s.commands_processed.load(Ordering::Relaxed),
            s.rejected_connections.load(Ordering::Relaxed),
            s.protocol_errors.load(Ordering::Relaxed),
            s.output_limit_disconnects.load(Ordering::Relaxed),
            s.timeouts.load(Ordering::Relaxed),
            s.durable_acks.load(Ordering::Relaxed),
            s.expired_keys.load(Ordering::Relaxed),
        );
    }
    if show("keyspace") {
        // The index size counts deleted keys not yet unlinked: approximate.
        let keys = state.db.approximate_len(state.keyspace.keys);
        text.push_str("# Keyspace\r\n");
        if keys > 0 {
            let _ = write!(text, "db0:keys={keys},expires=0,avg_ttl=0\r\n");
        }
    }
    out.bulk(text.as_bytes());
}

/// SAVE: takes a checkpoint now and waits for it.
pub(crate) async fn save(state: &Arc<State>) -> Result<(), String> {
    if state.bgsave_running.swap(true, Ordering::SeqCst) {
        return Err("ERR Background save already in progress".into());
    }
    let worker_state = state.clone();
    let outcome = tokio::task::spawn_blocking(move || checkpoint(&worker_state)).await;
    state.bgsave_running.store(false, Ordering::SeqCst);
    outcome.unwrap_or_else(|e| Err(format!("ERR checkpoint task failed: {e}")))
}

/// BGSAVE: starts a checkpoint and returns.
pub(crate) fn bgsave(state: &Arc<State>) -> Result<(), String> {
    if !takes_checkpoints(state) {
        return Err(no_checkpoints(state));
    }
    if state.bgsave_running.swap(true, Ordering::SeqCst) {
        return Err("ERR Background save already in progress".into());
    }
    let worker_state = state.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = checkpoint(&worker_state) {
            eprintln!("epochdb: BGSAVE failed: {e}");
        }
        worker_state.bgsave_running.store(false, Ordering::SeqCst);
    });
    Ok(())
}

/// `silor`, `wal` and `cpr` checkpoint (`log` replays its whole log).
fn takes_checkpoints(state: &State) -> bool {
    matches!(
        state.db.config().durability,
        epochdb_engine::DurabilityKind::Silor
            | epochdb_engine::DurabilityKind::Wal
            | epochdb_engine::DurabilityKind::Cpr
    )
}

fn no_checkpoints(state: &State) -> String {
    format!(
        "ERR durability mode '{}' takes no checkpoints (use --durability silor, wal or cpr)",
        state.db.durability_name()
    )
}

fn checkpoint(state: &State) -> Result<(), String> {
    if !takes_checkpoints(state) {
        return Err(no_checkpoints(state));
    }
    let begun = Instant::now();
    state
        .db
        .checkpoint()
        .map_err(|e| format!("ERR checkpoint failed: {e}"))?;
    state
        .last_save_ms
        .store(begun.elapsed().as_millis() as u64, Ordering::Relaxed);
    state
        .last_save_unix
        .store(value::now_ms() / 1000, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
