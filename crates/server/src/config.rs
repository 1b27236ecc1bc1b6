//! The server's settings: defaults, a redis.conf-style file (`name value`
//! per line, `#` comments), command-line flags and `CONFIG SET`, all
//! through one setter so they spell and validate things the same way.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use epochdb_engine::DurabilityKind;

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// Once the commit is durable under the durability mode (the default).
    Durable,
    /// Once the commit is in memory (faster; a crash may lose it).
    Memory,
}

/// Every setting of `epochdb serve`.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Directory for the durable files (required by durable modes).
    pub dir: Option<PathBuf>,
    /// TCP port.
    pub port: u16,
    /// Addresses to listen on.
    pub bind: Vec<IpAddr>,
    /// The durability mode (`none`, `log`, `silor`, `wal`).
    pub durability: DurabilityKind,
    /// When writes are acknowledged.
    pub ack: Ack,
    /// The password clients must send with AUTH (none: no AUTH needed).
    pub requirepass: Option<String>,
    /// Refuse clients from non-loopback addresses while no password is set.
    pub protected_mode: bool,
    /// Most simultaneous clients.
    pub maxclients: usize,
    /// Close a client idle this long (zero: never).
    pub timeout: Duration,
    /// Close a client whose request stalls half-sent this long.
    pub request_timeout: Duration,
    /// Largest bulk string a request may carry.
    pub proto_max_bulk_len: usize,
    /// Most reply bytes queued for a client that does not read them before
    /// it is disconnected.
    pub client_output_buffer_limit: usize,
    /// The engine's epoch length.
    pub epoch_interval: Duration,
    /// A held durable reply ends the current epoch once this much time has
    /// passed since the last boundary (zero: fixed epochs).
    pub epoch_min_gap: Duration,
    /// Seconds between automatic checkpoints (`silor`, `wal`).
    pub checkpoint_interval: Duration,
    /// Engine worker threads (zero: one per core but one, at least one).
    pub threads: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            dir: None,
            port: 6379,
            bind: vec![IpAddr::from([127, 0, 0, 1])],
            durability: DurabilityKind::Silor,
            ack: Ack::Durable,
            requirepass: None,
            protected_mode: true,
            maxclients: 10_000,
            timeout: Duration::ZERO,
            request_timeout: Duration::from_secs(30),
            proto_max_bulk_len: 512 * 1024 * 1024,
            client_output_buffer_limit: 256 * 1024 * 1024,
            // Measured (BENCHMARKS.md, the server): durable replies wait
            // for their epoch to end, so short epochs answer faster.
            epoch_interval: Duration::from_millis(1),
            // Off until a quiet-machine measurement shows it helps
            // (BENCHMARKS.md, the server).
            epoch_min_gap: Duration::ZERO,
            checkpoint_interval: Duration::from_secs(60),
            threads: 0,
        }
    }
}

/// A setting that could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// No setting has this name.
    #[error("unknown setting '{0}'")]
    Unknown(String),
    /// The value does not parse or is out of range.
    #[error("invalid value '{value}' for '{name}': {why}")]
    Invalid {
        /// The setting.
        name: String,
        /// What was given.
        value: String,
        /// What is expected.
        why: String,
    },
    /// The setting is fixed once the server runs.
    #[error("'{0}' cannot be changed while the server runs")]
    Immutable(String),
    /// A line of a config file is malformed.
    #[error("{file}:{line}: {error}")]
    File {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        error: Box<SettingError>,
    },
}

/// Settings `CONFIG SET` may change on a running server.
const MUTABLE: &[&str] = &[
    "maxclients",
    "timeout",
    "request-timeout",
    "requirepass",
    "protected-mode",
    "proto-max-bulk-len",
    "client-output-buffer-limit",
    "ack",
    "save",
    "appendonly",
];

/// Every setting's name, as the config file, flags and CONFIG spell it.
pub const NAMES: &[&str] = &[
    "dir",
    "port",
    "bind",
    "durability",
    "ack",
    "requirepass",
    "protected-mode",
    "maxclients",
    "timeout",
    "request-timeout",
    "proto-max-bulk-len",
    "client-output-buffer-limit",
    "epoch-ms",
    "epoch-min-us",
    "checkpoint-interval",
    "threads",
    "save",
    "appendonly",
    "databases",
];

fn invalid(name: &str, value: &str, why: &str) -> SettingError {
    SettingError::Invalid {
        name: name.into(),
        value: value.into(),
        why: why.into(),
    }
}

/// Parses a size like Redis does: `512mb`, `1gb`, `64kb`, `100` (bytes).
fn parse_bytes(name: &str, value: &str) -> Result<usize, SettingError> {
    let lower = value.to_ascii_lowercase();
    let (digits, unit) = match lower.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => lower.split_at(at),
        None => (lower.as_str(), ""),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| invalid(name, value, "expected a size like 512mb"))?;
    let unit = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(invalid(name, value, "unknown unit (use b, kb, mb or gb)")),
    };
    n.checked_mul(unit)
        .ok_or_else(|| invalid(name, value, "too large"))
}

fn parse_bool(name: &str, value: &str) -> Result<bool, SettingError> {
    match value.to_ascii_lowercase().as_str() {
        "yes" | "true" | "on" | "1" => Ok(true),
        "no" | "false" | "off" | "0" => Ok(false),
        _ => Err(invalid(name, value, "expected yes or no")),
    }
}

fn parse_num<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, SettingError> {
    value
        .parse()
        .map_err(|_| invalid(name, value, "expected a non-negative integer"))
}

impl Settings {
    /// Applies `name value`. With `running`, settings that need a restart
    /// are refused.
    pub fn set(&mut self, name: &str, value: &str, running: bool) -> Result<(), SettingError> {
        let name = name.to_ascii_lowercase();
        if !NAMES.contains(&name.as_str()) {
            return Err(SettingError::Unknown(name));
        }
        if running && !MUTABLE.contains(&name.as_str()) {
            return Err(SettingError::Immutable(name));
        }
        match name.as_str() {
            "dir" => self.dir = Some(PathBuf::from(value)),
            "port" => self.port = parse_num(&name, value)?,
            "bind" => {
                let addrs: Result<Vec<IpAddr>, _> =
                    value.split_whitespace().map(str::parse).collect();
                self.bind = addrs.map_err(|_| {
                    invalid(&name, value, "expected IP addresses separated by spaces")
                })?;
                if self.bind.is_empty() {
                    return Err(invalid(&name, value, "expected at least one address"));
                }
            }
            "durability" => {
                self.durability = value
                    .parse::<DurabilityKind>()
                    .map_err(|e| invalid(&name, value, &e.to_string()))?;
            }
            "ack" => {
                self.ack = match value.to_ascii_lowercase().as_str() {
                    "durable" => Ack::Durable,
                    "memory" => Ack::Memory,
                    _ => return Err(invalid(&name, value, "expected durable or memory")),
                }
            }
            "requirepass" => self.requirepass = (!value.is_empty()).then(|| value.to_string()),
            "protected-mode" => self.protected_mode = parse_bool(&name, value)?,
            "maxclients" => {
                self.maxclients = parse_num(&name, value)?;
                if self.maxclients == 0 {
                    return Err(invalid(&name, value, "must be at least 1"));
                }
            }
            "timeout" => self.timeout = Duration::from_secs(parse_num(&name, value)?),
            "request-timeout" => {
                self.request_timeout = Duration::from_secs(parse_num(&name, value)?)
            }
            "proto-max-bulk-len" => {
                let bytes = parse_bytes(&name, value)?;
                if !(1024 * 1024..=(1usize << 40)).contains(&bytes) {
                    return Err(invalid(&name, value, "must be between 1mb and 1024gb"));
                }
                self.proto_max_bulk_len = bytes;
            }
            "client-output-buffer-limit" => {
                self.client_output_buffer_limit = parse_bytes(&name, value)?.max(64 * 1024)
            }
            "epoch-ms" => {
                let ms: u64 = parse_num(&name, value)?;
                if ms == 0 {
                    return Err(invalid(&name, value, "must be at least 1"));
                }
                self.epoch_interval = Duration::from_millis(ms);
            }
            "epoch-min-us" => self.epoch_min_gap = Duration::from_micros(parse_num(&name, value)?),
            "checkpoint-interval" => {
                let secs: f64 = value
                    .parse()
                    .map_err(|_| invalid(&name, value, "expected seconds"))?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err(invalid(&name, value, "must be positive"));
                }
                self.checkpoint_interval = Duration::from_secs_f64(secs);
            }
            "threads" => self.threads = parse_num(&name, value)?,
            // Accepted for compatibility (redis-benchmark and clients read
            // and sometimes write them); persistence is `durability`.
            "save" | "appendonly" | "databases" => {}
            _ => unreachable!("every name in NAMES is handled"),
        }
        Ok(())
    }

    /// The value of `name` as `CONFIG GET` reports it.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "dir" => self
                .dir
                .as_ref()
                .map_or(String::new(), |d| d.display().to_string()),
            "port" => self.port.to_string(),
            "bind" => self
                .bind
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" "),
            "durability" => self.durability.to_string(),
            "ack" => self.ack.to_string(),
            "requirepass" => self.requirepass.clone().unwrap_or_default(),
            "protected-mode" => if self.protected_mode { "yes" } else { "no" }.into(),
            "maxclients" => self.maxclients.to_string(),
            "timeout" => self.timeout.as_secs().to_string(),
            "request-timeout" => self.request_timeout.as_secs().to_string(),
            "proto-max-bulk-len" => self.proto_max_bulk_len.to_string(),
            "client-output-buffer-limit" => self.client_output_buffer_limit.to_string(),
            "epoch-ms" => self.epoch_interval.as_millis().to_string(),
            "epoch-min-us" => self.epoch_min_gap.as_micros().to_string(),
            "checkpoint-interval" => self.checkpoint_interval.as_secs_f64().to_string(),
            "threads" => self.threads.to_string(),
            // Redis's `save` lists RDB snapshot rules; epochdb has none (its
            // checkpoints are part of the durability mode).
            "save" => String::new(),
            "appendonly" => if self.durability.is_durable() {
                "yes"
            } else {
                "no"
            }
            .into(),
            "databases" => "1".into(),
            _ => return None,
        })
    }

    /// Reads a config file: one `name value` per line; blank lines and
    /// lines starting with `#` are skipped; a value may be quoted.
    pub fn load_file(&mut self, path: &Path) -> Result<(), SettingError> {
        let text = std::fs::read_to_string(path).map_err(|e| SettingError::File {
            file: path.display().to_string(),
            line: 0,
            error: Box::new(invalid(
                "config",
                &path.display().to_string(),
                &e.to_string(),
            )),
        })?;
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            self.set(name, value, false)
                .map_err(|error| SettingError::File {
                    file: path.display().to_string(),
                    line: index + 1,
                    error: Box::new(error),
                })?;
        }
        Ok(())
    }

    /// Checks the settings fit together.
    pub fn validate(&self) -> Result<(), SettingError> {
        if self.durability.is_durable() && self.dir.is_none() {
            return Err(invalid(
                "dir",
                "",
                &format!("durability '{}' needs a directory (--dir)", self.durability),
            ));
        }
        Ok(())
    }

    /// Whether every bind address is a loopback address.
    pub fn binds_loopback_only(&self) -> bool {
        self.bind.iter().all(IpAddr::is_loopback)
    }
}

impl fmt::Display for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ack::Durable => "durable",
            Ack::Memory => "memory",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_flags_and_config_set_share_one_setter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epochdb.conf");
        std::fs::write(&path, "# comment\nport 7000\nbind \"127.0.0.1 ::1\"\nmaxclients 5\nproto-max-bulk-len 2mb\ndurability log\n").unwrap();
        let mut s = Settings::default();
        s.load_file(&path).unwrap();
        assert_eq!(s.port, 7000);
        assert_eq!(s.bind.len(), 2);
        assert_eq!(s.maxclients, 5);
        assert_eq!(s.proto_max_bulk_len, 2 * 1024 * 1024);
        assert_eq!(s.get("appendonly").unwrap(), "yes");
        assert!(s.validate().is_err(), "a durable mode needs a dir");
        assert_eq!(
            s.set("port", "1", true),
            Err(SettingError::Immutable("port".into()))
        );
        s.set("maxclients", "9", true).unwrap();
        assert_eq!(s.get("maxclients").unwrap(), "9");
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.conf");
        std::fs::write(&path, "port 1\nnosuch 2\n").unwrap();
        let err = Settings::default()
            .load_file(&path)
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("bad.conf:2: unknown setting 'nosuch'"),
            "{err}"
        );
        let mut s = Settings::default();
        assert!(s.set("maxclients", "0", false).is_err());
        assert!(s.set("proto-max-bulk-len", "12", false).is_err());
        assert!(s.set("ack", "sometimes", false).is_err());
    }
}
