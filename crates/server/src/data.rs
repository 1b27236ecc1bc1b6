//! The data commands, each executed inside an engine transaction. A body
//! may run more than once (OCC retries), so these functions write their
//! reply into a buffer the caller rewinds before each attempt, and have no
//! effect outside the transaction.
//!
//! Errors a client caused (a bad option, a non-integer) are replies, not
//! aborts: inside MULTI/EXEC the other commands still run, as in Redis.

use std::ops::Bound;

use epochdb_engine::{Abort, Transaction};

use crate::command::Cmd;
use crate::glob;
use crate::keyspace::GenKeys;
use crate::resp::{parse_i64, Out};
use crate::value::{encode, Stored};

/// Redis's reply for arithmetic on a value that is not an integer.
pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
/// Redis's reply for a malformed option list.
pub(crate) const SYNTAX_ERROR: &str = "ERR syntax error";
/// The reply for a value the server did not write (never expected).
pub(crate) const WRONG_TYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

/// What one command's body needs besides the transaction.
#[derive(Debug)]
pub(crate) struct TxContext<'a> {
    /// The keyspace, at the generation this transaction read.
    pub(crate) keys: GenKeys,
    /// "Now" for expiry, fixed for the whole transaction.
    pub(crate) now_ms: u64,
    /// Scratch space for encoding values.
    pub(crate) scratch: &'a mut Vec<u8>,
}

/// A key's live value: `Ok(None)` when missing or expired.
type Live<'t> = Result<Option<Stored<'t>>, ()>;

fn read_live<'t>(
    tx: &mut Transaction<'t>,
    cx: &mut TxContext<'_>,
    key: &[u8],
) -> Result<Live<'t>, Abort> {
    let Some(bytes) = cx.keys.get(tx, key)? else {
        return Ok(Ok(None));
    };
    Ok(match Stored::decode(bytes) {
        Some(stored) if stored.is_expired(cx.now_ms) => Ok(None),
        Some(stored) => Ok(Some(stored)),
        None => Err(()),
    })
}

fn write(
    tx: &mut Transaction<'_>,
    cx: &mut TxContext<'_>,
    key: &[u8],
    data: &[u8],
    expires_at_ms: Option<u64>,
) -> Result<(), Abort> {
    encode(cx.scratch, data, expires_at_ms);
    cx.keys.put(tx, key, cx.scratch)
}

/// Runs a data command. `args[0]` is the command name; the arity has been
/// checked.
pub(crate) fn execute(
    cmd: Cmd,
    args: &[&[u8]],
    tx: &mut Transaction<'_>,
    cx: &mut TxContext<'_>,
    out: &mut Out<'_>,
) -> Result<(), Abort> {
    match cmd {
        Cmd::Get => match read_live(tx, cx, args[1])? {
            Ok(v) => out.bulk_or_nil(v.map(|s| s.data)),
            Err(()) => out.error(WRONG_TYPE),
        },
        Cmd::Set => set(args, tx, cx, out)?,
        Cmd::SetEx | Cmd::PSetEx => {
            let unit = if cmd == Cmd::SetEx { 1000 } else { 1 };
            match parse_i64(args[2]) {
                Some(n) if n > 0 => match relative_deadline(cx.now_ms, n, unit) {
                    Some(when) => {
                        write(tx, cx, args[1], args[3], Some(when))?;
                        out.ok();
                    }
                    None => out.error(&invalid_expire(cmd)),
                },
                Some(_) => out.error(&invalid_expire(cmd)),
                None => out.error(NOT_AN_INTEGER),
            }
        }
        Cmd::GetSet => match read_live(tx, cx, args[1])? {
            Ok(old) => {
                let old = old.map(|s| s.data);
                write(tx, cx, args[1], args[2], None)?;
                out.bulk_or_nil(old);
            }
            Err(()) => out.error(WRONG_TYPE),
        },
        Cmd::GetDel => match read_live(tx, cx, args[1])? {
            Ok(old) => {
                if old.is_some() {
                    cx.keys.delete(tx, args[1])?;
                }
                out.bulk_or_nil(old.map(|s| s.data));
            }
            Err(()) => out.error(WRONG_TYPE),
        },
        Cmd::SetNx => match read_live(tx, cx, args[1])? {
            Ok(Some(_)) | Err(()) => out.int(0),
            Ok(None) => {
                write(tx, cx, args[1], args[2], None)?;
                out.int(1);
            }
        },
        Cmd::Del | Cmd::Unlink => {
            let mut removed = 0;
            for key in &args[1..] {
                let live = matches!(read_live(tx, cx, key)?, Ok(Some(_)) | Err(()));
                if cx.keys.delete(tx, key)? && live {
                    removed += 1;
                }
            }
            out.int(removed);
        }
        Cmd::Exists => {
            let mut present = 0;
            for key in &args[1..] {
                if matches!(read_live(tx, cx, key)?, Ok(Some(_)) | Err(())) {
                    present += 1;
                }
            }
            out.int(present);
        }
        Cmd::Type => match read_live(tx, cx, args[1])? {
            Ok(Some(_)) => out.simple("string"),
            Ok(None) => out.simple("none"),
            Err(()) => out.simple("unknown"),
        },
        Cmd::MGet => {
            out.array(args.len() - 1);
            for key in &args[1..] {
                match read_live(tx, cx, key)? {
                    Ok(v) => out.bulk_or_nil(v.map(|s| s.data)),
                    Err(()) => out.nil(),
                }
            }
        }
        Cmd::MSet | Cmd::MSetNx => {
            if args.len() % 2 != 1 {
                out.error(&wrong_arity(cmd_name(cmd)));
                return Ok(());
            }
            if cmd == Cmd::MSetNx {
                for pair in args[1..].chunks(2) {
                    if !matches!(read_live(tx, cx, pair[0])?, Ok(None)) {
                        out.int(0);
                        return Ok(());
                    }
                }
            }
            for pair in args[1..].chunks(2) {
                write(tx, cx, pair[0], pair[1], None)?;
            }
            if cmd == Cmd::MSet {
                out.ok();
            } else {
                out.int(1);
            }
        }
        Cmd::Incr | Cmd::Decr | Cmd::IncrBy | Cmd::DecrBy => {
            let delta = match cmd {
                Cmd::Incr => Some(1),
                Cmd::Decr => Some(-1),
                Cmd::IncrBy => parse_i64(args[2]),
                _ => parse_i64(args[2]).and_then(i64::checked_neg),
            };
            let Some(delta) = delta else {
                out.error(if cmd == Cmd::DecrBy && parse_i64(args[2]).is_some() {
                    "ERR decrement would overflow"
                } else {
                    NOT_AN_INTEGER
                });
                return Ok(());
            };
            incr(args, tx, cx, out, delta)?;
        }
        Cmd::Append => match read_live(tx, cx, args[1])? {
            Ok(old) => {
                let (mut data, expiry) = match old {
                    Some(s) => (s.data.to_vec(), s.expires_at_ms),
                    None => (Vec::new(), None),
                };
                data.extend_from_slice(args[2]);
                write(tx, cx, args[1], &data, expiry)?;
                out.int(data.len() as i64);
            }
            Err(()) => out.error(WRONG_TYPE),
        },
        Cmd::Strlen => match read_live(tx, cx, args[1])? {
            Ok(v) => out.int(v.map_or(0, |s| s.data.len() as i64)),
            Err(()) => out.error(WRONG_TYPE),
        },
        Cmd::Expire | Cmd::PExpire | Cmd::ExpireAt | Cmd::PExpireAt => {
            expire(cmd, args, tx, cx, out)?
        }
        Cmd::Ttl | Cmd::PTtl => match read_live(tx, cx, args[1])? {
            Ok(None) => out.int(-2),
            Ok(Some(Stored {
                expires_at_ms: None,
                ..
            }))
            | Err(()) => out.int(-1),
            Ok(Some(Stored {
                expires_at_ms: Some(when),
                ..
            })) => {
                let left_ms = when.saturating_sub(cx.now_ms) as i64;
                out.int(if cmd == Cmd::Ttl {
                    (left_ms + 500) / 1000
                } else {
                    left_ms
                });
            }
        },
        Cmd::Persist => match read_live(tx, cx, args[1])? {
            Ok(Some(Stored {
                data,
                expires_at_ms: Some(_),
            })) => {
                write(tx, cx, args[1], data, None)?;
                out.int(1);
            }
            _ => out.int(0),
        },
        Cmd::Keys => {
            let pattern = &args[1];
            let mut keys = Vec::new();
            scan_live(tx, cx, Bound::Unbounded, pattern, usize::MAX, |key| {
                keys.push(key.to_vec())
            })?;
            out.array(keys.len());
            for key in &keys {
                out.bulk(key);
            }
        }
        Cmd::DbSize => {
            let mut count = 0;
            scan_live(tx, cx, Bound::Unbounded, b"*", usize::MAX, |_| count += 1)?;
            out.int(count);
        }
        other => unreachable!("{other:?} is not a data command"),
    }
    Ok(())
}

fn set(
    args: &[&[u8]],
    tx: &mut Transaction<'_>,
    cx: &mut TxContext<'_>,
    out: &mut Out<'_>,
) -> Result<(), Abort> {
    #[derive(PartialEq)]
    enum Cond {
        Always,
        IfMissing,
        IfPresent,
    }
    let mut cond = Cond::Always;
    let mut get = false;
    let mut keep_ttl = false;
    let mut expiry: Option<u64> = None;
    let mut i = 3;
    while i < args.len() {
        let option = args[i].to_ascii_uppercase();
        let has_expiry = expiry.is_some() || keep_ttl;
        match option.as_slice() {
            b"NX" if cond == Cond::Always => cond = Cond::IfMissing,
            b"XX" if cond == Cond::Always => cond = Cond::IfPresent,
            b"GET" => get = true,
            b"KEEPTTL" if !has_expiry => keep_ttl = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if !has_expiry && i + 1 < args.len() => {
                i += 1;
                let Some(n) = parse_i64(args[i]) else {
                    out.error(NOT_AN_INTEGER);
                    return Ok(());
                };
                let when = match option.as_slice() {
                    b"EX" => relative_deadline(cx.now_ms, n, 1000),
                    b"PX" => relative_deadline(cx.now_ms, n, 1),
                    b"EXAT" => absolute_deadline(n, 1000),
                    _ => absolute_deadline(n, 1),
                };
                match when {
                    Some(when) if n > 0 => expiry = Some(when),
                    _ => {
                        out.error("ERR invalid expire time in 'set' command");
                        return Ok(());
                    }
                }
            }
            _ => {
                out.error(SYNTAX_ERROR);
                return Ok(());
            }
        }
        i += 1;
    }
    let old = match read_live(tx, cx, args[1])? {
        Ok(old) => old,
        Err(()) if !get => None,
        Err(()) => {
            out.error(WRONG_TYPE);
            return Ok(());
        }
    };
    let proceed = match cond {
        Cond::Always => true,
        Cond::IfMissing => old.is_none(),
        Cond::IfPresent => old.is_some(),
    };
    if proceed {
        if keep_ttl {
            expiry = old.and_then(|s| s.expires_at_ms);
        }
        let old_data = old.map(|s| s.data);
        write(tx, cx, args[1], args[2], expiry)?;
        if get {
            out.bulk_or_nil(old_data);
        } else {
            out.ok();
        }
    } else if get {
        out.bulk_or_nil(old.map(|s| s.data));
    } else {
        out.nil();
    }
    Ok(())
}

fn incr(
    args: &[&[u8]],
    tx: &mut Transaction<'_>,
    cx: &mut TxContext<'_>,
    out: &mut Out<'_>,
    delta: i64,
) -> Result<(), Abort> {
    let (current, expiry) = match read_live(tx, cx, args[1])? {
        Ok(None) => (0, None),
        Ok(Some(s)) => match parse_i64(s.data) {
            Some(n) => (n, s.expires_at_ms),
            None => {
                out.error(NOT_AN_INTEGER);
                return Ok(());
            }
        },
        Err(()) => {
            out.error(WRONG_TYPE);
            return Ok(());
        }
    };
    let Some(next) = current.checked_add(delta) else {
        out.error("ERR increment or decrement would overflow");
        return Ok(());
    };
    let mut digits = itoa::Buffer::new();
    write(tx, cx, args[1], digits.format(next).as_bytes(), expiry)?;
    out.int(next);
    Ok(())
}

fn expire(
    cmd: Cmd,
    args: &[&[u8]],
    tx: &mut Transaction<'_>,
    cx: &mut TxContext<'_>,
    out: &mut Out<'_>,
) -> Result<(), Abort> {
    let Some(n) = parse_i64(args[2]) else {
        out.error(NOT_AN_INTEGER);
        return Ok(());
    };
    let when = match cmd {
        Cmd::Expire => relative_deadline(cx.now_ms, n, 1000),
        Cmd::PExpire => relative_deadline(cx.now_ms, n, 1),
        Cmd::ExpireAt => absolute_deadline(n, 1000),
        _ => absolute_deadline(n, 1),
    };
    // A deadline in the past deletes the key, as in Redis.
    let when = match when {
        Some(when) => when,
        None if n <= 0 || matches!(cmd, Cmd::ExpireAt | Cmd::PExpireAt) => 0,
        None => {
            out.error(&invalid_expire(cmd));
            return Ok(());
        }
    };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                out.error(&format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(option)
                ));
                return Ok(());
            }
        }
    }
    if nx && (xx || gt || lt) {
        out.error("ERR NX and XX, GT or LT options at the same time are not compatible");
        return Ok(());
    }
    if gt && lt {
        out.error("ERR GT and LT options at the same time are not compatible");
        return Ok(());
    }
    let Ok(Some(stored)) = read_live(tx, cx, args[1])? else {
        out.int(0);
        return Ok(());
    };
    // No expiry counts as an infinite one for GT and LT.
    let allowed = match stored.expires_at_ms {
        None => !(xx || gt),
        Some(current) => !nx && (!gt || when > current) && (!lt || when < current),
    };
    if !allowed {
        out.int(0);
    } else if when <= cx.now_ms {
        cx.keys.delete(tx, args[1])?;
        out.int(1);
    } else {
        let data = stored.data;
        write(tx, cx, args[1], data, Some(when))?;
        out.int(1);
    }
    Ok(())
}

/// `now + n × unit_ms`, if positive and representable.
fn relative_deadline(now_ms: u64, n: i64, unit_ms: i64) -> Option<u64> {
    let offset = n.checked_mul(unit_ms)?;
    if offset <= 0 {
        return None;
    }
    now_ms
        .checked_add(offset as u64)
        .filter(|&w| w < i64::MAX as u64)
}

/// `n × unit_ms` as an instant, if positive and representable.
fn absolute_deadline(n: i64, unit_ms: i64) -> Option<u64> {
    n.checked_mul(unit_ms)
        .filter(|&ms| ms > 0)
        .map(|ms| ms as u64)
}

fn invalid_expire(cmd: Cmd) -> String {
    format!("ERR invalid expire time in '{}' command", cmd_name(cmd))
}

/// Redis's reply for a wrong argument count.
pub(crate) fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

fn cmd_name(cmd: Cmd) -> &'static str {
    crate::command::COMMANDS
        .iter()
        .find(|spec| spec.cmd == cmd)
        .map_or("?", |spec| spec.name)
}

/// The first key after every key that starts with `prefix`, if any.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Visits up to `limit` present keys from `from` on (only those under
/// `pattern`'s literal prefix), calling `found` for each live one that
/// matches. Returns the last key visited, whether or not it matched, and
/// whether the range ran out before `limit`.
pub(crate) fn scan_live(
    tx: &mut Transaction<'_>,
    cx: &mut TxContext<'_>,
    from: Bound<&[u8]>,
    pattern: &[u8],
    limit: usize,
    mut found: impl FnMut(&[u8]),
) -> Result<(Option<Vec<u8>>, bool), Abort> {
    let prefix = glob::literal_prefix(pattern);
    let from = match from {
        Bound::Unbounded => Bound::Included(prefix),
        Bound::Included(k) if k < prefix => Bound::Included(prefix),
        Bound::Excluded(k) if k < prefix => Bound::Included(prefix),
        other => other,
    };
    let end = prefix_end(prefix);
    let to = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let match_all = pattern == b"*";
    let mut visited = 0usize;
    let mut last: Option<Vec<u8>> = None;
    let now = cx.now_ms;
    cx.keys.scan(tx, from, to, limit, |key, value| {
        visited += 1;
        let live = Stored::decode(value).is_none_or(|s| !s.is_expired(now));
        if live && (match_all || glob::matches(pattern, key)) {
            found(key);
        }
        if visited == limit {
            last = Some(key.to_vec());
        }
        true
    })?;
    Ok((last, visited < limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn deadlines_reject_overflow_and_non_positive_values() {
        assert_eq!(relative_deadline(1_000, 2, 1000), Some(3_000));
        assert_eq!(relative_deadline(1_000, 0, 1000), None);
        assert_eq!(relative_deadline(1_000, i64::MAX, 1000), None);
        assert_eq!(absolute_deadline(5, 1000), Some(5_000));
        assert_eq!(absolute_deadline(-1, 1), None);
    }
}
