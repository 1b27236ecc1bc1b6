//! The command table: every command the server knows, its arity and the
//! metadata `COMMAND INFO` reports (what redis-cli uses for hints and
//! cluster-aware clients for key positions).

/// What a command is, once looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmd {
    // Strings and keys: each runs as one engine transaction.
    Get,
    Set,
    SetEx,
    PSetEx,
    GetSet,
    GetDel,
    SetNx,
    Del,
    Unlink,
    Exists,
    Type,
    MGet,
    MSet,
    MSetNx,
    Incr,
    IncrBy,
    Decr,
    DecrBy,
    Append,
    Strlen,
    Expire,
    PExpire,
    ExpireAt,
    PExpireAt,
    Ttl,
    PTtl,
    Persist,
    Keys,
    DbSize,
    FlushDb,
    FlushAll,
    Scan,
    // Transactions.
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    // Connection and server.
    Ping,
    Echo,
    Select,
    Quit,
    Hello,
    Client,
    Command,
    Config,
    Info,
    Save,
    BgSave,
    LastSave,
    Auth,
    Shutdown,
    Reset,
}

/// A command's description.
#[derive(Debug)]
pub(crate) struct Spec {
    /// Lowercase name, as Redis reports it.
    pub(crate) name: &'static str,
    /// The name as [`name_key`] packs it, for [`lookup`].
    key: u128,
    /// Redis's arity: `n` exactly n arguments (the name included), `-n` at
    /// least n.
    pub(crate) arity: i32,
    /// Redis's command flags, as `COMMAND INFO` lists them.
    pub(crate) flags: &'static [&'static str],
    /// Position of the first key argument (0: none).
    pub(crate) first_key: i32,
    /// Position of the last key argument (-1: the last argument).
    pub(crate) last_key: i32,
    /// Step between key arguments.
    pub(crate) key_step: i32,
    /// The command.
    pub(crate) cmd: Cmd,
}

impl Spec {
    /// Whether `argc` arguments (the name included) fit the arity.
    pub(crate) fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Whether MULTI queues it (rather than refusing it).
    pub(crate) fn is_queueable(&self) -> bool {
        !matches!(
            self.cmd,
            Cmd::Multi
                | Cmd::Exec
                | Cmd::Discard
                | Cmd::Watch
                | Cmd::Unwatch
                | Cmd::Quit
                | Cmd::Reset
                | Cmd::Scan
                | Cmd::Hello
                | Cmd::Auth
                | Cmd::Shutdown
                | Cmd::Save
                | Cmd::BgSave
                | Cmd::Config
                | Cmd::Client
                | Cmd::Command
                | Cmd::Info
                | Cmd::Select
                | Cmd::FlushDb
                | Cmd::FlushAll
                | Cmd::LastSave
        )
    }
}

const W: &[&str] = &["write"];
const WD: &[&str] = &["write", "denyoom"];
const R: &[&str] = &["readonly", "fast"];
const RS: &[&str] = &["readonly"];
const WF: &[&str] = &["write", "fast"];
const ADMIN: &[&str] = &["admin", "noscript"];
const CONN: &[&str] = &["fast", "loading", "stale"];
const NOAUTH: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth"];
const TX: &[&str] = &["noscript", "loading", "stale", "fast"];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $first:expr, $last:expr, $step:expr, $cmd:ident) => {
        Spec {
            name: $name,
            key: name_key($name.as_bytes()),
            arity: $arity,
            flags: $flags,
            first_key: $first,
            last_key: $last,
            key_step: $step,
            cmd: Cmd::$cmd,
        }
    };
}

/// Every command, sorted by name (binary search in [`lookup`]).
pub(crate) static COMMANDS: &[Spec] = &[
    spec!("append", 3, WD, 1, 1, 1, Append),
    spec!("auth", -2, NOAUTH, 0, 0, 0, Auth),
    spec!("bgsave", -1, ADMIN, 0, 0, 0, BgSave),
    spec!("client", -2, CONN, 0, 0, 0, Client),
    spec!("command", -1, CONN, 0, 0, 0, Command),
    spec!("config", -2, ADMIN, 0, 0, 0, Config),
    spec!("dbsize", 1, R, 0, 0, 0, DbSize),
    spec!("decr", 2, WD, 1, 1, 1, Decr),
    spec!("decrby", 3, WD, 1, 1, 1, DecrBy),
    spec!("del", -2, W, 1, -1, 1, Del),
    spec!("discard", 1, TX, 0, 0, 0, Discard),
    spec!("echo", 2, CONN, 0, 0, 0, Echo),
    spec!("exec", 1, TX, 0, 0, 0, Exec),
    spec!("exists", -2, R, 1, -1, 1, Exists),
    spec!("expire", -3, WF, 1, 1, 1, Expire),
    spec!("expireat", -3, WF, 1, 1, 1, ExpireAt),
    spec!("flushall", -1, W, 0, 0, 0, FlushAll),
    spec!("flushdb", -1, W, 0, 0, 0, FlushDb),
    spec!("get", 2, R, 1, 1, 1, Get),
    spec!("getdel", 2, WF, 1, 1, 1, GetDel),
    spec!("getset", 3, WD, 1, 1, 1, GetSet),
    spec!("hello", -1, NOAUTH, 0, 0, 0, Hello),
    spec!("incr", 2, WD, 1, 1, 1, Incr),
    spec!("incrby", 3, WD, 1, 1, 1, IncrBy),
    spec!("info", -1, CONN, 0, 0, 0, Info),
    spec!("keys", 2, RS, 0, 0, 0, Keys),
    spec!("lastsave", 1, CONN, 0, 0, 0, LastSave),
    spec!("mget", -2, R, 1, -1, 1, MGet),
    spec!("mset", -3, WD, 1, -1, 2, MSet),
    spec!("msetnx", -3, WD, 1, -1, 2, MSetNx),
    spec!("multi", 1, TX, 0, 0, 0, Multi),
    spec!("persist", 2, WF, 1, 1, 1, Persist),
    spec!("pexpire", -3, WF, 1, 1, 1, PExpire),
    spec!("pexpireat", -3, WF, 1, 1, 1, PExpireAt),
    spec!("ping", -1, CONN, 0, 0, 0, Ping),
    spec!("psetex", 4, WD, 1, 1, 1, PSetEx),
    spec!("pttl", 2, R, 1, 1, 1, PTtl),
    spec!("quit", -1, NOAUTH, 0, 0, 0, Quit),
    spec!("reset", 1, NOAUTH, 0, 0, 0, Reset),
    spec!("save", 1, ADMIN, 0, 0, 0, Save),
    spec!("scan", -2, RS, 0, 0, 0, Scan),
    spec!("select", 2, CONN, 0, 0, 0, Select),
    spec!("set", -3, WD, 1, 1, 1, Set),
    spec!("setex", 4, WD, 1, 1, 1, SetEx),
    spec!("setnx", 3, WD, 1, 1, 1, SetNx),
    spec!("shutdown", -1, ADMIN, 0, 0, 0, Shutdown),
    spec!("strlen", 2, R, 1, 1, 1, Strlen),
    spec!("ttl", 2, R, 1, 1, 1, Ttl),
    spec!("type", 2, R, 1, 1, 1, Type),
    spec!("unlink", -2, WF, 1, -1, 1, Unlink),
    spec!("unwatch", 1, TX, 0, 0, 0, Unwatch),
    spec!("watch", -2, TX, 1, -1, 1, Watch),
];

/// Longest command name [`lookup`] can find.
const NAME_BYTES_MAX: usize = 16;

/// `name` (at most [`NAME_BYTES_MAX`] bytes) lowercased and packed
/// big-endian into a number, zero-padded: these numbers sort as the names
/// do (padding sorts before any letter), so the sorted table can be
/// searched with one integer comparison per step instead of a `memcmp`
/// call (the lookup was a tenth of the server's user time under pipelined
/// GETs).
const fn name_key(name: &[u8]) -> u128 {
    let mut key = 0u128;
    let mut i = 0;
    while i < NAME_BYTES_MAX {
        let byte = if i < name.len() {
            name[i].to_ascii_lowercase()
        } else {
            0
        };
        key = (key << 8) | byte as u128;
        i += 1;
    }
    key
}

/// Looks a command up by name, case-insensitively.
pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    if name.len() > NAME_BYTES_MAX {
        return None;
    }
    let key = name_key(name);
    COMMANDS
        .binary_search_by(|spec| spec.key.cmp(&key))
        .ok()
        .map(|i| &COMMANDS[i])
        // A NUL packs like padding: "get\0" finds `get`, but is longer.
        .filter(|spec| spec.name.len() == name.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_lookups_ignore_case() {
        for pair in COMMANDS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
        for spec in COMMANDS {
            assert!(spec.name.len() <= NAME_BYTES_MAX, "{}", spec.name);
            assert_eq!(lookup(spec.name.as_bytes()).unwrap().cmd, spec.cmd);
            let upper = spec.name.to_ascii_uppercase();
            assert_eq!(lookup(upper.as_bytes()).unwrap().cmd, spec.cmd);
            // A prefix or an extension of a name is not the command.
            let short = &spec.name.as_bytes()[..spec.name.len() - 1];
            assert!(lookup(short).is_none_or(|s| s.name.as_bytes() == short));
            let long = format!("{}x", spec.name);
            assert!(lookup(long.as_bytes()).is_none_or(|s| s.name == long));
            let nul = format!("{}\0", spec.name);
            assert!(lookup(nul.as_bytes()).is_none());
        }
        assert_eq!(lookup(b"GeT").unwrap().cmd, Cmd::Get);
        assert_eq!(lookup(b"mset").unwrap().cmd, Cmd::MSet);
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(b"averyveryverylongname").is_none());
    }

    #[test]
    fn arity_follows_redis_rules() {
        let get = lookup(b"get").unwrap();
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let del = lookup(b"del").unwrap();
        assert!(del.arity_ok(2) && del.arity_ok(9) && !del.arity_ok(1));
    }
}
